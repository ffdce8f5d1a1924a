#pragma once
// Element types, and bf16/f16 storage types with round-to-nearest-even conversion.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

namespace tsr {

// X(Enum, name, C++ storage type)
#define TSR_DTYPE_LIST(X)     \
  X(F32, "f32", float)        \
  X(F64, "f64", double)       \
  X(BF16, "bf16", ::tsr::bf16) \
  X(F16, "f16", ::tsr::f16)   \
  X(I32, "i32", int32_t)      \
  X(I64, "i64", int64_t)      \
  X(U8, "u8", uint8_t)        \
  X(U32, "u32", uint32_t)     \
  X(Bool, "bool", bool)

enum class DType : uint8_t {
#define X(e, n, t) e,
  TSR_DTYPE_LIST(X)
#undef X
};
inline constexpr int kNumDTypes = 9;

// Bit-exact conversions. Rounding is to nearest, ties to even; NaN stays NaN. Inline: kernels convert per
// element, and a call per element would stop the loops from vectorising.
inline uint16_t floatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even on the 16 dropped bits
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16BitsToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t floatToF16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to infinity
  int32_t exp = static_cast<int32_t>(absu >> 23) - 127;
  uint32_t mant = absu & 0x7fffffu;
  if (exp < -14) {
    // Subnormal half (or zero): value = halfMant * 2^-24.
    if (exp < -25) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    int shift = -exp - 1;  // drop bits so that one unit is 2^-24
    uint32_t halfMant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (halfMant & 1u))) ++halfMant;
    return static_cast<uint16_t>(sign | halfMant);
  }
  uint32_t h = (static_cast<uint32_t>(exp + 15) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is still correct
  return static_cast<uint16_t>(sign | h);
}

inline float f16BitsToFloat(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {
      // Subnormal: normalise the mantissa.
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      u = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
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

struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  bf16(float f) : bits(floatToBf16Bits(f)) {}
  operator float() const { return bf16BitsToFloat(bits); }
  static bf16 fromBits(uint16_t b) { bf16 r; r.bits = b; return r; }
};

struct f16 {
  uint16_t bits = 0;
  f16() = default;
  f16(float f) : bits(floatToF16Bits(f)) {}
  operator float() const { return f16BitsToFloat(bits); }
  static f16 fromBits(uint16_t b) { f16 r; r.bits = b; return r; }
};

// Arrays converted 16 elements at a time (AVX2), bit for bit as the element conversions above: bf16 widened to f32
// (exact), f32 rounded to bf16. For kernels that widen whole operands (a loop over the element conversions does not
// vectorise: they go through memcpy).
void widenBf16(const bf16* x, float* y, int64_t n);
void narrowToBf16(const float* x, bf16* y, int64_t n);

std::string_view dtypeName(DType t);
std::optional<DType> parseDType(std::string_view name);
int64_t dtypeSize(DType t);
bool isFloating(DType t);  // f32 f64 bf16 f16
bool isInteger(DType t);   // i32 i64 u8 u32
bool isSigned(DType t);    // floats and signed integers
bool isUnsigned(DType t);  // u8 u32 (bool excluded)
bool isNumeric(DType t);   // every dtype but bool

template <class T> struct DTypeOf;
#define X(e, n, t) template <> struct DTypeOf<t> { static constexpr DType value = DType::e; };
TSR_DTYPE_LIST(X)
#undef X

template <DType D> struct CType;
#define X(e, n, t) template <> struct CType<DType::e> { using type = t; };
TSR_DTYPE_LIST(X)
#undef X

// Calls f.template operator()<T>() with T the storage type of `t`.
// Usage: dispatchDType(t, [&]<class T>() { ... });
template <class F>
decltype(auto) dispatchDType(DType t, F&& f) {
  switch (t) {
#define X(e, n, ty) \
  case DType::e: return f.template operator()<ty>();
    TSR_DTYPE_LIST(X)
#undef X
  }
  return f.template operator()<float>();
}

}  // namespace tsr
