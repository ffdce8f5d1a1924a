#pragma once
// What this machine can do at best, measured: the SGEMM peak (the practical ceiling of compute, which `tessera
// bench` compares a step's FLOP/s with) and the copy bandwidth (the ceiling of memory traffic). Together they
// are a roofline's roofs.
#include <cstdint>
#include <string>

namespace tsr::cpu {

struct SgemmPeak {
  int64_t n = 0;
  double gflops = 0;    // best of the repeats
  std::string kernels;  // OpenBLAS's name of the kernels it runs (openblas_get_corename: "SkylakeX", "Haswell", ...)
  std::string error;    // why nothing was measured (n 0): OpenBLAS's workspaces for the threads did not fit
};

// OpenBLAS SGEMM on n x n x n f32 matrices (row-major, no transposes) on `threads` threads: one untimed call,
// then the best of `repeats`. The engine runs OpenBLAS single-threaded inside its own pool, so the thread count
// is set for the measurement and restored afterwards (runtime::BlasThreads, which reserves the workspaces first).
SgemmPeak measureSgemm(int64_t n, int repeats, int threads);

struct CopyBandwidth {
  int64_t bytes = 0;  // of the buffer copied
  double gbs = 0;     // bytes read plus bytes written per second, 1e9 units, best of the repeats
};

// memcpy of a `bytes` buffer into another, split over `threads` threads: one untimed pass (which also faults
// the pages in), then the best of `repeats`. Read and written bytes both count, as a kernel's bytes do.
CopyBandwidth measureCopyBandwidth(int64_t bytes, int repeats, int threads);

}  // namespace tsr::cpu
