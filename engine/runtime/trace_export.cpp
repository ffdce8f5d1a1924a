#include "engine/runtime/trace_export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/version.h"

namespace tsr::runtime {

namespace {

using nlohmann::json;

constexpr int kHostPid = 1;
constexpr int kStepsTid = 1;
constexpr const char* kMarkCategory = "mark";
// Rank r > 0's host process: above any device's pid (devices count up from kHostPid + 1).
constexpr int kRankHostPids = 1 << 24;

int hostPid(int rank) { return rank == 0 ? kHostPid : kRankHostPids + rank; }
std::string hostName(int rank) { return fmt::format("host (rank {})", rank); }

double micros(int64_t ns) { return static_cast<double>(ns) / 1000.0; }
int64_t nanos(double us) { return std::llround(us * 1000.0); }

json metadata(const char* what, int pid, int64_t tid, const std::string& name) {
  json m = {{"ph", "M"}, {"name", what}, {"pid", pid}, {"args", {{"name", name}}}};
  if (tid >= 0) m["tid"] = tid;
  return m;
}

// Names come from the run store and from plugins, and need not be UTF-8: JSON must be, so a byte that is not
// becomes U+FFFD (dump() would throw).
std::string dumpElement(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json kernelArgs(const ProfileEvent& e, const FusionInfo* k) {
  json args = {{"fusion", e.fusion}, {"flops", e.flops}, {"bytes", e.bytes}};
  // flops per ns is GFLOP/s; bytes per ns is GB/s.
  double dur = static_cast<double>(e.durationNs);
  args["GFLOP/s"] = dur > 0 ? e.flops / dur : 0.0;
  args["GB/s"] = dur > 0 ? e.bytes / dur : 0.0;
  if (e.collective >= 0) {
    args["collective"] = e.collective;
    std::string group;
    for (size_t i = 0; i < e.group.size(); ++i) group += (i ? "," : "") + std::to_string(e.group[i]);
    args["group"] = group;
  }
  if (k) {
    args["executable"] = k->executable;
    args["kind"] = k->kind;
    args["nodes"] = k->nodes;
    args["ops"] = k->ops;
    args["module"] = k->modulePath;
  }
  return args;
}

}  // namespace

int hostRank(const std::string& processName) {
  int rank = 0;
  return std::sscanf(processName.c_str(), "host (rank %d)", &rank) == 1 && rank >= 0 ? rank : 0;
}

const FusionInfo* Trace::kernel(int64_t fusion) const {
  for (const auto& k : kernels)
    if (k.id == fusion) return &k;
  return nullptr;
}

ChromeTraceWriter::ChromeTraceWriter(std::ostream& out, int64_t t0, std::vector<FusionInfo> kernels)
    : m_out(out), m_t0(t0), m_table(std::move(kernels)) {
  for (const auto& k : m_table) m_kernels.emplace(k.id, &k);
  // Keys in the order dump() sorts them, so the document reads as toChromeTrace's always did.
  json other = {{"generator", fmt::format("tessera {}", kVersion)}};
  m_out << R"({"displayTimeUnit":"ns","otherData":)" << other.dump() << R"(,"traceEvents":[)";
}

void ChromeTraceWriter::put(const std::string& element) {
  if (!m_first) m_out << ',';
  m_first = false;
  m_out << element;
}

void ChromeTraceWriter::marksAndMemory(const std::vector<ProfileMark>& marks, const std::vector<MemorySample>& memory) {
  auto emit = [&](const json& j) { put(dumpElement(j)); };
  // Each rank's host is a process of its own ("host (rank 1)"), with its steps track and its memory counter;
  // a profile of one process has one "host".
  std::set<int> ranks;
  for (const auto& m : marks) ranks.insert(m.rank);
  for (const auto& m : memory) ranks.insert(m.rank);
  const bool several = ranks.size() > 1 || (ranks.size() == 1 && *ranks.begin() != 0);
  std::set<int> stepsNamed;
  for (int r : ranks) emit(metadata("process_name", hostPid(r), -1, several ? hostName(r) : "host"));
  for (const auto& m : marks) {
    if (stepsNamed.insert(m.rank).second) emit(metadata("thread_name", hostPid(m.rank), kStepsTid, "steps"));
    emit({{"ph", "X"}, {"name", m.name}, {"cat", kMarkCategory}, {"pid", hostPid(m.rank)}, {"tid", kStepsTid},
          {"ts", micros(m.startNs - m_t0)}, {"dur", micros(m.durationNs)}});
  }
  // Live buffer bytes: a counter track of each host process (Perfetto draws it as an area).
  for (const auto& m : memory)
    emit({{"ph", "C"}, {"name", "memory"}, {"pid", hostPid(m.rank)}, {"ts", micros(std::max(m.tNs - m_t0, int64_t(0)))},
          {"args", {{"bytes", m.bytes}}}});
}

void ChromeTraceWriter::event(const ProfileEvent& e) {
  auto emit = [&](const json& j) { put(dumpElement(j)); };
  // Devices become processes in order of first use, their threads or streams become threads.
  auto [it, added] = m_pids.emplace(e.device, kHostPid + 1 + static_cast<int>(m_pids.size()));
  if (added) emit(metadata("process_name", it->second, -1, e.device));
  if (m_threads.emplace(it->second, e.stream).second) {
    bool gpu = e.device.rfind("cpu", 0) != 0;
    emit(metadata("thread_name", it->second, e.stream + 1, fmt::format("{} {}", gpu ? "stream" : "thread", e.stream)));
  }
  auto k = m_kernels.find(e.fusion);
  const FusionInfo* info = k == m_kernels.end() ? nullptr : k->second;
  emit({{"ph", "X"},
        {"name", e.name},
        {"cat", info && !info->kind.empty() ? info->kind : "kernel"},
        {"pid", it->second},
        {"tid", e.stream + 1},
        {"ts", micros(e.startNs - m_t0)},
        {"dur", micros(e.durationNs)},
        {"args", kernelArgs(e, info)}});
  ++m_events;
  if (e.collective >= 0 && e.group.size() > 1) {
    Call& call = m_calls[{e.collective, e.group}];
    if (call.members.empty()) call.name = e.name;
    call.members.push_back(Member{e.device, it->second, e.stream + 1, e.startNs});
  }
}

void ChromeTraceWriter::finish() {
  // Flow events ("s" at the waiting member's launch, "f" bound to the enclosing slice of the straggler's): the
  // legacy format, which Perfetto and chrome://tracing both draw as arrows.
  auto emit = [&](const json& j) { put(dumpElement(j)); };
  for (const auto& [key, call] : m_calls) {
    const std::vector<Member>& members = call.members;
    if (members.size() < 2) continue;
    size_t straggler = 0;
    for (size_t i = 1; i < members.size(); ++i)
      if (members[i].startNs > members[straggler].startNs) straggler = i;
    const Member& last = members[straggler];
    for (size_t i = 0; i < members.size(); ++i) {
      if (i == straggler) continue;
      const Member& m = members[i];
      const int64_t waitNs = last.startNs - m.startNs;
      const std::string name = fmt::format("{} #{}: {} waited {:.3f} ms for {}", call.name, key.first,
                                           m.device, static_cast<double>(waitNs) / 1e6, last.device);
      const int64_t id = static_cast<int64_t>(++m_links);
      emit({{"ph", "s"}, {"id", id}, {"name", name}, {"cat", "collective"}, {"pid", m.pid}, {"tid", m.tid},
            {"ts", micros(m.startNs - m_t0)}, {"args", {{"wait_ns", waitNs}, {"straggler", last.device}}}});
      emit({{"ph", "f"}, {"bp", "e"}, {"id", id}, {"name", name}, {"cat", "collective"}, {"pid", last.pid},
            {"tid", last.tid}, {"ts", micros(last.startNs - m_t0)}});
    }
  }
  m_out << "]}";
}

namespace {

int64_t startOf(const Trace& trace) {
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const auto& e : trace.events) t0 = std::min(t0, e.startNs);
  for (const auto& m : trace.marks) t0 = std::min(t0, m.startNs);
  return trace.events.empty() && trace.marks.empty() ? 0 : t0;
}

}  // namespace

std::string toChromeTrace(const Trace& trace) {
  std::ostringstream out;
  ChromeTraceWriter w(out, startOf(trace), trace.kernels);
  w.marksAndMemory(trace.marks, trace.memory);
  for (const auto& e : trace.events) w.event(e);
  w.finish();
  return out.str();
}

Status writeChromeTrace(const std::string& path, const Trace& trace) {
  return writeChromeTraceWith(path, startOf(trace), trace.kernels, [&](ChromeTraceWriter& w) -> Status {
    w.marksAndMemory(trace.marks, trace.memory);
    for (const auto& e : trace.events) w.event(e);
    return {};
  });
}

Status writeChromeTraceWith(const std::string& path, int64_t t0, std::vector<FusionInfo> kernels,
                            const std::function<Status(ChromeTraceWriter&)>& body) {
  // Written beside the target and renamed over it: a viewer never opens half a file.
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return makeError("cannot write {}", tmp);
    ChromeTraceWriter w(out, t0, std::move(kernels));
    Status st = body(w);
    w.finish();
    if (!st.ok() || !out.flush()) {
      out.close();
      std::remove(tmp.c_str());
      return st.ok() ? makeError("cannot write {}", tmp) : st;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return makeError("cannot rename {} to {}", tmp, path);
  }
  return {};
}

namespace {

template <class T>
T field(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->get<T>();
}

void readKernelEvent(const json& ev, const std::map<int64_t, std::string>& processes, Trace& out,
                     std::set<int64_t>& seen) {
  ProfileEvent e;
  int64_t pid = field<int64_t>(ev, "pid", 0);
  auto proc = processes.find(pid);
  e.device = proc != processes.end() ? proc->second : fmt::format("pid {}", pid);
  e.stream = field<int64_t>(ev, "tid", 1) - 1;
  e.name = field<std::string>(ev, "name", "");
  e.startNs = nanos(field<double>(ev, "ts", 0.0));
  e.durationNs = nanos(field<double>(ev, "dur", 0.0));
  json args = ev.value("args", json::object());
  e.fusion = field<int64_t>(args, "fusion", -1);
  e.flops = field<double>(args, "flops", 0.0);
  e.bytes = field<double>(args, "bytes", 0.0);
  if (e.fusion >= 0 && args.contains("kind") && seen.insert(e.fusion).second) {
    FusionInfo k;
    k.id = e.fusion;
    k.executable = field<std::string>(args, "executable", "");
    k.name = e.name;
    k.kind = field<std::string>(args, "kind", "");
    k.nodes = field<std::vector<int>>(args, "nodes", {});
    k.ops = field<std::vector<std::string>>(args, "ops", {});
    k.modulePath = field<std::string>(args, "module", "");
    out.kernels.push_back(std::move(k));
  }
  out.events.push_back(std::move(e));
}

}  // namespace

Result<Trace> parseChromeTrace(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return makeError("not JSON");
  const json* events = &doc;
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    if (it == doc.end() || !it->is_array()) return makeError("no \"traceEvents\" array");
    events = &*it;
  } else if (!doc.is_array()) {
    return makeError("a trace is a JSON object with \"traceEvents\" or an array of events");
  }
  Trace out;
  try {
    std::map<int64_t, std::string> processes;
    for (const json& ev : *events)
      if (ev.is_object() && ev.value("ph", "") == "M" && ev.value("name", "") == "process_name")
        processes[field<int64_t>(ev, "pid", 0)] = ev.value("args", json::object()).value("name", "");
    std::set<int64_t> seen;
    for (const json& ev : *events) {
      auto rank = [&]() {
        auto proc = processes.find(field<int64_t>(ev, "pid", 0));
        return proc == processes.end() ? 0 : hostRank(proc->second);
      };
      if (ev.is_object() && ev.value("ph", "") == "C" && ev.value("name", "") == "memory") {
        out.memory.push_back(MemorySample{nanos(field<double>(ev, "ts", 0.0)),
                                          ev.value("args", json::object()).value("bytes", int64_t(0)), rank()});
        continue;
      }
      if (!ev.is_object() || ev.value("ph", "") != "X") continue;
      if (ev.value("cat", "") == kMarkCategory) {
        out.marks.push_back(ProfileMark{field<std::string>(ev, "name", ""), nanos(field<double>(ev, "ts", 0.0)),
                                        nanos(field<double>(ev, "dur", 0.0)), rank()});
        continue;
      }
      readKernelEvent(ev, processes, out, seen);
    }
  } catch (const json::exception& e) {
    return makeError("malformed trace event: {}", e.what());
  }
  auto byStart = [](const auto& a, const auto& b) { return a.startNs < b.startNs; };
  std::stable_sort(out.events.begin(), out.events.end(), byStart);
  std::stable_sort(out.marks.begin(), out.marks.end(), byStart);
  std::stable_sort(out.memory.begin(), out.memory.end(), [](const auto& a, const auto& b) { return a.tNs < b.tNs; });
  return out;
}

Result<Trace> readChromeTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError("cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto trace = parseChromeTrace(ss.str());
  if (!trace.ok()) return makeError("{}: {}", path, trace.error().message);
  return trace;
}

}  // namespace tsr::runtime
