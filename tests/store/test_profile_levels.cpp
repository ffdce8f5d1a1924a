// A profile's levels of detail and window queries (schema 6) against naive loops over the same launches held in
// memory: a window's raw launches are exactly those a filter over all of them keeps, and every bucket's count,
// busy time, work and longest launch are the sums a loop over the launches gives.
#include "tests/check.h"

#include <algorithm>
#include <random>
#include <tuple>

#include "engine/store/run_store.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::store;

namespace {

// 200k launches on 3 devices x 2 streams: mostly short with short gaps, some long ones (up to 5 ms, across
// many buckets), some overlapping their row's neighbours, one of zero length. Integer work, so sums are exact.
std::vector<KernelEvent> makeLaunches(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<KernelEvent> out;
  out.reserve(static_cast<size_t>(n));
  std::vector<int64_t> clock(6, 1'000'000);
  for (int64_t i = 0; i < n; ++i) {
    size_t r = rng() % 6;
    int64_t dur = static_cast<int64_t>(rng() % 4000);
    if (rng() % 1000 == 0) dur = static_cast<int64_t>(rng() % 5'000'000);
    int64_t gap = rng() % 50 == 0 ? static_cast<int64_t>(rng() % 100'000) : static_cast<int64_t>(rng() % 500);
    int64_t start = clock[r] + gap;
    if (rng() % 20 == 0) start -= std::min<int64_t>(start - 1'000'000, 1500);  // overlaps the previous launch
    clock[r] = std::max(clock[r], start + dur);
    int64_t fusion = static_cast<int64_t>(rng() % 40);
    out.push_back({fmt::format("cpu:{}", r / 2), static_cast<int64_t>(r % 2), fmt::format("fusion.{}", fusion), fusion,
                   start, dur, static_cast<double>(rng() % 1000), static_cast<double>(rng() % 4000)});
  }
  out.push_back({"cpu:0", 0, "fusion.0", 0, clock[0] + 10, 0, 0, 0});
  std::shuffle(out.begin(), out.end(), rng);  // the store must not depend on the order launches arrive in
  return out;
}

auto key(const KernelEvent& e) {
  return std::tie(e.startNs, e.device, e.stream, e.durationNs, e.fusion, e.name, e.flops, e.bytes);
}

std::vector<KernelEvent> sorted(std::vector<KernelEvent> v) {
  std::sort(v.begin(), v.end(), [](const KernelEvent& a, const KernelEvent& b) { return key(a) < key(b); });
  return v;
}

// The naive reference: every launch overlapping [from, to].
std::vector<KernelEvent> naiveWindow(const std::vector<KernelEvent>& all, int64_t from, int64_t to) {
  std::vector<KernelEvent> out;
  for (const KernelEvent& e : all)
    if (e.startNs <= to && e.startNs + e.durationNs >= from) out.push_back(e);
  return sorted(std::move(out));
}

struct Fixture {
  test::TempDir dir;
  std::optional<RunStore> store;
  std::vector<KernelEvent> launches;
  int64_t profile = 0;
  ProfileSummary summary;

  explicit Fixture(int64_t n) {
    auto s = RunStore::open(dir.filePath("runs.db"));
    REQUIRE_MESSAGE(s.ok(), s.error().message);
    store.emplace(std::move(s).value());
    auto run = store->createRun("big", "p", "");
    REQUIRE(run.ok());
    auto p = store->createProfile(*run, "profile", 0, 9);
    REQUIRE(p.ok());
    profile = *p;
    launches = makeLaunches(n, 7);
    // Written in batches, as a profiler flushes.
    for (size_t i = 0; i < launches.size(); i += 50'000) {
      std::vector<KernelEvent> batch(launches.begin() + static_cast<ptrdiff_t>(i),
                                     launches.begin() + static_cast<ptrdiff_t>(std::min(launches.size(), i + 50'000)));
      REQUIRE(store->addKernelEvents(profile, batch).ok());
    }
    double lastProgress = -1;
    REQUIRE(store->buildProfileLevels(profile, [&](double f) {
      REQUIRE(f >= lastProgress);
      lastProgress = f;
    }).ok());
    TSR_COMPARE(lastProgress, 1.0);
    auto sum = store->profileSummary(profile);
    REQUIRE_MESSAGE(sum.ok(), sum.error().message);
    REQUIRE(sum->has_value());
    summary = **sum;
  }
  int rowOf(const KernelEvent& e) const {
    for (size_t r = 0; r < summary.rows.size(); ++r)
      if (summary.rows[r].device == e.device && summary.rows[r].stream == e.stream) return static_cast<int>(r);
    return -1;
  }
};

}  // namespace

TEST_CASE("windowQueriesReturnExactlyTheOverlappingLaunches") {
  Fixture f(200'000);
  TSR_COMPARE(f.summary.events, static_cast<int64_t>(f.launches.size()));
  TSR_COMPARE(f.summary.rows.size(), size_t(6));
  TSR_COMPARE(*f.store->kernelEventCount(f.profile), static_cast<int64_t>(f.launches.size()));
  std::mt19937_64 rng(3);
  const int64_t extent = f.summary.endNs - f.summary.beginNs;
  for (int i = 0; i < 60; ++i) {
    // Windows from 1 us to a tenth of the run, some starting before the profile or ending after it.
    int64_t span = static_cast<int64_t>(1000 * std::pow(extent / 10'000.0, (rng() % 1000) / 1000.0));
    int64_t from = f.summary.beginNs - 5000 + static_cast<int64_t>(rng() % static_cast<uint64_t>(extent));
    auto w = f.store->profileWindow(f.summary, from, from + span, 1.0, INT64_MAX);
    REQUIRE_MESSAGE(w.ok(), w.error().message);
    REQUIRE(w->raw);
    auto want = naiveWindow(f.launches, from, from + span);
    auto got = sorted(w->events);
    TSR_COMPARE(got.size(), want.size());
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k) REQUIRE(key(got[k]) == key(want[k]));
    REQUIRE(std::is_sorted(w->events.begin(), w->events.end(),
                           [](const auto& a, const auto& b) { return a.startNs < b.startNs; }));
  }
  // The whole profile is one window.
  auto all = f.store->profileWindow(f.summary, INT64_MIN / 2, INT64_MAX / 2, 1.0, INT64_MAX);
  REQUIRE(all.ok());
  TSR_COMPARE(all->events.size(), f.launches.size());
}

TEST_CASE("levelsSumWhatANaiveLoopSums") {
  Fixture f(200'000);
  const ProfileSummary& s = f.summary;
  REQUIRE(s.levels >= 2);
  for (int level = 0; level < s.levels; ++level) {
    const int64_t width = s.bucketNs(level);
    const size_t n = static_cast<size_t>((s.endNs - s.beginNs) / width + 1);
    // Naive: every launch, every bucket it touches.
    std::vector<std::vector<LevelBucket>> want(s.rows.size(), std::vector<LevelBucket>(n));
    for (const KernelEvent& e : f.launches) {
      auto& row = want[static_cast<size_t>(f.rowOf(e))];
      int64_t start = e.startNs - s.beginNs, end = start + e.durationNs;
      LevelBucket& b = row[static_cast<size_t>(start / width)];
      ++b.count;
      b.flops += e.flops;
      b.bytes += e.bytes;
      b.longestNs = std::max(b.longestNs, e.durationNs);
      for (int64_t i = start / width; i <= end / width; ++i)
        row[static_cast<size_t>(i)].busyNs += std::min(end, (i + 1) * width) - std::max(start, i * width);
    }
    auto w = f.store->profileWindow(s, s.beginNs, s.endNs, static_cast<double>(width), 0);
    REQUIRE_MESSAGE(w.ok(), w.error().message);
    REQUIRE(!w->raw);
    TSR_COMPARE(w->level, level);
    TSR_COMPARE(w->estimatedEvents, static_cast<int64_t>(f.launches.size()));
    for (size_t r = 0; r < s.rows.size(); ++r) {
      const RowBuckets& got = w->rows[r];
      TSR_COMPARE(got.first, int64_t{0});
      TSR_COMPARE(got.buckets.size(), n);
      int64_t count = 0;
      for (size_t i = 0; i < n; ++i) {
        const LevelBucket& a = got.buckets[i];
        const LevelBucket& b = want[r][i];
        REQUIRE(a.count == b.count);
        REQUIRE(a.busyNs == b.busyNs);
        REQUIRE(a.flops == b.flops);
        REQUIRE(a.bytes == b.bytes);
        REQUIRE(a.longestNs == b.longestNs);
        count += a.count;
      }
      TSR_COMPARE(count, s.rows[r].events);
    }
  }
  // A window reads only its buckets: those covering [from, to] at the level of its pixel width.
  int64_t from = s.beginNs + (s.endNs - s.beginNs) / 3, to = from + (s.endNs - s.beginNs) / 2;
  double nsPerPx = static_cast<double>(to - from) / 100;
  auto w = f.store->profileWindow(s, from, to, nsPerPx, 100);
  REQUIRE(w.ok());
  REQUIRE(!w->raw);
  REQUIRE(static_cast<double>(w->bucketNs) <= nsPerPx);
  REQUIRE(static_cast<double>(w->bucketNs) * 2 > nsPerPx);
  for (const RowBuckets& r : w->rows) {
    TSR_COMPARE(r.first, (from - s.beginNs) / w->bucketNs);
    TSR_COMPARE(static_cast<int64_t>(r.buckets.size()), (to - s.beginNs) / w->bucketNs - r.first + 1);
  }
  // Few launches in the window: they come raw.
  auto narrow = f.store->profileWindow(s, from, from + 20'000, 20'000.0 / 800, 10'000);
  REQUIRE(narrow.ok());
  REQUIRE(narrow->raw);
  TSR_COMPARE(narrow->events.size(), naiveWindow(f.launches, from, from + 20'000).size());
}

TEST_CASE("levelsOfAnEmptyProfileAndRebuilds") {
  test::TempDir dir;
  auto s = RunStore::open(dir.filePath("runs.db"));
  REQUIRE(s.ok());
  auto run = s->createRun("r", "p", "");
  auto p = s->createProfile(*run, "empty", 0, 0);
  REQUIRE(s->profileSummary(*p)->has_value() == false);
  REQUIRE(s->buildProfileLevels(*p).ok());
  auto sum = s->profileSummary(*p);
  REQUIRE(sum->has_value());
  TSR_COMPARE((*sum)->events, int64_t{0});
  auto w = s->profileWindow(**sum, 0, 1000, 1.0, 10);
  REQUIRE(w.ok());
  REQUIRE(w->events.empty());
  // Built again after more launches: replaced, not added to.
  REQUIRE(s->addKernelEvents(*p, {{"cpu:0", 0, "k", 1, 100, 50, 1, 2}}).ok());
  REQUIRE(s->buildProfileLevels(*p).ok());
  REQUIRE(s->buildProfileLevels(*p).ok());
  TSR_COMPARE((*s->profileSummary(*p))->events, int64_t{1});
  TSR_COMPARE((*s->profileSummary(*p))->rows.size(), size_t(1));
  // Deleting the run deletes the levels.
  REQUIRE(s->deleteRun(*run).ok());
  REQUIRE(s->profileSummary(*p)->has_value() == false);
}
