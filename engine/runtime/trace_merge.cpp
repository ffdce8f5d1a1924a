#include "engine/runtime/trace_merge.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

namespace tsr::runtime {

namespace {

// Little-endian host bytes: the ranks of one job run the same build on the same kind of machine.
class Writer {
 public:
  template <class T>
  void pod(T v) {
    m_out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    m_out += s;
  }
  std::string take() { return std::move(m_out); }

 private:
  std::string m_out;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : m_in(in) {}
  template <class T>
  bool pod(T& v) {
    if (m_in.size() - m_at < sizeof(T)) return false;
    std::memcpy(&v, m_in.data() + m_at, sizeof(T));
    m_at += sizeof(T);
    return true;
  }
  bool str(std::string& s) {
    uint64_t n = 0;
    if (!pod(n) || m_in.size() - m_at < n) return false;
    s.assign(m_in.data() + m_at, n);
    m_at += n;
    return true;
  }
  // A count of items each at least `minBytes` long: no more than the bytes left can hold.
  bool count(uint64_t& n, size_t minBytes) { return pod(n) && n <= (m_in.size() - m_at) / minBytes; }

 private:
  std::string_view m_in;
  size_t m_at = 0;
};

constexpr uint32_t kMagic = 0x54525331;  // "TRS1"

bool sameKernel(const FusionInfo& a, const FusionInfo& b) {
  return a.executable == b.executable && a.name == b.name && a.kind == b.kind && a.nodes == b.nodes && a.ops == b.ops &&
         a.modulePath == b.modulePath;
}

}  // namespace

std::string encodeTrace(const Trace& t) {
  Writer w;
  w.pod(kMagic);
  w.pod<uint64_t>(t.events.size());
  for (const auto& e : t.events) {
    w.str(e.device);
    w.pod(e.stream);
    w.str(e.name);
    w.pod(e.fusion);
    w.pod(e.startNs);
    w.pod(e.durationNs);
    w.pod(e.flops);
    w.pod(e.bytes);
    w.pod(e.collective);
    w.pod<uint64_t>(e.group.size());
    for (int g : e.group) w.pod<int32_t>(g);
  }
  w.pod<uint64_t>(t.marks.size());
  for (const auto& m : t.marks) {
    w.str(m.name);
    w.pod(m.startNs);
    w.pod(m.durationNs);
    w.pod<int32_t>(m.rank);
  }
  w.pod<uint64_t>(t.kernels.size());
  for (const auto& k : t.kernels) {
    w.pod(k.id);
    w.str(k.executable);
    w.str(k.name);
    w.str(k.kind);
    w.pod<uint64_t>(k.nodes.size());
    for (int n : k.nodes) w.pod<int32_t>(n);
    w.pod<uint64_t>(k.ops.size());
    for (const auto& o : k.ops) w.str(o);
    w.str(k.modulePath);
  }
  w.pod<uint64_t>(t.memory.size());
  for (const auto& m : t.memory) {
    w.pod(m.tNs);
    w.pod(m.bytes);
    w.pod<int32_t>(m.rank);
  }
  w.pod<uint64_t>(t.devices.size());
  for (const auto& d : t.devices) {
    w.str(d.device);
    w.pod<int32_t>(d.rank);
    w.pod(d.offsetNs);
    w.pod(d.errorNs);
  }
  return w.take();
}

Result<Trace> decodeTrace(std::string_view bytes) {
  Reader r(bytes);
  Trace t;
  auto bad = [&](const char* what) { return makeError("a rank's profile ({} bytes) is cut short in its {}", bytes.size(), what); };
  uint32_t magic = 0;
  if (!r.pod(magic) || magic != kMagic) return makeError("a rank's profile ({} bytes) is not a Tessera trace", bytes.size());
  uint64_t n = 0;
  if (!r.count(n, 8)) return bad("events");
  t.events.resize(n);
  for (auto& e : t.events) {
    uint64_t g = 0;
    if (!(r.str(e.device) && r.pod(e.stream) && r.str(e.name) && r.pod(e.fusion) && r.pod(e.startNs) &&
          r.pod(e.durationNs) && r.pod(e.flops) && r.pod(e.bytes) && r.pod(e.collective) && r.count(g, 4)))
      return bad("events");
    e.group.resize(g);
    for (int& x : e.group) {
      int32_t v = 0;
      if (!r.pod(v)) return bad("events");
      x = v;
    }
  }
  if (!r.count(n, 8)) return bad("marks");
  t.marks.resize(n);
  for (auto& m : t.marks) {
    int32_t rank = 0;
    if (!(r.str(m.name) && r.pod(m.startNs) && r.pod(m.durationNs) && r.pod(rank))) return bad("marks");
    m.rank = rank;
  }
  if (!r.count(n, 8)) return bad("kernel table");
  t.kernels.resize(n);
  for (auto& k : t.kernels) {
    uint64_t c = 0;
    if (!(r.pod(k.id) && r.str(k.executable) && r.str(k.name) && r.str(k.kind) && r.count(c, 4))) return bad("kernel table");
    k.nodes.resize(c);
    for (int& x : k.nodes) {
      int32_t v = 0;
      if (!r.pod(v)) return bad("kernel table");
      x = v;
    }
    if (!r.count(c, 8)) return bad("kernel table");
    k.ops.resize(c);
    for (auto& o : k.ops)
      if (!r.str(o)) return bad("kernel table");
    if (!r.str(k.modulePath)) return bad("kernel table");
  }
  if (!r.count(n, 20)) return bad("memory samples");
  t.memory.resize(n);
  for (auto& m : t.memory) {
    int32_t rank = 0;
    if (!(r.pod(m.tNs) && r.pod(m.bytes) && r.pod(rank))) return bad("memory samples");
    m.rank = rank;
  }
  if (!r.count(n, 8)) return bad("devices");
  t.devices.resize(n);
  for (auto& d : t.devices) {
    int32_t rank = 0;
    if (!(r.str(d.device) && r.pod(rank) && r.pod(d.offsetNs) && r.pod(d.errorNs))) return bad("devices");
    d.rank = rank;
  }
  return t;
}

void setDeviceClocks(Trace& trace, int rank, int64_t offsetNs, int64_t errorNs) {
  std::set<std::string> names;
  for (const auto& e : trace.events) names.insert(e.device);
  for (const auto& d : trace.devices) names.erase(d.device);
  for (const auto& name : names) trace.devices.push_back({name, rank, offsetNs, errorNs});
}

void mergeRankTrace(Trace& into, Trace part, int rank, int64_t offsetNs, int64_t errorNs) {
  std::map<int64_t, const FusionInfo*> known;
  int64_t nextId = 0;
  for (const auto& k : into.kernels) {
    known[k.id] = &k;
    nextId = std::max(nextId, k.id + 1);
  }
  for (const auto& e : into.events) nextId = std::max(nextId, e.fusion + 1);
  // Fresh ids lie above every id of both sides, so a renamed kernel takes none of part's own.
  for (const auto& k : part.kernels) nextId = std::max(nextId, k.id + 1);
  for (const auto& e : part.events) nextId = std::max(nextId, e.fusion + 1);
  std::map<int64_t, int64_t> renamed;  // part's id -> into's
  std::vector<FusionInfo> added;
  for (auto& k : part.kernels) {
    auto it = known.find(k.id);
    if (it != known.end() && sameKernel(*it->second, k)) continue;
    if (it != known.end()) renamed[k.id] = nextId++;
    if (auto r = renamed.find(k.id); r != renamed.end()) k.id = r->second;
    added.push_back(std::move(k));
  }
  into.kernels.insert(into.kernels.end(), std::make_move_iterator(added.begin()), std::make_move_iterator(added.end()));
  setDeviceClocks(part, rank, offsetNs, errorNs);
  for (auto& d : part.devices) {
    bool have = std::any_of(into.devices.begin(), into.devices.end(), [&](const DeviceClock& c) { return c.device == d.device; });
    if (!have) into.devices.push_back(std::move(d));
  }
  into.events.reserve(into.events.size() + part.events.size());
  for (auto& e : part.events) {
    e.startNs -= offsetNs;
    if (auto r = renamed.find(e.fusion); r != renamed.end()) e.fusion = r->second;
    into.events.push_back(std::move(e));
  }
  // Each rank's steps and memory stay its own (a rank's process is not rank 0's), in time order.
  for (auto& m : part.marks) {
    m.startNs -= offsetNs;
    m.rank = rank;
    into.marks.push_back(std::move(m));
  }
  std::stable_sort(into.marks.begin(), into.marks.end(), [](const auto& a, const auto& b) { return a.startNs < b.startNs; });
  for (auto& m : part.memory) {
    m.tNs -= offsetNs;
    m.rank = rank;
    into.memory.push_back(m);
  }
  std::stable_sort(into.memory.begin(), into.memory.end(), [](const auto& a, const auto& b) { return a.tNs < b.tNs; });
}

}  // namespace tsr::runtime
