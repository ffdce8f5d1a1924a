#pragma once
// NCCL between ranks: each process that mpirun starts drives one GPU, and the collectives of its GPU programs
// run on NCCL on device buffers, ordered on the GPU's compute stream (no host copies, no wait on the host).
// Communicators are made when a program first needs them and kept with the run's host communicator
// (dist::Communicator::attachment), per local position:
//   - per set of participants (the positions a collective's groups name: the whole mesh in practice) one
//     communicator, ncclCommInitRank with the unique id of its first member, which reaches the others in the
//     bootstrap records exchanged over the host communicator (MPI; nccl_bootstrap.h), each rank's machine and
//     GPU checked first;
//   - per partition into groups (a mesh axis: gpt2_tp's 'data' pairs and 'model' pairs) one ncclCommSplit of
//     it, ranks in group order; a partition into one group in participant order is that communicator itself.
// Every member meets a program's collectives in the same order, so each makes the same communicators at the same
// point, and the first step pays for them once.
//
// Sums follow NCCL's order, not the interface's group order (engine/dist/communicator.h): every member gets the
// same values, which may differ in the last bits from the CPU's.
#include <cstdint>
#include <span>
#include <utility>

#include "engine/backends/cuda/device.h"
#include "engine/core/dtype.h"
#include "engine/core/result.h"
#include "engine/dist/communicator.h"

namespace tsr::cuda {

// Whether this build has NCCL.
bool ncclBuilt();

// One group's NCCL communicator as seen from a member.
struct NcclGroup {
  void* comm = nullptr;  // ncclComm_t
  int rank = 0;          // self's index in the group
  int size = 1;
};

// The communicator of self's group among `groups` (consecutive groups of groupSize positions; NCCL's ranks in
// group order), made on first use. Every position the groups name must call it at the same point of its program,
// on its own thread (dist::runOnDevices), with `device` the GPU it runs on.
Result<NcclGroup> ncclGroup(dist::Communicator& host, int self, Device& device, std::span<const int64_t> groups,
                            int64_t groupSize);

// The collectives on device pointers, enqueued on `stream` (a cudaStream_t on the group's GPU). Sizes as in
// dist::Communicator: all_reduce `count` elements (in == out allowed); all_gather `bytes` per member;
// reduce_scatter `count` elements per member's chunk; all_to_all `bytes` per chunk.
Status ncclAllReduce(const NcclGroup& g, const void* in, void* out, int64_t count, DType dtype, void* stream);
Status ncclAllGather(const NcclGroup& g, const void* in, void* out, int64_t bytes, void* stream);
Status ncclReduceScatter(const NcclGroup& g, const void* in, void* out, int64_t count, DType dtype, void* stream);
Status ncclAllToAll(const NcclGroup& g, const void* in, void* out, int64_t bytes, void* stream);
// pairs: (source, target) as ranks of g. self sends `in` to its target and receives `out` from its source, or
// zeros when it has none.
Status ncclPermute(const NcclGroup& g, std::span<const std::pair<int, int>> pairs, const void* in, void* out,
                   int64_t bytes, void* stream);

}  // namespace tsr::cuda
