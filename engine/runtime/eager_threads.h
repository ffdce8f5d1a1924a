#pragma once
// The threads an eager op's CPU kernel may split its work over (CpuKernelArgs::parallelFor). The runtime links no
// backend, so the CPU backend lends its pool when it is registered (registerCpuBackend); until then, and in a
// program that registers none, eager kernels run on the calling thread alone. The lent function must run each
// chunk with the caller's floating-point environment (eager ops keep subnormals where jitted code flushes them).
#include "engine/ir/op_def.h"

namespace tsr::runtime {

// `threads` is asked when an op runs (so that lending creates no threads).
void lendEagerThreads(ir::ParallelForFn parallelFor, int (*threads)());

// What runCpuOp passes to a kernel: the lent pool, or none (then threads() is 1).
ir::ParallelForFn eagerParallelFor();
int eagerThreads();

}  // namespace tsr::runtime
