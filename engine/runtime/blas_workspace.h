#pragma once
// OpenBLAS takes a workspace of 128 MiB for each thread that calls it, the first time that thread does, and when
// it cannot get one (an address-space limit such as `ulimit -v`, or memory exhausted) it retries forever: the
// process hangs, deaf to SIGTERM. Before a thread's first GEMM, reserveBlasWorkspace maps that much memory for
// every thread about to call OpenBLAS and gives it back, so that a GEMM that cannot run fails with a message.
#include "engine/core/result.h"

namespace tsr::runtime {

// OK when `threads` workspaces fit (checked once per calling thread, then free); otherwise an error that names
// the bytes, the reason and the address-space limit.
Status reserveBlasWorkspace(int threads = 1);

}  // namespace tsr::runtime
