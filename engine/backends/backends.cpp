#include "engine/backends/backends.h"

#include "engine/backends/cpu/backend.h"
#ifdef TESSERA_HAVE_CUDA
#include "engine/backends/cuda/backend.h"
#endif

namespace tsr {

void registerBackends(runtime::BackendRegistry& registry) {
  cpu::registerCpuBackend(registry);
#ifdef TESSERA_HAVE_CUDA
  cuda::registerCudaBackend(registry);
#endif
}

}  // namespace tsr
