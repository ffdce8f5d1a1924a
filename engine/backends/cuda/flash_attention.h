#pragma once
// Attention that never materialises the T x T score matrix (after FlashAttention, Dao et al. 2022): each
// block takes 64 query rows, streams the keys and values through shared memory in tiles of 64, and keeps a
// running maximum, normaliser and output per row (the online softmax), so memory is O(T * D) at any T.
// f32, head dimension up to 128, optional causal mask. Forward only; the executable does not yet recognise
// attention in traced graphs, so models still run attention as dot_general + softmax.
#include <string>

#include "engine/backends/cuda/device.h"

namespace tsr::cuda {

struct AttentionShape {
  int64_t batch = 1, heads = 1, seq = 1, headDim = 64;
  // Element strides of q, k, v and out, laid out [batch, seq, heads, headDim] by default.
  int64_t strideBatch = 0, strideSeq = 0, strideHead = 0;  // 0: the dense [B, T, H, D] layout
  bool causal = true;
  float scale = 0;  // 0: 1 / sqrt(headDim)
};

// The kernel's CUDA C++ for one head dimension (a compile-time constant of the kernel).
std::string flashAttentionSource(int headDim);
inline constexpr const char* kFlashAttentionKernel = "tsr_flash_attention";

// out = softmax(q k^T * scale [+ causal mask]) v on the device's compute stream.
Status flashAttention(Device& d, const float* q, const float* k, const float* v, float* out, const AttentionShape& s);

}  // namespace tsr::cuda
