#pragma once
// The collectives of a GPU program (all_reduce, all_gather, reduce_scatter, all_to_all, collective_permute) on
// the device. A group of one is a copy on the device. Under mpirun (one GPU per rank) every other group runs on
// NCCL (nccl_communicator.h) on the program's device buffers, enqueued on the compute stream like any kernel;
// an op along a dim other than 0 packs its operand into the members' chunk order first, or unpacks its result
// after, with strided device copies (the CPU kernels' splitChunks and joinChunks, engine/ops/collective.cpp).
// Elsewhere (virtual devices of one process, which may share a GPU; TESSERA_NCCL=off) the op's CPU kernel runs
// on host copies through the host communicator, as every host kernel does.
#include <cstdint>
#include <vector>

#include "engine/backends/cpu/executable.h"
#include "engine/backends/cuda/device.h"
#include "engine/core/result.h"
#include "engine/ir/graph.h"

namespace tsr::cuda {

bool isCollective(ir::OpCode op);

// Device copies (bytes, on `stream`) between the layout of a dim split into n chunks, [outer, n, row], and the
// communicator's chunk order, [n, outer, row].
Status packChunks(const void* src, void* dst, int64_t outer, int64_t n, int64_t row, void* stream);
Status unpackChunks(const void* src, void* dst, int64_t outer, int64_t n, int64_t row, void* stream);

// Runs the collective of kernel k (one node of g; args: the kernel's device pointers, as LoweredKernel::args) for
// the device of this thread's SPMD run (dist::currentDevice()) on `device`'s compute stream. Returns false,
// having done nothing, where the op's host kernel must run it instead (see above; also outside an SPMD run, where
// the host kernel reports a group it cannot serve).
Result<bool> runCollective(Device& device, const ir::Graph& g, const cpu::LoweredKernel& k,
                           const std::vector<void*>& args);

}  // namespace tsr::cuda
