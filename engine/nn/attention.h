#pragma once
// Scaled dot-product attention over heads, shared by GPT-2 and ViT.
#include "engine/nn/layers.h"

namespace tsr::nn {

// q, k, v: [B, H, T, D] -> [B, H, T, D]. With `causal`, position t attends to positions <= t.
Array dotProductAttention(const Array& q, const Array& k, const Array& v, bool causal, const Dropout& dropout,
                          Context& ctx);

// Whether models trace attention as one fused op (Context::setFusedAttention) for a step on `device` with f32
// matmuls at `matmulPrecision`: TESSERA_FUSED_ATTENTION=on/off, else (auto) on the CPU (blocked kernels on SGEMM,
// the masked half skipped: about 2x the unfused form) and on the GPU with bf16 matmuls, where flash attention runs
// on tensor cores. A GPU step at f32 or tf32 keeps the unfused form: the fused op would run on the host there.
bool fusedAttentionFor(const std::string& device, const std::string& matmulPrecision);

// [B, T, H*D] <-> [B, H, T, D]
Array splitHeads(const Array& x, int64_t heads);
Array mergeHeads(const Array& x);

}  // namespace tsr::nn
