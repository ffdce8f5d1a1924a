#include "engine/inspect/timeline_window.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "engine/store/run_store.h"

namespace tsr::inspect {

bool TimelineWindow::serves(double startNs, double endNs, double viewNsPerPx) const {
  if (!timeline) return false;
  // The profile's ends are as good as covered: nothing lies beyond them.
  const double lo = std::max(startNs, static_cast<double>(timeline->beginNs));
  const double hi = std::min(endNs, static_cast<double>(timeline->endNs));
  if (lo < static_cast<double>(fromNs) || hi > static_cast<double>(toNs)) return false;
  if (raw) return true;
  return viewNsPerPx >= nsPerPx / 2 && viewNsPerPx <= nsPerPx * 2;
}

ProfileWindows::~ProfileWindows() = default;

namespace {

Result<store::ProfileInfo> findProfile(const store::RunStore& db, const std::string& dbPath, int64_t profileId) {
  if (profileId <= 0) {
    TSR_ASSIGN(std::optional<store::ProfileInfo> latest, db.latestProfile());
    if (!latest) return makeError("{}: no profile yet (run `tessera profile` or Profile ▶)", dbPath);
    return *latest;
  }
  TSR_ASSIGN(std::vector<store::RunInfo> runs, db.runs());
  for (const store::RunInfo& r : runs) {
    TSR_ASSIGN(std::vector<store::ProfileInfo> ps, db.profiles(r.id));
    for (const store::ProfileInfo& p : ps)
      if (p.id == profileId) return p;
  }
  return makeError("{}: no profile {}", dbPath, profileId);
}

}  // namespace

Result<std::shared_ptr<ProfileWindows>> ProfileWindows::open(const std::string& dbPath, int64_t profileId,
                                                             const std::function<void(double)>& progress) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dbPath, ec))
    return makeError("{}: no run store yet (run `tessera profile` or Profile ▶)", dbPath);
  TSR_ASSIGN(store::RunStore ro, store::RunStore::openReadOnly(dbPath));
  TSR_ASSIGN(store::ProfileInfo info, findProfile(ro, dbPath, profileId));
  TSR_ASSIGN(std::optional<store::ProfileSummary> summary, ro.profileSummary(info.id));
  auto db = std::make_unique<store::RunStore>(std::move(ro));
  if (!summary) {
    // A profile from before the levels of detail: the store is brought to this schema and they are built once.
    TSR_ASSIGN(store::RunStore rw, store::RunStore::open(dbPath));
    TSR_TRY(rw.buildProfileLevels(info.id, progress));
    TSR_ASSIGN(summary, rw.profileSummary(info.id));
    if (!summary) return makeError("{}: profile {} has no levels of detail", dbPath, info.id);
    db = std::make_unique<store::RunStore>(std::move(rw));
  }
  TSR_ASSIGN(std::vector<store::KernelInfo> kernels, db->profileKernels(info.id));
  TSR_ASSIGN(std::vector<store::ProfileMarkInfo> marks, db->profileMarks(info.id));
  TSR_ASSIGN(store::RunInfo run, db->run(info.run));

  std::shared_ptr<ProfileWindows> w(new ProfileWindows());
  w->m_profile = info.id;
  w->m_origin = summary->events > 0 ? summary->beginNs : (marks.empty() ? 0 : marks.front().startNs);
  for (const store::ProfileMarkInfo& m : marks) w->m_origin = std::min(w->m_origin, m.startNs);
  TSR_ASSIGN(std::vector<store::ProfileDeviceInfo> devices, db->profileDevices(info.id));
  TSR_ASSIGN(w->m_collectives, store::collectiveInstances(*db, info.id));
  for (const store::ProfileDeviceInfo& d : devices) w->m_ranks.emplace_back(d.device, d.rank);
  TimelineBuilder b;
  for (const store::ProfileRow& r : summary->rows) b.row(r.device, r.stream);
  for (const auto& [device, rank] : w->m_ranks) b.setDeviceRank(device, rank);
  for (const store::KernelInfo& k : kernels)
    b.addKernel({k.fusion, k.executable, k.name, k.kind, k.nodes, k.ops, k.modulePath, {}});
  for (const store::ProfileMarkInfo& m : marks) b.addSpan({m.name, m.startNs, m.durationNs, m.rank});
  Timeline t = b.finish(fmt::format("profile {} ({}) of {}", info.id, info.name, dbPath), w->m_origin);
  t.profileId = info.id;
  t.runId = info.run;
  t.storePath = dbPath;
  t.projectText = run.config;
  t.endNs = std::max(t.endNs, summary->endNs - w->m_origin);
  for (const store::ProfileRow& r : summary->rows) {
    auto it = std::find_if(t.rows.begin(), t.rows.end(),
                           [&](const TimelineRow& row) { return row.device == r.device && row.stream == r.stream; });
    w->m_rowOf.push_back(static_cast<int>(it - t.rows.begin()));
    it->numEvents = static_cast<uint32_t>(std::min<int64_t>(r.events, UINT32_MAX));
  }
  w->m_skeleton = std::make_shared<const Timeline>(std::move(t));
  w->m_summary = std::make_unique<store::ProfileSummary>(std::move(*summary));
  w->m_db = std::move(db);
  return w;
}

int64_t ProfileWindows::launches() const { return m_summary->events; }

Result<TimelineWindow> ProfileWindows::window(double fromNs, double toNs, double nsPerPx, int64_t maxLaunches) const {
  const int64_t from = static_cast<int64_t>(std::floor(fromNs)), to = static_cast<int64_t>(std::ceil(toNs));
  TSR_ASSIGN(store::ProfileWindow pw,
             m_db->profileWindow(*m_summary, m_origin + from, m_origin + to, std::max(nsPerPx, 1e-3), maxLaunches));
  TimelineWindow out;
  out.fromNs = from;
  out.toNs = to;
  out.nsPerPx = nsPerPx;
  out.raw = pw.raw;
  if (pw.raw) {
    out.launches = static_cast<int64_t>(pw.events.size());
    // The skeleton again with the window's launches: rows, kernel and name tables come out the same.
    TimelineBuilder b;
    for (const store::ProfileRow& r : m_summary->rows) b.row(r.device, r.stream);
    for (const TimelineKernel& k : m_skeleton->kernels) {
      TimelineKernel copy = k;
      copy.events.clear();
      b.addKernel(std::move(copy));
    }
    for (const TimelineSpan& s : m_skeleton->spans) b.addSpan({s.name, s.startNs + m_origin, s.durationNs, s.rank});
    for (const store::KernelEvent& e : pw.events)
      b.addEvent(b.row(e.device, e.stream), e.name, e.startNs, e.durationNs, e.flops, e.bytes, e.fusion);
    for (const auto& [device, rank] : m_ranks) b.setDeviceRank(device, rank);
    // The collective calls the window shows a part of (members outside it are not linked).
    std::vector<store::CollectiveInstance> calls;
    for (const store::CollectiveInstance& c : m_collectives) {
      int64_t first = INT64_MAX, last = INT64_MIN;
      for (const auto& m : c.members) {
        first = std::min(first, m.arrivalNs);
        last = std::max(last, m.endNs);
      }
      if (last >= m_origin + from && first <= m_origin + to) calls.push_back(c);
    }
    b.addCollectives(std::move(calls));
    Timeline t = b.finish(m_skeleton->source, m_origin);
    t.profileId = m_skeleton->profileId;
    t.runId = m_skeleton->runId;
    t.storePath = m_skeleton->storePath;
    t.projectText = m_skeleton->projectText;
    t.endNs = std::max(t.endNs, m_skeleton->endNs);
    for (size_t r = 0; r < t.rows.size() && r < m_skeleton->rows.size(); ++r) t.rows[r].numEvents = m_skeleton->rows[r].numEvents;
    out.timeline = std::make_shared<const Timeline>(std::move(t));
    return out;
  }
  // Density: the skeleton as it is, and each row's buckets.
  out.launches = pw.estimatedEvents;
  out.timeline = m_skeleton;
  out.bucketNs = pw.bucketNs;
  out.density.resize(m_skeleton->rows.size());
  std::unordered_map<int64_t, int32_t> kernelOf;
  for (size_t k = 0; k < m_skeleton->kernels.size(); ++k) kernelOf.emplace(m_skeleton->kernels[k].fusion, static_cast<int32_t>(k));
  const double width = static_cast<double>(pw.bucketNs);
  for (size_t r = 0; r < pw.rows.size(); ++r) {
    const store::RowBuckets& rb = pw.rows[r];
    out.firstNs = m_summary->beginNs - m_origin + rb.first * pw.bucketNs;
    auto& row = out.density[static_cast<size_t>(m_rowOf[r])];
    row.reserve(rb.buckets.size());
    for (const store::LevelBucket& b : rb.buckets) {
      DensityBucket d;
      d.busy = static_cast<float>(std::min(1.0, static_cast<double>(b.busyNs) / width));
      d.count = b.count;
      if (b.count > 0)
        if (auto it = kernelOf.find(b.longestFusion); it != kernelOf.end()) d.kernel = it->second;
      row.push_back(d);
    }
  }
  return out;
}

Result<TimelineWindow> ProfileWindows::whole(double widthPx) const {
  double span = std::max<double>(1, static_cast<double>(m_skeleton->endNs - m_skeleton->beginNs));
  return window(static_cast<double>(m_skeleton->beginNs), static_cast<double>(m_skeleton->endNs), span / std::max(1.0, widthPx));
}

Result<RangeStats> ProfileWindows::rangeStats(int64_t fromNs, int64_t toNs) const {
  RangeStats s;
  s.fromNs = fromNs;
  s.toNs = toNs;
  if (toNs <= fromNs) return s;
  TSR_ASSIGN(std::vector<store::RunStore::KernelTotal> totals, m_db->kernelTotals(m_profile, fromNs + m_origin, toNs + m_origin));
  std::unordered_map<int64_t, const TimelineKernel*> kernelOf;
  for (const TimelineKernel& k : m_skeleton->kernels) kernelOf.emplace(k.fusion, &k);
  std::map<std::string, KernelStat> byName;
  for (const store::RunStore::KernelTotal& k : totals) {
    KernelStat& st = byName[k.name];
    if (st.name.empty()) {
      st.name = k.name;
      auto it = kernelOf.find(k.fusion);
      st.kind = it != kernelOf.end() && !it->second->kind.empty() ? it->second->kind : "kernel";
    }
    st.count += k.count;
    st.totalNs += k.insideNs;
    st.flops += k.flops;
    st.bytes += k.bytes;
    s.count += k.count;
    s.totalNs += k.insideNs;
  }
  for (auto& [name, st] : byName) {
    st.share = s.totalNs > 0 ? static_cast<double>(st.totalNs) / static_cast<double>(s.totalNs) : 0;
    s.kernels.push_back(std::move(st));
  }
  std::sort(s.kernels.begin(), s.kernels.end(), [](const KernelStat& a, const KernelStat& b) {
    return a.totalNs != b.totalNs ? a.totalNs > b.totalNs : a.name < b.name;
  });
  return s;
}

Result<OpenedProfile> openProfile(const std::string& dbPath, int64_t profileId, double widthPx,
                                  const std::function<void(double)>& progress, int64_t wholeBelow) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dbPath, ec))
    return makeError("{}: no run store yet (run `tessera profile` or Profile ▶)", dbPath);
  int64_t id = 0, launches = 0;
  {
    TSR_ASSIGN(store::RunStore db, store::RunStore::openReadOnly(dbPath));
    TSR_ASSIGN(store::ProfileInfo info, findProfile(db, dbPath, profileId));
    TSR_ASSIGN(std::optional<store::ProfileSummary> summary, db.profileSummary(info.id));
    id = info.id;
    if (summary) {
      launches = summary->events;
    } else {
      TSR_ASSIGN(launches, db.kernelEventCount(info.id));
    }
  }
  OpenedProfile out;
  if (launches <= wholeBelow) {
    TSR_ASSIGN(Timeline t, loadProfileTimeline(dbPath, id));
    out.whole = std::make_shared<const Timeline>(std::move(t));
    return out;
  }
  TSR_ASSIGN(out.windows, ProfileWindows::open(dbPath, id, progress));
  TSR_ASSIGN(TimelineWindow first, out.windows->whole(widthPx));
  out.first = std::make_shared<const TimelineWindow>(std::move(first));
  return out;
}

}  // namespace tsr::inspect
