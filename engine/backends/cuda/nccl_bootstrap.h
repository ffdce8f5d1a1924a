#pragma once
// What the ranks of a GPU program tell each other before NCCL connects them, and the decisions made from it.
// Nothing here calls CUDA or NCCL, so the tests run it on machines without either: the records travel through
// the host communicator (dist::Communicator: MPI between ranks, threads in one process), the NCCL unique id as
// bytes.
//
// A communicator over a set of positions (nccl_communicator.h) is made in three steps: every member fills its
// record (its machine, its GPU's UUID; the first member also NCCL's unique id), the records are all-gathered
// over the host communicator in member order, and every member checks them (checkOneGpuPerRank) before
// ncclCommInitRank with the first member's id. Every member sees the same records, so they all fail or all go on:
// nobody waits for a rank that gave up.
#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "engine/core/result.h"
#include "engine/dist/communicator.h"

namespace tsr::cuda {

inline constexpr size_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

struct RankRecord {
  std::array<char, kNcclIdBytes> uniqueId{};  // the first member's counts: the communicator's ncclUniqueId
  std::array<char, 64> host{};                // the machine's name (gethostname), cut to 63 bytes
  std::array<uint8_t, 16> gpuUuid{};          // cudaDeviceProp::uuid: one physical GPU, however it is numbered
  std::array<char, 160> error{};              // why this member could not take part ("" when it can)
  int32_t position = -1;
  int32_t gpu = -1;         // the GPU's number in this process (TESSERA_CUDA_DEVICE, local rank)
  int32_t gpus = 0;         // the GPUs this process sees
  int32_t localRanks = 0;   // the ranks on its machine, where the launcher says (0: unknown)
};
static_assert(std::is_trivially_copyable_v<RankRecord>);

// Copies text into a fixed field, cut to fit, always terminated.
template <size_t N>
void setText(std::array<char, N>& field, std::string_view text) {
  field.fill('\0');
  text.copy(field.data(), std::min(text.size(), N - 1));
}
template <size_t N>
std::string textOf(const std::array<char, N>& field) {
  return std::string(field.data(), std::find(field.begin(), field.end(), '\0'));
}

// Every member's record in member order (an all_gather over `members`, which are positions of `comm`, through
// the host communicator). Every member calls it. A member that reported an error fails everyone with it.
Result<std::vector<RankRecord>> exchangeRecords(dist::Communicator& comm, int self, std::span<const int> members,
                                                const RankRecord& mine);

// An error when two members run on the same GPU of one machine (NCCL refuses a communicator with a GPU twice;
// it means the machine has fewer GPUs than ranks, or TESSERA_CUDA_DEVICE gave two ranks the same one): it names
// the ranks, the machine, the GPUs there and what to do.
Status checkOneGpuPerRank(std::span<const RankRecord> records);

// How position self's group among `groups` (consecutive groups of groupSize positions) gets its NCCL
// communicator: from the one over `members` (every position the groups name, ascending), which is the group's
// own when the groups are one group in that order, and otherwise split into the groups (ncclCommSplit): color =
// the index of self's group, key = its index in the group, so that the new communicator's ranks follow the
// group's order (the order of all_gather's chunks). An error when self is in no group or the groups do not split
// into groupSize.
struct GroupPlan {
  std::vector<int> members;
  bool split = false;
  int color = -1;
  int key = -1;  // self's rank in its group's communicator
};
Result<GroupPlan> planGroup(std::span<const int64_t> groups, int64_t groupSize, int self);

// How a GPU program's collectives move data: on the device through NCCL (processes launched by mpirun, one GPU
// each), or as the op's CPU kernel on host copies through the host communicator (virtual devices of one process,
// which may share a GPU; TESSERA_NCCL=off). Under mpirun with NCCL asked for, a build without NCCL is an error.
enum class CollectiveRoute : uint8_t { Nccl, Host };
Result<CollectiveRoute> collectiveRoute(std::string_view commKind, bool ncclWanted, bool ncclBuilt);

}  // namespace tsr::cuda
