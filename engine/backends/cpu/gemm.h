#pragma once
// f32 dot_general as GEMMs on OpenBLAS, run single-threaded inside each of our pool's threads: the pool
// splits the batch, or the rows (or columns) of the product, so the GEMMs and the fused kernels share one set of
// threads and never compete for cores (OpenBLAS's own threads would spin between calls).
#include <cstdint>
#include <functional>
#include <optional>

#include "engine/core/dtype.h"
#include "engine/core/shape.h"
#include "engine/ir/attrs.h"

namespace tsr::cpu {

// result[b] (M x N) = op(A[b]) (M x K) * op(B[b]) (K x N), row-major, read in place.
struct GemmPlan {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool transA = false, transB = false;
  int64_t lda = 0, ldb = 0;
  int64_t strideA = 0, strideB = 0;  // elements between batches
};

// The GEMM view of a dot_general when both operands can be read in place: batch dims leading and in order,
// free and contracting dims each contiguous, contracting dims in ascending order on both sides. nullopt: the
// reference kernel (which packs operands) handles it.
std::optional<GemmPlan> planGemm(const Shape& lhs, const Shape& rhs, const ir::DotGeneralAttrs& attrs);

// TESSERA_GEMM_THREADS=blas: whole GEMMs on OpenBLAS's own threads instead.
bool blasThreaded();

// c = a * b, or c += a * b where accumulate.
void runGemm(const GemmPlan& p, const float* a, const float* b, float* c, bool accumulate = false);

// Floats of the widened operand panels (and f32 results) runGemmWidened holds at once (64 MB).
inline constexpr int64_t kWidenedPanelFloats = int64_t{16} << 20;

// The same product of bf16 operands on SGEMM, where the CPU's bf16 products are no faster than f32
// (ops::bf16ProductsOnOneDnn()): the contracted dim in panels whose widened operands (f32, exact, converted on
// the pool) hold at most panelFloats floats, each panel's product runGemm's, summed in f32; each result then
// rounded once to bf16 into c. `epilogue`, when given, is then called with the f32 results (an epilogue under
// excess precision reads them unrounded); c may then be null (nothing else reads the product). Without an
// epilogue, a product whose f32 result would exceed panelFloats runs in blocks of A's rows instead (all of K at
// once, B widened whole), so the f32 results held at once stay within panelFloats.
void runGemmWidened(const GemmPlan& p, const bf16* a, const bf16* b, bf16* c,
                    const std::function<void(const float*)>& epilogue = {},
                    int64_t panelFloats = kWidenedPanelFloats);

}  // namespace tsr::cpu
