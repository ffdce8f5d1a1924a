#pragma once
// Start-up: registers every backend this build has (cpu, and cuda where the CUDA toolkit was found) with the
// runtime's registry. The programs that link the whole engine call it once at the top of main (the CLI, the
// IDE, the tests); until then jit and the SPMD runner have nothing to compile with. Calling it again is
// harmless.
#include "engine/runtime/executable.h"

namespace tsr {

void registerBackends(runtime::BackendRegistry& registry = runtime::backends());

}  // namespace tsr
