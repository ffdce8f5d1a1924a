#include "engine/backends/cpu/vmath.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

namespace tsr::cpu::vmath {
namespace {

#include "engine/ops/vmath_avx2.inc"

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

void exp(const float* x, float* y, int64_t n) { apply<tsr_exp8>(x, y, n); }
void log(const float* x, float* y, int64_t n) { apply<tsr_log8>(x, y, n); }
void tanh(const float* x, float* y, int64_t n) { apply<tsr_tanh8>(x, y, n); }
void logistic(const float* x, float* y, int64_t n) { apply<tsr_logistic8>(x, y, n); }

}  // namespace tsr::cpu::vmath
