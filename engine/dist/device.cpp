// Devices: how many virtual CPU devices, which device this thread runs for, and runOnDevices, which runs one
// program per device on persistent threads and turns the first failure into an abort of the run's collectives
// (the in-process communicator keeps each run's calls apart, run_state.h; MPI's abort is the rank's).
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "engine/core/env_options.h"
#include "engine/dist/communicator.h"
#include "engine/dist/run_state.h"

namespace tsr::dist {

Result<int> parseCpuDeviceCount(std::string_view text) {
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return makeError("'{}' is not a device count (a whole number from 1 to {})", text, kMaxCpuDevices);
  if (n < 1 || n > kMaxCpuDevices)
    return makeError("{} devices: the count must be from 1 to {}", n, kMaxCpuDevices);
  return n;
}

int configuredCpuDevices() {
  static const int count = [] {
    const std::optional<std::string>& env = envOptions().cpuDevices;
    if (!env) return 1;
    auto n = parseCpuDeviceCount(*env);
    if (n.ok()) return *n;
    std::fprintf(stderr, "tessera: TESSERA_CPU_DEVICES: %s; using 1 device\n", n.error().message.c_str());
    return 1;
  }();
  return count;
}

bool launchedUnderMpi() {
  return envOptions().underMpi;
}

#ifndef TESSERA_HAVE_MPI
Result<std::shared_ptr<Communicator>> makeMpiCommunicator() {
  return makeError("this build of tessera has no MPI (install an MPI such as libopenmpi-dev and reconfigure)");
}
#endif

// ---- the device of this thread

namespace {
thread_local DeviceContext* t_device = nullptr;

class DeviceScope {
 public:
  explicit DeviceScope(DeviceContext* ctx) : m_saved(t_device) { t_device = ctx; }
  ~DeviceScope() { t_device = m_saved; }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  DeviceContext* m_saved;
};
}  // namespace

DeviceContext* currentDevice() { return t_device; }

// Which device failed first: that one is the root cause; the errors its abort causes elsewhere come later.
void RunState::recordFailure(int position, const std::string& message) {
  {
    std::lock_guard lock(mutex);
    if (firstDevice >= 0) return;
    firstDevice = position;
    firstMessage = message;
  }
  comm->abort(fmt::format("device {}: {}", position, message));
}

void DeviceContext::fail(const Error& e) {
  if (error.empty()) error = e.message;
  // The communicator tells which run to abort by the calling thread's device: make it this one's.
  DeviceScope scope(this);
  if (run) run->recordFailure(position, e.message);
  else if (comm) comm->abort(fmt::format("device {}: {}", position, e.message));
}

// ---- persistent device threads

namespace {

// Threads that run device programs, kept between runs: a training step calls runOnDevices every step, and
// starting eight threads costs more than a small step's collectives. One run uses them at a time; a run that
// finds them busy (a nested run, or runs from two threads) starts threads of its own.
class DeviceThreads {
 public:
  static DeviceThreads& instance() {
    static DeviceThreads threads;
    return threads;
  }

  // Runs jobs[0] on the calling thread and the others concurrently; returns when all have finished.
  void run(const std::vector<std::function<void()>>& jobs) {
    if (jobs.size() == 1) {
      jobs[0]();
      return;
    }
    std::unique_lock busy(m_busy, std::try_to_lock);
    if (!busy.owns_lock()) {
      std::vector<std::thread> threads;
      for (size_t i = 1; i < jobs.size(); ++i) threads.emplace_back(jobs[i]);
      jobs[0]();
      for (auto& t : threads) t.join();
      return;
    }
    while (m_workers.size() + 1 < jobs.size()) m_workers.push_back(std::make_unique<Worker>());
    std::latch done(static_cast<std::ptrdiff_t>(jobs.size() - 1));
    for (size_t i = 1; i < jobs.size(); ++i) m_workers[i - 1]->start(&jobs[i], &done);
    jobs[0]();
    done.wait();
  }

  ~DeviceThreads() = default;  // each Worker stops and joins its thread

 private:
  class Worker {
   public:
    Worker() : m_thread([this] { loop(); }) {}
    ~Worker() {
      {
        std::lock_guard lock(m_mutex);
        m_stop = true;
      }
      m_cv.notify_one();
      m_thread.join();
    }
    void start(const std::function<void()>* job, std::latch* done) {
      {
        std::lock_guard lock(m_mutex);
        m_job = job;
        m_done = done;
      }
      m_cv.notify_one();
    }

   private:
    void loop() {
      for (;;) {
        const std::function<void()>* job;
        std::latch* done;
        {
          std::unique_lock lock(m_mutex);
          m_cv.wait(lock, [&] { return m_stop || m_job; });
          if (m_stop) return;
          job = std::exchange(m_job, nullptr);
          done = m_done;
        }
        (*job)();
        done->count_down();
      }
    }

    std::mutex m_mutex;
    std::condition_variable m_cv;
    const std::function<void()>* m_job = nullptr;
    std::latch* m_done = nullptr;
    bool m_stop = false;
    std::thread m_thread;  // last: started once the members above exist
  };

  std::mutex m_busy;
  std::vector<std::unique_ptr<Worker>> m_workers;
};

// One device's program: its context set on this thread; every way it can fail is recorded.
Status runDevice(RunState& run, Communicator& comm, int position, const std::function<Status(int)>& fn) {
  DeviceContext ctx;
  ctx.position = position;
  ctx.comm = &comm;
  ctx.run = &run;
  DeviceScope scope(&ctx);
  Status st;
  try {
    st = fn(position);
  } catch (const std::exception& e) {
    st = makeError("{}", e.what());
  } catch (...) {
    st = makeError("an exception that is not a std::exception");
  }
  if (st.ok() && !ctx.error.empty()) st = Error{ctx.error};
  if (!st.ok()) run.recordFailure(position, st.error().message);
  return st;
}

}  // namespace

namespace {
std::atomic<int> g_runsInFlight{0};  // runOnDevices calls not yet returned, on any communicator
}  // namespace

Status runOnDevices(Communicator& comm, const std::function<Status(int position)>& fn) {
  const std::vector<int> local = comm.localDevices();
  if (local.empty()) return makeError("runOnDevices: the {} communicator has no devices here", comm.kind());
  RunState run;
  run.comm = &comm;
  std::vector<Status> results(local.size());
  std::vector<std::function<void()>> jobs;
  for (size_t i = 0; i < local.size(); ++i)
    jobs.push_back([&, i] { results[i] = runDevice(run, comm, local[i], fn); });
  g_runsInFlight.fetch_add(1);
  DeviceThreads::instance().run(jobs);
  // Every device of this run has returned; with no other run in flight nobody can be inside a collective. The
  // in-process communicator's state for this run goes with `run`; recover forgets an abort of the whole
  // communicator (one made outside any run) and what the callers outside runs left half met.
  if (g_runsInFlight.fetch_sub(1) == 1 && run.firstDevice >= 0) comm.recover();
  if (run.firstDevice < 0) return {};
  // The root cause's own error when it returned one (it carries the op and node), else what it recorded.
  for (size_t i = 0; i < local.size(); ++i)
    if (local[i] == run.firstDevice && !results[i].ok())
      return makeError("device {}: {}", run.firstDevice, results[i].error().message);
  return makeError("device {}: {}", run.firstDevice, run.firstMessage);
}

}  // namespace tsr::dist
