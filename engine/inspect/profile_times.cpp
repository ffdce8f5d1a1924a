#include "engine/inspect/profile_times.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "engine/inspect/node_info.h"

namespace tsr::inspect {

const KernelTime* ProfileTimes::kernelOf(ir::NodeId node) const {
  if (node < 0 || static_cast<size_t>(node) >= kernelOfNode.size()) return nullptr;
  int k = kernelOfNode[static_cast<size_t>(node)];
  return k >= 0 ? &kernels[static_cast<size_t>(k)] : nullptr;
}

Result<ProfileTimes> profileTimes(const store::ProfileInfo& profile, const std::vector<store::KernelInfo>& kernels,
                                  const std::vector<store::KernelEvent>& events, const ir::Graph& graph,
                                  const std::string& executable) {
  ProfileTimes t;
  t.profile = profile;
  t.executable = executable;
  t.steps = std::max<int64_t>(1, profile.lastStep - profile.firstStep + 1);
  const size_t numNodes = graph.nodes().size();
  t.kernelOfNode.assign(numNodes, -1);
  t.nodeNs.assign(numNodes, 0.0);
  std::map<int64_t, size_t> byFusion;
  for (const store::KernelInfo& k : kernels) {
    if (k.executable != executable) continue;
    // The kernel table lists each node with its op: both must be this graph's, or the times land elsewhere.
    for (size_t i = 0; i < k.nodes.size(); ++i) {
      int n = k.nodes[i];
      std::string op = i < k.ops.size() ? k.ops[i] : "";
      if (n < 0 || static_cast<size_t>(n) >= numNodes)
        return makeError("profile {} is for another graph: its kernel {} runs node {}, and this graph has {} nodes",
                         profile.id, k.name, n, numNodes);
      std::string here = opName(graph, n);
      if (here != op)
        return makeError("profile {} is for another graph: node {} is {} there and {} here", profile.id, n, op, here);
      if (t.kernelOfNode[static_cast<size_t>(n)] >= 0)
        return makeError("profile {} is for another graph: node {} is in two kernels", profile.id, n);
      t.kernelOfNode[static_cast<size_t>(n)] = static_cast<int>(t.kernels.size());
    }
    byFusion[k.fusion] = t.kernels.size();
    KernelTime kt;
    kt.fusion = k.fusion;
    kt.name = k.name;
    kt.kind = k.kind;
    kt.nodes.assign(k.nodes.begin(), k.nodes.end());
    t.kernels.push_back(std::move(kt));
  }
  if (t.kernels.empty()) return makeError("profile {} has no kernels of '{}'", profile.id, executable);
  for (const store::KernelEvent& e : events) {
    auto it = byFusion.find(e.fusion);
    if (it == byFusion.end()) continue;  // another executable's launch
    KernelTime& k = t.kernels[it->second];
    ++k.count;
    k.totalNs += e.durationNs;
    k.flops += e.flops;
    k.bytes += e.bytes;
    t.totalNs += e.durationNs;
  }
  for (const KernelTime& k : t.kernels)
    for (ir::NodeId n : k.nodes)
      t.nodeNs[static_cast<size_t>(n)] = static_cast<double>(k.totalNs) / static_cast<double>(k.nodes.size());
  return t;
}

Result<ProfileTimes> loadProfileTimes(const std::string& dbPath, const ir::Graph& graph, const std::string& executable) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dbPath, ec))
    return makeError("{}: no run store yet (run `tessera profile` or Profile ▶)", dbPath);
  TSR_ASSIGN(store::RunStore db, store::RunStore::openReadOnly(dbPath));
  TSR_ASSIGN(std::optional<store::ProfileInfo> latest, db.latestProfile());
  if (!latest) return makeError("{}: no profile yet (run `tessera profile` or Profile ▶)", dbPath);
  TSR_ASSIGN(std::vector<store::KernelInfo> kernels, db.profileKernels(latest->id));
  TSR_ASSIGN(std::vector<store::KernelEvent> events, db.kernelEvents(latest->id));
  return profileTimes(*latest, kernels, events, graph, executable);
}

}  // namespace tsr::inspect
