// Two profiles on one timeline (engine/inspect/timeline_compare.h), checked against times worked out by hand: the
// last step of each, moved to start at 0 on rows of its side; kernels paired through the graph nodes they ran
// (the fusion ids and names differ between the two compiles), with each pair's time per step on both kernels.
#include "tests/check.h"

#include <map>

#include "engine/inspect/timeline_compare.h"
#include "engine/store/run_store.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::inspect;

namespace {

struct Launch {
  int64_t fusion, start, duration;
};

// A run with a profile of steps 1-2 on cpu:0: a gemm kernel (node 1, dot_general) and a loop kernel (nodes 2, 3:
// add, gelu) of module h.0, under the fusion ids given.
void writeRun(store::RunStore& db, int64_t gemm, int64_t loop, std::vector<store::ProfileMarkInfo> marks,
              const std::vector<Launch>& launches) {
  auto run = db.createRun("r", "p", "");
  REQUIRE(run.ok());
  auto p = db.createProfile(*run, "steps 1-2", 1, 2);
  REQUIRE(p.ok());
  REQUIRE(db.addProfileKernels(*p, {{gemm, "train_step", fmt::format("fusion.{} gemm", gemm), "gemm", {1}, {"dot_general"}, "h.0"},
                                    {loop, "train_step", fmt::format("fusion.{} loop[add,gelu]", loop), "loop", {2, 3},
                                     {"add", "gelu"}, "h.0"}})
              .ok());
  std::vector<store::KernelEvent> events;
  for (const Launch& l : launches)
    events.push_back({"cpu:0", 0, fmt::format("fusion.{}", l.fusion), l.fusion, l.start, l.duration, 0, 0});
  REQUIRE(db.addKernelEvents(*p, events).ok());
  REQUIRE(db.addProfileMarks(*p, marks).ok());
}

}  // namespace

TEST_CASE("twoProfilesOnOneTimeline") {
  test::TempDir dir;
  const std::string path = dir.filePath("runs.db");
  {
    auto db = store::RunStore::open(path);
    REQUIRE(db.ok());
    // A: per step, the gemm (300 + 400) / 2 = 350 ns and the loop (200 + 100) / 2 = 150 ns.
    writeRun(*db, 0, 1, {{"step 1", 1000, 1000}, {"step 2", 2000, 1000}},
             {{0, 1100, 300}, {1, 1500, 200}, {0, 2100, 400}, {1, 2600, 100}});
    // B, compiled again (fusion 5 and 7): the gemm (100 + 200) / 2 = 150 ns, the loop 100 ns. Rank 1's later
    // step is not the one shown.
    writeRun(*db, 5, 7, {{"step 1", 10000, 500}, {"step 2", 10500, 600}, {"step 2", 10550, 700, 1}},
             {{5, 10050, 100}, {7, 10200, 100}, {5, 10600, 200}, {7, 10900, 100}});
  }
  auto c = compareProfiles(path, 1, 2);
  REQUIRE_MESSAGE(c.ok(), c.error().message);
  const Timeline& t = c->timeline;
  TSR_COMPARE(c->stepA, int64_t{2});
  TSR_COMPARE(c->stepB, int64_t{2});
  REQUIRE(t.rows.size() == 2);
  TSR_COMPARE(t.rows[0].device, std::string("A · cpu:0"));
  TSR_COMPARE(t.rows[1].device, std::string("B · cpu:0"));
  // Step 2 of each, from its start: A's launches at 100 (400 ns) and 600; B's at 100 (200 ns) and 400.
  std::vector<std::tuple<int, int64_t, int64_t, std::string>> got;
  for (uint32_t i = 0; i < t.events.size(); ++i)
    got.emplace_back(t.events[i].row, t.events[i].startNs, t.events[i].durationNs, t.nameOf(i));
  std::sort(got.begin(), got.end());
  using E = std::tuple<int, int64_t, int64_t, std::string>;
  TSR_COMPARE(got, (std::vector<E>{{0, 100, 400, "fusion.0"}, {0, 600, 100, "fusion.1"}, {1, 100, 200, "fusion.5"},
                                   {1, 400, 100, "fusion.7"}}));
  // The steps: one track each.
  REQUIRE(t.spans.size() == 2);
  TSR_COMPARE(t.spanRanks, (std::vector<int>{0, 1}));
  TSR_COMPARE(t.spanTrackNames, (std::vector<std::string>{"A", "B"}));
  std::map<std::string, int64_t> spans;
  for (const TimelineSpan& s : t.spans) spans[s.name] = s.durationNs;
  TSR_COMPARE(spans, (std::map<std::string, int64_t>{{"A: run 1 step 2", 1000}, {"B: run 2 step 2", 600}}));
  // Pairs: the gemm 350 -> 150 ns per step, the loop 150 -> 100, the same on both kernels of a pair.
  std::map<std::string, std::pair<double, double>> pairs;
  for (const TimelineKernel& k : t.kernels) pairs[k.name] = {k.pairNsA, k.pairNsB};
  TSR_COMPARE(pairs["fusion.0 gemm"], (std::pair<double, double>{350, 150}));
  TSR_COMPARE(pairs["fusion.5 gemm"], (std::pair<double, double>{350, 150}));
  TSR_COMPARE(pairs["fusion.1 loop[add,gelu]"], (std::pair<double, double>{150, 100}));
  TSR_COMPARE(pairs["fusion.7 loop[add,gelu]"], (std::pair<double, double>{150, 100}));
  for (const TimelineKernel& k : t.kernels)
    if (k.name == "fusion.0 gemm") CHECK(kernelChange(k) == doctest::Approx(150.0 / 350.0));
  TSR_COMPARE(t.runId, int64_t{1});
  REQUIRE(t.comparison);
  TSR_COMPARE(c->diff.a.stepNs, 500.0);
  TSR_COMPARE(c->diff.b.stepNs, 250.0);
}

TEST_CASE("aRunWithoutAProfileIsAnError") {
  test::TempDir dir;
  const std::string path = dir.filePath("runs.db");
  {
    auto db = store::RunStore::open(path);
    REQUIRE(db.ok());
    writeRun(*db, 0, 1, {{"step 1", 1000, 1000}}, {{0, 1100, 300}});
    REQUIRE(db->createRun("no profile", "p", "").ok());
  }
  auto c = compareProfiles(path, 1, 2);
  REQUIRE(!c.ok());
  CHECK(c.error().message.find("run 2 has no profile") != std::string::npos);
}
