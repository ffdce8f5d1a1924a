// A profile's levels of detail and its window queries: what lets the timeline open a profile of tens of millions
// of launches without reading it whole.
//
// Levels: each row (device, stream) has level 0's buckets, 2^baseShift ns wide from the profile's first start,
// and every level above halves the count (a parent is its two children merged). baseShift is chosen so that a
// row's level 0 has about one bucket per 64 launches: the levels together cost about 1.25 bytes per launch. The
// buckets are stored as blobs of kChunk buckets (LevelBucket's bytes as they are in memory, little-endian), one
// row per (profile, row, level, chunk), and chunks of empty buckets are not stored: a window of W pixels reads
// at most 2W buckets of each row, a few blobs.
//
// Raw launches: a window [from, to] holds the launches with start <= to and end >= from. With only a start
// index the lower bound of start is from minus the longest launch of the profile, which one long kernel makes
// useless. So each launch has a span class c (the hex digits of its duration: under 16^c ns, schema 6's
// generated column) and the index (profile, span_class, start_ns): per class the range is start in
// (from - 16^c, to], exact, and at most 16 index ranges in all.
#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "engine/store/run_store.h"
#include "engine/store/stmt.h"

namespace tsr::store {

namespace {

constexpr int64_t kChunk = 1024;  // buckets per stored blob
constexpr int kSpanClasses = 16;  // hex digits of an int64 duration
constexpr int64_t kLaunchesPerBucket = 64;
static_assert(sizeof(LevelBucket) == 40, "LevelBucket is stored as its bytes");

void merge(LevelBucket& into, const LevelBucket& b) {
  if (b.count > 0 && (into.count == 0 || b.longestNs > into.longestNs)) {
    into.longestNs = b.longestNs;
    into.longestFusion = b.longestFusion;
  }
  into.busyNs += b.busyNs;
  into.flops += b.flops;
  into.bytes += b.bytes;
  into.count += b.count;
}

bool empty(const LevelBucket& b) { return b.count == 0 && b.busyNs == 0; }

// Lower bound of the starts of span class c's launches that reach `fromNs`: they last under 16^c ns.
int64_t classLowerBound(int64_t fromNs, int c) {
  if (c >= 15) return INT64_MIN;
  int64_t span = int64_t{1} << (4 * c);
  return fromNs < INT64_MIN + span ? INT64_MIN : fromNs - span;
}

struct RowBuild {
  ProfileRow row;
  std::vector<LevelBucket> level0;
};

// Adds one launch to its row's level 0: count and work in the bucket where it starts, busy time in each
// bucket it covers.
void addLaunch(std::vector<LevelBucket>& buckets, int64_t origin, int shift, const KernelEvent& e) {
  const int64_t width = int64_t{1} << shift;
  const int64_t start = e.startNs - origin, end = start + std::max<int64_t>(0, e.durationNs);
  const size_t first = static_cast<size_t>(start >> shift), last = static_cast<size_t>(end >> shift);
  if (buckets.size() <= last) buckets.resize(last + 1);
  LevelBucket& b = buckets[first];
  if (b.count == 0 || e.durationNs > b.longestNs) {
    b.longestNs = e.durationNs;
    b.longestFusion = static_cast<int32_t>(e.fusion);
  }
  ++b.count;
  b.flops += e.flops;
  b.bytes += e.bytes;
  for (size_t i = first; i <= last; ++i) {
    int64_t lo = std::max(start, static_cast<int64_t>(i) * width);
    int64_t hi = std::min(end, static_cast<int64_t>(i + 1) * width);
    buckets[i].busyNs += std::max<int64_t>(0, hi - lo);
  }
}

}  // namespace

Result<std::optional<int64_t>> RunStore::firstKernelStart(int64_t profile) const {
  Stmt st(m_db, "SELECT min(start_ns) FROM kernel_events WHERE profile = ?");
  if (!st.ok()) return st.error();
  st.bind(1, profile);
  TSR_ASSIGN(bool found, st.one());
  if (!found || st.null(0)) return std::optional<int64_t>{};
  return std::optional<int64_t>(st.i64(0));
}

Result<int64_t> RunStore::kernelEventCount(int64_t profile) const {
  Stmt st(m_db, "SELECT count(*) FROM kernel_events WHERE profile = ?");
  if (!st.ok()) return st.error();
  st.bind(1, profile);
  TSR_ASSIGN(bool found, st.one());
  return found ? st.i64(0) : int64_t{0};
}

Status RunStore::eachKernelEvent(int64_t profile, const std::function<Status(const KernelEvent&)>& row) const {
  // By the time index: stores written in time order read their pages in order.
  Stmt st(m_db,
          "SELECT device, stream, name, fusion, start_ns, duration_ns, flops, bytes FROM kernel_events "
          "INDEXED BY kernel_events_by_time WHERE profile = ?");
  if (!st.ok()) return st.error();
  st.bind(1, profile);
  KernelEvent e;
  return st.each([&]() -> Status {
    e = KernelEvent{st.text(0), st.i64(1), st.text(2), st.i64(3), st.i64(4), st.i64(5), st.f64(6), st.f64(7)};
    return row(e);
  });
}

Status RunStore::buildProfileLevels(int64_t profile, const std::function<void(double)>& progress) {
  // The extent and count first (index lookups and one index scan), to size level 0.
  int64_t first = 0, lastStart = 0;
  TSR_ASSIGN(int64_t events, kernelEventCount(profile));
  for (auto [sql, out] : {std::pair{"SELECT min(start_ns) FROM kernel_events WHERE profile = ?", &first},
                          std::pair{"SELECT max(start_ns) FROM kernel_events WHERE profile = ?", &lastStart}}) {
    Stmt st(m_db, sql);
    if (!st.ok()) return st.error();
    st.bind(1, profile);
    TSR_ASSIGN(bool found, st.one());
    *out = found ? st.i64(0) : 0;
  }
  int shift = 0;
  const int64_t perRow = std::max<int64_t>(1024, events / kLaunchesPerBucket);
  while (shift < 40 && ((lastStart - first) >> shift) > perRow) ++shift;

  // One pass over the launches, in no order that matters: every sum of a bucket is order-free.
  std::vector<RowBuild> rows;
  std::unordered_map<std::string, size_t> rowIndex;
  std::string lastKey;
  size_t lastRow = 0;
  int64_t seen = 0;
  TSR_TRY(eachKernelEvent(profile, [&](const KernelEvent& e) -> Status {
    std::string key = fmt::format("{}\x1f{}", e.device, e.stream);
    if (rows.empty() || key != lastKey) {
      auto [it, added] = rowIndex.try_emplace(key, rows.size());
      if (added) rows.push_back({ProfileRow{e.device, e.stream, 0, e.startNs, e.startNs + e.durationNs}, {}});
      lastKey = std::move(key);
      lastRow = it->second;
    }
    RowBuild& r = rows[lastRow];
    ++r.row.events;
    r.row.beginNs = std::min(r.row.beginNs, e.startNs);
    r.row.endNs = std::max(r.row.endNs, e.startNs + e.durationNs);
    addLaunch(r.level0, first, shift, e);
    if (progress && ++seen % (1 << 20) == 0) progress(events > 0 ? static_cast<double>(seen) / events : 1.0);
    return {};
  }));
  std::sort(rows.begin(), rows.end(), [](const RowBuild& a, const RowBuild& b) {
    return a.row.device != b.row.device ? a.row.device < b.row.device : a.row.stream < b.row.stream;
  });
  int64_t end = first;
  size_t widest = 1;
  for (const RowBuild& r : rows) {
    end = std::max(end, r.row.endNs);
    widest = std::max(widest, r.level0.size());
  }
  int levels = 1;
  while ((widest >> (levels - 1)) > 1) ++levels;

  Status written = transaction([&]() -> Status {
    for (const char* sql : {"DELETE FROM profile_levels WHERE profile = ?", "DELETE FROM profile_rows WHERE profile = ?",
                            "DELETE FROM profile_buckets WHERE profile = ?"}) {
      Stmt del(m_db, sql);
      if (!del.ok()) return del.error();
      del.bind(1, profile);
      if (del.step() != SQLITE_DONE) return del.error();
    }
    Stmt info(m_db,
              "INSERT INTO profile_levels(profile, events, begin_ns, end_ns, base_shift, levels) VALUES(?, ?, ?, ?, ?, ?)");
    if (!info.ok()) return info.error();
    info.bind(1, profile).bind(2, events).bind(3, first).bind(4, end).bind(5, int64_t{shift}).bind(6, int64_t{levels});
    if (info.step() != SQLITE_DONE) return info.error();
    Stmt rowSt(m_db,
               "INSERT INTO profile_rows(profile, row, device, stream, events, begin_ns, end_ns) VALUES(?, ?, ?, ?, ?, ?, ?)");
    Stmt chunkSt(m_db, "INSERT INTO profile_buckets(profile, row, level, chunk, data) VALUES(?, ?, ?, ?, ?)");
    if (!rowSt.ok()) return rowSt.error();
    if (!chunkSt.ok()) return chunkSt.error();
    std::string blob;
    for (size_t r = 0; r < rows.size(); ++r) {
      const ProfileRow& pr = rows[r].row;
      rowSt.bind(1, profile).bind(2, static_cast<int64_t>(r)).bind(3, pr.device).bind(4, pr.stream);
      rowSt.bind(5, pr.events).bind(6, pr.beginNs).bind(7, pr.endNs);
      if (rowSt.step() != SQLITE_DONE) return rowSt.error();
      rowSt.reset();
      std::vector<LevelBucket> level = std::move(rows[r].level0);
      for (int l = 0; l < levels; ++l) {
        for (size_t c = 0; c * kChunk < level.size(); ++c) {
          size_t lo = c * kChunk, hi = std::min(level.size(), lo + kChunk);
          if (std::all_of(level.begin() + static_cast<ptrdiff_t>(lo), level.begin() + static_cast<ptrdiff_t>(hi), empty))
            continue;
          blob.assign(reinterpret_cast<const char*>(level.data() + lo), (hi - lo) * sizeof(LevelBucket));
          chunkSt.bind(1, profile).bind(2, static_cast<int64_t>(r)).bind(3, int64_t{l}).bind(4, static_cast<int64_t>(c));
          chunkSt.bindBlob(5, blob);
          if (chunkSt.step() != SQLITE_DONE) return chunkSt.error();
          chunkSt.reset();
        }
        std::vector<LevelBucket> parent((level.size() + 1) / 2);
        for (size_t i = 0; i < level.size(); ++i) merge(parent[i / 2], level[i]);
        level = std::move(parent);
      }
    }
    return {};
  });
  if (progress) progress(1.0);
  return written;
}

Result<std::optional<ProfileSummary>> RunStore::profileSummary(int64_t profile) const {
  if (schemaVersion() < 6) return std::optional<ProfileSummary>{};
  Stmt st(m_db, "SELECT events, begin_ns, end_ns, base_shift, levels FROM profile_levels WHERE profile = ?");
  if (!st.ok()) return st.error();
  st.bind(1, profile);
  TSR_ASSIGN(bool found, st.one());
  if (!found) return std::optional<ProfileSummary>{};
  ProfileSummary s;
  s.profile = profile;
  s.events = st.i64(0);
  s.beginNs = st.i64(1);
  s.endNs = st.i64(2);
  s.baseShift = static_cast<int>(st.i64(3));
  s.levels = static_cast<int>(st.i64(4));
  Stmt rows(m_db, "SELECT device, stream, events, begin_ns, end_ns FROM profile_rows WHERE profile = ? ORDER BY row");
  if (!rows.ok()) return rows.error();
  rows.bind(1, profile);
  TSR_TRY(rows.each([&]() -> Status {
    s.rows.push_back({rows.text(0), rows.i64(1), rows.i64(2), rows.i64(3), rows.i64(4)});
    return {};
  }));
  return std::optional<ProfileSummary>(std::move(s));
}

Result<ProfileWindow> RunStore::profileWindow(const ProfileSummary& s, int64_t fromNs, int64_t toNs, double nsPerPx,
                                              int64_t maxEvents) const {
  ProfileWindow w;
  w.fromNs = fromNs;
  w.toNs = toNs;
  // The coarsest level no wider than a pixel.
  int level = 0;
  while (level + 1 < s.levels && static_cast<double>(s.bucketNs(level + 1)) <= nsPerPx) ++level;
  w.level = level;
  w.bucketNs = s.bucketNs(level);
  const int shift = s.baseShift + level;
  const int64_t lo = std::max(fromNs, s.beginNs) - s.beginNs, hi = std::max<int64_t>(0, std::min(toNs, s.endNs) - s.beginNs);
  const int64_t b0 = lo >> shift, b1 = hi >> shift;
  Stmt st(m_db,
          "SELECT chunk, data FROM profile_buckets WHERE profile = ? AND row = ? AND level = ? AND chunk BETWEEN ? AND ?");
  if (!st.ok()) return st.error();
  w.rows.resize(s.rows.size());
  for (size_t r = 0; r < s.rows.size(); ++r) {
    RowBuckets& rb = w.rows[r];
    rb.first = b0;
    rb.buckets.assign(static_cast<size_t>(std::max<int64_t>(0, b1 - b0 + 1)), LevelBucket{});
    if (toNs < fromNs) continue;
    st.bind(1, s.profile).bind(2, static_cast<int64_t>(r)).bind(3, int64_t{level}).bind(4, b0 / kChunk).bind(5, b1 / kChunk);
    TSR_TRY(st.each([&]() -> Status {
      const int64_t chunkFirst = st.i64(0) * kChunk;
      const size_t n = static_cast<size_t>(st.bytes(1)) / sizeof(LevelBucket);
      const auto* data = static_cast<const char*>(st.blob(1));
      for (size_t i = 0; i < n; ++i) {
        int64_t b = chunkFirst + static_cast<int64_t>(i);
        if (b < b0 || b > b1) continue;
        std::memcpy(&rb.buckets[static_cast<size_t>(b - b0)], data + i * sizeof(LevelBucket), sizeof(LevelBucket));
      }
      return {};
    }));
    st.reset();
    for (const LevelBucket& b : rb.buckets) w.estimatedEvents += b.count;
  }
  if (w.estimatedEvents > maxEvents) return w;

  // Few enough: the launches themselves, one index range per span class.
  w.raw = true;
  w.rows.clear();
  Stmt ev(m_db,
          "SELECT device, stream, name, fusion, start_ns, duration_ns, flops, bytes FROM kernel_events "
          "WHERE profile = ? AND span_class = ? AND start_ns > ? AND start_ns <= ? AND start_ns + duration_ns >= ?");
  if (!ev.ok()) return ev.error();
  for (int c = 1; c <= kSpanClasses; ++c) {
    ev.bind(1, s.profile).bind(2, int64_t{c}).bind(3, classLowerBound(fromNs, c)).bind(4, toNs).bind(5, fromNs);
    TSR_TRY(ev.each([&]() -> Status {
      w.events.push_back(KernelEvent{ev.text(0), ev.i64(1), ev.text(2), ev.i64(3), ev.i64(4), ev.i64(5), ev.f64(6), ev.f64(7)});
      return {};
    }));
    ev.reset();
  }
  std::stable_sort(w.events.begin(), w.events.end(),
                   [](const KernelEvent& a, const KernelEvent& b) { return a.startNs < b.startNs; });
  return w;
}

Result<std::vector<RunStore::KernelTotal>> RunStore::kernelTotals(int64_t profile, int64_t fromNs, int64_t toNs) const {
  std::vector<KernelTotal> out;
  if (toNs <= fromNs) return out;
  Stmt st(m_db,
          "SELECT name, fusion, count(*), sum(min(start_ns + duration_ns, ?4) - max(start_ns, ?5)), sum(flops), "
          "sum(bytes) FROM kernel_events WHERE profile = ?1 AND span_class = ?2 AND start_ns > ?3 AND start_ns < ?4 "
          "AND start_ns + duration_ns > ?5 GROUP BY name, fusion");
  if (!st.ok()) return st.error();
  std::map<std::pair<std::string, int64_t>, size_t> index;
  for (int c = 1; c <= kSpanClasses; ++c) {
    st.bind(1, profile).bind(2, int64_t{c}).bind(3, classLowerBound(fromNs, c)).bind(4, toNs).bind(5, fromNs);
    TSR_TRY(st.each([&]() -> Status {
      auto [it, added] = index.try_emplace({st.text(0), st.i64(1)}, out.size());
      if (added) out.push_back({st.text(0), st.i64(1)});
      KernelTotal& k = out[it->second];
      k.count += st.i64(2);
      k.insideNs += st.i64(3);
      k.flops += st.f64(4);
      k.bytes += st.f64(5);
      return {};
    }));
    st.reset();
  }
  return out;
}

}  // namespace tsr::store
