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

// Bit-exact conversions. Rounding is to nearest, ties to even; NaN stays NaN.
uint16_t floatToBf16Bits(float f);
float bf16BitsToFloat(uint16_t b);
uint16_t floatToF16Bits(float f);
float f16BitsToFloat(uint16_t h);

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

std::string_view dtypeName(DType t);
std::optional<DType> parseDType(std::string_view name);
int64_t dtypeSize(DType t);
bool isFloating(DType t);  // f32 f64 bf16 f16
bool isInteger(DType t);   // i32 i64 u8 u32
bool isSigned(DType t);    // floats and signed integers
bool isUnsigned(DType t);  // u8 u32 (bool excluded)

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
