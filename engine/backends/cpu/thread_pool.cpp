#include "engine/backends/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cblas.h>

namespace tsr::cpu {

int configuredThreads() {
  if (const char* env = std::getenv("TESSERA_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return std::min(n, 256);
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void coordinateBlasThreads() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(ThreadPool::instance().numThreads()); });
}

// Workers sleep on a condition variable between jobs; a job is one parallelFor. Chunks are handed out with
// an atomic counter so that uneven chunks balance.
struct ThreadPool::State {
  std::mutex mutex;
  std::condition_variable wake, done;
  std::vector<std::thread> workers;
  const std::function<void(int64_t, int64_t, int)>* fn = nullptr;
  int64_t n = 0, chunk = 1, numChunks = 0;
  std::atomic<int64_t> next{0};
  int pending = 0;        // workers still inside the current job
  uint64_t generation = 0;
  bool stop = false;
  std::atomic<bool> busy{false};

  void work(int thread) {
    for (;;) {
      int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= numChunks) return;
      int64_t b = c * chunk, e = std::min(n, b + chunk);
      (*fn)(b, e, thread);
    }
  }
};

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool(configuredThreads());
  return pool;
}

ThreadPool::ThreadPool(int threads) : m_state(new State), m_numThreads(threads) {
  for (int t = 1; t < threads; ++t)
    m_state->workers.emplace_back([this, t] {
      State& s = *m_state;
      uint64_t seen = 0;
      for (;;) {
        {
          std::unique_lock lock(s.mutex);
          s.wake.wait(lock, [&] { return s.stop || s.generation != seen; });
          if (s.stop) return;
          seen = s.generation;
        }
        s.work(t);
        std::lock_guard lock(s.mutex);
        if (--s.pending == 0) s.done.notify_one();
      }
    });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(m_state->mutex);
    m_state->stop = true;
  }
  m_state->wake.notify_all();
  for (auto& w : m_state->workers) w.join();
  delete m_state;
}

void ThreadPool::parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  State& s = *m_state;
  // Aim for a few chunks per thread so that uneven work balances, never below the grain.
  int64_t chunk = std::max(grain, (n + 4 * m_numThreads - 1) / (4 * m_numThreads));
  int64_t numChunks = (n + chunk - 1) / chunk;
  bool expected = false;
  if (m_numThreads == 1 || numChunks == 1 || !s.busy.compare_exchange_strong(expected, true)) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard lock(s.mutex);
    s.fn = &fn;
    s.n = n;
    s.chunk = chunk;
    s.numChunks = numChunks;
    s.next.store(0, std::memory_order_relaxed);
    s.pending = static_cast<int>(s.workers.size());
    ++s.generation;
  }
  s.wake.notify_all();
  s.work(0);
  {
    std::unique_lock lock(s.mutex);
    s.done.wait(lock, [&] { return s.pending == 0; });
    s.fn = nullptr;
  }
  s.busy.store(false);
}

}  // namespace tsr::cpu
