// A profile read a window at a time (ProfileWindows) against the same profile read whole (loadProfileTimeline,
// the reference): the same rows, kernels and spans on the same time axis; a raw window holds exactly the
// launches of the whole timeline that overlap it; density counts sum to the launches; range statistics summed
// by SQLite equal rangeStats over the whole timeline. A profile without levels of detail gets them on open.
#include "tests/check.h"

#include <algorithm>
#include <random>
#include <tuple>

#include "engine/inspect/timeline_window.h"
#include "engine/store/run_store.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::inspect;

namespace {

// 30k launches on 2 devices x 2 streams, kernels from a table of 12 (two launches name no kernel), 3 step marks
// (the first starts before any launch, so the time axis starts at a mark).
int64_t writeProfile(store::RunStore& db, bool levels) {
  auto run = db.createRun("r", "p", "[model]\nfamily = 'mlp'\n");
  REQUIRE(run.ok());
  auto p = db.createProfile(*run, "prof", 0, 2);
  REQUIRE(p.ok());
  std::vector<store::KernelInfo> kernels;
  for (int k = 0; k < 12; ++k)
    kernels.push_back({k, "train_step", fmt::format("fusion.{}", k), k % 3 == 0 ? "gemm" : "loop", {k}, {"add"}, ""});
  REQUIRE(db.addProfileKernels(*p, kernels).ok());
  std::mt19937_64 rng(11);
  std::vector<store::KernelEvent> events;
  std::vector<int64_t> clock(4, 5'000'000);
  for (int i = 0; i < 30'000; ++i) {
    size_t r = rng() % 4;
    int64_t fusion = static_cast<int64_t>(rng() % 12);
    int64_t dur = rng() % 300 == 0 ? static_cast<int64_t>(rng() % 2'000'000) : static_cast<int64_t>(rng() % 5000);
    clock[r] += static_cast<int64_t>(rng() % 800);
    events.push_back({fmt::format("cpu:{}", r / 2), static_cast<int64_t>(r % 2), fmt::format("fusion.{}", fusion), fusion,
                      clock[r], dur, static_cast<double>(rng() % 100), static_cast<double>(rng() % 100)});
    clock[r] += dur;
  }
  events.push_back({"cpu:0", 0, "memcpy", -1, 6'000'000, 700, 0, 64});
  events.push_back({"cpu:1", 1, "memcpy", 99, 6'000'100, 0, 0, 64});
  REQUIRE(db.addKernelEvents(*p, events).ok());
  REQUIRE(db.addProfileMarks(*p, {{"step 1", 4'000'000, 20'000'000}, {"step 2", 24'000'000, 20'000'000},
                                  {"step 3", 44'000'000, 20'000'000}}).ok());
  if (levels) REQUIRE(db.buildProfileLevels(*p).ok());
  return *p;
}

auto key(const Timeline& t, const TimelineEvent& e) {
  const TimelineRow& r = t.rows[static_cast<size_t>(e.row)];
  return std::make_tuple(e.startNs, r.device, r.stream, e.durationNs, t.names[static_cast<size_t>(e.name)], e.kernel,
                         e.flops, e.bytes);
}

}  // namespace

TEST_CASE("windowsOfAProfileMatchTheProfileReadWhole") {
  test::TempDir dir;
  std::string path = dir.filePath("runs.db");
  {
    auto db = store::RunStore::open(path);
    REQUIRE(db.ok());
    writeProfile(*db, true);
  }
  auto whole = loadProfileTimeline(path);
  REQUIRE_MESSAGE(whole.ok(), whole.error().message);
  auto pw = ProfileWindows::open(path);
  REQUIRE_MESSAGE(pw.ok(), pw.error().message);
  TSR_COMPARE((*pw)->launches(), static_cast<int64_t>(whole->events.size()));

  auto first = (*pw)->whole(1000);
  REQUIRE(first.ok());
  REQUIRE(!first->raw);  // 30k launches: more than a window holds
  const Timeline& sk = *first->timeline;
  TSR_COMPARE(sk.endNs, whole->endNs);
  TSR_COMPARE(sk.rows.size(), whole->rows.size());
  for (size_t r = 0; r < sk.rows.size(); ++r) {
    TSR_COMPARE(sk.rows[r].device, whole->rows[r].device);
    TSR_COMPARE(sk.rows[r].label, whole->rows[r].label);
    TSR_COMPARE(sk.rows[r].numEvents, whole->rows[r].numEvents);
  }
  TSR_COMPARE(sk.kernels.size(), whole->kernels.size());
  TSR_COMPARE(sk.spans.size(), whole->spans.size());
  TSR_COMPARE(sk.spans.front().startNs, whole->spans.front().startNs);
  TSR_COMPARE(sk.projectText, whole->projectText);
  // Density: every launch counted once, in its row.
  for (size_t r = 0; r < sk.rows.size(); ++r) {
    int64_t n = 0;
    for (const DensityBucket& b : first->density[r]) n += b.count;
    TSR_COMPARE(n, static_cast<int64_t>(whole->rows[r].numEvents));
  }
  REQUIRE(first->serves(0, static_cast<double>(sk.endNs), first->nsPerPx));
  REQUIRE(!first->serves(0, static_cast<double>(sk.endNs), first->nsPerPx / 4));

  // Raw windows: the whole timeline's launches that overlap, nothing else.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 40; ++i) {
    int64_t span = 1000 + static_cast<int64_t>(rng() % 400'000);
    int64_t from = static_cast<int64_t>(rng() % static_cast<uint64_t>(whole->endNs));
    auto w = (*pw)->window(static_cast<double>(from), static_cast<double>(from + span), 1.0);
    REQUIRE_MESSAGE(w.ok(), w.error().message);
    REQUIRE(w->raw);
    std::vector<decltype(key(*whole, whole->events[0]))> want, got;
    for (const TimelineEvent& e : whole->events)
      if (e.startNs <= from + span && e.endNs() >= from) want.push_back(key(*whole, e));
    for (const TimelineEvent& e : w->timeline->events) got.push_back(key(*w->timeline, e));
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    REQUIRE(got == want);
    TSR_COMPARE(w->timeline->kernels.size(), whole->kernels.size());
  }

  // Range statistics by SQLite equal those of the whole timeline.
  for (auto [from, to] : {std::pair<int64_t, int64_t>{0, whole->endNs}, {whole->spans[1].startNs, whole->spans[2].startNs},
                          {1'234'567, 1'334'567}}) {
    RangeStats want = rangeStats(*whole, from, to);
    auto got = (*pw)->rangeStats(from, to);
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    TSR_COMPARE(got->count, want.count);
    TSR_COMPARE(got->totalNs, want.totalNs);
    REQUIRE(got->kernels.size() == want.kernels.size());
    for (size_t k = 0; k < want.kernels.size(); ++k) {
      TSR_COMPARE(got->kernels[k].name, want.kernels[k].name);
      TSR_COMPARE(got->kernels[k].kind, want.kernels[k].kind);
      TSR_COMPARE(got->kernels[k].count, want.kernels[k].count);
      TSR_COMPARE(got->kernels[k].totalNs, want.kernels[k].totalNs);
      TSR_COMPARE(got->kernels[k].flops, want.kernels[k].flops);
    }
  }
}

TEST_CASE("aProfileWithoutLevelsGetsThemOnOpen") {
  test::TempDir dir;
  std::string path = dir.filePath("runs.db");
  int64_t id = 0;
  {
    auto db = store::RunStore::open(path);
    REQUIRE(db.ok());
    id = writeProfile(*db, false);
    REQUIRE(!db->profileSummary(id)->has_value());
  }
  double last = -1;
  auto pw = ProfileWindows::open(path, id, [&](double f) { last = f; });
  REQUIRE_MESSAGE(pw.ok(), pw.error().message);
  TSR_COMPARE(last, 1.0);
  TSR_COMPARE((*pw)->launches(), int64_t{30'002});
  auto db = store::RunStore::openReadOnly(path);
  REQUIRE(db->profileSummary(id)->has_value());
  REQUIRE(!ProfileWindows::open(path, id + 1).ok());
  REQUIRE(!ProfileWindows::open(dir.filePath("none.db")).ok());
}

// A profile of two ranks read a window at a time: the rows carry their ranks, and a raw window links the
// collective calls it shows, the straggler's launch among its events, the waits worked out by hand.
TEST_CASE("aWindowLinksCollectivesAcrossRanks") {
  test::TempDir dir;
  std::string path = dir.filePath("runs.db");
  {
    auto db = store::RunStore::open(path);
    REQUIRE(db.ok());
    auto run = db->createRun("r", "p", "");
    REQUIRE(run.ok());
    auto p = db->createProfile(*run, "prof", 2, 2);
    REQUIRE(p.ok());
    // Call 0: cpu:0 arrives at 10'000, cpu:1 at 12'500 (the straggler; cpu:0 waits 2'500).
    REQUIRE(db->addKernelEvents(*p, {{"cpu:0", 0, "all_reduce", 4, 10'000, 3'000, 0, 64},
                                     {"cpu:1", 0, "all_reduce", 4, 12'500, 600, 0, 64},
                                     {"cpu:1", 0, "fusion.1", 1, 1'000, 9'000, 0, 64}}).ok());
    REQUIRE(db->addProfileCollectives(*p, {{"cpu:0", 0, "0,1", "all_reduce", 4, 10'000, 3'000},
                                           {"cpu:1", 0, "0,1", "all_reduce", 4, 12'500, 600}}).ok());
    REQUIRE(db->addProfileDevices(*p, {{"cpu:0", 0, 0, 0}, {"cpu:1", 1, 800, 40}}).ok());
    REQUIRE(db->buildProfileLevels(*p).ok());
  }
  auto pw = ProfileWindows::open(path);
  REQUIRE_MESSAGE(pw.ok(), pw.error().message);
  auto w = (*pw)->window(0, 20'000, 1.0);
  REQUIRE_MESSAGE(w.ok(), w.error().message);
  REQUIRE(w->raw);
  const Timeline& t = *w->timeline;
  TSR_COMPARE(t.rowGroup(1), std::string("rank 1 · cpu:1"));
  REQUIRE(t.collectives.size() == 1);
  const TimelineCollective& c = t.collectives[0];
  REQUIRE(c.stragglerEvent() >= 0);
  TSR_COMPARE(t.events[static_cast<size_t>(c.stragglerEvent())].startNs, int64_t{12'500 - 1'000});
  TSR_COMPARE(t.rows[static_cast<size_t>(t.events[static_cast<size_t>(c.stragglerEvent())].row)].device, std::string("cpu:1"));
  TSR_COMPARE(c.call.members[0].waitNs, int64_t{2'500});
  REQUIRE(c.events[0] >= 0);
  TSR_COMPARE(t.collectiveOf(static_cast<uint32_t>(c.events[0])), &c);
}
