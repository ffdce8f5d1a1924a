#pragma once
// The CPU backend's entry in the runtime's backend registry (engine/runtime/executable.h): "cpu" plans the
// fusion of a graph and compiles it to a cpu::Executable.
#include "engine/runtime/executable.h"

namespace tsr::cpu {

void registerCpuBackend(runtime::BackendRegistry& registry);

}  // namespace tsr::cpu
