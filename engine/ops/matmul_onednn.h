#pragma once
// dot_general's bf16 CPU kernel through oneDNN's matmul, where the CPU has bf16 dot-product instructions
// (AVX512_BF16's vdpbf16ps, AMX): the bf16 operands read as they lie (strided, transposed), products accumulated
// in f32, each result rounded once to bf16, as PyTorch's CPU autocast runs its linear layers. Where oneDNN has only
// its reference implementation for the problem (no bf16 instructions), it declines and the caller widens to f32
// for OpenBLAS instead, which is then the faster of the two. Whether the kernel asks oneDNN at all is
// bf16ProductsOnOneDnn()'s choice.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"

namespace tsr::ops {

// Matrices of rows x cols over batch dims (none, one, or several, as dot_general's batch dims lie in memory):
// element (b..., i, j) at data[sum(b_d * batchStrides[d]) + i * rowStride + j * colStride].
struct StridedMatrices {
  const bf16* data = nullptr;
  std::vector<int64_t> batch, batchStrides;
  int64_t rows = 1, cols = 1;
  int64_t rowStride = 0, colStride = 0;
};

// out [batch..., m, n] (row-major) = lhs [batch..., m, k] x rhs [batch..., k, n] (the same batch dims). False where oneDNN declines (see above)
// or refuses the problem: out is then untouched. Safe to call from several threads at once.
bool oneDnnBf16Matmul(const StridedMatrices& lhs, const StridedMatrices& rhs, bf16* out);

// The oneDNN implementation that would run the problem ("brg:avx512_core_bf16", ...), "ref..." where it has only
// its reference one (oneDnnBf16Matmul declines it), or "" where it refuses. For tests and benchmarks.
std::string oneDnnBf16MatmulImplementation(const StridedMatrices& lhs, const StridedMatrices& rhs);

// Whether dot_general's bf16 products go to oneDNN (else they widen to f32 for OpenBLAS's SGEMM), as
// TESSERA_CPU_BF16_MATMUL says: onednn, f32, or auto, which is cpuBf16ProductsOutrunF32().
bool bf16ProductsOnOneDnn();

// Whether this CPU computes bf16 products faster than f32 ones: with AMX's tile products, or on AMD's AVX512_BF16
// (Zen 4 and later: vdpbf16ps does two products a lane at the rate of an FMA's one; measured there at twice the
// SGEMM rate). An Intel CPU with AVX512_BF16 and no AMX (Cooper Lake, or a Sapphire/Emerald Rapids whose
// hypervisor hides AMX) issues vdpbf16ps on one port against two for f32 FMAs: oneDNN's bf16 products ran at
// 123-161 GFLOP/s on such a Xeon against SGEMM's 208-221. Asked once.
bool cpuBf16ProductsOutrunF32();

}  // namespace tsr::ops
