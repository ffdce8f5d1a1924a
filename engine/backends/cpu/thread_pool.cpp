#include "engine/backends/cpu/thread_pool.h"

#include <sched.h>
#include <unistd.h>
#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <cblas.h>

#include "engine/backends/cpu/gemm.h"
#include "engine/core/env_options.h"

namespace tsr::cpu {

int configuredThreads() {
  if (int n = envOptions().numThreads; n > 0) return n;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string blasCoreFallback() {
  const char* core = openblas_get_corename();
  if (core == nullptr || std::string_view(core) != "Prescott") return "";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

void ensureThreadLibrarySettings(char** argv) {
  const std::string core = blasCoreFallback();
  bool changed = false;
  for (const auto& [name, value] : {std::pair{"OMP_WAIT_POLICY", "PASSIVE"}, std::pair{"OPENBLAS_NUM_THREADS", "1"},
                                    std::pair{"OPENBLAS_CORETYPE", core.c_str()}})
    if (std::getenv(name) == nullptr && *value) {
      setenv(name, value, 1);
      changed = true;
    }
  if (changed) execv("/proc/self/exe", argv);
}

void coordinateBlasThreads() {
  // GEMMs run single-threaded inside our pool's threads (gemm.cpp): OpenBLAS starts no threads of its own.
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(blasThreaded() ? ThreadPool::instance().numThreads() : 1); });
}

// A job is one parallelFor; chunks are handed out with an atomic counter so that uneven chunks balance.
// Between jobs, workers spin on the job counter for a short while before sleeping on a condition variable:
// kernels follow each other within microseconds, and a sleeping thread can take milliseconds to wake on a busy
// machine.
// A job is done when its chunks are, whichever threads ran them: the caller never waits for a worker that has
// not taken a chunk. On a machine with more runnable threads than cores a worker can be off its core for a
// scheduler slice (milliseconds), and waiting for every worker to check in cost that slice per kernel. A
// generation number opens a job (odd) and closes it (even); a worker enters a job (`inside`) and checks that it is
// still open before it reads the job's fields, and the next job waits for the workers inside to leave before it
// rewrites them (the caller closes, then reads `inside`; a worker enters, then reads the generation: sequentially
// consistent, so one of them sees the other).
struct ThreadPool::State {
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<std::thread> workers;
  const std::function<void(int64_t, int64_t, int)>* fn = nullptr;
  int64_t n = 0, chunk = 1, numChunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};        // chunks of the current job finished (or given up after an exception)
  std::atomic<int> inside{0};          // workers that entered a job and have not left it
  std::atomic<uint64_t> generation{0};  // odd: the job is open
  std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  std::atomic<bool> busy{false};
  // The first exception a chunk threw (std::bad_alloc, say): the job stops handing out chunks, and parallelFor
  // rethrows it on the calling thread. An exception left on a worker thread would end the process.
  std::mutex errorMutex;
  std::exception_ptr error;

  void work(int thread) {
    for (;;) {
      int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= numChunks) return;
      int64_t b = c * chunk, e = std::min(n, b + chunk);
      try {
        (*fn)(b, e, thread);
      } catch (...) {
        {
          std::lock_guard lock(errorMutex);
          if (!error) error = std::current_exception();
        }
        // This chunk and those no one will take now count as done.
        int64_t rest = next.exchange(numChunks, std::memory_order_relaxed);
        done.fetch_add(1 + std::max<int64_t>(0, numChunks - rest), std::memory_order_release);
        return;
      }
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

namespace {
inline void pause() { __builtin_ia32_pause(); }
constexpr int kSpins = 1 << 16;  // polls before a waiting caller yields its core
// How long an idle worker polls for the next job before it sleeps, by the clock: `pause` takes 10 cycles on some
// cores and 140 on others (65536 of them: 1.6 ms on an EPYC), and a worker that polls through a oneDNN kernel
// (bf16 products, convolutions, on OpenMP threads of their own) takes a core from it on a 2-core machine.
constexpr auto kIdleSpin = std::chrono::microseconds(100);
}  // namespace

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool(configuredThreads());
  return pool;
}

ThreadPool::ThreadPool(int threads) : m_state(new State), m_numThreads(threads) {
  for (int t = 1; t < threads; ++t)
    m_state->workers.emplace_back([this, t] {
      _mm_setcsr(_mm_getcsr() | MxcsrScope::kFlushSubnormals);  // for good (see FlushDenormals)
      State& s = *m_state;
      uint64_t seen = 0;
      auto isNew = [&](uint64_t g) { return g != seen && (g & 1) != 0; };
      for (;;) {
        int spins = 0;
        const auto idleSince = std::chrono::steady_clock::now();
        uint64_t g = 0;
        while (!isNew(g = s.generation.load(std::memory_order_acquire)) && !s.stop.load(std::memory_order_relaxed)) {
          if ((++spins & 63) != 0 || std::chrono::steady_clock::now() - idleSince < kIdleSpin) {
            pause();
            continue;
          }
          std::unique_lock lock(s.mutex);
          s.sleepers.fetch_add(1);
          s.wake.wait(lock, [&] { return s.stop.load() || isNew(s.generation.load()); });
          s.sleepers.fetch_sub(1);
        }
        if (s.stop.load()) return;
        seen = g;
        s.inside.fetch_add(1, std::memory_order_seq_cst);
        if (s.generation.load(std::memory_order_seq_cst) == g) s.work(t);  // still open: its fields hold
        s.inside.fetch_sub(1, std::memory_order_release);
      }
    });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(m_state->mutex);
    m_state->stop.store(true);
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
  // Workers that entered the last job after it closed leave it before its fields change (they find no chunk).
  for (int spins = 0; s.inside.load(std::memory_order_seq_cst) > 0; ++spins) {
    if (spins < kSpins) pause();
    else std::this_thread::yield();
  }
  s.fn = &fn;
  s.n = n;
  s.chunk = chunk;
  s.numChunks = numChunks;
  s.next.store(0, std::memory_order_relaxed);
  s.done.store(0, std::memory_order_relaxed);
  {
    std::lock_guard lock(s.mutex);  // orders the job's fields before a sleeping worker's wake-up check
    s.generation.fetch_add(1, std::memory_order_seq_cst);  // open
  }
  if (s.sleepers.load() > 0) s.wake.notify_all();
  s.work(0);
  for (int spins = 0; s.done.load(std::memory_order_acquire) < numChunks; ++spins) {
    if (spins < kSpins) pause();
    else std::this_thread::yield();
  }
  s.generation.fetch_add(1, std::memory_order_seq_cst);  // closed
  std::exception_ptr error;
  {
    std::lock_guard lock(s.errorMutex);
    error = std::exchange(s.error, nullptr);
  }
  s.busy.store(false);
  if (error) std::rethrow_exception(error);
}

}  // namespace tsr::cpu
