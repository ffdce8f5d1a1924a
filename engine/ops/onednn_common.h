#pragma once
// What the ops' oneDNN kernels share (conv_onednn.cpp, matmul_onednn.cpp, batch_norm_onednn.cpp): the process's CPU
// engine, the threads primitives run on, and a cache of the primitives built per problem. Included by those .cpp
// files only, so that dnnl.hpp stays out of the ops' headers.
#include <dnnl.hpp>

#include <map>
#include <memory>
#include <mutex>

namespace tsr::ops {

// The CPU engine every primitive is built for and runs on.
const dnnl::engine& oneDnnEngine();

// The threads oneDNN's primitives run on: TESSERA_NUM_THREADS, else the cores this process may use. Each kernel
// sets them for the calling thread's OpenMP teams (useOneDnnThreads: omp_set_num_threads) before it executes.
int oneDnnThreads();
void useOneDnnThreads();

// Primitives built per problem, for the life of the process. get() builds an entry once, under the cache's lock
// (device threads of an SPMD program ask for the same problem at once); a build that throws leaves no entry.
template <class Key, class Entry>
class OneDnnCache {
 public:
  template <class Build>
  std::shared_ptr<const Entry> get(const Key& key, const Build& build) {
    std::lock_guard lock(m_mutex);
    if (auto it = m_entries.find(key); it != m_entries.end()) return it->second;
    std::shared_ptr<const Entry> entry = build();
    m_entries.emplace(key, entry);
    return entry;
  }

 private:
  std::mutex m_mutex;
  std::map<Key, std::shared_ptr<const Entry>> m_entries;
};

}  // namespace tsr::ops
