// SPMD runs that overlap in one process on one communicator: runs started at once from two host threads, and a
// run started from inside one device's program while the outer run's other devices wait in a collective. Each
// run's collectives must meet only that run's calls: every sum and gather is checked against values computed
// here without communication, and a failure in one run must leave the other running.
//
// A regression may leave devices waiting for calls that never come, so each case runs under a time limit
// (within): past it the communicator is aborted, which ends every wait, and the case fails instead of hanging.
#include "tests/check.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <latch>
#include <thread>

#include "engine/dist/communicator.h"

using namespace tsr;
using namespace tsr::dist;

namespace {

using Group = std::vector<int>;

// Runs body on a thread of its own and waits at most `limit`. Past it the communicator is aborted from this
// thread (outside any run, so every run's waits end); a body that still does not end cannot be joined, so the
// process says why and exits.
bool finishesWithin(Communicator& comm, std::chrono::seconds limit, const std::function<void()>& body) {
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  std::thread t([&] {
    body();
    done.set_value();
  });
  bool inTime = finished.wait_for(limit) == std::future_status::ready;
  if (!inTime) {
    comm.abort("the test's time limit passed");
    if (finished.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      std::fprintf(stderr, "FAILED: devices still wait after the abort; ending the process\n");
      std::fflush(nullptr);
      std::_Exit(1);
    }
  }
  t.join();
  return inTime;
}

// Device p's element e in iteration `it` of run `run` of host thread `host`: distinct for every argument, so a
// call that met another run's (or another iteration's) members shows in the sum.
int32_t valueOf(int host, int run, int it, int p, int64_t e) {
  return static_cast<int32_t>(host * 1000003 + run * 7919 + it * 101 + p * 13 + static_cast<int32_t>(e));
}

// One run's program: `iterations` rounds of an all_reduce over every device, an all_reduce over the pairs
// {0,1}, {2,3}, ... and an all_gather over every device, each checked exactly (int32 sums wrap, as the
// communicator's do).
Status collectiveLoop(int host, int run, int iterations, int n, int p) {
  Communicator& comm = *currentDevice()->comm;
  Group everyone(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) everyone[static_cast<size_t>(i)] = i;
  const Group& all = everyone;
  const Group pair = {p - p % 2, p - p % 2 + 1};
  for (int it = 0; it < iterations; ++it) {
    const int64_t count = 1 + it % 7;
    std::vector<int32_t> x(static_cast<size_t>(count)), sum(static_cast<size_t>(count));
    for (int64_t e = 0; e < count; ++e) x[static_cast<size_t>(e)] = valueOf(host, run, it, p, e);
    for (const Group* g : {&all, &pair}) {
      TSR_TRY(comm.allReduce(p, *g, x.data(), sum.data(), count, DType::I32));
      for (int64_t e = 0; e < count; ++e) {
        uint32_t want = 0;
        for (int m : *g) want += static_cast<uint32_t>(valueOf(host, run, it, m, e));
        if (static_cast<uint32_t>(sum[static_cast<size_t>(e)]) != want)
          return makeError("host {} run {} iteration {}: all_reduce over {} devices, element {} is {}, expected {}",
                           host, run, it, g->size(), e, sum[static_cast<size_t>(e)], static_cast<int32_t>(want));
      }
    }
    std::vector<int32_t> gathered(static_cast<size_t>(count * n));
    TSR_TRY(comm.allGather(p, all, x.data(), gathered.data(), count * 4));
    for (int m = 0; m < n; ++m)
      for (int64_t e = 0; e < count; ++e)
        if (gathered[static_cast<size_t>(m * count + e)] != valueOf(host, run, it, m, e))
          return makeError("host {} run {} iteration {}: all_gather chunk {} element {} is another call's", host,
                           run, it, m, e);
  }
  return {};
}

}  // namespace

// Two host threads (two Python threads calling sharded functions, an IDE worker and a script) start runs on the
// same communicator at once: the first takes the persistent device threads, the other starts its own, and their
// devices call the same collectives over the same groups at the same time.
TEST_CASE("concurrentRunsKeepTheirCollectives") {
  const int n = 8, runs = 12, iterations = 40;
  auto comm = makeInProcessCommunicator(n);
  std::vector<std::string> errors(2);
  std::atomic<int> completed{0};
  bool inTime = finishesWithin(*comm, std::chrono::seconds(120), [&] {
    std::latch start(2);
    auto host = [&](int h) {
      start.arrive_and_wait();
      for (int run = 0; run < runs; ++run) {
        Status st = runOnDevices(*comm, [&](int p) { return collectiveLoop(h, run, iterations, n, p); });
        if (!st.ok()) {
          errors[static_cast<size_t>(h)] = st.error().message;
          return;
        }
        completed.fetch_add(1);
      }
    };
    std::thread other(host, 1);
    host(0);
    other.join();
  });
  REQUIRE_MESSAGE(inTime, "the runs did not finish within the time limit");
  for (const std::string& e : errors) REQUIRE_MESSAGE(e.empty(), e);
  TSR_COMPARE(completed.load(), 2 * runs);
}

// Device 0 runs a whole SPMD program on the same devices (a host callback that calls a sharded function) while
// devices 1..3 of the outer run already wait for it in the outer run's next all_reduce. The inner run's devices
// 1..3 are threads of their own (the persistent ones are busy); its device 0 is the outer device 0's thread.
TEST_CASE("nestedRunKeepsItsCollectives") {
  const int n = 4;
  auto comm = makeInProcessCommunicator(n);
  Status st;
  bool inTime = finishesWithin(*comm, std::chrono::seconds(60), [&] {
    st = runOnDevices(*comm, [&](int p) -> Status {
      Communicator& c = *currentDevice()->comm;
      const Group all = {0, 1, 2, 3};
      for (int step = 0; step < 3; ++step) {
        if (p == 0) {
          TSR_TRY(runOnDevices(*comm, [&](int q) { return collectiveLoop(1, step, 20, n, q); }));
          if (currentDevice()->position != 0) return makeError("the outer device's context was not restored");
        }
        int32_t x = (step + 1) * 100 + p, sum = 0;
        TSR_TRY(c.allReduce(p, all, &x, &sum, 1, DType::I32));
        const int32_t want = 4 * (step + 1) * 100 + 0 + 1 + 2 + 3;
        if (sum != want) return makeError("outer step {}: all_reduce {} on device {}, expected {}", step, sum, p, want);
      }
      return {};
    });
  });
  REQUIRE_MESSAGE(inTime, "the runs did not finish within the time limit");
  REQUIRE_MESSAGE(st.ok(), st.error().message);
}

// A run that fails while another is in flight aborts only its own calls: the other run, which waits for the
// failure in the middle of its program, completes with exact sums; the failed one reports its root cause, and the
// communicator serves the next run.
TEST_CASE("failedRunLeavesTheOtherRunning") {
  const int n = 8;
  auto comm = makeInProcessCommunicator(n);
  Status good, bad;
  std::atomic<bool> goodStarted{false}, badDone{false};
  bool inTime = finishesWithin(*comm, std::chrono::seconds(120), [&] {
    std::thread other([&] {
      good = runOnDevices(*comm, [&](int p) -> Status {
        goodStarted.store(true);
        TSR_TRY(collectiveLoop(0, 0, 20, n, p));
        while (!badDone.load()) std::this_thread::yield();
        return collectiveLoop(0, 1, 20, n, p);
      });
    });
    while (!goodStarted.load()) std::this_thread::yield();
    bad = runOnDevices(*comm, [&](int p) -> Status {
      if (p == 5) return makeError("out of memory");
      int32_t x = 1;
      for (;;) TSR_TRY(currentDevice()->comm->allReduce(p, Group{0, 1, 2, 3, 4, 5, 6, 7}, &x, &x, 1, DType::I32));
    });
    badDone.store(true);
    other.join();
  });
  REQUIRE_MESSAGE(inTime, "the runs did not finish within the time limit");
  REQUIRE_MESSAGE(good.ok(), good.error().message);
  REQUIRE(!bad.ok());
  TSR_COMPARE(bad.error().message, std::string("device 5: out of memory"));
  Status next = runOnDevices(*comm, [&](int p) { return collectiveLoop(2, 0, 5, n, p); });
  REQUIRE_MESSAGE(next.ok(), next.error().message);
}

// An abort from outside any run (a host thread that stops everything) still ends every run's waits; once the
// runs have returned, the communicator recovers for the next.
TEST_CASE("abortFromOutsideEndsEveryRun") {
  const int n = 4;
  auto comm = makeInProcessCommunicator(n);
  std::vector<Status> results(2);
  std::atomic<int> waiting{0};
  std::atomic<bool> aborted{false};
  std::vector<std::thread> hosts;
  for (int h = 0; h < 2; ++h)
    hosts.emplace_back([&, h] {
      results[static_cast<size_t>(h)] = runOnDevices(*comm, [&](int p) -> Status {
        if (p == 0) {  // never joins: only the abort ends the others' wait
          while (!aborted.load()) std::this_thread::yield();
          return {};
        }
        waiting.fetch_add(1);
        int32_t x = 1;
        return currentDevice()->comm->allReduce(p, Group{0, 1, 2, 3}, &x, &x, 1, DType::I32);
      });
    });
  while (waiting.load() < 2 * (n - 1)) std::this_thread::yield();
  comm->abort("stopped from outside");
  aborted.store(true);
  for (auto& t : hosts) t.join();
  for (const Status& st : results) {
    REQUIRE(!st.ok());
    REQUIRE_MESSAGE(st.error().message.find("stopped from outside") != std::string::npos, st.error().message);
  }
  Status next = runOnDevices(*comm, [&](int p) { return collectiveLoop(3, 0, 5, n, p); });
  REQUIRE_MESSAGE(next.ok(), next.error().message);
}
