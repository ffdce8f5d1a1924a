#pragma once
// Run-time compilation of generated CUDA C++ with NVRTC, cached on disk by content hash.
//
// The cache key hashes the source, the options and NVRTC's version; entries are files
// <cache>/<key>.cubin written atomically (temporary file + rename), so concurrent processes share them safely.
// The cache directory: TESSERA_KERNEL_CACHE, else $XDG_CACHE_HOME/tessera/kernels, else
// ~/.cache/tessera/kernels; TESSERA_KERNEL_CACHE=off disables it. Compiling needs no GPU (tests check every
// generated kernel this way); loading and launching do.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/result.h"

namespace tsr::cuda {

struct NvrtcOptions {
  int sm = 90;          // target architecture: cubin for sm_<sm>
  bool lineInfo = false;
};

struct CompiledModule {
  std::vector<char> cubin;
  std::string log;           // NVRTC's warnings, if any
  bool fromCache = false;
};

// Compiles `source` (which defines extern "C" __global__ kernels). On failure the error holds NVRTC's log and
// the numbered source, so a bad generated kernel can be read at once.
Result<CompiledModule> compileCuda(const std::string& source, const std::string& name, const NvrtcOptions& options = {});

// "NVRTC 13.0"
std::string nvrtcVersionString();
// The cache directory in use ("" when disabled).
std::string kernelCacheDir();

// A compiled module loaded on the current device, and one of its kernels (cudaKernel_t as void*).
class LoadedModule {
 public:
  static Result<std::shared_ptr<LoadedModule>> load(const CompiledModule& m);
  ~LoadedModule();
  Result<const void*> kernel(const std::string& name) const;

 private:
  LoadedModule() = default;
  void* m_library = nullptr;  // cudaLibrary_t
};

// Launches a kernel (from LoadedModule::kernel) with an argument list of pointers to the argument values.
Status launchKernel(const void* kernel, int64_t gridX, int blockX, void** args, int sharedBytes, void* stream);
Status launchKernel2d(const void* kernel, int64_t gridX, int64_t gridY, int blockX, void** args, int sharedBytes, void* stream);

}  // namespace tsr::cuda
