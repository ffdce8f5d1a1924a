#include "engine/backends/cuda/nccl_bootstrap.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tsr::cuda {

Result<std::vector<RankRecord>> exchangeRecords(dist::Communicator& comm, int self, std::span<const int> members,
                                                const RankRecord& mine) {
  std::vector<RankRecord> all(members.size());
  if (members.size() == 1) {
    all[0] = mine;
  } else {
    TSR_TRY(comm.allGather(self, members, &mine, all.data(), static_cast<int64_t>(sizeof(RankRecord))));
  }
  for (const RankRecord& r : all)
    if (r.error[0] != '\0')
      return makeError("NCCL: rank {} could not take part: {}", r.position, textOf(r.error));
  return all;
}

Status checkOneGpuPerRank(std::span<const RankRecord> records) {
  // The first member seen on each (machine, GPU).
  std::map<std::pair<std::string, std::array<uint8_t, 16>>, const RankRecord*> seen;
  for (const RankRecord& r : records) {
    const std::string host = textOf(r.host);
    auto [it, fresh] = seen.emplace(std::pair{host, r.gpuUuid}, &r);
    if (fresh) continue;
    const RankRecord& first = *it->second;
    int onHost = 0;
    for (const RankRecord& o : records) onHost += textOf(o.host) == host;
    const int ranks = std::max(r.localRanks, onHost);
    return makeError(
        "NCCL: ranks {} and {} both run on GPU {} of {} ({} GPUs there for {} ranks): NCCL needs a GPU per rank. "
        "Launch at most {} ranks on that machine (mpirun -np N with N GPUs; a hostfile's slots), or give each rank "
        "its own GPU with TESSERA_CUDA_DEVICE; TESSERA_NCCL=off runs the collectives on the host through MPI, "
        "where ranks may share a GPU",
        first.position, r.position, r.gpu, host.empty() ? "this machine" : host, r.gpus, ranks, r.gpus);
  }
  return {};
}

Result<GroupPlan> planGroup(std::span<const int64_t> groups, int64_t groupSize, int self) {
  if (groupSize < 1 || groups.empty() || static_cast<int64_t>(groups.size()) % groupSize != 0)
    return makeError("NCCL: groups [{}] do not split into groups of {}", fmt::join(groups, ","), groupSize);
  auto it = std::find(groups.begin(), groups.end(), static_cast<int64_t>(self));
  if (it == groups.end()) return makeError("NCCL: device {} is in no group of [{}]", self, fmt::join(groups, ","));
  GroupPlan plan;
  for (int64_t p : groups) plan.members.push_back(static_cast<int>(p));
  std::sort(plan.members.begin(), plan.members.end());
  if (std::adjacent_find(plan.members.begin(), plan.members.end()) != plan.members.end())
    return makeError("NCCL: groups [{}] name a device twice", fmt::join(groups, ","));
  const auto index = static_cast<int64_t>(it - groups.begin());
  plan.color = static_cast<int>(index / groupSize);
  plan.key = static_cast<int>(index % groupSize);
  // One group in member order is the members' communicator itself; anything else is split from it.
  plan.split = groupSize != static_cast<int64_t>(plan.members.size()) ||
               !std::equal(groups.begin(), groups.end(), plan.members.begin(), plan.members.end());
  return plan;
}

Result<CollectiveRoute> collectiveRoute(std::string_view commKind, bool ncclWanted, bool ncclBuilt) {
  if (commKind != "mpi" || !ncclWanted) return CollectiveRoute::Host;
  if (!ncclBuilt)
    return makeError(
        "NCCL: this build of Tessera has no NCCL, which GPU programs under mpirun use for their collectives: "
        "rebuild where NCCL is installed (nccl.h and libnccl beside the CUDA toolkit), or set TESSERA_NCCL=off to "
        "run them on the host through MPI");
  return CollectiveRoute::Nccl;
}

}  // namespace tsr::cuda
