#pragma once
// Attention that never materialises the T x T score matrix (after FlashAttention, Dao et al. 2022): each
// block takes 64 query rows, streams the keys and values through shared memory in tiles of 64, and keeps a
// running maximum, normaliser and output per row (the online softmax), so memory is O(T * D) at any T.
// f32, head dimension up to 128, optional causal mask, forward only (flashAttention, f32 CUDA cores).
//
// The dot_product_attention op and its gradient (engine/ops/attention.cpp) run on FlashAttention-2's kernels on
// tensor cores where matmuls are bf16 (flashAttentionForward/Backward): mma.sync m16n8k16, bf16 operands, f32
// accumulation, softmax and outputs; head dims 16, 32, 48, 64. Forward: a block per 64 queries of a head, a warp
// per 16, keys and values streamed through shared memory in tiles of 64, the scores' online softmax in the
// registers of the products' accumulators, which then feed the next product as bf16 (no shared-memory round
// trip); it also writes each row's log-sum-exp. Backward: delta = rowsum(dout * out) - dlse per row, then a
// kernel per 64 keys accumulating dk and dv over the query tiles and one per 64 queries accumulating dq over the
// key tiles, each rebuilding P from the log-sum-exp: no [T, T] matrix in memory and no atomics (deterministic).
// That is v1 (TESSERA_FLASH_KERNELS=v1); v2, the default, takes 128 rows and 8 warps a block, loads the next
// tile into registers while the current one is multiplied, reads all B fragments with ldmatrix (.trans for the
// products that need a transposed tile) and masks only the tiles that need it. Both read and write q, k, v, out,
// dout and the gradients in f32 or in bf16 (autocast's activations, with no converts around the op); the
// log-sum-exps and delta stay f32.
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

// The tensor-core kernels' problem: q, out and dout [batch, seqQ, heads, headDim], k and v [batch, seqK, heads,
// headDim], dense; lse, dlse [batch, heads, seqQ] f32; scale 1/sqrt(headDim). bf16: q, k, v, out, dout and the
// gradients are bf16 (else f32).
struct AttentionProblem {
  int64_t batch = 1, heads = 1, seqQ = 1, seqK = 1, headDim = 64;
  bool causal = false;
  bool bf16 = false;
};
bool flashAttentionSupports(int64_t headDim);
// Whether to run the first generation of the tensor-core kernels (64 rows a block, synchronous tile loads) rather
// than v2 (128 rows a block, register-prefetched tiles, ldmatrix fragments): TESSERA_FLASH_KERNELS=v1.
bool flashKernelsV1();
// Each generation's source for one head dimension and I/O dtype (flash_attention_kernels.cpp; tests compile all).
std::string tensorCoreAttentionSourceV1(int headDim, bool bf16);
std::string tensorCoreAttentionSourceV2(int headDim, bool bf16);
// q, k, v, out, dout, dq, dk, dv: f32 or (p.bf16) bf16 device arrays.
Status flashAttentionForward(Device& d, const void* q, const void* k, const void* v, void* out, float* lse,
                             const AttentionProblem& p);
Status flashAttentionBackward(Device& d, const void* q, const void* k, const void* v, const void* out,
                              const float* lse, const void* dout, const float* dlse, void* dq, void* dk, void* dv,
                              const AttentionProblem& p);

}  // namespace tsr::cuda
