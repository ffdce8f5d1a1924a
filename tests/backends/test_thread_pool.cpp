// The CPU backend's thread pool: every index is visited once, and an exception thrown by a chunk on a worker
// thread reaches the caller instead of ending the process; the pool keeps working afterwards.
#include "tests/check.h"

#include <atomic>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/backends/cpu/thread_pool.h"

using namespace tsr;

TEST_CASE("every index is visited once") {
  std::vector<std::atomic<int>> seen(10007);
  cpu::ThreadPool::instance().parallelFor(10007, 3, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
  });
  for (size_t i = 0; i < seen.size(); ++i) REQUIRE_MESSAGE(seen[i].load() == 1, "index " << i);
}

TEST_CASE("an exception on a worker thread reaches the caller") {
  cpu::ThreadPool& pool = cpu::ThreadPool::instance();
  if (pool.numThreads() < 2) TSR_SKIP("one thread: no worker to throw from");
  std::atomic<bool> workerRan{false};
  bool thrown = false;
  try {
    // Slow chunks, so that the workers take some of them; each one a worker takes throws.
    pool.parallelFor(64, 1, [&](int64_t, int64_t, int thread) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      if (thread != 0) {
        workerRan = true;
        throw std::runtime_error("chunk failed");
      }
    });
  } catch (const std::runtime_error& e) {
    thrown = std::string(e.what()) == "chunk failed";
  }
  if (!workerRan) TSR_SKIP("no worker took a chunk");
  REQUIRE(thrown);
  // The pool is usable afterwards.
  std::atomic<int64_t> sum{0};
  pool.parallelFor(1000, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  TSR_COMPARE(sum.load(), int64_t(999 * 1000 / 2));
}
