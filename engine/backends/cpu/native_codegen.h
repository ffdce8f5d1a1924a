#pragma once
// Native code for fused loops: a tile program (tile_program.h) as one C++ function over AVX2 vectors, its
// values in registers, compiled at run time by the host C++ compiler (native_compiler.h). This is the second
// tier of the CPU backend, as TorchInductor's C++ backend is for PyTorch: the tile interpreter runs a kernel at
// once; hot kernels are swapped for native ones, which move each element through registers instead of through
// one L1 tile per op.
//
// The function evaluates the same work units as runLoop (a unit is up to kTile elements of one row of the
// collapsed iteration space), so the thread pool splits both tiers alike:
//   extern "C" void tsr_<hash>(void* const* args, long long firstUnit, long long endUnit);
// Every op is evaluated as the interpreter evaluates it: its loop lowering's expression in the same loop dialect
// (engine/ops/loop_lowering.h, with the vector math of vmath_avx2.inc), the C library where the dialect calls it,
// no FMA contraction, so both tiers give the same bits.
#include <string>

#include "engine/backends/cpu/executable.h"
#include "engine/backends/cpu/tile_program.h"
#include "engine/core/result.h"

namespace tsr::cpu {

using NativeReduceFn = void (*)(void* const* args, long long firstUnit, long long endUnit, long long chunks,
                               long long chunkLen, double* partial);

struct NativeSource {
  std::string symbol;  // "tsr_<hash of the code>": equal programs get equal symbols
  std::string code;    // the function alone
};

// The C++ of a loop kernel. Fails, naming the op, for an op the native tier does not evaluate (the kernel then
// stays on the interpreter).
Result<NativeSource> generateNativeLoop(const TileProgram& p);

// The C++ of a [K1, R, K2] reduction (LoweredKernel::reduces over its prologue program), with the interpreter's
// work units, chunking and order of combination (runReduction in executable.cpp), so results are the same bits:
//   extern "C" void tsr_<hash>(void* const* args, long long firstUnit, long long endUnit, long long chunks,
//                              long long chunkLen, double* partial);
// partial[((reduce * K1 + k1) * chunks + chunk) * K2 + k2] receives each unit's partial results.
Result<NativeSource> generateNativeReduction(const LoweredKernel& k);

// The native form of a lowered kernel, whatever its kind: loops and gemm epilogues (generateNativeLoop),
// [K1, R, K2] reductions (generateNativeReduction); an error for the rest.
Result<NativeSource> generateNative(const LoweredKernel& k);

// What every translation unit of native kernels starts with: <immintrin.h>, the vector math, the helpers.
const std::string& nativePrelude();

}  // namespace tsr::cpu
