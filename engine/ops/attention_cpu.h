#pragma once
// dot_product_attention's CPU kernels for f32 and bf16 operands (attention.cpp keeps the double loops for f64):
// FlashAttention's plan on small matrix products. Each (batch, head) is cut into blocks of query rows (64 under
// the causal mask, which skips the keys after a block's last row; without it, as many rows as keep a block's
// scores in L2, so ViT's 197 tokens make one block). A block's scores are computed transposed, [keys, rows]
// = k q^T, reading q and k where they lie ([B, T, H, D]: rows H*D apart, or a row view's rowStride apart), so
// that the softmax runs down columns, whole vectors of query rows at a time; e^(s - max) is taken in place and
// one product more gives the block's output, each row then divided by its sum (D values, not S). Nothing of
// [T, S] outlives a block. The gradient walks each head's blocks in turn, rebuilding P from lse, with five
// products a block (dq, and dk and dv summed over the blocks). On AVX-512 the products run on register tiles
// that read both operands in place and skip the tiles the causal mask hides; elsewhere on OpenBLAS's SGEMM.
// bf16 operands are widened per head and the results rounded once; everything is computed in f32.
#include <cstdint>

#include "engine/ir/op_def.h"

namespace tsr::ops {

struct AttentionDims {
  int64_t b = 0, t = 0, s = 0, h = 0, d = 0;  // q [b, t, h, d], k and v [b, s, h, d]
};

// Elements from one [H, D] row of a [B, seq, H, D] operand or result to the next: a row view's stride
// (TensorView::rowStride), H*D where it is contiguous.
inline int64_t attentionRowsApart(int64_t rowStride, const AttentionDims& m) {
  return rowStride ? rowStride : m.h * m.d;
}

// inputs q, k, v; outputs out, lse (f32). q's dtype f32 or bf16.
void blockedAttention(const ir::CpuKernelArgs& a, const AttentionDims& m, bool causal);
// inputs q, k, v, out, lse, dout, dlse; outputs dq, dk, dv. q's dtype f32 or bf16.
void blockedAttentionGrad(const ir::CpuKernelArgs& a, const AttentionDims& m, bool causal);

}  // namespace tsr::ops
