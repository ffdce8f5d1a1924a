#include "engine/inspect/timeline.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

#include "engine/inspect/node_info.h"
#include "engine/ops/registry.h"
#include "engine/runtime/trace_export.h"
#include "engine/store/run_store.h"
#include "engine/train/profile_run.h"

namespace tsr::inspect {

namespace {

// t - t0 for t >= t0, saturated: the times of a damaged store or trace can be anything.
int64_t sinceStart(int64_t t, int64_t t0) {
  int64_t d = 0;
  return __builtin_sub_overflow(t, t0, &d) ? std::numeric_limits<int64_t>::max() : d;
}

// "cpu:2" < "cpu:10": digits compare as numbers.
bool naturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && a[i2] == '0') ++i2;
      while (j2 < b.size() && b[j2] == '0') ++j2;
      size_t ie = i2, je = j2;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      if (ie - i2 != je - j2) return ie - i2 < je - j2;
      int c = a.compare(i2, ie - i2, b, j2, je - j2);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

// The op family a kernel is coloured by: its heaviest kind of op (a GEMM with a bias epilogue is a contraction).
const std::vector<std::string>& familyPriority() {
  static const std::vector<std::string> order = {"contraction", "collective", "reduction", "indexing", "control_flow",
                                                 "random",      "layout",     "elementwise", "misc"};
  return order;
}

std::string familyOfOps(const std::vector<std::string>& ops) {
  const ir::OpRegistry& reg = ops::registry();
  size_t best = std::numeric_limits<size_t>::max();
  std::string other;
  for (const std::string& op : ops) {
    const ir::OpDef* def = reg.find(op);
    if (!def) continue;
    const auto& order = familyPriority();
    auto it = std::find(order.begin(), order.end(), def->family);
    size_t rank = static_cast<size_t>(it - order.begin());
    if (it == order.end() && other.empty()) other = def->family;
    if (it != order.end() && rank < best) best = rank;
  }
  if (best < familyPriority().size()) return familyPriority()[best];
  return other;
}

// The family of an event without ops: the op its name starts with ("dot_general 64x784x1024"), if any.
std::string familyOfName(const std::string& name) {
  size_t end = name.find_first_of(" .[(:");
  const ir::OpDef* def = ops::registry().find(std::string_view(name).substr(0, end));
  return def ? def->family : "";
}

uint16_t internSmall(std::vector<std::string>& table, const std::string& s) {
  auto it = std::find(table.begin(), table.end(), s);
  if (it != table.end()) return static_cast<uint16_t>(it - table.begin());
  table.push_back(s);
  return static_cast<uint16_t>(table.size() - 1);
}

// A 64-bit mix (splitmix64) for the synthetic timeline: the same events on every machine.
struct SplitMix {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
};

}  // namespace

const TimelineKernel* Timeline::kernelOf(uint32_t event) const {
  int32_t k = events[event].kernel;
  return k >= 0 ? &kernels[static_cast<size_t>(k)] : nullptr;
}

std::vector<int> Timeline::kernelsWithNode(int node) const {
  std::vector<int> out;
  for (size_t k = 0; k < kernels.size(); ++k)
    if (kernelOfGraph(kernels[k]) && std::find(kernels[k].nodes.begin(), kernels[k].nodes.end(), node) != kernels[k].nodes.end())
      out.push_back(static_cast<int>(k));
  return out;
}

// --- TimelineBuilder ---------------------------------------------------------------------------------------

int TimelineBuilder::row(const std::string& device, int64_t stream, const std::string& label,
                         std::optional<int64_t> deviceOrder, std::optional<int64_t> streamOrder) {
  std::string key = device + '\x1f' + std::to_string(stream);
  auto [it, added] = m_rowIndex.emplace(key, static_cast<int>(m_rows.size()));
  if (added) m_rows.push_back({device, stream, label, deviceOrder, streamOrder});
  return it->second;
}

void TimelineBuilder::setRow(int row, const std::string& device, int64_t stream, const std::string& label,
                             std::optional<int64_t> deviceOrder, std::optional<int64_t> streamOrder) {
  m_rows[static_cast<size_t>(row)] = {device, stream, label, deviceOrder, streamOrder};
}

int32_t TimelineBuilder::intern(std::vector<std::string>& table, std::unordered_map<std::string, int32_t>& index,
                                std::string_view s) {
  std::string key(s);
  auto [it, added] = index.emplace(std::move(key), static_cast<int32_t>(table.size()));
  if (added) table.emplace_back(s);
  return it->second;
}

void TimelineBuilder::addEvent(int row, std::string_view name, int64_t startNs, int64_t durationNs, double flops,
                               double bytes, int64_t fusion, std::string_view category) {
  m_events.push_back({startNs, std::max<int64_t>(0, durationNs), flops, bytes, intern(m_names, m_nameIndex, name),
                      row, fusion, intern(m_categories, m_categoryIndex, category)});
}

void TimelineBuilder::addKernel(TimelineKernel kernel) {
  if (m_kernelIndex.count(kernel.fusion)) return;
  m_kernelIndex.emplace(kernel.fusion, m_kernels.size());
  kernel.events.clear();
  m_kernels.push_back(std::move(kernel));
}

void TimelineBuilder::addSpan(TimelineSpan span) { m_spans.push_back(std::move(span)); }

Timeline TimelineBuilder::finish(std::string source, std::optional<int64_t> originNs) {
  Timeline t;
  t.source = std::move(source);
  t.names = std::move(m_names);
  t.kernels = std::move(m_kernels);

  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const Pending& e : m_events) t0 = std::min(t0, e.startNs);
  for (const TimelineSpan& s : m_spans) t0 = std::min(t0, s.startNs);
  if (m_events.empty() && m_spans.empty()) t0 = 0;
  if (originNs) t0 = *originNs;

  // Rows: devices in natural order (a trace's sort index first), then streams.
  std::vector<int> order(m_rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  constexpr int64_t kUnordered = std::numeric_limits<int64_t>::max();
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const RowKey& x = m_rows[static_cast<size_t>(a)];
    const RowKey& y = m_rows[static_cast<size_t>(b)];
    int64_t dx = x.deviceOrder.value_or(kUnordered), dy = y.deviceOrder.value_or(kUnordered);
    if (dx != dy) return dx < dy;
    if (x.device != y.device) return naturalLess(x.device, y.device);
    int64_t sx = x.streamOrder.value_or(kUnordered), sy = y.streamOrder.value_or(kUnordered);
    if (sx != sy) return sx < sy;
    return x.stream < y.stream;
  });
  std::vector<int32_t> newRow(m_rows.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const RowKey& k = m_rows[static_cast<size_t>(order[i])];
    newRow[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);
    TimelineRow r;
    r.device = k.device;
    r.stream = k.stream;
    r.label = !k.label.empty() ? k.label
                               : fmt::format("{} {}", k.device.rfind("cpu", 0) == 0 ? "thread" : "stream", k.stream);
    t.rows.push_back(std::move(r));
  }

  // Colour keys: the kernel's kind and op family, or else the trace's category and the op the name begins with.
  std::vector<uint16_t> kernelKind(t.kernels.size()), kernelFamily(t.kernels.size());
  for (size_t k = 0; k < t.kernels.size(); ++k) {
    kernelKind[k] = internSmall(t.kinds, t.kernels[k].kind.empty() ? "kernel" : t.kernels[k].kind);
    std::string fam = familyOfOps(t.kernels[k].ops);
    if (fam.empty()) fam = familyOfName(t.kernels[k].name);
    kernelFamily[k] = internSmall(t.families, fam.empty() ? "other" : fam);
  }
  std::vector<int> nameFamily(t.names.size(), -1);
  std::vector<int> categoryKind(m_categories.size(), -1);

  t.events.reserve(m_events.size());
  for (const Pending& p : m_events) {
    TimelineEvent e;
    e.startNs = sinceStart(p.startNs, t0);
    e.durationNs = p.durationNs;
    e.flops = p.flops;
    e.bytes = p.bytes;
    e.name = p.name;
    e.row = newRow[static_cast<size_t>(p.row)];
    auto k = p.fusion >= 0 ? m_kernelIndex.find(p.fusion) : m_kernelIndex.end();
    if (k != m_kernelIndex.end()) {
      e.kernel = static_cast<int32_t>(k->second);
      e.kind = kernelKind[k->second];
      e.family = kernelFamily[k->second];
    } else {
      int& kind = categoryKind[static_cast<size_t>(p.category)];
      if (kind < 0) {
        const std::string& cat = m_categories[static_cast<size_t>(p.category)];
        kind = internSmall(t.kinds, cat.empty() ? "kernel" : cat);
      }
      e.kind = static_cast<uint16_t>(kind);
      int& fam = nameFamily[static_cast<size_t>(p.name)];
      if (fam < 0) {
        std::string f = familyOfName(t.names[static_cast<size_t>(p.name)]);
        if (f.empty()) f = m_categories[static_cast<size_t>(p.category)];
        fam = internSmall(t.families, f.empty() ? "other" : f);
      }
      e.family = static_cast<uint16_t>(fam);
    }
    t.events.push_back(e);
  }
  m_events = {};

  // Lanes: in start order (longer first at equal starts, so a parent comes before its children), an event goes
  // one lane below the events still open when it starts. Two events of a lane never overlap: an event leaves
  // the stack only once it has ended before the start of the event that pops it.
  std::sort(t.events.begin(), t.events.end(), [](const TimelineEvent& a, const TimelineEvent& b) {
    if (a.row != b.row) return a.row < b.row;
    if (a.startNs != b.startNs) return a.startNs < b.startNs;
    return a.durationNs > b.durationNs;
  });
  std::vector<int64_t> open;
  for (size_t i = 0; i < t.events.size(); ++i) {
    if (i == 0 || t.events[i].row != t.events[i - 1].row) open.clear();
    TimelineEvent& e = t.events[i];
    while (!open.empty() && open.back() <= e.startNs) open.pop_back();
    e.lane = static_cast<uint16_t>(std::min<size_t>(open.size(), std::numeric_limits<uint16_t>::max()));
    open.push_back(e.endNs());
  }
  std::stable_sort(t.events.begin(), t.events.end(), [](const TimelineEvent& a, const TimelineEvent& b) {
    return a.row != b.row ? a.row < b.row : a.lane < b.lane;
  });

  for (size_t i = 0; i < t.events.size();) {
    const TimelineEvent& first = t.events[i];
    TimelineRow& row = t.rows[static_cast<size_t>(first.row)];
    size_t j = i;
    while (j < t.events.size() && t.events[j].row == first.row && t.events[j].lane == first.lane) ++j;
    row.lanes.resize(std::max<size_t>(row.lanes.size(), first.lane + 1u));
    TimelineLane& lane = row.lanes[first.lane];
    lane.begin = static_cast<uint32_t>(i);
    lane.end = static_cast<uint32_t>(j);
    lane.starts.reserve(j - i);
    lane.ends.reserve(j - i);
    lane.busyPrefix.reserve(j - i + 1);
    lane.busyPrefix.push_back(0);
    for (size_t k = i; k < j; ++k) {
      lane.starts.push_back(t.events[k].startNs);
      lane.ends.push_back(std::max(t.events[k].endNs(), lane.ends.empty() ? 0 : lane.ends.back()));
      lane.busyPrefix.push_back(lane.busyPrefix.back() + t.events[k].durationNs);
    }
    row.numEvents += static_cast<uint32_t>(j - i);
    i = j;
  }
  for (size_t i = 0; i < t.events.size(); ++i) {
    const TimelineEvent& e = t.events[i];
    if (e.kernel >= 0) t.kernels[static_cast<size_t>(e.kernel)].events.push_back(static_cast<uint32_t>(i));
    t.endNs = std::max(t.endNs, e.endNs());
  }
  for (TimelineSpan& s : m_spans) {
    s.startNs = sinceStart(s.startNs, t0);
    t.endNs = std::max(t.endNs, s.startNs + s.durationNs);
    t.spans.push_back(std::move(s));
  }
  std::stable_sort(t.spans.begin(), t.spans.end(), [](const auto& a, const auto& b) { return a.startNs < b.startNs; });
  for (const TimelineSpan& s : t.spans) t.spanRanks.push_back(s.rank);
  std::sort(t.spanRanks.begin(), t.spanRanks.end());
  t.spanRanks.erase(std::unique(t.spanRanks.begin(), t.spanRanks.end()), t.spanRanks.end());
  m_spans = {};
  t.beginNs = 0;
  for (TimelineRow& r : t.rows)
    if (auto it = m_ranks.find(r.device); it != m_ranks.end()) r.rank = it->second;
  linkCollectives(t, std::move(m_collectives), t0);
  m_collectives = {};
  return t;
}

void TimelineBuilder::addCollectives(std::vector<store::CollectiveInstance> calls) {
  m_collectives.insert(m_collectives.end(), std::make_move_iterator(calls.begin()), std::make_move_iterator(calls.end()));
}

// Each member's launch: the event of its device that starts at its arrival (binary search in each lane).
void TimelineBuilder::linkCollectives(Timeline& t, std::vector<store::CollectiveInstance> calls, int64_t t0) {
  std::unordered_map<std::string, std::vector<int>> rowsOf;
  for (size_t r = 0; r < t.rows.size(); ++r) rowsOf[t.rows[r].device].push_back(static_cast<int>(r));
  auto find = [&](const std::string& device, int64_t startNs) -> int64_t {
    auto it = rowsOf.find(device);
    if (it == rowsOf.end()) return -1;
    for (int r : it->second)
      for (const TimelineLane& lane : t.rows[static_cast<size_t>(r)].lanes) {
        auto at = std::lower_bound(lane.starts.begin(), lane.starts.end(), startNs);
        if (at != lane.starts.end() && *at == startNs) return lane.begin + (at - lane.starts.begin());
      }
    return -1;
  };
  t.collectives.reserve(calls.size());
  for (auto& call : calls) {
    TimelineCollective c;
    for (const auto& m : call.members) c.events.push_back(find(m.device, sinceStart(m.arrivalNs, t0)));
    c.call = std::move(call);
    const auto index = static_cast<int32_t>(t.collectives.size());
    for (int64_t e : c.events)
      if (e >= 0) t.collectiveIndex[static_cast<uint32_t>(e)] = index;
    t.collectives.push_back(std::move(c));
  }
}

const TimelineCollective* Timeline::collectiveOf(uint32_t event, int* member) const {
  auto it = collectiveIndex.find(event);
  if (it == collectiveIndex.end()) return nullptr;
  const TimelineCollective& c = collectives[static_cast<size_t>(it->second)];
  if (member) *member = static_cast<int>(std::find(c.events.begin(), c.events.end(), int64_t{event}) - c.events.begin());
  return &c;
}

int Timeline::numRanks() const {
  int most = -1;
  for (const TimelineRow& r : rows) most = std::max(most, r.rank);
  return most + 1;
}

std::string collectiveSummary(const Timeline& t, uint32_t event) {
  int member = 0;
  const TimelineCollective* c = t.collectiveOf(event, &member);
  if (!c) return "";
  const store::CollectiveInstance& call = c->call;
  auto named = [&](const std::string& device) {
    for (const TimelineRow& r : t.rows)
      if (r.device == device && r.rank >= 0 && t.numRanks() > 1) return fmt::format("{} (rank {})", device, r.rank);
    return device;
  };
  const auto& last = call.members[static_cast<size_t>(call.straggler)];
  const std::string what = fmt::format("collective call {} over devices {}", call.seq, call.group);
  if (member == call.straggler) {
    // The member that waited longest came first.
    const auto first = std::max_element(call.members.begin(), call.members.end(),
                                        [](const auto& a, const auto& b) { return a.waitNs < b.waitNs; });
    return fmt::format("straggler of {}: arrived {} after {}", what, formatTime(static_cast<double>(call.maxWaitNs)),
                       named(first->device));
  }
  return fmt::format("{}: waited {} for the straggler {}", what,
                     formatTime(static_cast<double>(call.members[static_cast<size_t>(member)].waitNs)), named(last.device));
}

int worstCollective(const Timeline& t) {
  int best = -1;
  for (size_t i = 0; i < t.collectives.size(); ++i)
    if (best < 0 || t.collectives[i].call.maxWaitNs > t.collectives[static_cast<size_t>(best)].call.maxWaitNs)
      best = static_cast<int>(i);
  return best;
}

std::string Timeline::rowGroup(int row) const {
  const TimelineRow& r = rows[static_cast<size_t>(row)];
  return r.rank >= 0 && numRanks() > 1 ? fmt::format("rank {} · {}", r.rank, r.device) : r.device;
}

// --- Sources --------------------------------------------------------------------------------------------------

Timeline timelineFromTrace(const runtime::Trace& trace, std::string source) {
  TimelineBuilder b;
  for (const runtime::FusionInfo& k : trace.kernels)
    b.addKernel({k.id, k.executable, k.name, k.kind, k.nodes, k.ops, k.modulePath, {}});
  for (const runtime::ProfileEvent& e : trace.events)
    b.addEvent(b.row(e.device, e.stream), e.name, e.startNs, e.durationNs, e.flops, e.bytes, e.fusion);
  for (const runtime::ProfileMark& m : trace.marks) b.addSpan({m.name, m.startNs, m.durationNs, m.rank});
  for (const runtime::DeviceClock& d : trace.devices) b.setDeviceRank(d.device, d.rank);
  b.addCollectives(store::collectiveInstances(train::collectiveLaunches(trace)));
  return b.finish(std::move(source));
}

Result<Timeline> loadProfileTimeline(const std::string& dbPath, int64_t profileId) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dbPath, ec))
    return makeError("{}: no run store yet (run `tessera profile` or Profile ▶)", dbPath);
  TSR_ASSIGN(store::RunStore db, store::RunStore::openReadOnly(dbPath));
  TSR_ASSIGN(std::vector<store::RunInfo> runs, db.runs());
  std::optional<store::ProfileInfo> chosen;
  for (const store::RunInfo& r : runs) {
    TSR_ASSIGN(std::vector<store::ProfileInfo> ps, db.profiles(r.id));
    for (const store::ProfileInfo& p : ps)
      if (profileId > 0 ? p.id == profileId : (!chosen || p.id > chosen->id)) chosen = p;
  }
  if (!chosen) {
    if (profileId > 0) return makeError("{}: no profile {}", dbPath, profileId);
    return makeError("{}: no profile yet (run `tessera profile` or Profile ▶)", dbPath);
  }
  TSR_ASSIGN(runtime::Trace trace, train::loadTrace(db, chosen->id));
  TSR_ASSIGN(store::RunInfo run, db.run(chosen->run));
  Timeline t = timelineFromTrace(trace, fmt::format("profile {} ({}) of {}", chosen->id, chosen->name, dbPath));
  t.profileId = chosen->id;
  t.runId = chosen->run;
  t.storePath = dbPath;
  t.projectText = run.config;
  return t;
}

Timeline syntheticTimeline(int64_t numEvents, int devices, int streams, uint64_t seed) {
  SplitMix rng{seed};
  TimelineBuilder b;
  // A small kernel table, as a fused training step has: many short loops, some reductions, a few GEMMs.
  struct Kind {
    const char* kind;
    const char* ops;
    double meanNs;
  };
  const Kind kinds[] = {{"loop", "add,mul,tanh", 2'000},   {"loop", "convert,mul", 800},
                        {"reduction", "reduce_sum,mul", 6'000}, {"gemm", "dot_general,add", 40'000},
                        {"copy", "transpose", 3'000},       {"opaque", "gather", 9'000}};
  constexpr int kKernels = 48;
  std::vector<double> mean(kKernels);
  for (int k = 0; k < kKernels; ++k) {
    const Kind& kd = kinds[static_cast<size_t>(k) % std::size(kinds)];
    TimelineKernel info;
    info.fusion = k;
    info.executable = "train_step";
    info.name = fmt::format("fusion.{} {}[{}]", k, kd.kind, kd.ops);
    info.kind = kd.kind;
    for (size_t p = 0, q; p <= std::string(kd.ops).size(); p = q + 1) {
      q = std::string(kd.ops).find(',', p);
      if (q == std::string::npos) q = std::string(kd.ops).size();
      info.nodes.push_back(k * 4 + static_cast<int>(info.ops.size()));
      info.ops.push_back(std::string(kd.ops).substr(p, q - p));
    }
    mean[static_cast<size_t>(k)] = kd.meanNs;
    b.addKernel(std::move(info));
  }
  const int numRows = std::max(1, devices) * std::max(1, streams);
  std::vector<int> rows;
  for (int d = 0; d < std::max(1, devices); ++d)
    for (int s = 0; s < std::max(1, streams); ++s) rows.push_back(b.row(fmt::format("cpu:{}", d), s));
  std::vector<int64_t> clock(static_cast<size_t>(numRows), 0);
  for (int64_t i = 0; i < numEvents; ++i) {
    size_t r = static_cast<size_t>(i % numRows);
    int k = static_cast<int>(rng.next() % kKernels);
    // Durations spread over two orders of magnitude around the kernel's mean; gaps mostly short.
    double dur = mean[static_cast<size_t>(k)] * std::exp((rng.uniform() - 0.5) * 3.0);
    double gap = rng.uniform() < 0.02 ? 50'000 * rng.uniform() : 300 * rng.uniform();
    clock[r] += static_cast<int64_t>(gap);
    int64_t d = std::max<int64_t>(1, static_cast<int64_t>(dur));
    double flops = kinds[static_cast<size_t>(k) % std::size(kinds)].kind == std::string("gemm") ? 60.0 * dur : dur;
    b.addEvent(rows[r], "", clock[r], d, flops, 4.0 * dur, k);
    clock[r] += d;
  }
  // The names: the kernel's (events were added unnamed to keep the name table small).
  Timeline t = b.finish(fmt::format("synthetic: {} events", numEvents));
  t.names.clear();
  for (const TimelineKernel& k : t.kernels) t.names.push_back(k.name);
  for (TimelineEvent& e : t.events) e.name = e.kernel;
  // Ten steps over the whole run.
  int64_t end = t.endNs;
  for (int s = 0; s < 10; ++s)
    t.spans.push_back({fmt::format("step {}", s + 1), end * s / 10, end / 10});
  t.spanRanks = {0};
  return t;
}

bool kernelOfGraph(const TimelineKernel& kernel, const std::string& executable) {
  return kernel.executable.empty() || kernel.executable == executable;
}

Status checkGraph(const Timeline& timeline, const ir::Graph& graph, const std::string& executable) {
  if (timeline.kernels.empty())
    return makeError("{} has no kernel table (a trace of another tool): its kernels name no graph nodes",
                     timeline.source);
  const size_t numNodes = graph.nodes().size();
  bool any = false;
  for (const TimelineKernel& k : timeline.kernels) {
    if (!kernelOfGraph(k, executable)) continue;
    any = true;
    for (size_t i = 0; i < k.nodes.size(); ++i) {
      int n = k.nodes[i];
      if (n < 0 || static_cast<size_t>(n) >= numNodes)
        return makeError("kernel {} runs node {}, and this graph has {} nodes", k.name, n, numNodes);
      std::string here = opName(graph, n);
      std::string there = i < k.ops.size() ? k.ops[i] : "";
      if (here != there) return makeError("kernel {} runs node {} ({}), which is {} here", k.name, n, there, here);
    }
  }
  if (!any) return makeError("{} has no kernels of '{}'", timeline.source, executable);
  return {};
}

std::string profileStaleness(const Timeline& timeline, const std::string& projectText,
                             const std::vector<CompiledKernel>& kernels, const std::string& executable) {
  const std::string what = timeline.profileId > 0 ? fmt::format("profile {}", timeline.profileId) : timeline.source;
  // A profile without a kernel of the step (a Python script's, tessera.profiler) shows its own programs: neither
  // project.toml nor the step's kernels can make it stale.
  if (std::none_of(timeline.kernels.begin(), timeline.kernels.end(),
                   [&](const TimelineKernel& k) { return kernelOfGraph(k, executable); }))
    return "";
  if (!timeline.projectText.empty() && timeline.projectText != projectText)
    return fmt::format("project.toml was edited since {} was recorded", what);
  // The same compiled step runs the same nodes in the same kernels, each launch doing the same work.
  std::map<std::vector<int>, const CompiledKernel*> now;
  for (const CompiledKernel& k : kernels) now[std::vector<int>(k.nodes.begin(), k.nodes.end())] = &k;
  size_t profiled = 0;
  for (const TimelineKernel& k : timeline.kernels) {
    if (!kernelOfGraph(k, executable)) continue;
    ++profiled;
    auto it = now.find(k.nodes);
    if (it == now.end())
      return fmt::format("the training step compiles to other kernels than when {} was recorded (none runs the nodes "
                         "of its {})", what, k.name);
    if (k.events.empty()) continue;
    const TimelineEvent& e = timeline.events[k.events.front()];
    auto differs = [](double a, double b) { return std::abs(a - b) > 1e-9 * std::max(std::abs(a), std::abs(b)); };
    if (differs(e.flops, it->second->flops) || differs(e.bytes, it->second->bytes))
      return fmt::format("the training step's shapes changed since {} was recorded ({} does other work now)", what, k.name);
  }
  if (profiled > 0 && profiled != now.size())
    return fmt::format("the training step compiles to {} kernels now, {} when {} was recorded", now.size(), profiled, what);
  return "";
}

// --- Folding and hit tests -------------------------------------------------------------------------------

void laneBoxes(const Timeline& t, int row, int lane, const TimeWindow& w, double minPx, std::vector<TimelineBox>& out) {
  const TimelineLane& L = t.rows[static_cast<size_t>(row)].lanes[static_cast<size_t>(lane)];
  const double t0 = w.startNs, t1 = w.endNs();
  const double minNs = std::max(minPx, 0.0) * w.nsPerPx;
  const int64_t* starts = L.starts.data();
  const int64_t* ends = L.ends.data();
  const size_t n = L.size();
  size_t i = static_cast<size_t>(std::upper_bound(ends, ends + n, t0, [](double v, int64_t e) { return v < static_cast<double>(e); }) - ends);
  const size_t stop = static_cast<size_t>(
      std::lower_bound(starts, starts + n, t1, [](int64_t s, double v) { return static_cast<double>(s) < v; }) - starts);
  auto emit = [&](size_t a, size_t b) {
    out.push_back({row, lane, L.begin + static_cast<uint32_t>(a), L.begin + static_cast<uint32_t>(b), starts[a],
                   ends[b - 1], L.busyPrefix[b] - L.busyPrefix[a]});
  };
  while (i < stop) {
    if (static_cast<double>(ends[i] - starts[i]) >= minNs) {
      emit(i, i + 1);
      ++i;
      continue;
    }
    // A run of narrow events: take every event that starts within minNs of the run's end (and before the
    // fold's widest extent). Of those, only the last can be wide (the events do not overlap); a wide one ends
    // the run.
    size_t j = i;
    const double limit = static_cast<double>(starts[i]) + kMaxFoldPx * w.nsPerPx;
    while (true) {
      double reach = std::min(static_cast<double>(ends[j]) + minNs, limit);
      size_t k = static_cast<size_t>(std::lower_bound(starts + j + 1, starts + stop, reach,
                                                      [](int64_t s, double v) { return static_cast<double>(s) < v; }) -
                                     starts);
      if (k == j + 1) break;
      size_t last = k - 1;
      if (static_cast<double>(ends[last] - starts[last]) >= minNs) {
        j = last - 1;
        break;
      }
      j = last;
    }
    emit(i, j + 1);
    i = j + 1;
  }
}

std::vector<TimelineBox> visibleBoxes(const Timeline& t, const TimeWindow& w, double minPx) {
  std::vector<TimelineBox> out;
  for (size_t r = 0; r < t.rows.size(); ++r)
    for (size_t l = 0; l < t.rows[r].lanes.size(); ++l) laneBoxes(t, static_cast<int>(r), static_cast<int>(l), w, minPx, out);
  return out;
}

int TimelineLayout::spanTrackAt(double y) const {
  if (y < top || y >= top + spanHeight || spanTrackHeight <= 0) return -1;
  return static_cast<int>((y - top) / spanTrackHeight);
}

TimelineLayout layoutRows(const Timeline& t, double top, double laneHeight, double rowGap, double spanHeight) {
  TimelineLayout l;
  l.top = top;
  l.laneHeight = laneHeight;
  l.rowGap = rowGap;
  l.spanTrackHeight = spanHeight;
  l.spanHeight = spanHeight * static_cast<double>(t.spanRanks.size());
  double y = top + l.spanHeight + (l.spanHeight > 0 ? rowGap : 0);
  for (const TimelineRow& r : t.rows) {
    l.rowY.push_back(y);
    y += static_cast<double>(std::max<size_t>(1, r.lanes.size())) * laneHeight + rowGap;
  }
  l.contentHeight = y - top;
  return l;
}

std::optional<TimelineHit> hitTest(const Timeline& t, const TimelineLayout& layout, const TimeWindow& w, double minPx,
                                   double x, double y) {
  for (size_t r = 0; r < t.rows.size(); ++r) {
    for (size_t l = 0; l < t.rows[r].lanes.size(); ++l) {
      double ly = layout.laneY(static_cast<int>(r), static_cast<int>(l));
      if (y < ly || y >= ly + layout.laneHeight) continue;
      std::vector<TimelineBox> boxes;
      laneBoxes(t, static_cast<int>(r), static_cast<int>(l), w, minPx, boxes);
      // Exactly under the pixel, else the nearest box within a pixel (a narrow box is drawn one pixel wide).
      const TimelineBox* best = nullptr;
      double bestDist = 1.0;
      for (const TimelineBox& b : boxes) {
        double x0 = w.x(static_cast<double>(b.startNs));
        double x1 = std::max(w.x(static_cast<double>(b.endNs)), x0 + 1);
        double d = x < x0 ? x0 - x : x >= x1 ? x - x1 : 0;
        if (d < bestDist || (d == 0 && !best)) {
          best = &b;
          bestDist = d;
          if (d == 0) break;
        }
      }
      if (!best) return std::nullopt;
      TimelineHit hit{*best, best->count() == 1 ? static_cast<int64_t>(best->first) : -1};
      return hit;
    }
  }
  return std::nullopt;
}

// --- Statistics ------------------------------------------------------------------------------------------

RangeStats rangeStats(const Timeline& t, int64_t fromNs, int64_t toNs) {
  RangeStats s;
  s.fromNs = fromNs;
  s.toNs = toNs;
  if (toNs <= fromNs) return s;
  std::vector<KernelStat> byName(t.names.size());
  std::vector<char> seen(t.names.size(), 0);
  for (const TimelineRow& row : t.rows)
    for (const TimelineLane& lane : row.lanes) {
      auto i = std::upper_bound(lane.ends.begin(), lane.ends.end(), fromNs) - lane.ends.begin();
      auto stop = std::lower_bound(lane.starts.begin(), lane.starts.end(), toNs) - lane.starts.begin();
      for (auto k = i; k < stop; ++k) {
        const TimelineEvent& e = t.events[lane.begin + static_cast<size_t>(k)];
        if (e.endNs() <= fromNs) continue;  // ends[] is a running maximum
        KernelStat& st = byName[static_cast<size_t>(e.name)];
        if (!seen[static_cast<size_t>(e.name)]) {
          seen[static_cast<size_t>(e.name)] = 1;
          st.name = t.names[static_cast<size_t>(e.name)];
          st.kind = t.kinds[e.kind];
        }
        int64_t inside = std::min(e.endNs(), toNs) - std::max(e.startNs, fromNs);
        ++st.count;
        st.totalNs += inside;
        st.flops += e.flops;
        st.bytes += e.bytes;
        ++s.count;
        s.totalNs += inside;
      }
    }
  for (size_t n = 0; n < byName.size(); ++n) {
    if (!seen[n]) continue;
    KernelStat& st = byName[n];
    st.share = s.totalNs > 0 ? static_cast<double>(st.totalNs) / static_cast<double>(s.totalNs) : 0;
    s.kernels.push_back(std::move(st));
  }
  std::sort(s.kernels.begin(), s.kernels.end(), [](const KernelStat& a, const KernelStat& b) {
    return a.totalNs != b.totalNs ? a.totalNs > b.totalNs : a.name < b.name;
  });
  return s;
}

std::string formatTime(double ns, double step) {
  auto unitOf = [](double a, double& div) {
    if (a >= 1e9) return div = 1e9, "s";
    if (a >= 1e6) return div = 1e6, "ms";
    if (a >= 1e3) return div = 1e3, "\xc2\xb5s";
    return div = 1, "ns";
  };
  double div = 1;
  if (step <= 0) {
    const char* unit = unitOf(std::abs(ns), div);
    double v = std::abs(ns / div);
    int digits = div == 1 || v == 0 ? 0 : std::clamp(2 - static_cast<int>(std::floor(std::log10(v))), 0, 3);
    return fmt::format("{:.{}f} {}", ns / div, digits, unit);
  }
  const char* unit = unitOf(step * 10, div);
  double s = step / div;
  int digits = s >= 1 ? 0 : std::min(6, static_cast<int>(std::ceil(-std::log10(s) - 1e-9)));
  return fmt::format("{:.{}f} {}", ns / div, digits, unit);
}

double gflopsPerSecond(const TimelineEvent& e) {
  return e.durationNs > 0 ? e.flops / static_cast<double>(e.durationNs) : 0.0;
}
double gbPerSecond(const TimelineEvent& e) { return e.durationNs > 0 ? e.bytes / static_cast<double>(e.durationNs) : 0.0; }

}  // namespace tsr::inspect
