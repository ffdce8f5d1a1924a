#include "engine/backends/cuda/flash_attention.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "engine/backends/cuda/nvrtc.h"
#include "engine/core/env_options.h"

namespace tsr::cuda {

namespace {

constexpr int kRows = 64;  // query rows per block: one thread each
// Keys per tile in shared memory: K and V tiles take 2 * cols * D floats, under the 48 KiB of static shared memory.
int tileCols(int headDim) { return headDim > 64 ? 32 : 64; }

// The module `name` compiled from source(), once per (device, name, head dimension), kept for the process.
Result<std::shared_ptr<LoadedModule>> attentionModule(Device& d, const std::string& name, int64_t headDim,
                                                      const std::function<std::string()>& source) {
  static std::mutex mutex;
  static auto& modules =
      *new std::map<std::tuple<int, std::string, int64_t>, std::shared_ptr<LoadedModule>>();  // kept past exit
  std::lock_guard lock(mutex);
  auto& m = modules[{d.ordinal(), name, headDim}];
  if (!m) {
    NvrtcOptions o;
    o.sm = d.smVersion();
    TSR_ASSIGN(CompiledModule cm, compileCuda(source(), name, o));
    TSR_ASSIGN(m, LoadedModule::load(cm));
  }
  return m;
}

}  // namespace

std::string flashAttentionSource(int headDim) {
  return fmt::format(R"(// flash attention, head dimension {0}
#define D {0}
#define BR {1}
#define BC {2}
extern "C" __global__ void __launch_bounds__(BR) {3}(const float* __restrict__ q, const float* __restrict__ k,
    const float* __restrict__ v, float* __restrict__ out, int heads, int seq, long long sb, long long ss,
    long long sh, float scale, int causal) {{
  __shared__ float ks[BC][D];
  __shared__ float vs[BC][D];
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const int row = blockIdx.x * BR + threadIdx.x;
  const long long base = (long long)b * sb + (long long)h * sh;
  float qr[D], acc[D];
  float m = -__int_as_float(0x7f800000), l = 0.0f;
  if (row < seq)
    for (int d = 0; d < D; ++d) qr[d] = q[base + (long long)row * ss + d] * scale;
  for (int d = 0; d < D; ++d) acc[d] = 0.0f;
  // The last key tile this block needs: causal rows see keys up to themselves.
  const int lastRow = min(seq, (int)(blockIdx.x + 1) * BR) - 1;
  const int end = causal ? lastRow + 1 : seq;
  for (int c0 = 0; c0 < end; c0 += BC) {{
    __syncthreads();
    for (int e = threadIdx.x; e < BC * D; e += BR) {{
      const int j = e / D, d = e % D;
      const bool in = c0 + j < seq;
      ks[j][d] = in ? k[base + (long long)(c0 + j) * ss + d] : 0.0f;
      vs[j][d] = in ? v[base + (long long)(c0 + j) * ss + d] : 0.0f;
    }}
    __syncthreads();
    if (row >= seq) continue;
    const int cols = min(BC, (causal ? row + 1 : seq) - c0);
    if (cols <= 0) continue;
    float s[BC];
    float tileMax = m;
    for (int j = 0; j < cols; ++j) {{
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += qr[d] * ks[j][d];
      s[j] = dot;
      tileMax = fmaxf(tileMax, dot);
    }}
    const float correction = expf(m - tileMax);
    l *= correction;
    for (int d = 0; d < D; ++d) acc[d] *= correction;
    for (int j = 0; j < cols; ++j) {{
      const float p = expf(s[j] - tileMax);
      l += p;
      for (int d = 0; d < D; ++d) acc[d] += p * vs[j][d];
    }}
    m = tileMax;
  }}
  if (row < seq)
    for (int d = 0; d < D; ++d) out[base + (long long)row * ss + d] = acc[d] / l;
}}
)",
                     headDim, kRows, tileCols(headDim), kFlashAttentionKernel);
}

Status flashAttention(Device& d, const float* q, const float* k, const float* v, float* out, const AttentionShape& s) {
  if (s.headDim < 1 || s.headDim > 128)
    return makeError("flash attention: head dimension {} (1 to 128 supported)", s.headDim);
  if (s.seq > 0x7fffffff || s.heads > 0x7fffffff) return makeError("flash attention: sequence or heads too large");
  TSR_ASSIGN(std::shared_ptr<LoadedModule> mod, attentionModule(d, "flash_attention", s.headDim,
                                                                  [&] { return flashAttentionSource(static_cast<int>(s.headDim)); }));
  TSR_ASSIGN(const void* fn, mod->kernel(kFlashAttentionKernel));
  long long sh = s.strideHead ? s.strideHead : s.headDim;
  long long ss = s.strideSeq ? s.strideSeq : s.heads * s.headDim;
  long long sb = s.strideBatch ? s.strideBatch : s.seq * ss;
  int heads = static_cast<int>(s.heads), seq = static_cast<int>(s.seq), causal = s.causal ? 1 : 0;
  float scale = s.scale != 0 ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.headDim));
  void* args[] = {&q, &k, &v, &out, &heads, &seq, &sb, &ss, &sh, &scale, &causal};
  const int64_t rowBlocks = (s.seq + kRows - 1) / kRows;
  if (s.batch * s.heads > 65535) return makeError("flash attention: batch x heads = {} exceeds 65535", s.batch * s.heads);
  // Grid: x = row blocks, y = batch * heads.
  return launchKernel2d(fn, rowBlocks, s.batch * s.heads, kRows, args, 0, d.computeStream());
}

namespace {

Status checkAligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      return makeError("flash attention: an operand at {} is not 16-byte aligned", p);
  return {};
}

Status checkProblem(const AttentionProblem& p) {
  if (!flashAttentionSupports(p.headDim))
    return makeError("flash attention on tensor cores: head dimension {} (16, 32, 48 or 64 supported)", p.headDim);
  if (p.seqQ > 0x7fffffff || p.seqK > 0x7fffffff || p.heads > 0x7fffffff)
    return makeError("flash attention: sequence or heads too large");
  if (p.batch * p.heads > 65535) return makeError("flash attention: batch x heads = {} exceeds 65535", p.batch * p.heads);
  if (p.causal && p.seqQ != p.seqK) return makeError("flash attention: causal needs as many keys as queries");
  return {};
}

// One generation of the tensor-core kernels: its source, module name (with the I/O dtype, the module cache's key),
// rows (queries of tsr_fa_fwd and tsr_fa_bwd_dq, keys of tsr_fa_bwd_dkdv) and threads per block.
struct TensorCoreKernels {
  std::string (*source)(int, bool);
  const char* module;
  int rows, threads;
};
const TensorCoreKernels& tensorCoreKernels() {
  static constexpr TensorCoreKernels v1{tensorCoreAttentionSourceV1, "flash_attention_tc", 64, 128};
  static constexpr TensorCoreKernels v2{tensorCoreAttentionSourceV2, "flash_attention_tc2", 128, 256};  // BR, NTHR
  return flashKernelsV1() ? v1 : v2;
}

Result<std::shared_ptr<LoadedModule>> tensorCoreModule(Device& d, const TensorCoreKernels& tc, const AttentionProblem& p) {
  return attentionModule(d, fmt::format("{}_{}", tc.module, p.bf16 ? "bf16" : "f32"), p.headDim,
                         [&] { return tc.source(static_cast<int>(p.headDim), p.bf16); });
}

int64_t ioBytes(const AttentionProblem& p) { return p.bf16 ? 2 : 4; }

}  // namespace

bool flashKernelsV1() { return envOptions().flashKernelsV1; }

bool flashAttentionSupports(int64_t headDim) { return headDim >= 16 && headDim <= 64 && headDim % 16 == 0; }

Status flashAttentionForward(Device& d, const void* q, const void* k, const void* v, void* out, float* lse,
                             const AttentionProblem& p) {
  TSR_TRY(checkProblem(p));
  TSR_TRY(checkAligned({q, k, v, out}));
  if (p.batch * p.heads * p.seqQ == 0) return {};
  const TensorCoreKernels& tc = tensorCoreKernels();
  TSR_ASSIGN(std::shared_ptr<LoadedModule> mod, tensorCoreModule(d, tc, p));
  TSR_ASSIGN(const void* fn, mod->kernel("tsr_fa_fwd"));
  int heads = static_cast<int>(p.heads), tq = static_cast<int>(p.seqQ), tk = static_cast<int>(p.seqK);
  int causal = p.causal ? 1 : 0;
  long long ss = p.heads * p.headDim;
  float scale = 1.0f / std::sqrt(static_cast<float>(p.headDim));
  void* args[] = {&q, &k, &v, &out, &lse, &heads, &tq, &tk, &ss, &scale, &causal};
  return launchKernel2d(fn, (p.seqQ + tc.rows - 1) / tc.rows, p.batch * p.heads, tc.threads, args, 0,
                        d.computeStream());
}

Status flashAttentionBackward(Device& d, const void* q, const void* k, const void* v, const void* out,
                              const float* lse, const void* dout, const float* dlse, void* dq, void* dk, void* dv,
                              const AttentionProblem& p) {
  TSR_TRY(checkProblem(p));
  TSR_TRY(checkAligned({q, k, v, out, dout, dq, dk, dv}));
  const int64_t rows = p.batch * p.heads * p.seqQ;
  const TensorCoreKernels& tc = tensorCoreKernels();
  TSR_ASSIGN(std::shared_ptr<LoadedModule> mod, tensorCoreModule(d, tc, p));
  TSR_ASSIGN(const void* pre, mod->kernel("tsr_fa_bwd_pre"));
  TSR_ASSIGN(const void* dkdv, mod->kernel("tsr_fa_bwd_dkdv"));
  TSR_ASSIGN(const void* dqk, mod->kernel("tsr_fa_bwd_dq"));
  int heads = static_cast<int>(p.heads), tq = static_cast<int>(p.seqQ), tk = static_cast<int>(p.seqK);
  int causal = p.causal ? 1 : 0;
  long long ss = p.heads * p.headDim, nrows = rows;
  float scale = 1.0f / std::sqrt(static_cast<float>(p.headDim));
  if (rows == 0) {  // no queries: the keys' gradients are zero
    const int64_t bytes = p.batch * p.seqK * ss * ioBytes(p);
    TSR_TRY(d.memset(dk, 0, bytes));
    return d.memset(dv, 0, bytes);
  }
  // delta in a pool buffer, freed in stream order after the kernels that read it.
  TSR_ASSIGN(DeviceBufferPtr scratch, d.allocate(rows * static_cast<int64_t>(sizeof(float))));
  float* delta = static_cast<float*>(scratch->data());
  void* preArgs[] = {&out, &dout, &dlse, &delta, &heads, &tq, &ss, &nrows};
  TSR_TRY(launchKernel(pre, (rows + 3) / 4, 128, preArgs, 0, d.computeStream()));
  const float* deltaIn = delta;
  void* kvArgs[] = {&q, &k, &v, &dout, &lse, &deltaIn, &dk, &dv, &heads, &tq, &tk, &ss, &scale, &causal};
  if (p.seqK == 0) return d.memset(dq, 0, rows * p.headDim * ioBytes(p));  // no keys
  TSR_TRY(launchKernel2d(dkdv, (p.seqK + tc.rows - 1) / tc.rows, p.batch * p.heads, tc.threads, kvArgs, 0,
                         d.computeStream()));
  void* qArgs[] = {&q, &k, &v, &dout, &lse, &deltaIn, &dq, &heads, &tq, &tk, &ss, &scale, &causal};
  return launchKernel2d(dqk, (p.seqQ + tc.rows - 1) / tc.rows, p.batch * p.heads, tc.threads, qArgs, 0,
                        d.computeStream());
}

}  // namespace tsr::cuda
