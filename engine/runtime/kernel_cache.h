#pragma once
// Where generated kernels are cached on disk (CUDA cubins from NVRTC, native CPU kernel libraries): the
// TESSERA_KERNEL_CACHE folder, else $XDG_CACHE_HOME/tessera/kernels, else ~/.cache/tessera/kernels. Empty when
// TESSERA_KERNEL_CACHE=off or no home is known: nothing is cached.
#include <string>

namespace tsr::runtime {

std::string kernelCacheDir();

}  // namespace tsr::runtime
