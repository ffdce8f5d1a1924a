#pragma once
// The CPU backend's worker threads. One pool per process, sized by TESSERA_NUM_THREADS (default: the cores
// this process may run on). Kernels run one at a time and split their work over the pool; GEMMs run on
// OpenBLAS's threads instead, whose count is set to the same number, so the two never compete for cores.
#include <cstdint>
#include <functional>

namespace tsr::cpu {

class ThreadPool {
 public:
  static ThreadPool& instance();
  int numThreads() const { return m_numThreads; }

  // Calls fn(begin, end, thread) over [0, n) split into chunks of at least `grain` items; thread is in
  // [0, numThreads()). Runs on the calling thread alone when there is one chunk. Not reentrant: a kernel
  // running inside parallelFor must not call it again (it runs serially instead).
  void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

 private:
  explicit ThreadPool(int threads);
  struct State;
  State* m_state;
  int m_numThreads;
};

// The thread count: TESSERA_NUM_THREADS, else the cores available to this process.
int configuredThreads();

// Sets OpenBLAS's thread count to ours (once); called before the first GEMM.
void coordinateBlasThreads();

}  // namespace tsr::cpu
