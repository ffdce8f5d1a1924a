// engine/inspect/timeline: the Timeline panel's data model, checked against the events it was built from.
// Loading (a store profile, Tessera's trace JSON, other tools' traces), row order and lanes, range statistics
// against a naive loop over all events, the folding's bounds and counts, and a click at a pixel mapped to its
// event and to the graph nodes of its kernel.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include "engine/inspect/graph_stages.h"
#include "engine/inspect/node_info.h"
#include "engine/inspect/project_snapshot.h"
#include "engine/inspect/timeline.h"
#include "engine/runtime/trace_export.h"
#include "engine/store/run_store.h"
#include "engine/train/profile_run.h"

using namespace tsr;

namespace {

// What identifies an event wherever it was read from, with times relative to the first event.
using EventKey = std::tuple<std::string, int64_t, std::string, int64_t, int64_t, int64_t, double, double>;

std::multiset<EventKey> keysOf(const inspect::Timeline& t) {
  std::multiset<EventKey> out;
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto& e = t.events[i];
    const auto& row = t.rows[static_cast<size_t>(e.row)];
    const inspect::TimelineKernel* k = t.kernelOf(static_cast<uint32_t>(i));
    out.insert({row.device, row.stream, t.nameOf(static_cast<uint32_t>(i)), k ? k->fusion : -1, e.startNs,
                e.durationNs, e.flops, e.bytes});
  }
  return out;
}

// A profile as the profiler records one: kernels on three CPU threads of two devices and a GPU stream, a
// kernel table, two step marks. Devices out of natural order on purpose ("cpu:10" after "cpu:2").
runtime::Trace handMadeTrace() {
  runtime::Trace t;
  t.kernels = {{7, "train_step", "fusion.7 loop[add,mul]", "loop", {3, 4}, {"add", "mul"}, "h.0.mlp"},
               {8, "train_step", "dot_general 64x128x256", "gemm", {5}, {"dot_general"}, "h.0.mlp"},
               {9, "train_step", "fusion.9 reduction[reduce_sum]", "reduction", {6, 7}, {"mul", "reduce_sum"}, ""}};
  int64_t base = 1'000'000'000;
  auto ev = [&](const char* dev, int64_t stream, int64_t fusion, int64_t start, int64_t dur) {
    const char* name = fusion == 7 ? "fusion.7 loop[add,mul]" : fusion == 8 ? "dot_general 64x128x256" : "fusion.9 reduction[reduce_sum]";
    t.events.push_back({dev, stream, name, fusion, base + start, dur, 1000.0 * static_cast<double>(fusion),
                        64.0 * static_cast<double>(dur), -1, {}});
  };
  ev("cpu:0", 0, 8, 0, 5000);
  ev("cpu:0", 0, 7, 5200, 300);
  ev("cpu:0", 2, 9, 5300, 800);
  ev("cpu:10", 0, 7, 100, 200);
  ev("cpu:2", 1, 8, 50, 4000);
  ev("cuda:0", 7, 9, 400, 1500);
  ev("cpu:0", 0, 9, 6000, 100);
  t.marks = {{"step 1", base - 100, 3000}, {"step 2", base + 2900, 3300}};
  return t;
}

std::string writeTemp(const QTemporaryDir& dir, const QString& name, const std::string& text) {
  QFile f(dir.filePath(name));
  f.open(QIODevice::WriteOnly);
  f.write(text.data(), static_cast<qint64>(text.size()));
  return dir.filePath(name).toStdString();
}

// The statistics by a plain loop over every event: overlap with the range, clipped time, per name.
std::map<std::string, std::pair<int64_t, int64_t>> naiveStats(const inspect::Timeline& t, int64_t from, int64_t to) {
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto& e = t.events[i];
    int64_t s = e.startNs, end = e.startNs + e.durationNs;
    if (s < to && end > from) {
      auto& [count, total] = out[t.nameOf(static_cast<uint32_t>(i))];
      ++count;
      total += std::min(end, to) - std::max(s, from);
    }
  }
  return out;
}

int64_t naiveInWindow(const inspect::Timeline& t, double from, double to) {
  int64_t n = 0;
  for (const auto& e : t.events)
    n += static_cast<double>(e.startNs) < to && static_cast<double>(e.startNs + e.durationNs) > from;
  return n;
}

}  // namespace

class TestTimelineModel : public QObject {
  Q_OBJECT

 private slots:
  // Two ranks of an mpirun profile, times on rank 0's clock (base + ns). Rank 1 has two threads. Two
  // all-reduces over both ranks: call 0, rank 0 arrives at 1000 and rank 1 at 1600 (rank 1 straggles, rank 0
  // waits 600); call 1, rank 1 at 3000 and rank 0 at 3100 (rank 0 straggles, rank 1 waits 100). Read back through
  // the run store, as the Timeline panel opens it.
  void collectivesLinkedAcrossRanks() {
    const int64_t base = 5'000'000;
    runtime::Trace trace;
    trace.kernels = {{7, "train_step", "fusion.7 loop[add]", "loop", {3}, {"add"}, ""},
                     {8, "train_step", "all_reduce f32[256]", "opaque", {5}, {"all_reduce"}, ""}};
    auto ev = [&](const char* dev, int64_t stream, int64_t fusion, int64_t start, int64_t dur, int64_t coll = -1) {
      runtime::ProfileEvent e;
      e.device = dev;
      e.stream = stream;
      e.name = fusion == 7 ? "fusion.7 loop[add]" : "all_reduce f32[256]";
      e.fusion = fusion;
      e.startNs = base + start;
      e.durationNs = dur;
      e.collective = coll;
      if (coll >= 0) e.group = {0, 1};
      trace.events.push_back(e);
    };
    ev("cpu:0", 0, 7, 0, 900);
    ev("cpu:0", 0, 8, 1000, 700, 0);
    ev("cpu:1", 0, 7, 0, 1500);
    ev("cpu:1", 1, 7, 100, 50);
    ev("cpu:1", 0, 8, 1600, 100, 0);
    ev("cpu:1", 0, 8, 3000, 200, 1);
    ev("cpu:0", 0, 8, 3100, 100, 1);
    trace.marks = {{"step 2", base, 3300}};
    trace.devices = {{"cpu:0", 0, 0, 0}, {"cpu:1", 1, 1200, 35}};

    QTemporaryDir dir;
    std::string db = dir.filePath("runs.db").toStdString();
    {
      auto s = store::RunStore::open(db);
      QVERIFY(s.ok());
      auto run = s->createRun("profile", "p", "");
      QVERIFY(run.ok());
      auto p = s->createProfile(*run, "steps 2-2", 2, 2);
      QVERIFY(p.ok());
      auto saved = train::saveTrace(*s, *p, trace);
      QVERIFY2(saved.ok(), saved.ok() ? "" : saved.error().message.c_str());
    }
    auto t = inspect::loadProfileTimeline(db);
    QVERIFY2(t.ok(), t.ok() ? "" : t.error().message.c_str());

    // One row group per rank: rank 0's one row, rank 1's two.
    QCOMPARE(t->rows.size(), size_t{3});
    QCOMPARE(t->numRanks(), 2);
    QCOMPARE(t->rowGroup(0), std::string("rank 0 · cpu:0"));
    QCOMPARE(t->rowGroup(1), std::string("rank 1 · cpu:1"));
    QCOMPARE(t->rowGroup(2), std::string("rank 1 · cpu:1"));

    // Both calls, each member's launch found among the events.
    QCOMPARE(t->collectives.size(), size_t{2});
    auto eventAt = [&](const std::string& device, int64_t start) -> int64_t {
      for (size_t i = 0; i < t->events.size(); ++i)
        if (t->rows[static_cast<size_t>(t->events[i].row)].device == device && t->events[i].startNs == start)
          return static_cast<int64_t>(i);
      return -1;
    };
    const inspect::TimelineCollective& c0 = t->collectives[0];
    QCOMPARE(c0.call.seq, int64_t{0});
    QVERIFY(c0.call.complete);
    QCOMPARE(c0.events, (std::vector<int64_t>{eventAt("cpu:0", 1000), eventAt("cpu:1", 1600)}));
    QCOMPARE(c0.stragglerEvent(), eventAt("cpu:1", 1600));
    QCOMPARE(c0.call.members[0].waitNs, int64_t{600});
    QCOMPARE(c0.call.members[1].waitNs, int64_t{0});
    const inspect::TimelineCollective& c1 = t->collectives[1];
    QCOMPARE(c1.stragglerEvent(), eventAt("cpu:0", 3100));
    QCOMPARE(c1.call.members[1].waitNs, int64_t{100});
    QCOMPARE(c1.call.maxWaitNs, int64_t{100});

    // From either member's launch to its call; a kernel that is no collective has none.
    int member = -1;
    QCOMPARE(t->collectiveOf(static_cast<uint32_t>(eventAt("cpu:1", 3000)), &member), &c1);
    QCOMPARE(member, 1);
    QCOMPARE(t->collectiveOf(static_cast<uint32_t>(eventAt("cpu:0", 1000)), &member), &c0);
    QCOMPARE(member, 0);
    QVERIFY(t->collectiveOf(static_cast<uint32_t>(eventAt("cpu:1", 100))) == nullptr);

    // What the panel says of a selected launch, and the call it shows first.
    QCOMPARE(inspect::collectiveSummary(*t, static_cast<uint32_t>(eventAt("cpu:0", 1000))),
             std::string("collective call 0 over devices 0,1: waited 600 ns for the straggler cpu:1 (rank 1)"));
    QCOMPARE(inspect::collectiveSummary(*t, static_cast<uint32_t>(eventAt("cpu:1", 1600))),
             std::string("straggler of collective call 0 over devices 0,1: arrived 600 ns after cpu:0 (rank 0)"));
    QCOMPARE(inspect::collectiveSummary(*t, static_cast<uint32_t>(eventAt("cpu:1", 100))), std::string());
    QCOMPARE(inspect::worstCollective(*t), 0);

    // The same profile from the trace held in memory links the same events.
    inspect::Timeline fromTrace = inspect::timelineFromTrace(trace, "trace");
    QCOMPARE(fromTrace.collectives.size(), size_t{2});
    QCOMPARE(fromTrace.collectives[0].events, c0.events);
  }

  // Virtual devices of one process: separate row groups, no ranks in the headings.
  void virtualDevicesAreRowGroups() {
    runtime::Trace trace = handMadeTrace();
    trace.devices = {{"cpu:0", 0, 0, 0}, {"cpu:2", 0, 0, 0}, {"cpu:10", 0, 0, 0}};
    inspect::Timeline t = inspect::timelineFromTrace(trace, "trace");
    QCOMPARE(t.numRanks(), 1);
    QCOMPARE(t.rowGroup(0), std::string("cpu:0"));
    QVERIFY(t.collectives.empty());
  }

  void storeProfileLoadsEveryEvent() {
    QTemporaryDir dir;
    std::string db = dir.filePath("runs.db").toStdString();
    auto none = inspect::loadProfileTimeline(db);
    QVERIFY(!none.ok());
    QVERIFY2(none.error().message.find("no run store yet") != std::string::npos, none.error().message.c_str());

    runtime::Trace trace = handMadeTrace();
    {
      auto s = store::RunStore::open(db);
      QVERIFY(s.ok());
      auto run = s->createRun("profile", "p", "");
      QVERIFY(run.ok());
      auto p = s->createProfile(*run, "steps 1-2", 1, 2);
      QVERIFY(p.ok());
      std::vector<store::KernelEvent> events;
      for (const auto& e : trace.events) events.push_back({e.device, e.stream, e.name, e.fusion, e.startNs, e.durationNs, e.flops, e.bytes});
      std::vector<store::KernelInfo> kernels;
      for (const auto& k : trace.kernels) kernels.push_back({k.id, k.executable, k.name, k.kind, k.nodes, k.ops, k.modulePath});
      std::vector<store::ProfileMarkInfo> marks;
      for (const auto& m : trace.marks) marks.push_back({m.name, m.startNs, m.durationNs});
      QVERIFY(s->addKernelEvents(*p, events).ok());
      QVERIFY(s->addProfileKernels(*p, kernels).ok());
      QVERIFY(s->addProfileMarks(*p, marks).ok());
    }
    auto t = inspect::loadProfileTimeline(db);
    QVERIFY2(t.ok(), t.ok() ? "" : t.error().message.c_str());
    QVERIFY(t->source.find("profile 1") != std::string::npos);

    // Every event of the store, once, with times from the earliest event or mark (the first mark here).
    int64_t t0 = trace.marks.front().startNs;
    std::multiset<EventKey> expected;
    for (const auto& e : trace.events)
      expected.insert({e.device, e.stream, e.name, e.fusion, e.startNs - t0, e.durationNs, e.flops, e.bytes});
    QVERIFY(keysOf(*t) == expected);
    QCOMPARE(t->spans.size(), size_t(2));
    QCOMPARE(t->spans[1].startNs, trace.marks[1].startNs - t0);
    QCOMPARE(t->endNs, int64_t(2900 + 3300 + 100));  // the second mark's end, from the first mark

    // Rows: devices in natural order, CPUs before the GPU, then streams; CPU rows are threads.
    std::vector<std::string> rows;
    for (const auto& r : t->rows) rows.push_back(r.device + " " + r.label);
    std::vector<std::string> want = {"cpu:0 thread 0", "cpu:0 thread 2", "cpu:2 thread 1", "cpu:10 thread 0", "cuda:0 stream 7"};
    QCOMPARE(rows, want);
    // Kinds come from the kernel table; an event links to its kernel's nodes.
    for (size_t i = 0; i < t->events.size(); ++i) {
      const auto* k = t->kernelOf(static_cast<uint32_t>(i));
      QVERIFY(k);
      QCOMPARE(t->kinds[t->events[i].kind], k->kind);
    }
    QCOMPARE(t->families[t->events[0].family], std::string("contraction"));  // cpu:0 thread 0 starts with the GEMM
  }

  void tesseraTraceJsonGivesTheSameTimeline() {
    runtime::Trace trace = handMadeTrace();
    QTemporaryDir dir;
    std::string path = writeTemp(dir, "trace.json", runtime::toChromeTrace(trace));
    auto fromJson = inspect::readTraceTimeline(path);
    QVERIFY2(fromJson.ok(), fromJson.ok() ? "" : fromJson.error().message.c_str());
    inspect::Timeline direct = inspect::timelineFromTrace(trace, "direct");
    // The same events (the JSON keeps microseconds with three decimals: nanoseconds survive), rows and kernels.
    QVERIFY(keysOf(*fromJson) == keysOf(direct));
    QCOMPARE(fromJson->rows.size(), direct.rows.size());
    for (size_t r = 0; r < direct.rows.size(); ++r) {
      QCOMPARE(fromJson->rows[r].device, direct.rows[r].device);
      QCOMPARE(fromJson->rows[r].stream, direct.rows[r].stream);
      QCOMPARE(fromJson->rows[r].label, direct.rows[r].label);
    }
    QCOMPARE(fromJson->kernels.size(), trace.kernels.size());
    for (const auto& k : fromJson->kernels) {
      const runtime::FusionInfo* ref = trace.kernel(k.fusion);
      QVERIFY(ref);
      QCOMPARE(k.nodes, ref->nodes);
      QCOMPARE(k.ops, ref->ops);
      QCOMPARE(k.kind, ref->kind);
    }
    QCOMPARE(fromJson->spans.size(), size_t(2));
    QCOMPARE(fromJson->spans[0].name, std::string("step 1"));
  }

  // A profile of two ranks as exported: each rank's steps (named by its host process, given after them) on a
  // track of its own, the tracks stacked above the rows.
  void eachRanksStepsHaveATrack() {
    const char* json = R"json({"traceEvents": [
      {"ph": "X", "name": "step 1", "cat": "mark", "pid": 16777217, "tid": 1, "ts": 12.0, "dur": 40.0},
      {"ph": "X", "name": "step 1", "cat": "mark", "pid": 1, "tid": 1, "ts": 10.0, "dur": 50.0},
      {"ph": "X", "name": "step 2", "cat": "mark", "pid": 1, "tid": 1, "ts": 60.0, "dur": 50.0},
      {"ph": "X", "name": "fusion.1", "cat": "loop", "pid": 2, "tid": 1, "ts": 11.0, "dur": 5.0},
      {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "host (rank 0)"}},
      {"ph": "M", "name": "process_name", "pid": 16777217, "args": {"name": "host (rank 1)"}},
      {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "cpu:0"}}
    ]})json";
    auto t = inspect::parseTraceTimeline(json, "ranks");
    QVERIFY2(t.ok(), t.ok() ? "" : t.error().message.c_str());
    QCOMPARE(t->spans.size(), size_t(3));
    QCOMPARE(t->spanRanks, (std::vector<int>{0, 1}));
    // By start: rank 0's step 1 (10 us, the origin), rank 1's step 1 (12 us), rank 0's step 2.
    QCOMPARE(t->spans[0].rank, 0);
    QCOMPARE(t->spans[1].rank, 1);
    QCOMPARE(t->spans[1].startNs, int64_t(2000));
    QCOMPARE(t->spans[2].rank, 0);
    inspect::TimelineLayout layout = inspect::layoutRows(*t, 30, 20, 6, 18);
    QCOMPARE(layout.spanHeight, 36.0);
    QCOMPARE(layout.spanTrackAt(30), 0);
    QCOMPARE(layout.spanTrackAt(50), 1);
    QCOMPARE(layout.spanTrackAt(66), -1);
    QCOMPARE(layout.rowY[0], 30.0 + 36 + 6);
  }

  // Another tool's trace: metadata after the events, string thread ids, sort indexes, B/E pairs, nesting.
  void otherToolsTracesLoad() {
    const char* json = R"({"traceEvents": [
      {"ph": "X", "name": "outer", "cat": "host", "pid": 5, "tid": "main", "ts": 10.0, "dur": 100.0},
      {"ph": "X", "name": "inner", "cat": "host", "pid": 5, "tid": "main", "ts": 20.0, "dur": 30.0},
      {"ph": "X", "name": "innermost", "cat": "host", "pid": 5, "tid": "main", "ts": 25.0, "dur": 5.0},
      {"ph": "X", "name": "after", "cat": "host", "pid": 5, "tid": "main", "ts": 60.0, "dur": 10.0},
      {"ph": "B", "name": "kernel A", "cat": "gpu", "pid": 9, "tid": 3, "ts": 15.5, "args": {"flops": 100}},
      {"ph": "E", "pid": 9, "tid": 3, "ts": 17.25},
      {"ph": "E", "pid": 9, "tid": 3, "ts": 18.0},
      {"ph": "X", "name": "dot_general 8x8x8", "pid": 9, "tid": 1, "ts": 11, "dur": 2, "args": {"bytes": 512}},
      {"ph": "i", "name": "instant", "pid": 9, "tid": 1, "ts": 12},
      {"ph": "C", "name": "counter", "pid": 9, "ts": 12, "args": {"value": 3}},
      {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "GPU 0"}},
      {"ph": "M", "name": "process_name", "pid": 5, "args": {"name": "Python"}},
      {"ph": "M", "name": "process_sort_index", "pid": 9, "args": {"sort_index": -1}},
      {"ph": "M", "name": "thread_name", "pid": 5, "tid": "main", "args": {"name": "MainThread"}},
      {"ph": "M", "name": "thread_name", "pid": 9, "tid": 3, "args": {"name": "stream 3"}},
      {"ph": "M", "name": "thread_sort_index", "pid": 9, "tid": 3, "args": {"sort_index": 0}}
    ], "displayTimeUnit": "ms", "otherData": {"nested": {"traceEvents": [1, 2]}}})";
    auto t = inspect::parseTraceTimeline(json, "other");
    QVERIFY2(t.ok(), t.ok() ? "" : t.error().message.c_str());
    QCOMPARE(t->events.size(), size_t(6));  // the stray "E", the instant and the counter are not kernels
    std::vector<std::string> rows;
    for (const auto& r : t->rows) rows.push_back(r.device + "/" + r.label);
    // GPU 0 first (sort index -1), its stream 3 before thread 1 (sort index 0 < tid 1); then Python.
    std::vector<std::string> want = {"GPU 0/stream 3", "GPU 0/thread 1", "Python/MainThread"};
    QCOMPARE(rows, want);
    QVERIFY(t->kernels.empty());
    std::map<std::string, inspect::TimelineEvent> byName;
    for (size_t i = 0; i < t->events.size(); ++i) byName[t->nameOf(static_cast<uint32_t>(i))] = t->events[i];
    // Times from the earliest event (ts 10 us), in ns.
    QCOMPARE(byName["outer"].startNs, int64_t(0));
    QCOMPARE(byName["kernel A"].startNs, int64_t(5500));
    QCOMPARE(byName["kernel A"].durationNs, int64_t(1750));
    QCOMPARE(byName["kernel A"].flops, 100.0);
    QCOMPARE(byName["dot_general 8x8x8"].bytes, 512.0);
    // Nesting: lanes by depth; "after" is back at depth 1, inside "outer".
    QCOMPARE(int(byName["outer"].lane), 0);
    QCOMPARE(int(byName["inner"].lane), 1);
    QCOMPARE(int(byName["innermost"].lane), 2);
    QCOMPARE(int(byName["after"].lane), 1);
    QCOMPARE(t->rows[2].lanes.size(), size_t(3));
    // Kinds from the category; the family from the op a name begins with.
    QCOMPARE(t->kinds[byName["kernel A"].kind], std::string("gpu"));
    QCOMPARE(t->families[byName["dot_general 8x8x8"].family], std::string("contraction"));

    QVERIFY(!inspect::parseTraceTimeline("{\"traceEvents\": [", "bad").ok());
    QVERIFY(!inspect::parseTraceTimeline("{\"foo\": 1}", "none").ok());
    QVERIFY(inspect::parseTraceTimeline("[]", "empty").ok());
    QVERIFY(!inspect::readTraceTimeline("/nonexistent/trace.json").ok());
  }

  void rangeStatisticsEqualANaiveLoop() {
    inspect::Timeline synth = inspect::syntheticTimeline(60'000, 2, 3, 7);
    // Nested events too: another tool's trace with zones inside zones.
    inspect::TimelineBuilder b;
    std::mt19937_64 rng(3);
    int row = b.row("host", 0);
    for (int i = 0; i < 2000; ++i) {
      int64_t s = static_cast<int64_t>(rng() % 1'000'000);
      b.addEvent(row, i % 3 ? "zone a" : "zone b", s, static_cast<int64_t>(rng() % 20'000));
    }
    inspect::Timeline nested = b.finish("nested");
    for (const inspect::Timeline* t : {&synth, &nested}) {
      std::mt19937_64 r(11);
      for (int trial = 0; trial < 12; ++trial) {
        int64_t span = t->endNs - t->beginNs;
        int64_t from = static_cast<int64_t>(r() % static_cast<uint64_t>(span));
        int64_t to = from + 1 + static_cast<int64_t>(r() % static_cast<uint64_t>(std::max<int64_t>(1, span / (1 + trial))));
        if (trial == 0) from = 0, to = span;
        inspect::RangeStats s = inspect::rangeStats(*t, from, to);
        auto ref = naiveStats(*t, from, to);
        QCOMPARE(s.kernels.size(), ref.size());
        int64_t count = 0, total = 0;
        double shares = 0;
        for (const auto& k : s.kernels) {
          auto it = ref.find(k.name);
          QVERIFY(it != ref.end());
          QCOMPARE(k.count, it->second.first);
          QCOMPARE(k.totalNs, it->second.second);
          QCOMPARE(k.meanNs(), static_cast<double>(it->second.second) / static_cast<double>(it->second.first));
          count += k.count;
          total += k.totalNs;
          shares += k.share;
        }
        QCOMPARE(s.count, count);
        QCOMPARE(s.totalNs, total);
        if (total > 0) QVERIFY(std::abs(shares - 1.0) < 1e-9);
        for (size_t i = 1; i < s.kernels.size(); ++i) QVERIFY(s.kernels[i - 1].totalNs >= s.kernels[i].totalNs);
      }
    }
    QVERIFY(inspect::rangeStats(synth, 100, 100).kernels.empty());
  }

  void foldingIsBoundedAndAccountsForEveryEvent() {
    inspect::Timeline t = inspect::syntheticTimeline(200'000, 2, 2, 5);
    const double width = 1200, minPx = 3;
    const double span = static_cast<double>(t.endNs);
    std::mt19937_64 r(17);
    for (double zoom : {1.0, 4.0, 60.0, 2000.0, 200000.0}) {
      double visible = span / zoom;
      double start = zoom == 1.0 ? 0 : static_cast<double>(r() % static_cast<uint64_t>(span - visible));
      inspect::TimeWindow w{start, visible / width, width};
      std::vector<inspect::TimelineBox> boxes = inspect::visibleBoxes(t, w, minPx);
      int64_t held = 0;
      std::map<std::pair<int, int>, size_t> perLane;
      for (size_t i = 0; i < boxes.size(); ++i) {
        const auto& b = boxes[i];
        held += b.count();
        ++perLane[{b.row, b.lane}];
        // In order and apart within a lane; a fold holds only kernels narrower than minPx.
        if (i > 0 && boxes[i - 1].row == b.row && boxes[i - 1].lane == b.lane) {
          QCOMPARE(boxes[i - 1].last, b.first);
          QVERIFY(boxes[i - 1].endNs <= b.startNs);
        }
        if (b.count() > 1) {
          for (uint32_t e = b.first; e < b.last; ++e)
            QVERIFY(static_cast<double>(t.events[e].durationNs) < minPx * w.nsPerPx);
          QVERIFY(static_cast<double>(b.endNs - b.startNs) < (inspect::kMaxFoldPx + minPx) * w.nsPerPx);
        }
        int64_t busy = 0;
        for (uint32_t e = b.first; e < b.last; ++e) busy += t.events[e].durationNs;
        QCOMPARE(b.busyNs, busy);
      }
      // Every event in the window lies in exactly one box.
      QCOMPARE(held, naiveInWindow(t, w.startNs, w.endNs()));
      for (const auto& [lane, n] : perLane)
        QVERIFY2(static_cast<double>(n) <= 2 * width / minPx + width / inspect::kMaxFoldPx + 3,
                 qPrintable(QString("zoom %1: %2 boxes").arg(zoom).arg(n)));
      if (zoom == 1.0) QVERIFY(boxes.size() < 200'000 / 20);  // zoomed out, most kernels are folded
    }
    // No folding: a box per event.
    inspect::TimeWindow all{0, span / width, width};
    QCOMPARE(static_cast<int64_t>(inspect::visibleBoxes(t, all, 0).size()), naiveInWindow(t, 0, span));
  }

  void aClickMapsToItsEventAndKernel() {
    inspect::Timeline t = inspect::timelineFromTrace(handMadeTrace(), "clicks");
    inspect::TimelineLayout layout = inspect::layoutRows(t, 30);
    inspect::TimeWindow w{0, 10, 800};  // 10 ns per pixel: 8 us in view
    for (size_t i = 0; i < t.events.size(); ++i) {
      const auto& e = t.events[i];
      double x = w.x(static_cast<double>(e.startNs) + static_cast<double>(e.durationNs) / 2);
      double y = layout.laneY(e.row, e.lane) + layout.laneHeight / 2;
      auto hit = inspect::hitTest(t, layout, w, 3, x, y);
      QVERIFY(hit);
      QCOMPARE(hit->event, static_cast<int64_t>(i));
      // Its kernel's nodes: the kernel table's entry for the event's fusion.
      const auto* k = t.kernelOf(static_cast<uint32_t>(hit->event));
      QVERIFY(k);
      for (const auto& ref : handMadeTrace().kernels)
        if (ref.name == t.nameOf(static_cast<uint32_t>(i))) QCOMPARE(k->nodes, ref.nodes);
    }
    // Empty space, the gutter above the rows, a pixel between two rows: nothing.
    const auto& first = t.events[0];
    double y0 = layout.laneY(first.row, 0) + 5;
    QVERIFY(!inspect::hitTest(t, layout, w, 3, w.x(static_cast<double>(first.endNs()) + 100), y0));
    QVERIFY(!inspect::hitTest(t, layout, w, 3, 10, 5));
    QVERIFY(!inspect::hitTest(t, layout, w, 3, 10, layout.rowY[1] - layout.rowGap / 2));
    // Zoomed out, the two kernels at 5.2 and 6.0 us of thread 0 fold into one: a click finds the fold.
    inspect::TimeWindow far{0, 400, 800};
    double x = -1;
    for (size_t i = 0; i < t.events.size(); ++i)
      if (t.events[i].row == first.row && t.nameOf(static_cast<uint32_t>(i)) == "fusion.7 loop[add,mul]")
        x = far.x(static_cast<double>(t.events[i].startNs) + static_cast<double>(t.events[i].durationNs) / 2);
    auto fold = inspect::hitTest(t, layout, far, 3, x, y0);
    QVERIFY(fold);
    QCOMPARE(fold->event, int64_t(-1));
    QCOMPARE(fold->box.count(), 2u);
  }

  // `tessera profile --trace` on a copy of gpt2_mini: the store's profile and the trace file give the same
  // timeline, its kernels name the fusion stage's nodes with their ops, and a click on a kernel finds them.
  void aRealProfileLinksToTheGraph() {
    QTemporaryDir dir;
    const QString mini = QStringLiteral(TSR_SOURCE_DIR "/sample_projects/gpt2_mini");
    QVERIFY(QFile::copy(mini + "/project.toml", dir.filePath("project.toml")));
    QVERIFY(QDir().mkpath(dir.filePath("data")));
    QVERIFY(QFile::copy(mini + "/data/corpus.txt", dir.filePath("data/corpus.txt")));
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(TSR_TESSERA_BIN, {"profile", dir.path(), "--steps", "2", "--quiet", "--trace", dir.filePath("trace.json")});
    QVERIFY(p.waitForFinished(180000));
    QVERIFY2(p.exitCode() == 0, p.readAll().constData());

    auto fromStore = inspect::loadProfileTimeline(dir.filePath("runs.db").toStdString());
    QVERIFY2(fromStore.ok(), fromStore.ok() ? "" : fromStore.error().message.c_str());
    auto fromTrace = inspect::readTraceTimeline(dir.filePath("trace.json").toStdString());
    QVERIFY2(fromTrace.ok(), fromTrace.ok() ? "" : fromTrace.error().message.c_str());
    QVERIFY(!fromStore->events.empty());
    QVERIFY(keysOf(*fromStore) == keysOf(*fromTrace));
    QCOMPARE(fromStore->spans.size(), size_t(2));

    auto project = inspect::openProject(dir.path().toStdString());
    QVERIFY(project.ok());
    auto stages = inspect::compileStages(project->traced);
    QVERIFY(stages.ok());
    const inspect::Stage* fusion = nullptr;
    for (const auto& s : *stages)
      if (s.fusion) fusion = &s;
    QVERIFY(fusion);
    Status linked = inspect::checkGraph(*fromStore, *fusion->graph);
    QVERIFY2(linked.ok(), linked.ok() ? "" : linked.error().message.c_str());
    QVERIFY(!inspect::checkGraph(*fromStore, *stages->front().graph).ok());  // the traced graph is another

    // A click on the longest kernel, fully zoomed out on its row: its fusion's nodes, ops as in the graph.
    size_t longest = 0;
    for (size_t i = 0; i < fromStore->events.size(); ++i)
      if (fromStore->events[i].durationNs > fromStore->events[longest].durationNs) longest = i;
    const auto& e = fromStore->events[longest];
    inspect::TimelineLayout layout = inspect::layoutRows(*fromStore, 0);
    double width = 1500;
    inspect::TimeWindow w{0, static_cast<double>(fromStore->endNs) / width, width};
    auto hit = inspect::hitTest(*fromStore, layout, w, 3, w.x(static_cast<double>(e.startNs + e.durationNs / 2)),
                                layout.laneY(e.row, e.lane) + 3);
    QVERIFY(hit);
    QCOMPARE(hit->event, static_cast<int64_t>(longest));
    const auto* k = fromStore->kernelOf(static_cast<uint32_t>(longest));
    QVERIFY(k && !k->nodes.empty());
    for (size_t i = 0; i < k->nodes.size(); ++i) QCOMPARE(inspect::opName(*fusion->graph, k->nodes[i]), k->ops[i]);
    // And back: each of its nodes leads to this kernel.
    for (int n : k->nodes) QCOMPARE(fromStore->kernelsWithNode(n), std::vector<int>{e.kernel});
  }

  // A profile is stale once project.toml differs from the text its run recorded, or once the step compiles to
  // other kernels: other node lists, or the same nodes doing other work per launch (their shapes changed).
  void aProfileIsStaleOnceTheProjectOrItsKernelsChange() {
    inspect::TimelineBuilder b;
    int row = b.row("cpu:0", 0);
    b.addKernel({3, "train_step", "fusion.3 loop[add,mul]", "loop", {4, 5}, {"add", "mul"}, "", {}});
    b.addKernel({7, "train_step", "dot_general.7", "gemm", {9}, {"dot_general"}, "", {}});
    b.addKernel({1, "eval_step", "fusion.1 loop[add]", "loop", {2}, {"add"}, "", {}});  // another executable
    for (int step = 0; step < 2; ++step) {
      b.addEvent(row, "fusion.3 loop[add,mul]", step * 100, 10, 512, 4096, 3);
      b.addEvent(row, "dot_general.7", step * 100 + 20, 50, 65536, 8192, 7);
      b.addEvent(row, "fusion.1 loop[add]", step * 100 + 80, 5, 64, 512, 1);
    }
    inspect::Timeline t = b.finish("profile 4 of runs.db");
    t.profileId = 4;
    t.projectText = "[model]\nfamily = \"mlp\"\n";
    const std::vector<inspect::CompiledKernel> now = {{{4, 5}, 512, 4096}, {{9}, 65536, 8192}};
    QCOMPARE(inspect::profileStaleness(t, t.projectText, now), std::string());
    QVERIFY(inspect::profileStaleness(t, t.projectText + "lr = 0.1\n", now).find("project.toml was edited since profile 4") !=
            std::string::npos);
    // Nodes split into other kernels, a kernel more, the same nodes with more work per launch.
    const std::vector<inspect::CompiledKernel> split = {{{4}, 256, 2048}, {{5}, 256, 2048}, {{9}, 65536, 8192}};
    QVERIFY(inspect::profileStaleness(t, t.projectText, split).find("other kernels") != std::string::npos);
    auto more = now;
    more.push_back({{12}, 1, 8});
    QVERIFY(inspect::profileStaleness(t, t.projectText, more).find("3 kernels now, 2 when") != std::string::npos);
    auto wider = now;
    wider[1].flops *= 1.5;
    QVERIFY(inspect::profileStaleness(t, t.projectText, wider).find("dot_general.7 does other work") != std::string::npos);
    // A trace of another tool names no graph: nothing to compare.
    inspect::TimelineBuilder other;
    other.addEvent(other.row("cpu:0", 0), "zone", 0, 10);
    QCOMPARE(inspect::profileStaleness(other.finish("trace.json"), "", now), std::string());
    // A Python script's profile in the project's store (tessera.profiler): its run recorded the script's
    // configuration, not project.toml, and its kernels are its own programs'.
    inspect::TimelineBuilder script;
    script.addKernel({2, "step", "fusion.0 gemm[dot_general,tanh]", "gemm", {0, 1}, {"dot_general", "tanh"}, "", {}});
    script.addEvent(script.row("cpu:0", 0), "fusion.0 gemm[dot_general,tanh]", 0, 10, 100, 100, 2);
    inspect::Timeline fromScript = script.finish("profile 5 of runs.db");
    fromScript.profileId = 5;
    fromScript.projectText = "{\"lr\": 0.1}";
    QCOMPARE(inspect::profileStaleness(fromScript, t.projectText, now), std::string());
  }

  void timesAreFormattedInTheirUnit() {
    QCOMPARE(inspect::formatTime(1234567), std::string("1.23 ms"));
    QCOMPARE(inspect::formatTime(950), std::string("950 ns"));
    QCOMPARE(inspect::formatTime(2500000, 500000), std::string("2.5 ms"));
    QCOMPARE(inspect::formatTime(3000000, 1000000), std::string("3 ms"));
    QCOMPARE(inspect::formatTime(1500, 100), std::string("1.5 \xc2\xb5s"));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestTimelineModel)
#include "test_timeline_model.moc"
