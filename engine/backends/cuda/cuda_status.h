#pragma once
// CUDA runtime, NVRTC and cuBLAS status codes as Status values with the API's own error text.
#include <cuda_runtime_api.h>

#include "engine/core/result.h"

namespace tsr::cuda {

inline Status checkCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return makeError("CUDA: {} failed: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace tsr::cuda

// TSR_CUDA(call): return the CUDA error of `call` as a Status.
#define TSR_CUDA(call) TSR_TRY(::tsr::cuda::checkCuda((call), #call))
