#pragma once
// Scaled dot-product attention over heads, shared by GPT-2 and ViT.
#include "engine/nn/layers.h"

namespace tsr::nn {

// q, k, v: [B, H, T, D] -> [B, H, T, D]. With `causal`, position t attends to positions <= t.
Array dotProductAttention(const Array& q, const Array& k, const Array& v, bool causal, const Dropout& dropout,
                          Context& ctx);

// [B, T, H*D] <-> [B, H, T, D]
Array splitHeads(const Array& x, int64_t heads);
Array mergeHeads(const Array& x);

}  // namespace tsr::nn
