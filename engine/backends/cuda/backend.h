#pragma once
// The CUDA backend's entry in the runtime's backend registry (engine/runtime/executable.h): "cuda" plans the
// fusion of a graph and compiles it for the GPU of the local device it is for (gpuForLocalDevice: GPU 0, or
// under mpirun the rank's own); its executables take host buffers and return host buffers (copies both ways at
// every run, Executable::runHost).
#include "engine/runtime/executable.h"

namespace tsr::cuda {

void registerCudaBackend(runtime::BackendRegistry& registry);

}  // namespace tsr::cuda
