#pragma once
// Collectives between GPUs on NCCL, behind the collective interface (engine/dist/communicator.h). Positions are
// the process's GPUs 0..n-1, each driven by its own thread (dist::runOnDevices), and buffers are DEVICE pointers
// on the position's GPU; calls are ordered on that device's compute stream and return once the result is
// complete. Groups: the whole mesh in position order (NCCL communicators for subgroups are not made yet; other
// groups are an error naming the group). Sums follow NCCL's order, not the interface's group order: results
// are identical on every member but may differ in the last bit from the in-process communicator.
#include <memory>

#include "engine/core/result.h"
#include "engine/dist/communicator.h"

namespace tsr::cuda {

// One NCCL rank per GPU 0..numDevices-1 of this process (ncclCommInitAll). An error when the build has no
// NCCL or there are fewer GPUs.
Result<std::shared_ptr<dist::Communicator>> makeNcclCommunicator(int numDevices);

}  // namespace tsr::cuda
