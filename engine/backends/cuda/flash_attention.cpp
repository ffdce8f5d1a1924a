#include "engine/backends/cuda/flash_attention.h"

#include <cmath>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "engine/backends/cuda/nvrtc.h"

namespace tsr::cuda {

namespace {

constexpr int kRows = 64;  // query rows per block: one thread each
// Keys per tile in shared memory: K and V tiles take 2 * cols * D floats, under the 48 KiB of static shared memory.
int tileCols(int headDim) { return headDim > 64 ? 32 : 64; }

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
  // One compiled module per (device, head dimension), kept for the process.
  static std::mutex mutex;
  static auto& modules = *new std::map<std::pair<int, int64_t>, std::shared_ptr<LoadedModule>>();  // kept past exit
  std::shared_ptr<LoadedModule> mod;
  {
    std::lock_guard lock(mutex);
    auto& m = modules[{d.ordinal(), s.headDim}];
    if (!m) {
      NvrtcOptions o;
      o.sm = d.smVersion();
      TSR_ASSIGN(CompiledModule cm, compileCuda(flashAttentionSource(static_cast<int>(s.headDim)), "flash_attention", o));
      TSR_ASSIGN(m, LoadedModule::load(cm));
    }
    mod = m;
  }
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

}  // namespace tsr::cuda
