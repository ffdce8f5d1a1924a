#include "engine/train/profile_diff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tsr::train {

namespace {

using NodeKey = std::tuple<std::string, std::string, int>;  // module, op, occurrence

struct Loaded {
  ProfileSide side;
  std::vector<store::KernelInfo> kernels;  // of the executable
  std::vector<double> kernelNs;            // per step, by index into kernels
  std::map<NodeKey, std::pair<int, double>> nodes;  // node id and its time per step
  std::vector<std::vector<NodeKey>> kernelNodes;    // by index into kernels
};

Result<Loaded> load(const store::RunStore& db, int64_t run, const std::string& executable) {
  TSR_ASSIGN(std::vector<store::ProfileInfo> profiles, db.profiles(run));
  if (profiles.empty()) return makeError("run {} has no profile (tessera profile PROJECT makes one)", run);
  const store::ProfileInfo& p = profiles.back();
  Loaded l;
  l.side.run = run;
  l.side.profile = p.id;
  l.side.steps = std::max<int64_t>(p.lastStep - p.firstStep + 1, 1);
  TSR_ASSIGN(std::vector<store::KernelInfo> all, db.profileKernels(p.id));
  std::map<int64_t, size_t> byFusion;
  for (auto& k : all)
    if (k.executable == executable) byFusion[k.fusion] = l.kernels.size(), l.kernels.push_back(std::move(k));
  if (l.kernels.empty()) return makeError("profile {} of run {} has no kernels of '{}'", p.id, run, executable);
  l.kernelNs.assign(l.kernels.size(), 0.0);
  // One launch at a time: a profile of any size diffs in the memory of its kernel table.
  TSR_TRY(db.eachKernelEvent(p.id, [&](const store::KernelEvent& e) -> Status {
    if (auto it = byFusion.find(e.fusion); it != byFusion.end()) l.kernelNs[it->second] += static_cast<double>(e.durationNs);
    return {};
  }));
  for (double& ns : l.kernelNs) ns /= static_cast<double>(l.side.steps);
  for (double ns : l.kernelNs) l.side.stepNs += ns;
  // Nodes in id order, numbered within their module and op.
  std::vector<std::tuple<int, std::string, std::string, size_t>> nodes;  // id, module, op, kernel
  for (size_t k = 0; k < l.kernels.size(); ++k)
    for (size_t i = 0; i < l.kernels[k].nodes.size(); ++i)
      nodes.emplace_back(l.kernels[k].nodes[i], l.kernels[k].modulePath,
                         i < l.kernels[k].ops.size() ? l.kernels[k].ops[i] : std::string("?"), k);
  std::sort(nodes.begin(), nodes.end());
  std::map<std::pair<std::string, std::string>, int> seen;
  l.kernelNodes.resize(l.kernels.size());
  for (const auto& [id, module, op, k] : nodes) {
    NodeKey key{module, op, seen[{module, op}]++};
    const double share = l.kernelNs[k] / static_cast<double>(l.kernels[k].nodes.size());
    l.nodes[key] = {id, share};
    l.kernelNodes[k].push_back(key);
  }
  return l;
}

double change(double a, double b) { return std::abs(b - a); }

}  // namespace

Result<ProfileDiff> diffProfiles(const store::RunStore& storeA, int64_t runA, const store::RunStore& storeB,
                                 int64_t runB, const std::string& executable) {
  TSR_ASSIGN(Loaded a, load(storeA, runA, executable));
  TSR_ASSIGN(Loaded b, load(storeB, runB, executable));
  ProfileDiff d;
  d.a = a.side;
  d.b = b.side;
  auto table = [](const Loaded& l) {
    std::vector<std::pair<std::vector<int>, std::vector<std::string>>> t;
    for (const auto& k : l.kernels) t.emplace_back(k.nodes, k.ops);
    std::sort(t.begin(), t.end());
    return t;
  };
  d.sameGraph = table(a) == table(b);

  // Nodes: the union of both profiles' keys.
  std::map<NodeKey, NodeTimeDiff> nodes;
  for (const auto& [key, v] : a.nodes) {
    NodeTimeDiff& n = nodes[key];
    std::tie(n.module, n.op, n.occurrence) = key;
    n.nodeA = v.first, n.nsA = v.second;
  }
  for (const auto& [key, v] : b.nodes) {
    NodeTimeDiff& n = nodes[key];
    std::tie(n.module, n.op, n.occurrence) = key;
    n.nodeB = v.first, n.nsB = v.second;
  }
  for (auto& [key, n] : nodes) d.nodes.push_back(std::move(n));

  // Kernels: pairs that share the most nodes first, each kernel in one pair at most.
  std::map<NodeKey, size_t> kernelOfB;
  for (size_t k = 0; k < b.kernelNodes.size(); ++k)
    for (const NodeKey& key : b.kernelNodes[k]) kernelOfB[key] = k;
  std::vector<std::tuple<int, size_t, size_t>> pairs;  // -shared, a, b
  for (size_t ka = 0; ka < a.kernelNodes.size(); ++ka) {
    std::map<size_t, int> shared;
    for (const NodeKey& key : a.kernelNodes[ka])
      if (auto it = kernelOfB.find(key); it != kernelOfB.end()) ++shared[it->second];
    for (const auto& [kb, n] : shared) pairs.emplace_back(-n, ka, kb);
  }
  std::sort(pairs.begin(), pairs.end());
  std::vector<bool> usedA(a.kernels.size(), false), usedB(b.kernels.size(), false);
  for (const auto& [negShared, ka, kb] : pairs) {
    if (usedA[ka] || usedB[kb]) continue;
    usedA[ka] = usedB[kb] = true;
    KernelTimeDiff k;
    k.nameA = a.kernels[ka].name, k.nameB = b.kernels[kb].name;
    k.kind = a.kernels[ka].kind;
    k.fusionA = a.kernels[ka].fusion, k.fusionB = b.kernels[kb].fusion;
    k.sharedNodes = -negShared;
    k.nsA = a.kernelNs[ka], k.nsB = b.kernelNs[kb];
    d.kernels.push_back(std::move(k));
  }
  for (size_t ka = 0; ka < a.kernels.size(); ++ka)
    if (!usedA[ka])
      d.kernels.push_back({a.kernels[ka].name, "", a.kernels[ka].kind, a.kernels[ka].fusion, -1, 0, a.kernelNs[ka], 0});
  for (size_t kb = 0; kb < b.kernels.size(); ++kb)
    if (!usedB[kb])
      d.kernels.push_back({"", b.kernels[kb].name, b.kernels[kb].kind, -1, b.kernels[kb].fusion, 0, 0, b.kernelNs[kb]});

  std::stable_sort(d.kernels.begin(), d.kernels.end(),
                   [](const KernelTimeDiff& x, const KernelTimeDiff& y) { return change(x.nsA, x.nsB) > change(y.nsA, y.nsB); });
  std::stable_sort(d.nodes.begin(), d.nodes.end(),
                   [](const NodeTimeDiff& x, const NodeTimeDiff& y) { return change(x.nsA, x.nsB) > change(y.nsA, y.nsB); });
  return d;
}

std::string profileDiffJson(const ProfileDiff& d) {
  using nlohmann::json;
  auto side = [](const ProfileSide& s) {
    return json{{"run", s.run}, {"profile", s.profile}, {"steps", s.steps}, {"step_ns", s.stepNs}};
  };
  json kernels = json::array(), nodes = json::array();
  for (const auto& k : d.kernels)
    kernels.push_back({{"a", k.nameA}, {"b", k.nameB}, {"kind", k.kind}, {"fusion_a", k.fusionA}, {"fusion_b", k.fusionB},
                       {"shared_nodes", k.sharedNodes}, {"ns_a", k.nsA}, {"ns_b", k.nsB}});
  for (const auto& n : d.nodes)
    nodes.push_back({{"module", n.module}, {"op", n.op}, {"occurrence", n.occurrence}, {"node_a", n.nodeA},
                     {"node_b", n.nodeB}, {"ns_a", n.nsA}, {"ns_b", n.nsB}});
  json out = {{"a", side(d.a)}, {"b", side(d.b)}, {"same_graph", d.sameGraph}, {"kernels", kernels}, {"nodes", nodes}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tsr::train
