#include "engine/ops/attention_cpu.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/runtime/blas_workspace.h"

namespace tsr::ops {
namespace {

#include "engine/ops/vmath_avx2.inc"

constexpr int64_t kCausalBlock = 64;    // query rows a causal block: the smaller, the more masked keys it skips
constexpr int64_t kScoreBytes = 256 << 10;  // an unmasked block's scores (and the gradient's dS) stay in L2
constexpr float kInf = std::numeric_limits<float>::infinity();

// A row-major f32 matrix: where it starts and how far apart its rows are.
struct Rows {
  float* data;
  int64_t ld;
  float* row(int64_t i) const { return data + i * ld; }
};

// Rows [first, first + count) of head (b, h) of a [B, seq, H, D] tensor whose rows of H*D lie `ld` elements
// apart (H*D where it is contiguous; more for a row view, TensorView::rowStride). As f32 where it is f32: in
// place; a bf16 tensor's are widened into `scratch` (read) or computed there and rounded into place by store()
// (written).
template <class T>
class HeadRows {
 public:
  HeadRows(T* x, int64_t ld, const AttentionDims& m, int64_t seq, int64_t b, int64_t h, int64_t first,
           int64_t count, std::vector<float>& scratch)
      : m_x(x + (b * seq + first) * ld + h * m.d), m_ld(ld), m_d(m.d), m_count(count) {
    if constexpr (std::is_same_v<T, float>) {
      m_rows = {m_x, m_ld};
    } else {
      scratch.resize(static_cast<size_t>(count * m.d));
      m_rows = {scratch.data(), m.d};
    }
  }
  // The rows as f32, read from the tensor.
  Rows load() const {
    if constexpr (std::is_same_v<T, bf16>)
      for (int64_t i = 0; i < m_count; ++i) widenBf16(m_x + i * m_ld, m_rows.row(i), m_d);
    return m_rows;
  }
  // Where the f32 results go.
  Rows rows() const { return m_rows; }
  // Rows [from, count) to 0.
  void zero(int64_t from = 0) const {
    for (int64_t i = from; i < m_count; ++i) std::fill(m_rows.row(i), m_rows.row(i) + m_d, 0.0f);
  }
  // The results into the tensor (a bf16 tensor's rounded once).
  void store() const {
    if constexpr (std::is_same_v<T, bf16>)
      for (int64_t i = 0; i < m_count; ++i) narrowToBf16(m_rows.row(i), m_x + i * m_ld, m_d);
  }

 private:
  T* m_x;
  int64_t m_ld, m_d, m_count;
  Rows m_rows{};
};

// Rows of a kernel operand (read: load()) or result (written: store()), as its view lays them out.
template <class T, class View>
HeadRows<T> headRows(const View& x, const AttentionDims& m, int64_t seq, int64_t b, int64_t h, int64_t first,
                     int64_t count, std::vector<float>& scratch) {
  return HeadRows<T>(const_cast<T*>(static_cast<const T*>(x.data)), attentionRowsApart(x.rowStride, m), m, seq, b,
                     h, first, count, scratch);
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// The sum of x[j] y[j] for j < n.
float dot(const float* x, const float* y, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(y + j), acc);
  float sum = hsum(acc);
  for (; j < n; ++j) sum += x[j] * y[j];
  return sum;
}

// Lanes of one [keys, lanes] block of transposed scores: the block's query rows, rounded up so that the passes
// over them run whole vectors (the products leave the extra lanes as they were; nothing reads what the passes
// make of them).
int64_t laneCount(int64_t rows) { return (rows + 15) / 16 * 16; }

// Which part of a causal product anything reads, for a block whose first query row is `first` (the other
// entries of C may be left as they are; the masked entries of A are zeros):
//   Lower   C[r][c] (key r, query c of transposed scores) is needed where c >= r - first;
//   KBelow  row r (query r) sums over the keys k <= r + first;
//   KAbove  row r (key r) sums over the queries k >= r - first.
enum class Band { All, Lower, KBelow, KAbove };
struct Causal {
  Band band = Band::All;
  int64_t first = 0;
};

// A product's operand: element (i, p) at data[i * ld + p], or at data[p * ld + i] when transposed.
struct Operand {
  const float* data;
  int64_t ld;
  bool transposed = false;
};

void blasProduct(int64_t m, int64_t n, int64_t k, float alpha, Operand a, Operand b, float beta, Rows c) {
  cblas_sgemm(CblasRowMajor, a.transposed ? CblasTrans : CblasNoTrans, b.transposed ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a.data, static_cast<int>(a.ld),
              b.data, static_cast<int>(b.ld), beta, c.data, static_cast<int>(c.ld));
}

#pragma GCC push_options
#pragma GCC target("avx512f")
#pragma GCC diagnostic push
// GCC 12's avx512fintrin.h starts results from _mm512_undefined_ps(), which it then warns of.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The products on AVX-512 registers, for the shapes attention has: K (the sum) is D or a block's keys or rows,
// mostly a few hundred or fewer, where OpenBLAS's SGEMM spends much of its time packing both operands for each
// call. Here A is read where it lies (one element broadcast at a time, so either layout serves) and B's rows are
// loaded as they lie; only a transposed B (q^T, dout^T: a block's rows, D x rows) is laid out first.
namespace avx512 {

constexpr int kTileRows = 6;         // rows of C a tile: 6 x 4 accumulators of 16 lanes, of 32 registers
constexpr int64_t kPanel = 4;        // vectors of 16 columns of C a tile, at most
constexpr int64_t kDepth = 128;      // K a pass: B's panel (128 x 64 floats, 32 KiB) stays in L1

// C[r][0, 16 NV) = alpha sum_{k0 <= p < k1} A(r, p) B[p] (+ C[r] when accumulating) for r < M, the last
// vector's lanes under `last`.
template <int M, int NV>
void tile(int64_t k0, int64_t k1, const float* a, int64_t ars, int64_t acs, const float* b, int64_t ldb,
          __mmask16 last, float alpha, bool accumulate, float* c, int64_t ldc) {
  __m512 acc[M][NV];
#pragma GCC unroll 8
  for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = k0; p < k1; ++p) {
    const float* bp = b + p * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = v + 1 < NV ? _mm512_loadu_ps(bp + 16 * v) : _mm512_maskz_loadu_ps(last, bp + 16 * v);
    const float* ap = a + p * acs;
#pragma GCC unroll 8
    for (int r = 0; r < M; ++r) {
      const __m512 x = _mm512_set1_ps(ap[r * ars]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* cp = c + r * ldc + 16 * v;
      const __mmask16 lanes = v + 1 < NV ? __mmask16(0xffff) : last;
      __m512 y = _mm512_mul_ps(acc[r][v], scale);
      if (accumulate) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(lanes, cp));
      _mm512_mask_storeu_ps(cp, lanes, y);
    }
}

using TileFn = void (*)(int64_t, int64_t, const float*, int64_t, int64_t, const float*, int64_t, __mmask16, float,
                        bool, float*, int64_t);

template <int M>
TileFn tileOf(int64_t vectors) {
  switch (vectors) {
    case 1: return tile<M, 1>;
    case 2: return tile<M, 2>;
    case 3: return tile<M, 3>;
    default: return tile<M, 4>;
  }
}

TileFn tileOf(int64_t rows, int64_t vectors) {
  switch (rows) {
    case 1: return tileOf<1>(vectors);
    case 2: return tileOf<2>(vectors);
    case 3: return tileOf<3>(vectors);
    case 4: return tileOf<4>(vectors);
    case 5: return tileOf<5>(vectors);
    default: return tileOf<6>(vectors);
  }
}

// The first n (up to 16) lanes.
__mmask16 lanesUpTo(int64_t n) { return static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1); }

// r[i][j] = r[j][i] for a 16 x 16 block in registers: pairs of rows interleaved, then quads, then 128-bit lanes.
void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // r[4g + c], 128-bit lane L: column 4L + c of rows 4g to 4g + 3.
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) {
    r[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
    r[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xee);
    r[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    r[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 lo01 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), hi01 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xee);
    const __m512 lo23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
    const __m512 hi23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xee);
    t[c] = _mm512_shuffle_f32x4(lo01, lo23, 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(lo01, lo23, 0xdd);
    t[8 + c] = _mm512_shuffle_f32x4(hi01, hi23, 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(hi01, hi23, 0xdd);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// out[p * n + j] = b[j * ld + p]: B [n, k] (rows ld apart) as [k, n], in blocks of 16 x 16.
void transpose(const float* b, int64_t ld, int64_t n, int64_t k, float* out) {
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const __mmask16 rows = lanesUpTo(n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += 16) {
      const __mmask16 cols = lanesUpTo(k - p0);
      __m512 r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        r[i] = j0 + i < n ? _mm512_maskz_loadu_ps(cols, b + (j0 + i) * ld + p0) : _mm512_setzero_ps();
      transpose16(r);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        if (p0 + i < k) _mm512_mask_storeu_ps(out + (p0 + i) * n + j0, rows, r[i]);
    }
  }
}

void product(int64_t m, int64_t n, int64_t k, float alpha, Operand a, Operand b, float beta, Rows c, Causal mask) {
  thread_local std::vector<float> packed;
  const float* bd = b.data;
  int64_t ldb = b.ld;
  if (b.transposed) {
    packed.resize(static_cast<size_t>(k * n));
    transpose(b.data, b.ld, n, k, packed.data());
    bd = packed.data();
    ldb = n;
  }
  const int64_t ars = a.transposed ? 1 : a.ld, acs = a.transposed ? a.ld : 1;
  for (int64_t k0 = 0; k0 == 0 || k0 < k; k0 += kDepth) {
    const int64_t k1 = std::min(k, k0 + kDepth);
    const bool accumulate = beta != 0.0f || k0 > 0;
    // C's vectors of columns dealt out evenly to as few panels as there can be (ViT's 197 columns: 3, 3, 3 and
    // 4 vectors, not 4, 4, 4 and one of 5 columns).
    const int64_t vectors = (n + 15) / 16, panels = (vectors + kPanel - 1) / kPanel;
    for (int64_t panel = 0; panel < panels; ++panel) {
      const int64_t c0 = 16 * (panel * vectors / panels), c1 = std::min(n, 16 * ((panel + 1) * vectors / panels));
      for (int64_t r0 = 0; r0 < m; r0 += kTileRows) {
        const int64_t r1 = std::min(m, r0 + kTileRows);
        int64_t from = c0, kb = k0, ke = k1;  // the tile's columns and sum, cut to what its rows need
        if (mask.band == Band::Lower) from += std::max<int64_t>(0, r0 - mask.first - c0) / 16 * 16;
        if (mask.band == Band::KBelow) ke = std::min(k1, r1 + mask.first);
        if (mask.band == Band::KAbove) kb = std::max(k0, r0 - mask.first);
        if (from >= c1 || (kb >= ke && accumulate)) continue;
        kb = std::min(kb, ke);
        const int64_t width = (c1 - from + 15) / 16;
        tileOf(r1 - r0, width)(kb, ke, a.data + r0 * ars, ars, acs, bd + from, ldb,
                               lanesUpTo(c1 - from - 16 * (width - 1)), alpha, accumulate,
                               c.row(r0) + from, c.ld);
      }
    }
  }
}


// e^x for 16 lanes: tsr_exp8's reduction and polynomial, 2^n applied by scalef, which rounds what underflows
// (to 0 below the clamp at -104) and overflows to inf (above the one at 88.8), so no lane needs a blend after;
// max and min return their second operand for NaN, which so stays NaN.
__m512 exp16(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// softmaxColumns (below) on 16 lanes, a row of keys at a time (lanes: a multiple of 16).
void softmaxColumns(Rows st, int64_t keys, int64_t lanes, bool causal, int64_t first, float* lse, float* inv) {
  thread_local std::vector<float> terms;
  terms.resize(static_cast<size_t>(2 * lanes));
  float* mx = terms.data();
  float* sum = mx + lanes;
  if (causal)  // key j is masked for the queries i < j - first
    for (int64_t j = first + 1; j < keys; ++j) std::fill(st.row(j), st.row(j) + std::min(lanes, j - first), -kInf);
  std::fill(mx, mx + lanes, -kInf);
  for (int64_t j = 0; j < keys; ++j)
    for (int64_t i = 0; i < lanes; i += 16)
      _mm512_storeu_ps(mx + i, _mm512_max_ps(_mm512_loadu_ps(mx + i), _mm512_loadu_ps(st.row(j) + i)));
  // A column of -inf (nothing visible) shifts by 0: e^-inf = 0 everywhere, no NaN from -inf - -inf.
  for (int64_t i = 0; i < lanes; ++i) mx[i] = mx[i] == -kInf ? 0.0f : mx[i];
  std::fill(sum, sum + lanes, 0.0f);
  for (int64_t j = 0; j < keys; ++j)
    for (int64_t i = 0; i < lanes; i += 16) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(st.row(j) + i), _mm512_loadu_ps(mx + i)));
      _mm512_storeu_ps(st.row(j) + i, e);
      _mm512_storeu_ps(sum + i, _mm512_add_ps(_mm512_loadu_ps(sum + i), e));
    }
  for (int64_t i = 0; i < lanes; ++i) {
    lse[i] = mx[i] + std::log(sum[i]);
    inv[i] = sum[i] == 0.0f ? 0.0f : 1.0f / sum[i];
  }
}

// softmaxGradColumns (below) on 16 lanes (lanes: a multiple of 16).
void softmaxGradColumns(Rows pt, Rows dpt, int64_t keys, int64_t lanes, bool causal, int64_t first,
                        const float* lseT, const float* delta) {
  for (int64_t j = 0; j < keys; ++j) {
    float* p = pt.row(j);
    float* ds = dpt.row(j);
    for (int64_t i = 0; i < lanes; i += 16) {
      // query i + l sees key j where l >= j - first - i
      const __mmask16 seen = causal && j - first > i ? static_cast<__mmask16>(~lanesUpTo(j - first - i)) : 0xffff;
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p + i), _mm512_loadu_ps(lseT + i)));
      const __m512 g = _mm512_mul_ps(e, _mm512_sub_ps(_mm512_loadu_ps(ds + i), _mm512_loadu_ps(delta + i)));
      _mm512_storeu_ps(p + i, _mm512_maskz_mov_ps(seen, e));
      _mm512_storeu_ps(ds + i, _mm512_maskz_mov_ps(seen, g));
    }
  }
}

}  // namespace avx512

#pragma GCC diagnostic pop
#pragma GCC pop_options

bool hasAvx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}

// C [m, n] = alpha op(A) op(B) + beta C (beta 0 or 1) on this thread (the kernel's tasks are what run in
// parallel). On AVX-512 the causal band's masked tiles are skipped; OpenBLAS computes them all.
void product(int64_t m, int64_t n, int64_t k, float alpha, Operand a, Operand b, float beta, Rows c,
             Causal mask = {}) {
  if (hasAvx512()) avx512::product(m, n, k, alpha, a, b, beta, c, mask);
  else blasProduct(m, n, k, alpha, a, b, beta, c);
}

// e^x for the 8 lanes at x, in place; adds them to *sum.
inline void expInPlace(float* x, __m256 shift, __m256* sum) {
  const __m256 e = tsr_exp8(_mm256_sub_ps(_mm256_loadu_ps(x), shift));
  _mm256_storeu_ps(x, e);
  *sum = _mm256_add_ps(*sum, e);
}

// Transposed scores st [keys, lanes] (lane i: query row first + i) become e^(s - max) down each column, 0 where
// masked: the softmax times its sum, which the caller divides out of the output rows (D values, not S). Sets
// lse[i] (-inf for a row with no weight anywhere) and inv[i] (1 / the sum, 0 for none) for i < lanes.
void softmaxColumns(Rows st, int64_t keys, int64_t lanes, bool causal, int64_t first, float* lse, float* inv) {
  if (hasAvx512()) return avx512::softmaxColumns(st, keys, lanes, causal, first, lse, inv);
  if (causal)  // key j is masked for the queries i < j - first
    for (int64_t j = first + 1; j < keys; ++j) std::fill(st.row(j), st.row(j) + std::min(lanes, j - first), -kInf);
  for (int64_t i = 0; i < lanes; i += 8) {
    __m256 mx = _mm256_set1_ps(-kInf);
    for (int64_t j = 0; j < keys; ++j) mx = _mm256_max_ps(mx, _mm256_loadu_ps(st.row(j) + i));
    // A column of -inf (nothing visible) shifts by 0: e^-inf = 0 everywhere, no NaN from -inf - -inf. A NaN
    // among the scores makes the column NaN either way (it passes through e^x).
    const __m256 shift = _mm256_andnot_ps(_mm256_cmp_ps(mx, _mm256_set1_ps(-kInf), _CMP_EQ_OQ), mx);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < keys; ++j) expInPlace(st.row(j) + i, shift, &sum);
    alignas(32) float s[8], sh[8];
    _mm256_store_ps(s, sum);
    _mm256_store_ps(sh, shift);
    for (int l = 0; l < 8; ++l) {
      lse[i + l] = sh[l] + std::log(s[l]);
      inv[i + l] = s[l] == 0.0f ? 0.0f : 1.0f / s[l];
    }
  }
}

// The gradient's transposed scores pt and dP^T dpt [keys, lanes] become P^T = e^(s - lse) and dS^T = P^T (dP^T -
// delta), both 0 where masked (those entries may hold anything before: the products skip masked tiles).
// lseT[i] is lse with -inf (a row with no weight) as +inf, so that its e^(s - lse) is 0.
void softmaxGradColumns(Rows pt, Rows dpt, int64_t keys, int64_t lanes, bool causal, int64_t first,
                        const float* lseT, const float* delta) {
  if (hasAvx512()) return avx512::softmaxGradColumns(pt, dpt, keys, lanes, causal, first, lseT, delta);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t j = 0; j < keys; ++j) {
    float* p = pt.row(j);
    float* ds = dpt.row(j);
    for (int64_t i = 0; i < lanes; i += 8) {
      __m256 e = tsr_exp8(_mm256_sub_ps(_mm256_loadu_ps(p + i), _mm256_loadu_ps(lseT + i)));
      __m256 g = _mm256_mul_ps(e, _mm256_sub_ps(_mm256_loadu_ps(ds + i), _mm256_loadu_ps(delta + i)));
      if (causal && j - first > i) {  // query i + l sees key j where i + l >= j - first
        const __m256 seen = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int>(i - (j - first) + 1))),
                               _mm256_setzero_si256()));
        e = _mm256_and_ps(e, seen);
        g = _mm256_and_ps(g, seen);
      }
      _mm256_storeu_ps(p + i, e);
      _mm256_storeu_ps(ds + i, g);
    }
  }
}

// Query rows a block. A causal block skips the keys after its last row, so small blocks skip more; without the
// mask every block sees every key and the largest that keeps its scores in L2 wins (fewer, larger products: for
// ViT-B/16's 197 tokens one block of 197, not three of 64 and one of 5), cut into blocks of equal size, and
// into enough of them that every thread has work.
int64_t queryBlock(const AttentionDims& m, bool causal, int threads) {
  if (causal) return kCausalBlock;
  if (m.t == 0) return 1;  // no queries, no blocks (and no division by zero)
  const int64_t rowBytes = static_cast<int64_t>(sizeof(float)) * std::max<int64_t>(m.s, 1);
  const int64_t fit = std::max<int64_t>(8, kScoreBytes / rowBytes);
  int64_t blocks = (m.t + fit - 1) / fit;
  while (m.b * m.h * blocks < 2 * static_cast<int64_t>(threads) && blocks * 8 < m.t) ++blocks;
  return (m.t + blocks - 1) / blocks;
}

// The block of query rows [first, first + rows) of head (b, h), given (at least) the keys and values it sees.
template <class T>
void forwardBlock(const ir::CpuKernelArgs& a, const AttentionDims& m, bool causal, int64_t b, int64_t h,
                  int64_t first, int64_t rows, Rows k, Rows v) {
  const int64_t lanes = laneCount(rows);
  const int64_t keys = causal ? std::min(m.s, first + rows) : m.s;
  thread_local std::vector<float> qs, os, scores, invs;
  HeadRows<T> out = headRows<T>(a.outputs[0], m, m.t, b, h, first, rows, os);
  float* lse = a.outputs[1].as<float>() + (b * m.h + h) * m.t + first;
  if (keys == 0) {
    out.zero();
    out.store();
    std::fill(lse, lse + rows, -kInf);
    return;
  }
  const Rows q = headRows<T>(a.inputs[0], m, m.t, b, h, first, rows, qs).load();
  // Transposed scores st [keys, rows] = scale k q^T: each query row a column, so the softmax runs down columns,
  // whole vectors of rows at a time.
  scores.resize(static_cast<size_t>(keys * lanes));
  invs.resize(static_cast<size_t>(2 * lanes));
  const Rows st{scores.data(), lanes};
  const Causal band = causal ? Causal{Band::Lower, first} : Causal{};
  product(keys, rows, m.d, 1.0f / std::sqrt(static_cast<float>(m.d)), {k.data, k.ld}, {q.data, q.ld, true}, 0.0f,
          st, band);
  float* rowLse = invs.data() + lanes;
  softmaxColumns(st, keys, lanes, causal, first, rowLse, invs.data());
  std::copy(rowLse, rowLse + rows, lse);
  // out [rows, D] = P v, each row then divided by its sum.
  const Rows o = out.rows();
  product(rows, m.d, keys, 1.0f, {st.data, st.ld, true}, {v.data, v.ld}, 0.0f, o,
          causal ? Causal{Band::KBelow, first} : Causal{});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t d = 0; d < m.d; ++d) o.row(i)[d] *= invs[static_cast<size_t>(i)];
  out.store();
}

// Forward task `task`: `perTask` consecutive blocks of one head (of `blocks` a head), whose keys and values are
// read (for bf16, widened) once for all of them.
template <class T>
void forwardTask(const ir::CpuKernelArgs& a, const AttentionDims& m, bool causal, int64_t block, int64_t blocks,
                 int64_t perTask, int64_t task) {
  const int64_t tasksPerHead = blocks / perTask, head = task / tasksPerHead;
  const int64_t b = head / m.h, h = head % m.h;
  const int64_t first = task % tasksPerHead * perTask * block, last = std::min(m.t, first + perTask * block);
  const int64_t keys = causal ? std::min(m.s, last) : m.s;  // what the task's last block sees
  thread_local std::vector<float> ks, vs;
  const Rows k = headRows<T>(a.inputs[1], m, m.s, b, h, 0, keys, ks).load();
  const Rows v = headRows<T>(a.inputs[2], m, m.s, b, h, 0, keys, vs).load();
  for (int64_t i = first; i < last; i += block) forwardBlock<T>(a, m, causal, b, h, i, std::min(block, last - i), k, v);
}

template <class T>
void backwardHead(const ir::CpuKernelArgs& a, const AttentionDims& m, bool causal, int64_t block, int64_t task) {
  const int64_t b = task / m.h, h = task % m.h;
  const float scale = 1.0f / std::sqrt(static_cast<float>(m.d));
  thread_local std::vector<float> qs, ks, vs, os, dos, dqs, dks, dvs, ps, dps, rowTerms;
  const Rows k = headRows<T>(a.inputs[1], m, m.s, b, h, 0, m.s, ks).load();
  const Rows v = headRows<T>(a.inputs[2], m, m.s, b, h, 0, m.s, vs).load();
  const float* lse = a.inputs[4].as<float>() + (b * m.h + h) * m.t;
  const float* dlse = a.inputs[6].as<float>() + (b * m.h + h) * m.t;
  HeadRows<T> dk = headRows<T>(a.outputs[1], m, m.s, b, h, 0, m.s, dks);
  HeadRows<T> dv = headRows<T>(a.outputs[2], m, m.s, b, h, 0, m.s, dvs);
  // Each block writes the keys no earlier block reached and adds to the others: without the mask the first
  // block writes them all; under it a block is the first to see the keys from its first row on. Keys past the
  // last query (cross attention with more keys) are seen by none, nor is any key without queries.
  const int64_t reached = causal ? std::min(m.s, m.t) : (m.t > 0 ? m.s : 0);
  dk.zero(reached);
  dv.zero(reached);
  for (int64_t first = 0; first < m.t; first += block) {
    const int64_t rows = std::min(block, m.t - first), lanes = laneCount(rows);
    const int64_t keys = causal ? std::min(m.s, first + rows) : m.s;
    HeadRows<T> dq = headRows<T>(a.outputs[0], m, m.t, b, h, first, rows, dqs);
    if (keys == 0) {
      dq.zero();
      dq.store();
      continue;
    }
    const Rows q = headRows<T>(a.inputs[0], m, m.t, b, h, first, rows, qs).load();
    const Rows o = headRows<T>(a.inputs[3], m, m.t, b, h, first, rows, os).load();
    const Rows dout = headRows<T>(a.inputs[5], m, m.t, b, h, first, rows, dos).load();
    ps.resize(static_cast<size_t>(keys * lanes));
    dps.resize(static_cast<size_t>(keys * lanes));
    rowTerms.assign(static_cast<size_t>(2 * lanes), 0.0f);
    const Rows pt{ps.data(), lanes}, dst{dps.data(), lanes};
    // Per query row: lse (-inf as +inf, see softmaxGradColumns) and delta = dout . out - dlse.
    float* lseT = rowTerms.data();
    float* delta = lseT + lanes;
    for (int64_t i = 0; i < rows; ++i) {
      lseT[i] = lse[first + i] == -kInf ? kInf : lse[first + i];
      delta[i] = dot(dout.row(i), o.row(i), m.d) - dlse[first + i];
    }
    // P^T = e^(scale k q^T - lse), rebuilt as the forward pass had it; dP^T = v dout^T; then dS^T = P^T (dP^T - delta).
    const Causal lower = causal ? Causal{Band::Lower, first} : Causal{};
    product(keys, rows, m.d, scale, {k.data, k.ld}, {q.data, q.ld, true}, 0.0f, pt, lower);
    product(keys, rows, m.d, 1.0f, {v.data, v.ld}, {dout.data, dout.ld, true}, 0.0f, dst, lower);
    softmaxGradColumns(pt, dst, keys, lanes, causal, first, lseT, delta);
    // dq = scale dS k; dk += scale dS^T q; dv += P^T dout.
    product(rows, m.d, keys, scale, {dst.data, dst.ld, true}, {k.data, k.ld}, 0.0f, dq.rows(),
            causal ? Causal{Band::KBelow, first} : Causal{});
    dq.store();
    const int64_t added = causal ? std::min(first, keys) : (first > 0 ? keys : 0);  // keys earlier blocks saw
    if (added > 0) {
      product(added, m.d, rows, scale, {dst.data, dst.ld}, {q.data, q.ld}, 1.0f, dk.rows());
      product(added, m.d, rows, 1.0f, {pt.data, pt.ld}, {dout.data, dout.ld}, 1.0f, dv.rows());
    }
    if (added < keys) {  // under the mask key first + r is seen by the queries r and after
      const Causal above = causal ? Causal{Band::KAbove, 0} : Causal{};
      const Rows dkNew{dk.rows().row(added), dk.rows().ld}, dvNew{dv.rows().row(added), dv.rows().ld};
      product(keys - added, m.d, rows, scale, {dst.row(added), dst.ld}, {q.data, q.ld}, 0.0f, dkNew, above);
      product(keys - added, m.d, rows, 1.0f, {pt.row(added), pt.ld}, {dout.data, dout.ld}, 0.0f, dvNew, above);
    }
  }
  dk.store();
  dv.store();
}

// Runs fn(task) for task in [0, tasks) on the kernel's threads, after making sure each can take OpenBLAS's
// workspace (blas_workspace.h: it would hang otherwise).
template <class Fn>
void forTasks(const ir::CpuKernelArgs& a, int64_t tasks, const Fn& fn) {
  if (auto st = runtime::reserveBlasWorkspace(std::max(a.threads, 1)); !st.ok())
    throw std::runtime_error(st.error().message);
  a.forChunks(tasks, 1, [&](int64_t lo, int64_t hi, int) {
    for (int64_t t = lo; t < hi; ++t) fn(t);
  });
}

}  // namespace

void blockedAttention(const ir::CpuKernelArgs& a, const AttentionDims& m, bool causal) {
  const int64_t block = queryBlock(m, causal, a.threads), blocks = (m.t + block - 1) / block;
  // A task a head where there are enough of them to share out evenly (GPT-2's 96 of 4 causal blocks: k and v
  // widened once, not once a block), else a block.
  const int64_t threads = std::max(a.threads, 1);
  const int64_t perTask = m.b * m.h >= 8 * threads ? std::max<int64_t>(blocks, 1) : 1;
  const int64_t tasks = m.b * m.h * blocks / perTask;
  if (a.inputs[0].aval.dtype == DType::BF16)
    forTasks(a, tasks, [&](int64_t t) { forwardTask<bf16>(a, m, causal, block, blocks, perTask, t); });
  else
    forTasks(a, tasks, [&](int64_t t) { forwardTask<float>(a, m, causal, block, blocks, perTask, t); });
}

void blockedAttentionGrad(const ir::CpuKernelArgs& a, const AttentionDims& m, bool causal) {
  // Each task walks one head's blocks (dk and dv are summed over them), so the blocks need not feed the threads.
  const int64_t block = queryBlock(m, causal, 1);
  if (a.inputs[0].aval.dtype == DType::BF16)
    forTasks(a, m.b * m.h, [&](int64_t t) { backwardHead<bf16>(a, m, causal, block, t); });
  else
    forTasks(a, m.b * m.h, [&](int64_t t) { backwardHead<float>(a, m, causal, block, t); });
}

}  // namespace tsr::ops
