#include "engine/core/dtype.h"

#include <cmath>

namespace tsr {

uint16_t floatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  // Round to nearest even on the 16 dropped bits.
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

float bf16BitsToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToF16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absu >= 0x477ff000u) {
    // >= 65520 rounds to infinity (65504 is the largest finite half).
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  int32_t exp = static_cast<int32_t>(absu >> 23) - 127;
  uint32_t mant = absu & 0x7fffffu;
  if (exp < -14) {
    // Subnormal half (or zero): value = mant_h * 2^-24.
    if (exp < -25) return static_cast<uint16_t>(sign);  // rounds to zero (exactly 2^-25 handled below)
    mant |= 0x800000u;                                   // implicit bit
    int shift = -exp - 1;                                // drop bits so that one unit is 2^-24
    uint32_t halfMant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (halfMant & 1u))) ++halfMant;
    return static_cast<uint16_t>(sign | halfMant);
  }
  uint32_t halfExp = static_cast<uint32_t>(exp + 15);
  uint32_t halfMant = mant >> 13;
  uint32_t rem = mant & 0x1fffu;
  uint32_t h = (halfExp << 10) | halfMant;
  if (rem > 0x1000u || (rem == 0x1000u && (halfMant & 1u))) ++h;  // carry may bump the exponent: correct
  return static_cast<uint16_t>(sign | h);
}

float f16BitsToFloat(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
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
bool isUnsigned(DType t) { return t == DType::U8 || t == DType::U32; }
bool isSigned(DType t) { return isFloating(t) || t == DType::I32 || t == DType::I64; }

}  // namespace tsr
