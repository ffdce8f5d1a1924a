// The tensor-core flash attention kernels' CUDA source, both generations (flash_attention.h says what each
// does; flash_attention.cpp compiles and launches them).
#include <string>

#include <fmt/format.h>

#include "engine/backends/cuda/flash_attention.h"

namespace tsr::cuda {

namespace {

// v1: the first tensor-core kernels (64 rows and 4 warps a block, synchronous tile loads, transposed copies of the
// tiles for the B fragments), kept as a fallback (TESSERA_FLASH_KERNELS=v1).
// What both generations share: the constants, bf16 mma operands, the I/O element type and the backward pass's
// first kernel. q, k, v, out, dout, dq, dk and dv are tsr_io: f32, or bf16 where TSR_IO_BF16 is 1 (autocast's
// activations, read and written as they are); lse, dlse and delta are f32 either way.
constexpr const char* kTensorCorePrelude = R"TSR(
#define TSR_INF __int_as_float(0x7f800000)
#define TSR_LOG2E 1.4426950408889634f  // softmax in base 2: exp(x) = exp2(x log2 e), one ex2 each
#define TSR_LN2 0.6931471805599453f
typedef unsigned short bf16_t;

// Two floats as bf16x2 (round to nearest even), lo in the low half: an mma operand register.
__device__ __forceinline__ unsigned tsr_pack(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// c (16x8 f32) += a (16x16 bf16, row-major) * b (16x8 bf16, column-major): lane = 4 g + t holds
// a: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); b: (2t..2t+1, g), (2t+8.., g); c: (g, 2t..2t+1), (g+8, 2t..).
__device__ __forceinline__ void tsr_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two accumulator tiles (16 x 8 f32, columns 16 kk.. and 16 kk + 8..) as the A fragment of columns 16 kk..16 kk+15.
__device__ __forceinline__ void tsr_c_to_a(unsigned* a, const float* c0, const float* c1) {
  a[0] = tsr_pack(c0[0], c0[1]);
  a[1] = tsr_pack(c0[2], c0[3]);
  a[2] = tsr_pack(c1[0], c1[1]);
  a[3] = tsr_pack(c1[2], c1[3]);
}

// tsr_io4: four consecutive elements as one load (16 bytes of f32, 8 of bf16). tsr_bits2, tsr_bits4: elements as
// packed bf16 mma operands. tsr_get2: two elements as floats. tsr_put2: two floats stored (rounded to bf16).
#if TSR_IO_BF16
typedef bf16_t tsr_io;
typedef uint2 tsr_io4;
__device__ __forceinline__ float tsr_f(bf16_t x) { return __uint_as_float((unsigned)x << 16); }
__device__ __forceinline__ unsigned tsr_bits2(const tsr_io* p) { return *(const unsigned*)p; }
__device__ __forceinline__ uint2 tsr_bits4(tsr_io4 r) { return r; }
__device__ __forceinline__ tsr_io4 tsr_zero4() { return make_uint2(0u, 0u); }
__device__ __forceinline__ float2 tsr_get2(const tsr_io* p) {
  const unsigned u = *(const unsigned*)p;
  return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
__device__ __forceinline__ void tsr_put2(tsr_io* p, float lo, float hi) { *(unsigned*)p = tsr_pack(lo, hi); }
#else
typedef float tsr_io;
typedef float4 tsr_io4;
__device__ __forceinline__ float tsr_f(float x) { return x; }
__device__ __forceinline__ unsigned tsr_bits2(const tsr_io* p) {
  const float2 f = *(const float2*)p;
  return tsr_pack(f.x, f.y);
}
__device__ __forceinline__ uint2 tsr_bits4(tsr_io4 f) { return make_uint2(tsr_pack(f.x, f.y), tsr_pack(f.z, f.w)); }
__device__ __forceinline__ tsr_io4 tsr_zero4() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ float2 tsr_get2(const tsr_io* p) { return *(const float2*)p; }
__device__ __forceinline__ void tsr_put2(tsr_io* p, float lo, float hi) { *(float2*)p = make_float2(lo, hi); }
#endif

// delta = rowsum(dout * out) - dlse, a warp per row ([batch * heads * tq] rows, 4 per block).
extern "C" __global__ void __launch_bounds__(128) tsr_fa_bwd_pre(const tsr_io* __restrict__ out,
    const tsr_io* __restrict__ dout, const float* __restrict__ dlse, float* __restrict__ delta, int heads, int tq,
    long long ss, long long rows) {
  const long long row = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const long long bh = row / tq, b = bh / heads, h = bh % heads;
  const long long base = b * tq * ss + h * D + (row % tq) * ss;
  float sum = 0.0f;
  for (int d = 2 * lane; d < D; d += 64) {
    const float2 x = tsr_get2(out + base + d), y = tsr_get2(dout + base + d);
    sum += x.x * y.x + x.y * y.y;
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) delta[row] = sum - dlse[row];
}
)TSR";

constexpr const char* kTensorCoreAttentionV1 = R"(// FlashAttention-2 on tensor cores
#define KT (D / 16)  // k-steps of 16 over the head dim
#define DN (D / 8)   // n-tiles of 8 over the head dim
#define LDS (D + 8)  // row stride (bf16) of a [64][D] tile in shared memory: conflict-free fragment loads
#define LDT 72       // row stride (bf16) of a [D][64] (transposed) tile
__device__ __forceinline__ unsigned tsr_ld2(const bf16_t* p) { return *(const unsigned*)p; }
__device__ __forceinline__ void tsr_zero(float (*c)[4], int n) {
  for (int i = 0; i < n; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
}
// Element (row, d) of a head of a [B, seq, H, D] tensor (`base`: the batch and head's offset); 0 past seq.
__device__ __forceinline__ float tsr_at(const tsr_io* x, long long base, int row, int d, int seq, long long ss) {
  return row < seq ? tsr_f(x[base + (long long)row * ss + d]) : 0.0f;
}
// The A fragment of rows r0..r0+15 of a head, columns 16 kt..16 kt+15, straight from global memory.
__device__ __forceinline__ void tsr_frag(unsigned* a, const tsr_io* x, long long base, int r0, int kt, int seq,
                                         long long ss, int g, int t) {
  const int c = kt * 16 + 2 * t;
  a[0] = tsr_pack(tsr_at(x, base, r0 + g, c, seq, ss), tsr_at(x, base, r0 + g, c + 1, seq, ss));
  a[1] = tsr_pack(tsr_at(x, base, r0 + g + 8, c, seq, ss), tsr_at(x, base, r0 + g + 8, c + 1, seq, ss));
  a[2] = tsr_pack(tsr_at(x, base, r0 + g, c + 8, seq, ss), tsr_at(x, base, r0 + g, c + 9, seq, ss));
  a[3] = tsr_pack(tsr_at(x, base, r0 + g + 8, c + 8, seq, ss), tsr_at(x, base, r0 + g + 8, c + 9, seq, ss));
}
// Rows r0..r0+63 of a head into shared memory as bf16: `rows` [64][LDS] and/or `cols` [D][LDT] (transposed);
// four elements a load (a head's rows are 16-byte aligned: D is a multiple of 16), every load of a thread issued
// before the first is used.
__device__ __forceinline__ void tsr_tile(bf16_t* rows, bf16_t* cols, const tsr_io* x, long long base, int r0,
                                         int seq, long long ss) {
#pragma unroll
  for (int e = threadIdx.x * 4; e < 64 * D; e += 512) {
    const int j = e / D, d = e % D;
    tsr_io4 f = tsr_zero4();
    if (r0 + j < seq) f = *(const tsr_io4*)(x + base + (long long)(r0 + j) * ss + d);
    const uint2 bits = tsr_bits4(f);
    const unsigned lo = bits.x, hi = bits.y;
    if (rows) *(uint2*)(rows + j * LDS + d) = make_uint2(lo, hi);
    if (cols) {
      cols[d * LDT + j] = (bf16_t)(lo & 0xffffu);
      cols[(d + 1) * LDT + j] = (bf16_t)(lo >> 16);
      cols[(d + 2) * LDT + j] = (bf16_t)(hi & 0xffffu);
      cols[(d + 3) * LDT + j] = (bf16_t)(hi >> 16);
    }
  }
}
__device__ __forceinline__ bool tsr_sees(int qi, int kj, int tq, int tk, int causal) {
  return qi < tq && kj < tk && !(causal && kj > qi);
}

// out and lse for 64 queries of one head (grid: query blocks x batch * heads; 4 warps of 16 queries).
extern "C" __global__ void __launch_bounds__(128) tsr_fa_fwd(const tsr_io* __restrict__ q,
    const tsr_io* __restrict__ k, const tsr_io* __restrict__ v, tsr_io* __restrict__ out, float* __restrict__ lse,
    int heads, int tq, int tk, long long ss, float scale, int causal) {
  __shared__ __align__(16) bf16_t sK[64 * LDS];
  __shared__ __align__(16) bf16_t sVt[D * LDT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const long long qBase = (long long)b * tq * ss + (long long)h * D, kBase = (long long)b * tk * ss + (long long)h * D;
  const int q0 = blockIdx.x * 64 + warp * 16;
  unsigned qa[KT][4];
  for (int kt = 0; kt < KT; ++kt) tsr_frag(qa[kt], q, qBase, q0, kt, tq, ss, g, t);
  float o[DN][4];
  tsr_zero(o, DN);
  float m[2] = {-TSR_INF, -TSR_INF}, l[2] = {0.0f, 0.0f};  // the rows' maxima (base 2) and this thread's sums
  const float scale2 = scale * TSR_LOG2E;
  const int kEnd = causal ? min(tk, (int)blockIdx.x * 64 + 64) : tk;
  for (int k0 = 0; k0 < kEnd; k0 += 64) {
    __syncthreads();
    tsr_tile(sK, 0, k, kBase, k0, tk, ss);
    tsr_tile(0, sVt, v, kBase, k0, tk, ss);
    __syncthreads();
    float s[8][4];
    tsr_zero(s, 8);
    for (int n = 0; n < 8; ++n) {
      const bf16_t* kr = sK + (n * 8 + g) * LDS + 2 * t;
      for (int kt = 0; kt < KT; ++kt) tsr_mma(s[n], qa[kt], tsr_ld2(kr + kt * 16), tsr_ld2(kr + kt * 16 + 8));
    }
    for (int r = 0; r < 2; ++r) {  // rows g and g + 8: the online softmax
      const int qi = q0 + g + 8 * r;
      float mx = -TSR_INF;
      for (int n = 0; n < 8; ++n)
        for (int e = 0; e < 2; ++e) {
          const float x = tsr_sees(qi, k0 + n * 8 + 2 * t + e, tq, tk, causal) ? s[n][2 * r + e] * scale2 : -TSR_INF;
          s[n][2 * r + e] = x;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mNew = fmaxf(m[r], mx);
      const float base = mNew == -TSR_INF ? 0.0f : mNew;
      const float alpha = exp2f(m[r] - base);
      m[r] = mNew;
      float sum = 0.0f;
      for (int n = 0; n < 8; ++n)
        for (int e = 0; e < 2; ++e) {
          const float p = exp2f(s[n][2 * r + e] - base);
          s[n][2 * r + e] = p;
          sum += p;
        }
      l[r] = l[r] * alpha + sum;  // this thread's share of the row; the quad's shares are added at the end
      for (int n = 0; n < DN; ++n) {
        o[n][2 * r] *= alpha;
        o[n][2 * r + 1] *= alpha;
      }
    }
    for (int kk = 0; kk < 4; ++kk) {
      unsigned pa[4];
      tsr_c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
      for (int n = 0; n < DN; ++n) {
        const bf16_t* vr = sVt + (n * 8 + g) * LDT + kk * 16 + 2 * t;
        tsr_mma(o[n], pa, tsr_ld2(vr), tsr_ld2(vr + 8));
      }
    }
  }
  for (int r = 0; r < 2; ++r) {
    float lr = l[r];
    lr += __shfl_xor_sync(0xffffffffu, lr, 1);
    lr += __shfl_xor_sync(0xffffffffu, lr, 2);
    const int qi = q0 + g + 8 * r;
    if (qi >= tq) continue;
    const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
    tsr_io* dst = out + qBase + (long long)qi * ss + 2 * t;
    for (int n = 0; n < DN; ++n) tsr_put2(dst + n * 8, o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    if (t == 0) lse[(long long)bh * tq + qi] = lr > 0.0f ? (m[r] + log2f(lr)) * TSR_LN2 : -TSR_INF;
  }
}

// dk and dv for 64 keys of one head, over the query tiles that see them (a warp per 16 keys).
extern "C" __global__ void __launch_bounds__(128) tsr_fa_bwd_dkdv(const tsr_io* __restrict__ q,
    const tsr_io* __restrict__ k, const tsr_io* __restrict__ v, const tsr_io* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, tsr_io* __restrict__ dk, tsr_io* __restrict__ dv,
    int heads, int tq, int tk, long long ss, float scale, int causal) {
  __shared__ __align__(16) bf16_t sQ[64 * LDS];
  __shared__ __align__(16) bf16_t sQt[D * LDT];
  __shared__ __align__(16) bf16_t sO[64 * LDS];
  __shared__ __align__(16) bf16_t sOt[D * LDT];
  __shared__ float sL[64], sDel[64];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const long long qBase = (long long)b * tq * ss + (long long)h * D, kBase = (long long)b * tk * ss + (long long)h * D;
  const int j0 = blockIdx.x * 64 + warp * 16;
  const float scale2 = scale * TSR_LOG2E;
  unsigned ka[KT][4], va[KT][4];
  for (int kt = 0; kt < KT; ++kt) {
    tsr_frag(ka[kt], k, kBase, j0, kt, tk, ss, g, t);
    tsr_frag(va[kt], v, kBase, j0, kt, tk, ss, g, t);
  }
  float gk[DN][4], gv[DN][4];
  tsr_zero(gk, DN);
  tsr_zero(gv, DN);
  for (int i0 = causal ? blockIdx.x * 64 : 0; i0 < tq; i0 += 64) {
    __syncthreads();
    tsr_tile(sQ, sQt, q, qBase, i0, tq, ss);
    tsr_tile(sO, sOt, dout, qBase, i0, tq, ss);
    if (threadIdx.x < 64) {
      const int i = i0 + threadIdx.x;
      sL[threadIdx.x] = i < tq ? lse[(long long)bh * tq + i] * TSR_LOG2E : 0.0f;
      sDel[threadIdx.x] = i < tq ? delta[(long long)bh * tq + i] : 0.0f;
    }
    __syncthreads();
    float p[8][4], dp[8][4];  // P^T and dP^T: [this warp's 16 keys][64 queries]
    tsr_zero(p, 8);
    tsr_zero(dp, 8);
    for (int n = 0; n < 8; ++n) {
      const bf16_t* qr = sQ + (n * 8 + g) * LDS + 2 * t;
      const bf16_t* orow = sO + (n * 8 + g) * LDS + 2 * t;
      for (int kt = 0; kt < KT; ++kt) {
        tsr_mma(p[n], ka[kt], tsr_ld2(qr + kt * 16), tsr_ld2(qr + kt * 16 + 8));
        tsr_mma(dp[n], va[kt], tsr_ld2(orow + kt * 16), tsr_ld2(orow + kt * 16 + 8));
      }
    }
    for (int n = 0; n < 8; ++n)
      for (int e = 0; e < 4; ++e) {
        const int kj = j0 + g + (e >> 1) * 8, il = n * 8 + 2 * t + (e & 1);
        const float pr = tsr_sees(i0 + il, kj, tq, tk, causal) ? exp2f(p[n][e] * scale2 - sL[il]) : 0.0f;
        p[n][e] = pr;
        dp[n][e] = pr * (dp[n][e] - sDel[il]);  // dS^T
      }
    for (int kk = 0; kk < 4; ++kk) {
      unsigned pa[4], da[4];
      tsr_c_to_a(pa, p[2 * kk], p[2 * kk + 1]);
      tsr_c_to_a(da, dp[2 * kk], dp[2 * kk + 1]);
      for (int n = 0; n < DN; ++n) {
        const bf16_t* orow = sOt + (n * 8 + g) * LDT + kk * 16 + 2 * t;
        const bf16_t* qrow = sQt + (n * 8 + g) * LDT + kk * 16 + 2 * t;
        tsr_mma(gv[n], pa, tsr_ld2(orow), tsr_ld2(orow + 8));
        tsr_mma(gk[n], da, tsr_ld2(qrow), tsr_ld2(qrow + 8));
      }
    }
  }
  for (int r = 0; r < 2; ++r) {
    const int kj = j0 + g + 8 * r;
    if (kj >= tk) continue;
    tsr_io* dkr = dk + kBase + (long long)kj * ss + 2 * t;
    tsr_io* dvr = dv + kBase + (long long)kj * ss + 2 * t;
    for (int n = 0; n < DN; ++n) {
      tsr_put2(dkr + n * 8, gk[n][2 * r] * scale, gk[n][2 * r + 1] * scale);
      tsr_put2(dvr + n * 8, gv[n][2 * r], gv[n][2 * r + 1]);
    }
  }
}

// dq for 64 queries of one head, over the key tiles they see (a warp per 16 queries).
extern "C" __global__ void __launch_bounds__(128) tsr_fa_bwd_dq(const tsr_io* __restrict__ q,
    const tsr_io* __restrict__ k, const tsr_io* __restrict__ v, const tsr_io* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, tsr_io* __restrict__ dq, int heads, int tq,
    int tk, long long ss, float scale, int causal) {
  __shared__ __align__(16) bf16_t sK[64 * LDS];
  __shared__ __align__(16) bf16_t sKt[D * LDT];
  __shared__ __align__(16) bf16_t sV[64 * LDS];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const long long qBase = (long long)b * tq * ss + (long long)h * D, kBase = (long long)b * tk * ss + (long long)h * D;
  const int q0 = blockIdx.x * 64 + warp * 16;
  unsigned qa[KT][4], oa[KT][4];
  for (int kt = 0; kt < KT; ++kt) {
    tsr_frag(qa[kt], q, qBase, q0, kt, tq, ss, g, t);
    tsr_frag(oa[kt], dout, qBase, q0, kt, tq, ss, g, t);
  }
  float lr[2], dr[2];
  for (int r = 0; r < 2; ++r) {
    const int qi = q0 + g + 8 * r;
    lr[r] = qi < tq ? lse[(long long)bh * tq + qi] * TSR_LOG2E : 0.0f;
    dr[r] = qi < tq ? delta[(long long)bh * tq + qi] : 0.0f;
  }
  const float scale2 = scale * TSR_LOG2E;
  float gq[DN][4];
  tsr_zero(gq, DN);
  const int kEnd = causal ? min(tk, (int)blockIdx.x * 64 + 64) : tk;
  for (int k0 = 0; k0 < kEnd; k0 += 64) {
    __syncthreads();
    tsr_tile(sK, sKt, k, kBase, k0, tk, ss);
    tsr_tile(sV, 0, v, kBase, k0, tk, ss);
    __syncthreads();
    float s[8][4], dp[8][4];
    tsr_zero(s, 8);
    tsr_zero(dp, 8);
    for (int n = 0; n < 8; ++n) {
      const bf16_t* kr = sK + (n * 8 + g) * LDS + 2 * t;
      const bf16_t* vr = sV + (n * 8 + g) * LDS + 2 * t;
      for (int kt = 0; kt < KT; ++kt) {
        tsr_mma(s[n], qa[kt], tsr_ld2(kr + kt * 16), tsr_ld2(kr + kt * 16 + 8));
        tsr_mma(dp[n], oa[kt], tsr_ld2(vr + kt * 16), tsr_ld2(vr + kt * 16 + 8));
      }
    }
    for (int n = 0; n < 8; ++n)
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, qi = q0 + g + 8 * r, kj = k0 + n * 8 + 2 * t + (e & 1);
        const float pr = tsr_sees(qi, kj, tq, tk, causal) ? exp2f(s[n][e] * scale2 - lr[r]) : 0.0f;
        dp[n][e] = pr * (dp[n][e] - dr[r]);  // dS
      }
    for (int kk = 0; kk < 4; ++kk) {
      unsigned da[4];
      tsr_c_to_a(da, dp[2 * kk], dp[2 * kk + 1]);
      for (int n = 0; n < DN; ++n) {
        const bf16_t* kr = sKt + (n * 8 + g) * LDT + kk * 16 + 2 * t;
        tsr_mma(gq[n], da, tsr_ld2(kr), tsr_ld2(kr + 8));
      }
    }
  }
  for (int r = 0; r < 2; ++r) {
    const int qi = q0 + g + 8 * r;
    if (qi >= tq) continue;
    tsr_io* dst = dq + qBase + (long long)qi * ss + 2 * t;
    for (int n = 0; n < DN; ++n) tsr_put2(dst + n * 8, gq[n][2 * r] * scale, gq[n][2 * r + 1] * scale);
  }
}
)";

// v2 (the default): see the notes at the top of the source.
constexpr const char* kTensorCoreAttentionV2 = R"TSR(// FlashAttention-2 on tensor cores (v2): register-prefetched tiles, ldmatrix fragments, masks only where needed.
//
// mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32, lane = 4 g + t (g = lane / 4, t = lane % 4):
//   A (16 x 16, row-major):  a0 (g, 2t..2t+1), a1 (g+8, 2t..2t+1), a2 (g, 2t+8..2t+9), a3 (g+8, 2t+8..2t+9)
//   B (16 x 8, k x n):       b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g)
//   C (16 x 8 f32):          c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..2t+1)
// ldmatrix.m8n8.x4.b16: lane 8 i + r gives the shared address of row r of matrix i (8 bf16, 16 bytes); result
// register i holds matrix i's elements: without .trans lane 4 g + t gets (row g, cols 2t, 2t+1); with .trans it gets
// (rows 2t, 2t+1, col g). Tiles in shared memory are bf16, row-major [64 rows][LDS], LDS = D + 8 (rows 16 bytes
// apart modulo 128: the 8 row addresses of a matrix hit distinct banks).
// * B of n-tiles n, n+1 and k-step kt from a tile stored [n][k] (S = Q K^T: K is [key][d]; S^T = K Q^T: Q is
//   [query][d]; dP = dO V^T: V; dP^T = V dO^T: dO): non-transposed x4 of matrices (n 0-7, k 0-7), (n 0-7, k 8-15),
//   (n 8-15, k 0-7), (n 8-15, k 8-15) = b0, b1 of n-tile n, b0, b1 of n-tile n+1: lane l addresses row
//   8 n + (l & 7) + (l & 16 ? 8 : 0), column 16 kt + (l & 8) (tsr_ldb).
// * B of n-tiles n, n+1 and k-step kk from a tile stored [k][n] (O = P V: V is [key][d]; dQ = dS K: K; dV = P^T dO:
//   dO [query][d]; dK = dS^T Q: Q): .trans x4 of matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15),
//   (k 8-15, n 8-15) = b0, b1 of n-tile n, b0, b1 of n-tile n+1: lane l addresses row 16 kk + (l & 7) + (l & 8),
//   column 8 n + (l & 16 ? 8 : 0) (tsr_ldbt). No transposed copies of any tile.
// * A of P, dS (and their transposes): the accumulators of n-tiles 2 kk, 2 kk + 1 are a0..a3 of k-step kk (tsr_c_to_a).
// * A of the block's own rows (Q, dO in fwd / dq; K, V in dkdv): once per block from global, a pair a load.
// Tiles of 64 rows stream through two shared buffers: the loads of tile i + 1 are issued into registers
// before tile i's math and converted and stored to the other buffer after it, one barrier per tile.
// Masks: only the tiles that hold keys past tk, or (causal) keys past some query of the warp, test elements; a
// warp skips tiles that it cannot see at all.
#define KT (D / 16)  // k-steps of 16 over the head dim
#define DN (D / 8)   // n-tiles of 8 over the head dim
#define LDS (D + 8)  // row stride (bf16) of a [64][D] tile in shared memory
#define NWARP 8      // warps per block: 16 rows each
#define NTHR (NWARP * 32)
#define BR (NWARP * 16)  // rows (queries, or keys in dkdv) per block
#define NLD (64 * D / 4 / NTHR)  // loads (four elements each) per thread for a 64-row tile
__device__ __forceinline__ float tsr_exp2(float x) {  // 2^x, 2^-inf = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ unsigned tsr_smem(const void* p) {
  unsigned a;
  asm("{ .reg .u64 u; cvta.to.shared.u64 u, %1; cvt.u32.u64 %0, u; }" : "=r"(a) : "l"(p));
  return a;
}
// B fragments {b0, b1} of n-tiles n and n + 1 (see above); `addr`: the lane's row address (tsr_smem).
__device__ __forceinline__ void tsr_ldb(unsigned* b, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void tsr_ldbt(unsigned* b, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void tsr_zero(float (*c)[4], int n) {
#pragma unroll
  for (int i = 0; i < n; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
}
// Elements (row, c..c+1) of a head of a [B, seq, H, D] tensor (`base`: the batch and head's offset); 0 past seq.
__device__ __forceinline__ unsigned tsr_at2(const tsr_io* x, long long base, int row, int c, int seq, long long ss) {
  return row < seq ? tsr_bits2(x + base + (long long)row * ss + c) : 0u;
}
// The A fragments of rows r0..r0+15 of a head, all k-steps, straight from global memory.
__device__ __forceinline__ void tsr_frag(unsigned (*a)[4], const tsr_io* x, long long base, int r0, int seq,
                                         long long ss, int g, int t) {
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
    const int c = kt * 16 + 2 * t;
    a[kt][0] = tsr_at2(x, base, r0 + g, c, seq, ss);
    a[kt][1] = tsr_at2(x, base, r0 + g + 8, c, seq, ss);
    a[kt][2] = tsr_at2(x, base, r0 + g, c + 8, seq, ss);
    a[kt][3] = tsr_at2(x, base, r0 + g + 8, c + 8, seq, ss);
  }
}
// Issue the loads of rows r0..r0+63 of a head (zeros past seq) into registers: load e of the tile (four elements) is
// thread e % NTHR's load e / NTHR (a head's rows are 16-byte aligned: D is a multiple of 16).
__device__ __forceinline__ void tsr_fetch(tsr_io4* r, const tsr_io* x, long long base, int r0, int seq, long long ss) {
#pragma unroll
  for (int i = 0; i < NLD; ++i) {
    const int e = ((int)threadIdx.x + i * NTHR) * 4, j = e / D, d = e % D;
    r[i] = tsr_zero4();
    if (r0 + j < seq) r[i] = *(const tsr_io4*)(x + base + (long long)(r0 + j) * ss + d);
  }
}
// ... and store them to a [64][LDS] bf16 tile.
__device__ __forceinline__ void tsr_stash(bf16_t* tile, const tsr_io4* r) {
#pragma unroll
  for (int i = 0; i < NLD; ++i) {
    const int e = ((int)threadIdx.x + i * NTHR) * 4, j = e / D, d = e % D;
    *(uint2*)(tile + j * LDS + d) = tsr_bits4(r[i]);
  }
}

// out and lse for BR queries of one head (grid: query blocks x batch * heads; NWARP warps of 16 queries). Two
// blocks an SM (registers capped at 128: a few bytes spill at D = 64, still faster on an H200 than one block).
extern "C" __global__ void __launch_bounds__(NTHR, 2) tsr_fa_fwd(const tsr_io* __restrict__ q,
    const tsr_io* __restrict__ k, const tsr_io* __restrict__ v, tsr_io* __restrict__ out, float* __restrict__ lse,
    int heads, int tq, int tk, long long ss, float scale, int causal) {
  __shared__ __align__(16) bf16_t sK[2][64 * LDS];
  __shared__ __align__(16) bf16_t sV[2][64 * LDS];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const long long qBase = (long long)b * tq * ss + (long long)h * D, kBase = (long long)b * tk * ss + (long long)h * D;
  // Causal: the last query blocks see the most keys; they start first (a shorter tail).
  const int qBlock = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int q0 = qBlock * BR + warp * 16;  // the warp's first query
  unsigned qa[KT][4];
  tsr_frag(qa, q, qBase, q0, tq, ss, g, t);
  float o[DN][4];
  tsr_zero(o, DN);
  float m[2] = {-TSR_INF, -TSR_INF}, l[2] = {0.0f, 0.0f};  // the rows' maxima (base 2, scaled) and this thread's sums
  const float scale2 = scale * TSR_LOG2E;
  const int kEnd = causal ? min(tk, qBlock * BR + BR) : tk;
  const int tiles = (kEnd + 63) / 64;
  // The lane's ldmatrix row addresses in buffer 0 (tsr_ldb: 8 n + (l & 7) + (l & 16 ? 8 : 0), 16 kt + (l & 8);
  // tsr_ldbt: 16 kk + (l & 7) + (l & 8), 8 n + (l & 16 ? 8 : 0)), and the bytes between the two buffers.
  const unsigned kAddr = tsr_smem(sK[0]) + 2 * (((lane & 7) + ((lane >> 4) << 3)) * LDS + (lane & 8));
  const unsigned vAddr = tsr_smem(sV[0]) + 2 * (((lane & 7) + (lane & 8)) * LDS + ((lane >> 4) << 3));
  const unsigned bufBytes = 2 * 64 * LDS;
  // The next tile's loads in registers: K's issued before the product S = Q K^T and stored after it, V's issued
  // before the softmax and O += P V and stored after them (half the registers of both at once).
  tsr_io4 pf[NLD];
  if (tiles > 0) {
    tsr_fetch(pf, k, kBase, 0, tk, ss);
    tsr_stash(sK[0], pf);
    tsr_fetch(pf, v, kBase, 0, tk, ss);
    tsr_stash(sV[0], pf);
  }
  __syncthreads();
  for (int it = 0; it < tiles; ++it) {
    const int k0 = it * 64;
    const bool more = it + 1 < tiles;
    if (more) tsr_fetch(pf, k, kBase, k0 + 64, tk, ss);
    if (!causal || k0 <= q0 + 15) {  // the warp sees some key of the tile
      const unsigned kb = kAddr + (it & 1) * bufBytes, vb = vAddr + (it & 1) * bufBytes;
      float s[8][4];
      tsr_zero(s, 8);
#pragma unroll
      for (int kt = 0; kt < KT; ++kt)
#pragma unroll
        for (int n = 0; n < 8; n += 2) {
          unsigned bb[4];
          tsr_ldb(bb, kb + 2 * (n * 8 * LDS + kt * 16));
          tsr_mma(s[n], qa[kt], bb[0], bb[1]);
          tsr_mma(s[n + 1], qa[kt], bb[2], bb[3]);
        }
      if (more) {
        tsr_stash(sK[(it + 1) & 1], pf);
        tsr_fetch(pf, v, kBase, k0 + 64, tk, ss);
      }
      if (k0 + 64 > tk || (causal && k0 + 63 > q0)) {  // keys past tk or past a query of the warp
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int kj = k0 + n * 8 + 2 * t + (e & 1), qi = q0 + g + 8 * (e >> 1);
            if (kj >= tk || (causal && kj > qi)) s[n][e] = -TSR_INF;
          }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // rows g and g + 8: the online softmax (scale > 0: the max commutes with it)
        float mx = -TSR_INF;
#pragma unroll
        for (int n = 0; n < 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mNew = fmaxf(m[r], mx * scale2);
        const float base = mNew == -TSR_INF ? 0.0f : mNew;
        const float alpha = tsr_exp2(m[r] - base);
        m[r] = mNew;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = tsr_exp2(fmaf(s[n][2 * r + e], scale2, -base));
            s[n][2 * r + e] = p;
            sum += p;
          }
        l[r] = l[r] * alpha + sum;  // this thread's share of the row; the quad's shares are added at the end
#pragma unroll
        for (int n = 0; n < DN; ++n) {
          o[n][2 * r] *= alpha;
          o[n][2 * r + 1] *= alpha;
        }
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        unsigned pa[4];
        tsr_c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int n = 0; n < DN; n += 2) {
          unsigned bb[4];
          tsr_ldbt(bb, vb + 2 * (kk * 16 * LDS + n * 8));
          tsr_mma(o[n], pa, bb[0], bb[1]);
          tsr_mma(o[n + 1], pa, bb[2], bb[3]);
        }
      }
    } else if (more) {  // the warp skipped the tile
      tsr_stash(sK[(it + 1) & 1], pf);
      tsr_fetch(pf, v, kBase, k0 + 64, tk, ss);
    }
    if (more) tsr_stash(sV[(it + 1) & 1], pf);
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float lr = l[r];
    lr += __shfl_xor_sync(0xffffffffu, lr, 1);
    lr += __shfl_xor_sync(0xffffffffu, lr, 2);
    const int qi = q0 + g + 8 * r;
    if (qi >= tq) continue;
    const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
    tsr_io* dst = out + qBase + (long long)qi * ss + 2 * t;
#pragma unroll
    for (int n = 0; n < DN; ++n) tsr_put2(dst + n * 8, o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    if (t == 0) lse[(long long)bh * tq + qi] = lr > 0.0f ? (m[r] + log2f(lr)) * TSR_LN2 : -TSR_INF;
  }
}

// dk and dv for BR keys of one head, over the query tiles (64 queries) that see them (a warp per 16 keys).
extern "C" __global__ void __launch_bounds__(NTHR) tsr_fa_bwd_dkdv(const tsr_io* __restrict__ q,
    const tsr_io* __restrict__ k, const tsr_io* __restrict__ v, const tsr_io* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, tsr_io* __restrict__ dk, tsr_io* __restrict__ dv,
    int heads, int tq, int tk, long long ss, float scale, int causal) {
  __shared__ __align__(16) bf16_t sQ[2][64 * LDS];
  __shared__ __align__(16) bf16_t sO[2][64 * LDS];
  __shared__ __align__(16) float sL[2][64], sDel[2][64];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const long long qBase = (long long)b * tq * ss + (long long)h * D, kBase = (long long)b * tk * ss + (long long)h * D;
  const int j0 = blockIdx.x * BR + warp * 16;  // the warp's first key
  const float scale2 = scale * TSR_LOG2E;
  unsigned ka[KT][4], va[KT][4];
  tsr_frag(ka, k, kBase, j0, tk, ss, g, t);
  tsr_frag(va, v, kBase, j0, tk, ss, g, t);
  float gk[DN][4], gv[DN][4];
  tsr_zero(gk, DN);
  tsr_zero(gv, DN);
  // Causal: queries before the block's first key see none of its keys (tq == tk; BR is a multiple of 64).
  const int iStart = causal ? (int)blockIdx.x * BR : 0;
  const int tiles = tq > iStart ? (tq - iStart + 63) / 64 : 0;
  const unsigned nAddr = 2 * (((lane & 7) + ((lane >> 4) << 3)) * LDS + (lane & 8));  // tsr_ldb's row
  const unsigned tAddr = 2 * (((lane & 7) + (lane & 8)) * LDS + ((lane >> 4) << 3));  // tsr_ldbt's row
  const unsigned qS = tsr_smem(sQ[0]), oS = tsr_smem(sO[0]), bufBytes = 2 * 64 * LDS;
  // The next tile's loads in registers: Q's issued before the products that make P^T and dP^T and stored after
  // them, dO's issued before those that make dV and dK and stored after them (half the registers of both at once).
  tsr_io4 pf[NLD];
  float pl = 0.0f, pd = 0.0f;
  if (tiles > 0) {
    tsr_fetch(pf, q, qBase, iStart, tq, ss);
    tsr_stash(sQ[0], pf);
    tsr_fetch(pf, dout, qBase, iStart, tq, ss);
    tsr_stash(sO[0], pf);
    if (threadIdx.x < 64 && iStart + (int)threadIdx.x < tq) {
      pl = lse[(long long)bh * tq + iStart + threadIdx.x];
      pd = delta[(long long)bh * tq + iStart + threadIdx.x];
    }
    if (threadIdx.x < 64) {
      sL[0][threadIdx.x] = pl * TSR_LOG2E;
      sDel[0][threadIdx.x] = pd;
    }
  }
  __syncthreads();
  for (int it = 0; it < tiles; ++it) {
    const int i0 = iStart + it * 64, buf = it & 1;
    const bool more = it + 1 < tiles;
    if (more) {
      tsr_fetch(pf, q, qBase, i0 + 64, tq, ss);
      pl = pd = 0.0f;
      if (threadIdx.x < 64 && i0 + 64 + (int)threadIdx.x < tq) {
        pl = lse[(long long)bh * tq + i0 + 64 + threadIdx.x];
        pd = delta[(long long)bh * tq + i0 + 64 + threadIdx.x];
      }
    }
    if (!causal || i0 + 63 >= j0) {  // some query of the tile sees some key of the warp
      const unsigned qb = qS + buf * bufBytes, ob = oS + buf * bufBytes;
      float p[8][4], dp[8][4];  // P^T and dP^T: [the warp's 16 keys][64 queries]
      tsr_zero(p, 8);
      tsr_zero(dp, 8);
#pragma unroll
      for (int kt = 0; kt < KT; ++kt)
#pragma unroll
        for (int n = 0; n < 8; n += 2) {
          unsigned bq[4], bo[4];
          tsr_ldb(bq, qb + nAddr + 2 * (n * 8 * LDS + kt * 16));
          tsr_ldb(bo, ob + nAddr + 2 * (n * 8 * LDS + kt * 16));
          tsr_mma(p[n], ka[kt], bq[0], bq[1]);
          tsr_mma(p[n + 1], ka[kt], bq[2], bq[3]);
          tsr_mma(dp[n], va[kt], bo[0], bo[1]);
          tsr_mma(dp[n + 1], va[kt], bo[2], bo[3]);
        }
      if (more) {
        tsr_stash(sQ[buf ^ 1], pf);
        tsr_fetch(pf, dout, qBase, i0 + 64, tq, ss);
      }
      const bool mask = i0 + 64 > tq || (causal && i0 < j0 + 15);  // queries past tq, or before a key of the warp
      const float* cL = sL[buf];
      const float* cD = sDel[buf];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const float2 L = *(const float2*)(cL + n * 8 + 2 * t), Dl = *(const float2*)(cD + n * 8 + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int il = n * 8 + 2 * t + (e & 1), kj = j0 + g + 8 * (e >> 1);
          float pr = tsr_exp2(fmaf(p[n][e], scale2, -((e & 1) ? L.y : L.x)));
          if (mask && (i0 + il >= tq || (causal && kj > i0 + il))) pr = 0.0f;
          p[n][e] = pr;
          dp[n][e] = pr * (dp[n][e] - ((e & 1) ? Dl.y : Dl.x));  // dS^T
        }
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        unsigned pa[4], da[4];
        tsr_c_to_a(pa, p[2 * kk], p[2 * kk + 1]);
        tsr_c_to_a(da, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
        for (int n = 0; n < DN; n += 2) {
          unsigned bo[4], bq[4];
          tsr_ldbt(bo, ob + tAddr + 2 * (kk * 16 * LDS + n * 8));
          tsr_ldbt(bq, qb + tAddr + 2 * (kk * 16 * LDS + n * 8));
          tsr_mma(gv[n], pa, bo[0], bo[1]);
          tsr_mma(gv[n + 1], pa, bo[2], bo[3]);
          tsr_mma(gk[n], da, bq[0], bq[1]);
          tsr_mma(gk[n + 1], da, bq[2], bq[3]);
        }
      }
    } else if (more) {  // the warp skipped the tile
      tsr_stash(sQ[buf ^ 1], pf);
      tsr_fetch(pf, dout, qBase, i0 + 64, tq, ss);
    }
    if (more) {
      tsr_stash(sO[buf ^ 1], pf);
      if (threadIdx.x < 64) {
        sL[buf ^ 1][threadIdx.x] = pl * TSR_LOG2E;
        sDel[buf ^ 1][threadIdx.x] = pd;
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int kj = j0 + g + 8 * r;
    if (kj >= tk) continue;
    tsr_io* dkr = dk + kBase + (long long)kj * ss + 2 * t;
    tsr_io* dvr = dv + kBase + (long long)kj * ss + 2 * t;
#pragma unroll
    for (int n = 0; n < DN; ++n) {
      tsr_put2(dkr + n * 8, gk[n][2 * r] * scale, gk[n][2 * r + 1] * scale);
      tsr_put2(dvr + n * 8, gv[n][2 * r], gv[n][2 * r + 1]);
    }
  }
}

// dq for BR queries of one head, over the key tiles they see (a warp per 16 queries).
extern "C" __global__ void __launch_bounds__(NTHR) tsr_fa_bwd_dq(const tsr_io* __restrict__ q,
    const tsr_io* __restrict__ k, const tsr_io* __restrict__ v, const tsr_io* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, tsr_io* __restrict__ dq, int heads, int tq,
    int tk, long long ss, float scale, int causal) {
  __shared__ __align__(16) bf16_t sK[2][64 * LDS];
  __shared__ __align__(16) bf16_t sV[2][64 * LDS];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const long long qBase = (long long)b * tq * ss + (long long)h * D, kBase = (long long)b * tk * ss + (long long)h * D;
  // Causal: the last query blocks see the most keys; they start first (a shorter tail).
  const int qBlock = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int q0 = qBlock * BR + warp * 16;  // the warp's first query
  unsigned qa[KT][4], oa[KT][4];
  tsr_frag(qa, q, qBase, q0, tq, ss, g, t);
  tsr_frag(oa, dout, qBase, q0, tq, ss, g, t);
  float lr[2], dr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int qi = q0 + g + 8 * r;
    lr[r] = qi < tq ? lse[(long long)bh * tq + qi] * TSR_LOG2E : 0.0f;
    dr[r] = qi < tq ? delta[(long long)bh * tq + qi] : 0.0f;
  }
  const float scale2 = scale * TSR_LOG2E;
  float gq[DN][4];
  tsr_zero(gq, DN);
  const int kEnd = causal ? min(tk, qBlock * BR + BR) : tk;
  const int tiles = (kEnd + 63) / 64;
  const unsigned nAddr = 2 * (((lane & 7) + ((lane >> 4) << 3)) * LDS + (lane & 8));  // tsr_ldb's row
  const unsigned tAddr = 2 * (((lane & 7) + (lane & 8)) * LDS + ((lane >> 4) << 3));  // tsr_ldbt's row
  const unsigned kS = tsr_smem(sK[0]), vS = tsr_smem(sV[0]), bufBytes = 2 * 64 * LDS;
  // The next tile's loads in registers: V's issued before the products S and dP and stored after them, K's issued
  // before dQ += dS K and stored after it (half the registers of both at once).
  tsr_io4 pf[NLD];
  if (tiles > 0) {
    tsr_fetch(pf, k, kBase, 0, tk, ss);
    tsr_stash(sK[0], pf);
    tsr_fetch(pf, v, kBase, 0, tk, ss);
    tsr_stash(sV[0], pf);
  }
  __syncthreads();
  for (int it = 0; it < tiles; ++it) {
    const int k0 = it * 64, buf = it & 1;
    const bool more = it + 1 < tiles;
    if (more) tsr_fetch(pf, v, kBase, k0 + 64, tk, ss);
    if (!causal || k0 <= q0 + 15) {  // the warp sees some key of the tile
      const unsigned kb = kS + buf * bufBytes, vb = vS + buf * bufBytes;
      float s[8][4], dp[8][4];
      tsr_zero(s, 8);
      tsr_zero(dp, 8);
#pragma unroll
      for (int kt = 0; kt < KT; ++kt)
#pragma unroll
        for (int n = 0; n < 8; n += 2) {
          unsigned bk[4], bv[4];
          tsr_ldb(bk, kb + nAddr + 2 * (n * 8 * LDS + kt * 16));
          tsr_ldb(bv, vb + nAddr + 2 * (n * 8 * LDS + kt * 16));
          tsr_mma(s[n], qa[kt], bk[0], bk[1]);
          tsr_mma(s[n + 1], qa[kt], bk[2], bk[3]);
          tsr_mma(dp[n], oa[kt], bv[0], bv[1]);
          tsr_mma(dp[n + 1], oa[kt], bv[2], bv[3]);
        }
      if (more) {
        tsr_stash(sV[buf ^ 1], pf);
        tsr_fetch(pf, k, kBase, k0 + 64, tk, ss);
      }
      const bool mask = k0 + 64 > tk || (causal && k0 + 63 > q0);  // keys past tk or past a query of the warp
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1, qi = q0 + g + 8 * r, kj = k0 + n * 8 + 2 * t + (e & 1);
          float pr = tsr_exp2(fmaf(s[n][e], scale2, -lr[r]));
          if (mask && (kj >= tk || (causal && kj > qi))) pr = 0.0f;
          dp[n][e] = pr * (dp[n][e] - dr[r]);  // dS
        }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        unsigned da[4];
        tsr_c_to_a(da, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
        for (int n = 0; n < DN; n += 2) {
          unsigned bk[4];
          tsr_ldbt(bk, kb + tAddr + 2 * (kk * 16 * LDS + n * 8));
          tsr_mma(gq[n], da, bk[0], bk[1]);
          tsr_mma(gq[n + 1], da, bk[2], bk[3]);
        }
      }
    } else if (more) {  // the warp skipped the tile
      tsr_stash(sV[buf ^ 1], pf);
      tsr_fetch(pf, k, kBase, k0 + 64, tk, ss);
    }
    if (more) tsr_stash(sK[buf ^ 1], pf);
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int qi = q0 + g + 8 * r;
    if (qi >= tq) continue;
    tsr_io* dst = dq + qBase + (long long)qi * ss + 2 * t;
#pragma unroll
    for (int n = 0; n < DN; ++n) tsr_put2(dst + n * 8, gq[n][2 * r] * scale, gq[n][2 * r + 1] * scale);
  }
}
)TSR";

}  // namespace

namespace {

std::string withPrelude(int headDim, bool bf16, const char* kernels) {
  return fmt::format("#define D {}\n#define TSR_IO_BF16 {}\n", headDim, bf16 ? 1 : 0) + kTensorCorePrelude + kernels;
}

}  // namespace

std::string tensorCoreAttentionSourceV1(int headDim, bool bf16) { return withPrelude(headDim, bf16, kTensorCoreAttentionV1); }

std::string tensorCoreAttentionSourceV2(int headDim, bool bf16) { return withPrelude(headDim, bf16, kTensorCoreAttentionV2); }

}  // namespace tsr::cuda
