// The CPU backend's thread pool: every index is visited once, also over many short jobs back to back (a worker
// late for one job must not run a chunk of the next with the last one's fields), and an exception thrown by a
// chunk on a worker thread reaches the caller instead of ending the process; the pool keeps working afterwards.
// FlushDenormals and MxcsrScope set a thread's subnormal handling for their scope and put it back. OpenBLAS's
// workspaces are checked for as many threads as asked, also after fewer were checked (BlasThreads).
#include "tests/check.h"

#include <atomic>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include <cblas.h>
#include <sys/resource.h>

#include <fstream>
#include <string>

#include "engine/backends/cpu/thread_pool.h"
#include "engine/runtime/blas_workspace.h"

using namespace tsr;

TEST_CASE("every index is visited once") {
  std::vector<std::atomic<int>> seen(10007);
  cpu::ThreadPool::instance().parallelFor(10007, 3, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
  });
  for (size_t i = 0; i < seen.size(); ++i) REQUIRE_MESSAGE(seen[i].load() == 1, "index " << i);
}

TEST_CASE("short jobs back to back each visit their own indices once") {
  // Each job writes its number into its own slots: a chunk run with another job's size or function would leave a
  // slot unwritten, written twice, or written with the wrong job's number.
  constexpr int kJobs = 20000;
  std::vector<int> slots(64 * 2);
  std::vector<std::atomic<int>> count(slots.size());
  for (int job = 0; job < kJobs; ++job) {
    const int64_t n = 2 + job % 61;
    int* mine = slots.data() + (job % 2) * 64;
    std::atomic<int>* counts = count.data() + (job % 2) * 64;
    cpu::ThreadPool::instance().parallelFor(n, 1, [&, mine, counts](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        mine[i] = job;
        counts[i].fetch_add(1, std::memory_order_relaxed);
      }
    });
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE_MESSAGE(mine[i] == job, "job " << job << " index " << i);
      REQUIRE_MESSAGE(counts[i].exchange(0) == 1, "job " << job << " index " << i);
    }
  }
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

namespace {
// Half the smallest normal float, a subnormal, computed at run time (a constant would be folded at compile time).
float halfOfSmallestNormal() {
  volatile float smallest = 1.17549435e-38f, half = 0.5f;
  return smallest * half;
}
}  // namespace

TEST_CASE("FlushDenormals flushes subnormal results in its scope and restores the thread's MXCSR after") {
  const unsigned before = cpu::MxcsrScope::current();
  REQUIRE_MESSAGE((before & cpu::MxcsrScope::kFlushSubnormals) == 0, "the test thread starts without FTZ/DAZ");
  CHECK(halfOfSmallestNormal() > 0.0f);  // IEEE: gradual underflow
  {
    cpu::FlushDenormals ftz;
    CHECK(halfOfSmallestNormal() == 0.0f);
    {
      cpu::MxcsrScope caller(before);  // an eager chunk on a pool worker: the caller's register
      CHECK(halfOfSmallestNormal() > 0.0f);
    }
    CHECK(halfOfSmallestNormal() == 0.0f);
  }
  constexpr unsigned kControl = ~0x3Fu;  // bits 0-5 are sticky exception flags the arithmetic above sets
  CHECK((cpu::MxcsrScope::current() & kControl) == (before & kControl));
  CHECK(halfOfSmallestNormal() > 0.0f);
}

namespace {
// This process's mapped bytes (VmSize), or 0 when /proc does not say.
uint64_t mappedBytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) << 10;  // kB
  return 0;
}
}  // namespace

TEST_CASE("OpenBLAS's workspaces are checked for more threads after fewer fit, and BlasThreads leaves the count") {
#if defined(__SANITIZE_ADDRESS__)
  TSR_SKIP("AddressSanitizer maps its own memory: an address-space limit would stop it, not OpenBLAS");
#endif
  const uint64_t mapped = mappedBytes();
  if (mapped == 0) TSR_SKIP("no /proc/self/status");
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_AS, &saved) == 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < mapped + (uint64_t(1) << 30))
    TSR_SKIP("an address-space limit is set already");
  const int threadsBefore = openblas_get_num_threads();
  // Room for one 128 MiB workspace, not for four.
  rlimit tight{mapped + (uint64_t(300) << 20), saved.rlim_max};
  REQUIRE(::setrlimit(RLIMIT_AS, &tight) == 0);
  const Status one = runtime::reserveBlasWorkspace(1);
  const Status four = runtime::reserveBlasWorkspace(4);
  std::string scoped;
  int threadsInScope = -1;
  {
    runtime::BlasThreads blas(4);
    if (!blas.status().ok()) scoped = blas.status().error().message;
    threadsInScope = openblas_get_num_threads();
  }
  ::setrlimit(RLIMIT_AS, &saved);
  CHECK(one.ok());
  REQUIRE_FALSE(four.ok());
  CHECK_MESSAGE(four.error().message.find("4 GEMM threads") != std::string::npos, four.error().message);
  CHECK_MESSAGE(scoped.find("out of memory") != std::string::npos, scoped);
  CHECK(threadsInScope == threadsBefore);  // not set when its workspaces do not fit
  CHECK(openblas_get_num_threads() == threadsBefore);
}
