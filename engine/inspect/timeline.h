#pragma once
// The kernel timeline as the Timeline panel shows it: every kernel launch of a profile (from the run store, or
// from a Chrome/Perfetto trace JSON file), one row per device and stream (and host thread), on one time axis.
//
// Built once, then read-only. Events are stored sorted by (row, lane, start): each lane of a row is a
// contiguous range of `events` in which no two events overlap (nested zones of other tools' traces get deeper
// lanes), with running sums over it so that a frame visits only what is on screen:
//   - visibleBoxes() folds runs of kernels narrower than a few pixels into one box with a count, jumping over
//     them by binary search, so a frame costs O(boxes * log n) whatever the number of events;
//   - hitTest() maps a pixel to the same box the view draws there;
//   - rangeStats() sums the events of a time range per kernel name.
// Nothing here knows Qt or ImGui: the Timeline panel draws what these functions return.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/core/result.h"
#include "engine/ir/graph.h"
#include "engine/runtime/kernel_summary.h"
#include "engine/store/collective_instances.h"

namespace tsr::runtime {
struct Trace;
}

namespace tsr::inspect {

// One kernel launch (or a zone of another tool's trace). Times are ns from the timeline's start.
struct TimelineEvent {
  int64_t startNs = 0;
  int64_t durationNs = 0;
  double flops = 0;
  double bytes = 0;          // read + written
  int32_t name = 0;          // index into Timeline::names
  int32_t kernel = -1;       // index into Timeline::kernels; -1: no kernel table entry
  int32_t row = 0;           // index into Timeline::rows
  uint16_t lane = 0;         // nesting depth in the row (0: top level)
  uint16_t kind = 0;         // index into Timeline::kinds (fusion kind: "loop", "gemm", ... or a trace's category)
  uint16_t family = 0;       // index into Timeline::families (op family: "contraction", "elementwise", ...)
  int64_t endNs() const { return startNs + durationNs; }
};

// One kernel of the profiled executable: the graph nodes its launches ran.
struct TimelineKernel {
  int64_t fusion = -1;
  std::string executable;  // "train_step"
  std::string name;
  std::string kind;  // "loop", "reduction", "gemm", "opaque", "copy"
  std::vector<int> nodes;  // node ids of the graph after the fusion pass
  std::vector<std::string> ops;
  std::string modulePath;
  std::vector<uint32_t> events;  // its launches, in event order
  // On a timeline of two profiles (timeline_compare.h): the time per step of this kernel's pair, in A and in
  // B, the same on both sides of the pair; -1 where the kernel has no pair in the other profile, or there is none.
  double pairNsA = -1, pairNsB = -1;
};

// One lane of a row: events [begin, end) of Timeline::events, by start, none overlapping.
struct TimelineLane {
  uint32_t begin = 0, end = 0;
  std::vector<int64_t> starts;      // starts[i]: start of event begin + i
  std::vector<int64_t> ends;        // ends[i]: its end (non-decreasing: the events do not overlap)
  std::vector<int64_t> busyPrefix;  // busyPrefix[i]: summed durations of events begin .. begin + i - 1
  uint32_t size() const { return end - begin; }
};

struct TimelineRow {
  std::string device;  // "cpu:0", "cuda:1", or a trace's process name
  std::string label;   // "thread 2", "stream 7", or a trace's thread name
  int64_t stream = 0;  // stream or thread id as recorded
  int rank = -1;       // the MPI rank of the device's process; -1: not recorded (one process, or a trace file)
  std::vector<TimelineLane> lanes;
  uint32_t numEvents = 0;
};

// A named host span such as "step 3" of one process (its MPI rank; 0 in a profile of one process), drawn on its
// rank's track above the rows.
struct TimelineSpan {
  std::string name;
  int64_t startNs = 0;
  int64_t durationNs = 0;
  int rank = 0;
};

// One collective call across devices (store::CollectiveInstance: arrivals, waits, the straggler), with each
// member's launch among the timeline's events, so the view can link the spans and mark the straggler.
struct TimelineCollective {
  store::CollectiveInstance call;  // its times on the profile's clock, as recorded (not from the timeline's start)
  std::vector<int64_t> events;     // per member of call: its event in Timeline::events, -1 when not found
  int64_t stragglerEvent() const { return events[static_cast<size_t>(call.straggler)]; }
};

struct Timeline {
  std::string source;  // "profile 3 of /p/runs.db", "/tmp/trace.json"
  int64_t profileId = 0;     // the run store's profile id; 0 for a trace file
  int64_t runId = 0;         // the run it profiled; 0 for a trace file
  std::string storePath;     // the run store it came from; "" for a trace file
  bool comparison = false;   // two profiles side by side (timeline_compare.h): runId is A's
  std::string projectText;   // the project.toml its run was started with ("" for a trace file)
  std::vector<TimelineEvent> events;  // by (row, lane, start)
  std::vector<std::string> names;
  std::vector<std::string> kinds;
  std::vector<std::string> families;
  std::vector<TimelineKernel> kernels;
  std::vector<TimelineRow> rows;
  std::vector<TimelineSpan> spans;  // by start
  std::vector<int> spanRanks;       // the ranks with spans, ascending: one span track each
  std::vector<std::string> spanTrackNames;  // per span track, where set: its label (a comparison: "A", "B")
  int64_t beginNs = 0, endNs = 0;   // the extent of events and spans
  std::vector<TimelineCollective> collectives;  // by (seq, group)
  std::unordered_map<uint32_t, int32_t> collectiveIndex;  // event -> its call in collectives

  const TimelineKernel* kernelOf(uint32_t event) const;
  // The collective call an event belongs to, or nullptr; `member` gets its index among the call's members.
  const TimelineCollective* collectiveOf(uint32_t event, int* member = nullptr) const;
  // A row's group heading: "rank 1 · cpu:1" when the profile spans processes, else the device.
  std::string rowGroup(int row) const;
  // How many processes the profile's devices ran in (0: not recorded).
  int numRanks() const;
  const std::string& nameOf(uint32_t event) const { return names[static_cast<size_t>(events[event].name)]; }
  // Kernels whose nodes include `node` (graph of the fusion stage).
  std::vector<int> kernelsWithNode(int node) const;
};

// Collects events in any order and builds the Timeline: rows sorted (devices in natural order, "cpu:2" before
// "cpu:10", CPUs before GPUs; then streams), lanes assigned by nesting, the running sums computed.
class TimelineBuilder {
 public:
  // The row of (device, stream), created on first use. `label` names it (empty: "thread N" on a CPU, "stream
  // N" elsewhere); deviceOrder / streamOrder, when given, sort before the natural order (a trace's sort_index).
  int row(const std::string& device, int64_t stream, const std::string& label = "",
          std::optional<int64_t> deviceOrder = {}, std::optional<int64_t> streamOrder = {});
  // Renames and reorders a row (a trace names its processes and threads anywhere in the file).
  void setRow(int row, const std::string& device, int64_t stream, const std::string& label,
              std::optional<int64_t> deviceOrder = {}, std::optional<int64_t> streamOrder = {});
  // category: the kind when the event has no kernel entry (a trace's "cat").
  void addEvent(int row, std::string_view name, int64_t startNs, int64_t durationNs, double flops = 0,
                double bytes = 0, int64_t fusion = -1, std::string_view category = "");
  // The kernel table entry of `fusion` (the first one given wins).
  void addKernel(TimelineKernel kernel);
  bool hasKernel(int64_t fusion) const { return m_kernelIndex.count(fusion) > 0; }
  void addSpan(TimelineSpan span);
  // The rank of a device's process (rows of that device show it).
  void setDeviceRank(const std::string& device, int rank) { m_ranks[device] = rank; }
  // Collective calls whose members' launches are among the events added (matched by device and start).
  void addCollectives(std::vector<store::CollectiveInstance> calls);
  size_t numEvents() const { return m_events.size(); }
  // Times are made relative to the earliest event or span, or to originNs when given (a window of a profile:
  // the same origin for every window).
  Timeline finish(std::string source, std::optional<int64_t> originNs = {});

 private:
  struct RowKey {
    std::string device;
    int64_t stream = 0;
    std::string label;
    std::optional<int64_t> deviceOrder, streamOrder;
  };
  struct Pending {
    int64_t startNs, durationNs;
    double flops, bytes;
    int32_t name, row;
    int64_t fusion;
    int32_t category;
  };
  int32_t intern(std::vector<std::string>& table, std::unordered_map<std::string, int32_t>& index, std::string_view s);
  static void linkCollectives(Timeline& t, std::vector<store::CollectiveInstance> calls, int64_t t0);

  std::vector<RowKey> m_rows;
  std::unordered_map<std::string, int> m_rowIndex;
  std::vector<Pending> m_events;
  std::vector<std::string> m_names, m_categories;
  std::unordered_map<std::string, int32_t> m_nameIndex, m_categoryIndex;
  std::vector<TimelineKernel> m_kernels;
  std::unordered_map<int64_t, size_t> m_kernelIndex;
  std::vector<TimelineSpan> m_spans;
  std::unordered_map<std::string, int> m_ranks;
  std::vector<store::CollectiveInstance> m_collectives;
};

// What the selected launch of a collective call says: "collective call 44 over devices 0,1: waited 825.7 ms for
// the straggler cpu:1 (rank 1)", or for the straggler itself "straggler of ...: arrived 825.7 ms after cpu:0";
// "" when the event is no collective's launch.
std::string collectiveSummary(const Timeline& t, uint32_t event);
// The call with the longest wait (the first such), or -1 when the timeline links none.
int worstCollective(const Timeline& t);

// A profile of the run store at `dbPath` (0: the latest of any run). Fails when there is no store or profile.
Result<Timeline> loadProfileTimeline(const std::string& dbPath, int64_t profileId = 0);
// A profile as the engine holds it (runtime::Trace: events, step marks and kernel table).
Timeline timelineFromTrace(const runtime::Trace& trace, std::string source);
// A Chrome/Perfetto trace JSON file: what `tessera profile --trace` writes (kernel table in the events' args),
// or any tool's complete ("X") and begin/end ("B"/"E") events with process and thread names. Read as a
// stream, so a trace of a million events needs no DOM.
Result<Timeline> parseTraceTimeline(std::string_view json, std::string source = "trace");
Result<Timeline> readTraceTimeline(const std::string& path);

// `numEvents` kernels of a made-up training step over `devices` devices with `streams` streams each, from a
// fixed seed: for the frame-time measurement and tests of scale.
Timeline syntheticTimeline(int64_t numEvents, int devices = 2, int streams = 4, uint64_t seed = 1);

// The kernels of `executable` (and those of no named executable) must name `graph`'s nodes with their ops
// (graph: the fusion stage's), or the timeline cannot select in it: "kernel fusion.3 runs node 12 (add), which
// is mul here".
Status checkGraph(const Timeline& timeline, const ir::Graph& graph, const std::string& executable = "train_step");
// Whether a click on this kernel selects in the graph checkGraph accepted.
bool kernelOfGraph(const TimelineKernel& kernel, const std::string& executable = "train_step");

// A kernel of the step as it compiles now (the fusion stage's kernel table): the nodes it runs and the work one
// launch does, as the profiler records it for each launch.
struct CompiledKernel {
  std::vector<ir::NodeId> nodes;
  double flops = 0, bytes = 0;
};

// Why a profile no longer shows the project as it is now, or "" when it does: project.toml was edited since the
// profile's run was started (projectText: the file's text now), or the training step compiles to other kernels
// than the profile's of `executable` (other nodes, or the same nodes doing other work: shapes that changed). A
// profile with no kernel of `executable` (a script's, from tessera.profiler) is never stale.
std::string profileStaleness(const Timeline& timeline, const std::string& projectText,
                             const std::vector<CompiledKernel>& kernels, const std::string& executable = "train_step");

// --- What a frame draws ----------------------------------------------------------------------------------

// The visible time window: time startNs at pixel 0, nsPerPx ns per pixel, widthPx pixels wide.
struct TimeWindow {
  double startNs = 0;
  double nsPerPx = 1;
  double widthPx = 1;
  double endNs() const { return startNs + nsPerPx * widthPx; }
  double x(double ns) const { return (ns - startNs) / nsPerPx; }
  double ns(double x) const { return startNs + x * nsPerPx; }
};

// A fold spans at most this many pixels, so that a zoomed-out row still shows where it is busy and how many
// kernels each part holds.
constexpr double kMaxFoldPx = 64;

// One box to draw: a single event (count 1) or consecutive events of a lane folded together.
struct TimelineBox {
  int32_t row = 0;
  int32_t lane = 0;
  uint32_t first = 0, last = 0;  // events [first, last)
  int64_t startNs = 0, endNs = 0;
  int64_t busyNs = 0;  // summed durations of the events
  uint32_t count() const { return last - first; }
};

// The boxes of one lane that overlap the window (start < window end, end > window start). An event at least
// minPx wide is a box of its own; runs of narrower ones are folded until the next gap or wide event of minPx,
// or until the fold spans kMaxFoldPx. Every event in the window lies in exactly one box; a lane gives at most
// 2 * widthPx / minPx + widthPx / kMaxFoldPx + 3 boxes.
void laneBoxes(const Timeline& t, int row, int lane, const TimeWindow& w, double minPx, std::vector<TimelineBox>& out);
std::vector<TimelineBox> visibleBoxes(const Timeline& t, const TimeWindow& w, double minPx);

// Rows stacked top to bottom, under a track for the spans (when there are any), scrolled by scrollY.
struct TimelineLayout {
  double top = 0;          // y of the span tracks (or the first row)
  double spanHeight = 18;  // of all span tracks (one per rank with spans); 0 when the timeline has no spans
  double spanTrackHeight = 18;
  double laneHeight = 20;
  double rowGap = 6;
  double scrollY = 0;
  std::vector<double> rowY;  // top of each row, before scrolling
  double contentHeight = 0;

  // The span track of Timeline::spanRanks[track] spans [top + track * spanTrackHeight, + spanTrackHeight).
  double spanTrackY(int track) const { return top + track * spanTrackHeight; }
  // The track at y, or -1.
  int spanTrackAt(double y) const;
  // Where a row's lane is drawn (scrolled).
  double laneY(int row, int lane) const { return rowY[static_cast<size_t>(row)] + lane * laneHeight - scrollY; }
};
TimelineLayout layoutRows(const Timeline& t, double top, double laneHeight = 20, double rowGap = 6, double spanHeight = 18);

struct TimelineHit {
  TimelineBox box;
  // The event under the pixel when the box is a single event; -1 for a fold.
  int64_t event = -1;
};
// The box drawn at pixel (x, y), if any: the same folding as visibleBoxes, with a slop of one pixel around
// boxes narrower than minPx.
std::optional<TimelineHit> hitTest(const Timeline& t, const TimelineLayout& layout, const TimeWindow& w, double minPx,
                                   double x, double y);

// --- Range statistics -------------------------------------------------------------------------------------

// Per kernel name over a time range. An event counts when it overlaps [fromNs, toNs) (start < toNs and end >
// fromNs); its time is the part inside the range, so a range inside one long kernel gives it all the time.
using KernelStat = runtime::KernelSummary;  // totalNs inside the range, share of the range's kernel time
struct RangeStats {
  int64_t fromNs = 0, toNs = 0;
  int64_t count = 0;
  int64_t totalNs = 0;
  std::vector<KernelStat> kernels;  // longest total first, then by name
};
RangeStats rangeStats(const Timeline& t, int64_t fromNs, int64_t toNs);

// "1.25 ms": a time in the unit that suits `step`, the difference between the values shown beside it, with
// the digits that tell them apart (step 0: the time itself sets the unit, with three significant digits).
std::string formatTime(double ns, double step = 0);

// Achieved rates of an event: flops per ns is GFLOP/s, bytes per ns GB/s.
double gflopsPerSecond(const TimelineEvent& e);
double gbPerSecond(const TimelineEvent& e);

}  // namespace tsr::inspect
