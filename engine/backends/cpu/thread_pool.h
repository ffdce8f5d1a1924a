#pragma once
// The CPU backend's worker threads. One pool per process, sized by TESSERA_NUM_THREADS (default: the cores
// this process may run on). Kernels run one at a time and split their work over the pool; GEMMs too (each
// thread calls single-threaded OpenBLAS on its block), so no second set of threads competes for the cores.
#include <cstdint>
#include <functional>
#include <string>

#include "engine/core/mxcsr.h"

namespace tsr::cpu {

class ThreadPool {
 public:
  static ThreadPool& instance();
  int numThreads() const { return m_numThreads; }

  // Calls fn(begin, end, thread) over [0, n) split into chunks of at least `grain` items; thread is in
  // [0, numThreads()). Runs on the calling thread alone when there is one chunk. Not reentrant: a kernel
  // running inside parallelFor must not call it again (it runs serially instead).
  void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

 private:
  explicit ThreadPool(int threads);
  struct State;
  State* m_state;
  int m_numThreads;
};

// The thread count: TESSERA_NUM_THREADS, else the cores available to this process.
int configuredThreads();

using ::tsr::MxcsrScope;  // engine/core/mxcsr.h

// Flushes subnormal floats to zero (FTZ and DAZ in MXCSR) on this thread while in scope, as XLA:CPU does:
// squared gradients and Adam's second moments reach the subnormal range, where each operation costs about a
// hundred times more. Pool workers run with it always.
class FlushDenormals : public MxcsrScope {
 public:
  FlushDenormals() : MxcsrScope(current() | kFlushSubnormals) {}
};

// Makes OpenBLAS single-threaded (once): called before the first GEMM.
void coordinateBlasThreads();

// The thread libraries read their settings from the environment when they load, before main, and glibc resets
// `environ` after a .preinit_array runs, so a setting made there never reaches them. An executable's main calls
// this first: where either variable below is unset it sets it and executes itself again (the same arguments,
// the same process). It returns where both were set already, and where the exec fails (the program then runs as
// it is). Python's tessera module sets OMP_WAIT_POLICY before it loads the engine (not OpenBLAS's: numpy shares it).
//   OMP_WAIT_POLICY=PASSIVE: oneDNN (the CPU convolutions) runs on libgomp's threads, which by default spin for
//     milliseconds after every parallel region and so take the cores from this pool's next kernels (a small
//     ResNet step took 140 ms instead of 8).
//   OPENBLAS_NUM_THREADS=1: GEMMs run on this pool's threads (gemm.cpp); OpenBLAS would start a thread per core
//     when it loads, each mapping a 128 MiB workspace (and, under `ulimit -v`, retrying forever when it cannot).
//   OPENBLAS_CORETYPE (blasCoreFallback): only where OpenBLAS took its generic kernels on a CPU it does not know.
void ensureThreadLibrarySettings(char** argv);

// The kernels OpenBLAS should run where, not knowing this CPU (Debian 12's 0.3.21 predates Intel's Emerald
// Rapids, for one), it fell back to its generic SSE3 ones ("Prescott", 5-9x slower SGEMM): "SkylakeX" for a CPU
// with AVX-512, "Haswell" with AVX2 and FMA (names 0.3.21 takes; it refuses "Cooperlake"). Empty where OpenBLAS
// chose other kernels or the CPU has none of these.
std::string blasCoreFallback();

}  // namespace tsr::cpu
