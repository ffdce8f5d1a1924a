#include "engine/core/dtype.h"

#include <immintrin.h>


namespace tsr {

void widenBf16(const bf16* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i lo = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16);
    const __m256i hi = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16);
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(lo));
    _mm256_storeu_ps(y + i + 8, _mm256_castsi256_ps(hi));
  }
  for (; i < n; ++i) y[i] = static_cast<float>(x[i]);
}

namespace {

// 8 floats' bf16 bits in the low halves of 32-bit lanes, as floatToBf16Bits.
__m256i bf16Bits8(__m256 f) {
  const __m256i u = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

}  // namespace

void narrowToBf16(const float* x, bf16* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // packus packs within 128-bit halves: lanes come out 0-3, 8-11, 4-7, 12-15 and the permute puts them in order.
    const __m256i packed =
        _mm256_packus_epi32(bf16Bits8(_mm256_loadu_ps(x + i)), bf16Bits8(_mm256_loadu_ps(x + i + 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_permute4x64_epi64(packed, 0xD8));
  }
  for (; i < n; ++i) y[i] = bf16(x[i]);
}

std::string_view dtypeName(DType t) {
  switch (t) {
#define X(e, n, ty) \
  case DType::e: return n;
    TSR_DTYPE_LIST(X)
#undef X
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view name) {
#define X(e, n, ty) \
  if (name == n) return DType::e;
  TSR_DTYPE_LIST(X)
#undef X
  return std::nullopt;
}

int64_t dtypeSize(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::U32: return 4;
    case DType::Bool: return 1;
  }
  return 0;
}

bool isFloating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16;
}
bool isInteger(DType t) {
  return t == DType::I32 || t == DType::I64 || t == DType::U8 || t == DType::U32;
}
bool isNumeric(DType t) { return t != DType::Bool; }
bool isUnsigned(DType t) { return t == DType::U8 || t == DType::U32; }
bool isSigned(DType t) { return isFloating(t) || t == DType::I32 || t == DType::I64; }

}  // namespace tsr
