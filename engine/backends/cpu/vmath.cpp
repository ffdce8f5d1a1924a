#include "engine/backends/cpu/vmath.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace tsr::cpu::vmath {
namespace {

inline __m256 set1(float v) { return _mm256_set1_ps(v); }

// e^x for 8 lanes. n = round(x / ln2), r = x - n ln2 (in two parts), e^r by a degree-6 polynomial, times 2^n
// applied as two factors so that n down to -150 (subnormal results) and up to 128 (overflow to inf) work.
inline __m256 exp8(__m256 x) {
  const __m256 hi = set1(88.8f), lo = set1(-104.0f);
  __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, set1(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
  __m256 p = set1(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, set1(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, set1(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, set1(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, set1(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, set1(5.0000001201E-1f));
  __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, set1(1.0f)));
  __m256i ni = _mm256_cvtps_epi32(n);
  __m256i n1 = _mm256_srai_epi32(ni, 1);
  __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  // Beyond the clamp: overflow to inf, underflow to 0; NaN stays NaN.
  y = _mm256_blendv_ps(y, set1(std::numeric_limits<float>::infinity()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// ln x for 8 lanes: x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m by a polynomial in m - 1.
inline __m256 log8(__m256 x) {
  const __m256 minNormal = set1(std::numeric_limits<float>::min());
  // Subnormals: scale up by 2^23 first.
  __m256 sub = _mm256_cmp_ps(x, minNormal, _CMP_LT_OQ);
  __m256 xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, set1(8388608.0f)), sub);
  __m256 eAdj = _mm256_and_ps(sub, set1(-23.0f));
  __m256i bits = _mm256_castps_si256(xs);
  __m256i ei = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126));
  __m256 m = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                                                 _mm256_set1_epi32(0x3f000000)));  // in [0.5, 1)
  __m256 e = _mm256_add_ps(_mm256_cvtepi32_ps(ei), eAdj);
  __m256 small = _mm256_cmp_ps(m, set1(0.707106781186547524f), _CMP_LT_OQ);
  e = _mm256_sub_ps(e, _mm256_and_ps(small, set1(1.0f)));
  __m256 t = _mm256_add_ps(m, _mm256_and_ps(small, m));
  t = _mm256_sub_ps(t, set1(1.0f));
  __m256 z = _mm256_mul_ps(t, t);
  __m256 y = set1(7.0376836292E-2f);
  y = _mm256_fmadd_ps(y, t, set1(-1.1514610310E-1f));
  y = _mm256_fmadd_ps(y, t, set1(1.1676998740E-1f));
  y = _mm256_fmadd_ps(y, t, set1(-1.2420140846E-1f));
  y = _mm256_fmadd_ps(y, t, set1(1.4249322787E-1f));
  y = _mm256_fmadd_ps(y, t, set1(-1.6668057665E-1f));
  y = _mm256_fmadd_ps(y, t, set1(2.0000714765E-1f));
  y = _mm256_fmadd_ps(y, t, set1(-2.4999993993E-1f));
  y = _mm256_fmadd_ps(y, t, set1(3.3333331174E-1f));
  y = _mm256_mul_ps(_mm256_mul_ps(y, t), z);
  y = _mm256_fmadd_ps(e, set1(-2.12194440e-4f), y);
  y = _mm256_fnmadd_ps(z, set1(0.5f), y);
  __m256 r = _mm256_add_ps(t, y);
  r = _mm256_fmadd_ps(e, set1(0.693359375f), r);
  // Special values: log(0) = -inf, log(+inf) = +inf, log(x < 0) and log(NaN) = NaN.
  const float inf = std::numeric_limits<float>::infinity();
  r = _mm256_blendv_ps(r, set1(-inf), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
  r = _mm256_blendv_ps(r, set1(inf), _mm256_cmp_ps(x, set1(inf), _CMP_EQ_OQ));
  __m256 bad = _mm256_or_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_ps(r, set1(std::numeric_limits<float>::quiet_NaN()), bad);
}

// tanh as a rational function x P(x^2) / Q(x^2) (degree 13 over 6, the minimax fit Eigen uses), clamped where
// tanh rounds to +-1 in float: no exp and one division, a third of the work of 1 - 2 / (e^{2x} + 1).
inline __m256 tanh8(__m256 x) {
  const __m256 bound = set1(7.90531110763549805f);
  __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_sub_ps(_mm256_setzero_ps(), bound)), bound);
  __m256 x2 = _mm256_mul_ps(xc, xc);
  __m256 p = set1(-2.76076847742355e-16f);
  p = _mm256_fmadd_ps(p, x2, set1(2.00018790482477e-13f));
  p = _mm256_fmadd_ps(p, x2, set1(-8.60467152213735e-11f));
  p = _mm256_fmadd_ps(p, x2, set1(5.12229709037114e-08f));
  p = _mm256_fmadd_ps(p, x2, set1(1.48572235717979e-05f));
  p = _mm256_fmadd_ps(p, x2, set1(6.37261928875436e-04f));
  p = _mm256_fmadd_ps(p, x2, set1(4.89352455891786e-03f));
  p = _mm256_mul_ps(p, xc);
  __m256 q = set1(1.19825839466702e-06f);
  q = _mm256_fmadd_ps(q, x2, set1(1.18534705686654e-04f));
  q = _mm256_fmadd_ps(q, x2, set1(2.26843463243900e-03f));
  q = _mm256_fmadd_ps(q, x2, set1(4.89352518554385e-03f));
  __m256 r = _mm256_div_ps(p, q);
  // Tiny |x|: tanh(x) = x exactly in float (keeps -0.0 and subnormals); NaN stays NaN.
  const __m256 signMask = set1(-0.0f);
  __m256 tiny = _mm256_cmp_ps(_mm256_andnot_ps(signMask, x), set1(0.0004f), _CMP_LT_OQ);
  r = _mm256_blendv_ps(r, x, tiny);
  return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below (no overflow either way).
inline __m256 logistic8(__m256 x) {
  const __m256 signMask = set1(-0.0f);
  __m256 e = exp8(_mm256_or_ps(x, signMask));  // e^{-|x|}
  __m256 s = _mm256_div_ps(set1(1.0f), _mm256_add_ps(set1(1.0f), e));
  __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  __m256 r = _mm256_blendv_ps(s, _mm256_mul_ps(e, s), neg);
  return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

template <__m256 (*F)(__m256)>
void apply(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, F(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float buf[8] = {};
    std::memcpy(buf, x + i, static_cast<size_t>(n - i) * sizeof(float));
    _mm256_store_ps(buf, F(_mm256_load_ps(buf)));
    std::memcpy(y + i, buf, static_cast<size_t>(n - i) * sizeof(float));
  }
}

}  // namespace

void exp(const float* x, float* y, int64_t n) { apply<exp8>(x, y, n); }
void log(const float* x, float* y, int64_t n) { apply<log8>(x, y, n); }
void tanh(const float* x, float* y, int64_t n) { apply<tanh8>(x, y, n); }
void logistic(const float* x, float* y, int64_t n) { apply<logistic8>(x, y, n); }

}  // namespace tsr::cpu::vmath
