#pragma once
// Profiles as Chrome Trace Event Format JSON, the format ui.perfetto.dev and chrome://tracing open as is:
//
//   {"traceEvents": [
//      {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "cpu:0"}},
//      {"ph": "M", "name": "thread_name", "pid": 2, "tid": 1, "args": {"name": "thread 0"}},
//      {"ph": "X", "name": "dot_general f32[64,784],f32[784,1024]", "cat": "gemm", "pid": 2, "tid": 1,
//       "ts": 12.345, "dur": 101.5, "args": {"fusion": 7, "kind": "gemm", "nodes": [3], "ops": ["dot_general"],
//       "flops": 1.0e8, "bytes": 3.6e6, "GFLOP/s": 98.7, "GB/s": 35.5, ...}}, ...],
//    "displayTimeUnit": "ns", "otherData": {...}}
//
// Each device is a process (pid 2, 3, ... in order of first use) and each of its threads or streams a thread
// (tid = stream + 1); step marks are complete events on their own track (process "host", pid 1, thread
// "steps"). Times are microseconds from the first event or mark, as floats keeping nanoseconds. Each kernel
// event's args carry its fusion's table entry, so a trace file read back (readChromeTrace) gives the events,
// the marks and the kernels that ran.
#include <functional>
#include <iosfwd>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/result.h"
#include "engine/runtime/profiler.h"

namespace tsr::runtime {

// A device of a profile: the process (rank) that ran it, and how its clock was put on rank 0's (rank_clocks.h).
struct DeviceClock {
  std::string device;    // "cpu:3"
  int rank = 0;          // the MPI rank of its process; 0 for the virtual devices of one process
  int64_t offsetNs = 0;  // its process's clock minus rank 0's, subtracted from its times
  int64_t errorNs = 0;   // the bound on the offset's error (0: the same clock)
  bool operator==(const DeviceClock&) const = default;
};

// What one profile holds: kernel launches, host marks (steps), and the kernel table linking events to nodes.
struct Trace {
  std::vector<ProfileEvent> events;
  std::vector<ProfileMark> marks;
  std::vector<FusionInfo> kernels;
  std::vector<MemorySample> memory;  // live buffer bytes over time (a counter track)
  std::vector<DeviceClock> devices;  // by device name; empty: every device ran in one process

  static Trace from(const Profiler& p) { return Trace{p.events(), p.marks(), p.fusions(), p.memorySamples(), {}}; }
  const FusionInfo* kernel(int64_t fusion) const;
};

// The rank of a trace's host process from its name: N for "host (rank N)", as traces of several ranks name
// them; 0 for any other name.
int hostRank(const std::string& processName);

// The same JSON written a part at a time, for profiles too large to hold (`tessera runs export-trace`): the kernel
// table, step marks and memory samples are small and given first, then each launch as it is read. A device's
// and a stream's names are written before their first launch.
class ChromeTraceWriter {
 public:
  // t0: the time that becomes 0 (the earliest launch or mark).
  ChromeTraceWriter(std::ostream& out, int64_t t0, std::vector<FusionInfo> kernels);
  void marksAndMemory(const std::vector<ProfileMark>& marks, const std::vector<MemorySample>& memory);
  void event(const ProfileEvent& e);
  // Closes the document; the stream's state says whether everything was written. Before closing it links each
  // collective call's members (launches with the same collective number and group, ProfileEvent::collective)
  // to its straggler, the last to arrive: a flow arrow from each waiting member's launch to the straggler's,
  // named with the wait, as the Timeline draws them.
  void finish();
  size_t events() const { return m_events; }
  size_t links() const { return m_links; }

 private:
  void put(const std::string& element);  // one element of traceEvents, as JSON text
  std::ostream& m_out;
  int64_t m_t0;
  std::vector<FusionInfo> m_table;
  std::map<int64_t, const FusionInfo*> m_kernels;
  std::map<std::string, int> m_pids;
  std::set<std::pair<int, int64_t>> m_threads;
  struct Member {
    std::string device;
    int pid = 0;
    int64_t tid = 0, startNs = 0;
  };
  struct Call {
    std::string name;  // its first launch's kernel
    std::vector<Member> members;
  };
  std::map<std::pair<int64_t, std::vector<int>>, Call> m_calls;  // by (collective, group)
  bool m_first = true;
  size_t m_events = 0, m_links = 0;
};

// The trace as JSON text.
std::string toChromeTrace(const Trace& trace);
Status writeChromeTrace(const std::string& path, const Trace& trace);
// Writes `path` beside it and renames it over (a viewer never opens half a file); body writes the trace.
Status writeChromeTraceWith(const std::string& path, int64_t t0, std::vector<FusionInfo> kernels,
                            const std::function<Status(ChromeTraceWriter&)>& body);

// A trace written by toChromeTrace. Times come back in ns relative to the trace's start (the first event at
// its offset from the first mark or event, as written); kernels are rebuilt from the events' args. Events of
// other programs are read as far as they follow the format (X events with ts and dur).
Result<Trace> parseChromeTrace(std::string_view json);
Result<Trace> readChromeTrace(const std::string& path);

}  // namespace tsr::runtime
