#pragma once
// The threads an eager op's CPU kernel may split its work over (CpuKernelArgs::parallelFor). The runtime links no
// backend, so the CPU backend lends its pool when it is registered (registerCpuBackend); until then, and in a
// program that registers none, eager kernels run on the calling thread alone. The lent function must run each
// chunk with the caller's floating-point environment (eager ops keep subnormals where jitted code flushes them).
#include <span>
#include <vector>

#include "engine/core/result.h"
#include "engine/ir/op_def.h"
#include "engine/runtime/buffer.h"

namespace tsr::runtime {

// `threads` is asked when an op runs (so that lending creates no threads).
void lendEagerThreads(ir::ParallelForFn parallelFor, int (*threads)());

// What runCpuOp passes to a kernel: the lent pool, or none (then threads() is 1).
ir::ParallelForFn eagerParallelFor();
int eagerThreads();

// runCpuOp (buffer.h) for an eager op: an elementwise op on float32 operands of one shape runs its loop
// lowering's vector tiles, the code fused loops run, instead of its kernel's scalar reference code, so an eager
// op gives the bits its jitted form gives (as an eager JAX op is its compiled form) at the vector code's speed.
// Other ops run their kernel.
Result<std::vector<BufferPtr>> runEagerOp(const ir::OpDef& def, std::span<const BufferPtr> inputs,
                                          std::span<const Aval> inputAvals, const ir::Attrs& attrs,
                                          std::vector<Aval>* resultAvals = nullptr);

}  // namespace tsr::runtime
