#pragma once
// The scalar math of the elementwise ops: one small functor per op, with the dtypes it accepts. The kernels
// in elementwise.cpp map a functor over flat arrays, so a new elementwise op is a functor plus a table row.
//
// Functors see the compute type: float for bf16/f16 (rounded once when stored), the storage type otherwise.
// Integer semantics are defined for every input, never UB:
//   - add/sub/mul/neg/abs wrap around (two's complement), e.g. neg(INT_MIN) == INT_MIN;
//   - div truncates toward zero; x / 0 == 0 and INT_MIN / -1 == INT_MIN;
//   - rem has the sign of the dividend; x % 0 == x (so x == div(x, y) * y + rem(x, y) holds for every y);
//   - shift amounts are read as unsigned; amounts >= the bit width give 0 (left, logical right) or the sign
//     fill (arithmetic right). Arithmetic right shifts of unsigned types treat the top bit as the sign.
// Floating max/min (and so clamp) propagate NaN.
//
// Derivatives sit beside the math: a functor with a `vjp` is differentiable, one without (sign, floor,
// bitwise, comparisons) has a zero gradient. vjp(g, y, operands...) gets the cotangent g of the result y and
// returns one cotangent per operand, each with exactly that operand's aval (operands have equal avals, and
// scalar constants broadcast). Rules use the Array API only, so they run eagerly, under jit and under grad of
// grad; elementwise.cpp calls them only for floating results.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/transform/api.h"

namespace tsr::ops {

// A set of dtypes, usable at compile time (to instantiate kernels only where they make sense) and at run
// time (for infer's error messages).
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> types) {
    for (DType t : types) m_bits |= bit(t);
  }
  constexpr bool contains(DType t) const { return (m_bits & bit(t)) != 0; }
  template <class T>
  constexpr bool contains() const {
    return contains(DTypeOf<T>::value);
  }
  constexpr DTypeSet operator|(DTypeSet o) const {
    DTypeSet r;
    r.m_bits = m_bits | o.m_bits;
    return r;
  }
  std::string toString() const;  // "f32, f64, bf16, f16"

 private:
  static constexpr uint32_t bit(DType t) { return 1u << static_cast<unsigned>(t); }
  uint32_t m_bits = 0;
};

inline constexpr DTypeSet kFloats{DType::F32, DType::F64, DType::BF16, DType::F16};
inline constexpr DTypeSet kSignedInts{DType::I32, DType::I64};
inline constexpr DTypeSet kUnsignedInts{DType::U8, DType::U32};
inline constexpr DTypeSet kInts = kSignedInts | kUnsignedInts;
inline constexpr DTypeSet kNumeric = kFloats | kInts;
inline constexpr DTypeSet kIntsAndBool = kInts | DTypeSet{DType::Bool};
inline constexpr DTypeSet kAllDTypes = kNumeric | DTypeSet{DType::Bool};

template <class T>
inline constexpr bool kIsHalf = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;
template <class T>
using ComputeType = std::conditional_t<kIsHalf<T>, float, T>;

// Giles, "Approximating the erfinv function" (GPU Computing Gems Jade, 2011). The single-precision
// polynomials are good to a few ulp in float; the double-precision ones to about 2 ulp in double.
float erfInv(float x);
double erfInv(double x);

// The digamma function psi = lgamma' in double: poles (0, -1, -2, ...) and -inf give NaN; negative x reflect
// (psi(x) = psi(1 - x) - pi / tan(pi x)), small x recur up to 10, then the asymptotic series.
double digammaOf(double x);
// The same in float, bit for bit the loop dialect's tsr_digamma, so fused and unfused f32 results agree.
float digammaOf(float x);
// The trigamma function psi' of a floating Array, with the Array API (digamma's vjp; differentiable again):
// reflection below 1/2, six steps of the recurrence psi'(x) = psi'(x + 1) + 1/x^2, then the asymptotic series.
Array trigamma(const Array& x);

namespace elementwise {

template <class T>
inline constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Two's complement wraparound via the unsigned type, where signed overflow would be UB.
template <class T, class F>
T wrapping(T a, T b, F f) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(f(static_cast<U>(a), static_cast<U>(b)));
}
template <class T>
T negate(T x) {
  if constexpr (kIsInt<T>) return wrapping(T(0), x, [](auto a, auto b) { return a - b; });
  else return -x;
}

using Cotangents = std::vector<Array>;

inline Array isZero(const Array& x) { return equal(x, scalarLike(x, 0.0)); }
// x with its zeros replaced by ones: keeps log and pow finite in branches a select then discards, so that
// their own derivatives (grad of grad) do not turn the discarded inf into NaN.
inline Array replaceZero(const Array& x) { return where(isZero(x), scalarLike(x, 1.0), x); }
// The share of max/min's cotangent that operand x gets: 1 where x was chosen, 1/2 where both operands tie
// (as JAX does, so max(x, x) has slope 1), 0 otherwise. A NaN result matches neither operand.
inline Array chosenShare(const Array& x, const Array& other, const Array& y) {
  Array share = where(equal(other, y), scalarLike(x, 0.5), scalarLike(x, 1.0));
  return where(equal(x, y), share, scalarLike(x, 0.0));
}

// Unary
struct Neg {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> static T apply(T x) { return negate(x); }
  static Cotangents vjp(const Array& g, const Array&, const Array&) { return {-g}; }
};
struct Abs {
  static constexpr DTypeSet kTypes = kFloats | kSignedInts;
  template <class T> static T apply(T x) {
    if constexpr (kIsInt<T>) return x < 0 ? negate(x) : x;
    else return std::fabs(x);
  }
  // 0 at x == 0 (sign(0)), as PyTorch does.
  static Cotangents vjp(const Array& g, const Array&, const Array& x) { return {g * sign(x)}; }
};
// -1, 0 or 1; floats keep the sign of zero and NaN stays NaN.
struct Sign {
  static constexpr DTypeSet kTypes = kFloats | kSignedInts;
  template <class T> static T apply(T x) { return x > T(0) ? T(1) : x < T(0) ? T(-1) : x; }
};
struct Exp {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::exp(x); }
  static Cotangents vjp(const Array& g, const Array& y, const Array&) { return {g * y}; }
};
struct Exp2 {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::exp2(x); }
  static Cotangents vjp(const Array& g, const Array& y, const Array&) { return {g * y * std::numbers::ln2}; }
};
struct Log {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::log(x); }
  static Cotangents vjp(const Array& g, const Array&, const Array& x) { return {g / x}; }
};
struct Log1p {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::log1p(x); }
  static Cotangents vjp(const Array& g, const Array&, const Array& x) { return {g / (1.0 + x)}; }
};
struct Expm1 {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::expm1(x); }
  static Cotangents vjp(const Array& g, const Array& y, const Array&) { return {g * (y + 1.0)}; }
};
struct Sqrt {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::sqrt(x); }
  static Cotangents vjp(const Array& g, const Array& y, const Array&) { return {g / (2.0 * y)}; }
};
struct Rsqrt {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return T(1) / std::sqrt(x); }
  // y = x^-1/2: y' = -1/2 x^-3/2 = -1/2 y / x.
  static Cotangents vjp(const Array& g, const Array& y, const Array& x) { return {g * -0.5 * y / x}; }
};
struct Tanh {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::tanh(x); }
  static Cotangents vjp(const Array& g, const Array& y, const Array&) { return {g * (1.0 - y * y)}; }
};
// 1 / (1 + e^-x) with e = e^-|x| <= 1, so neither branch overflows and tiny results keep their precision.
struct Logistic {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) {
    T e = std::exp(-std::fabs(x));
    T s = T(1) / (T(1) + e);
    return x >= T(0) ? s : e * s;
  }
  static Cotangents vjp(const Array& g, const Array& y, const Array&) { return {g * y * (1.0 - y)}; }
};
struct Sin {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::sin(x); }
  static Cotangents vjp(const Array& g, const Array&, const Array& x) { return {g * cos(x)}; }
};
struct Cos {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::cos(x); }
  static Cotangents vjp(const Array& g, const Array&, const Array& x) { return {-g * sin(x)}; }
};
struct Tan {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::tan(x); }
  static Cotangents vjp(const Array& g, const Array& y, const Array&) { return {g * (1.0 + y * y)}; }
};
struct Erf {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::erf(x); }
  // erf'(x) = 2/sqrt(pi) e^(-x^2)
  static Cotangents vjp(const Array& g, const Array&, const Array& x) {
    return {g * (2.0 * std::numbers::inv_sqrtpi) * exp(-x * x)};
  }
};
struct ErfInv {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return erfInv(x); }
  // The inverse's slope: 1 / erf'(y) = sqrt(pi)/2 e^(y^2).
  static Cotangents vjp(const Array& g, const Array& y, const Array&) {
    return {g * (0.5 / std::numbers::inv_sqrtpi) * exp(y * y)};
  }
};
struct Floor {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::floor(x); }
};
struct Ceil {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::ceil(x); }
};
// Half-way cases round away from zero (std::round), not to even: round(2.5) == 3, round(-0.5) == -1.
struct Round {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::round(x); }
};
struct IsFinite {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static bool apply(T x) { return std::isfinite(x); }
};
struct Not {
  static constexpr DTypeSet kTypes = kIntsAndBool;
  template <class T> static T apply(T x) {
    if constexpr (std::is_same_v<T, bool>) return !x;
    else return static_cast<T>(~x);
  }
};
// NaN stays NaN.
struct Relu {
  static constexpr DTypeSet kTypes = kFloats | kSignedInts;
  template <class T> static T apply(T x) { return x < T(0) ? T(0) : x; }
  // 0 at x == 0, as JAX does. Read from the result (y > 0 exactly where x > 0, NaN included), as PyTorch's
  // threshold_backward is: the backward pass keeps relu's output, which the next layer keeps anyway, and not its
  // input, so a convolution's or a norm's result need not stay alive for it and relu can join their kernels.
  static Cotangents vjp(const Array& g, const Array& y, const Array&) {
    return {where(y > 0.0, g, scalarLike(g, 0.0))};
  }
};
// x * x; integers wrap around.
struct Square {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> static T apply(T x) {
    if constexpr (kIsInt<T>) return wrapping(x, x, [](auto a, auto b) { return a * b; });
    else return x * x;
  }
  static Cotangents vjp(const Array& g, const Array&, const Array& x) { return {g * (2.0 * x)}; }
};
// log |gamma(x)|; +inf at the poles 0, -1, -2, ...
struct Lgamma {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return std::lgamma(x); }
  static Cotangents vjp(const Array& g, const Array&, const Array& x) { return {g * digamma(x)}; }
};
// f32 (and the halves, in float) as the loop dialect computes it; f64 in double.
struct Digamma {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T x) { return digammaOf(x); }
  static Cotangents vjp(const Array& g, const Array&, const Array& x) { return {g * trigamma(x)}; }
};

// Binary
struct Add {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> static T apply(T a, T b) {
    if constexpr (kIsInt<T>) return wrapping(a, b, [](auto x, auto y) { return x + y; });
    else return a + b;
  }
  static Cotangents vjp(const Array& g, const Array&, const Array&, const Array&) { return {g, g}; }
};
struct Sub {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> static T apply(T a, T b) {
    if constexpr (kIsInt<T>) return wrapping(a, b, [](auto x, auto y) { return x - y; });
    else return a - b;
  }
  static Cotangents vjp(const Array& g, const Array&, const Array&, const Array&) { return {g, -g}; }
};
struct Mul {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> static T apply(T a, T b) {
    if constexpr (kIsInt<T>) return wrapping(a, b, [](auto x, auto y) { return x * y; });
    else return a * b;
  }
  static Cotangents vjp(const Array& g, const Array&, const Array& a, const Array& b) { return {g * b, g * a}; }
};
struct Div {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> static T apply(T a, T b) {
    if constexpr (kIsInt<T>) {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>)
        if (b == -1) return negate(a);
      return static_cast<T>(a / b);
    } else {
      return a / b;
    }
  }
  // d/db (a / b) = -a / b^2 = -y / b
  static Cotangents vjp(const Array& g, const Array& y, const Array& a, const Array& b) { return {g / b, -g * y / b}; }
};
struct Rem {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> static T apply(T a, T b) {
    if constexpr (kIsInt<T>) {
      if (b == 0) return a;
      if constexpr (std::is_signed_v<T>)
        if (b == -1) return 0;
      return static_cast<T>(a % b);
    } else {
      return std::fmod(a, b);
    }
  }
  // rem(a, b) = a - b trunc(a / b), and trunc is piecewise constant: d/da = 1, d/db = -trunc(a / b) (as JAX).
  static Cotangents vjp(const Array& g, const Array&, const Array& a, const Array& b) {
    Array q = a / b;
    return {g, -g * (sign(q) * floor(abs(q)))};
  }
};
struct Pow {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T a, T b) { return std::pow(a, b); }
  // d/da = b a^(b-1), taken as 0 where b == 0 (x^0 is constant); d/db = log(a) y, taken as 0 where a == 0
  // (the limit as a -> 0+ for b > 0). Both conventions are JAX's.
  static Cotangents vjp(const Array& g, const Array& y, const Array& a, const Array& b) {
    Array da = where(isZero(b), scalarLike(b, 0.0), replaceZero(b) * pow(a, b - 1.0));
    return {g * da, g * log(replaceZero(a)) * y};
  }
};
struct Max {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) return (a > b || a != a) ? a : b;
    else return a > b ? a : b;
  }
  static Cotangents vjp(const Array& g, const Array& y, const Array& a, const Array& b) {
    return {g * chosenShare(a, b, y), g * chosenShare(b, a, y)};
  }
};
struct Min {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) return (a < b || a != a) ? a : b;
    else return a < b ? a : b;
  }
  static Cotangents vjp(const Array& g, const Array& y, const Array& a, const Array& b) {
    return {g * chosenShare(a, b, y), g * chosenShare(b, a, y)};
  }
};
struct Atan2 {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> static T apply(T a, T b) { return std::atan2(a, b); }
  // atan2(a, b) = angle of (b, a): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2)
  static Cotangents vjp(const Array& g, const Array&, const Array& a, const Array& b) {
    Array r2 = a * a + b * b;
    return {g * b / r2, -g * a / r2};
  }
};
struct And {
  static constexpr DTypeSet kTypes = kIntsAndBool;
  template <class T> static T apply(T a, T b) { return static_cast<T>(a & b); }
};
struct Or {
  static constexpr DTypeSet kTypes = kIntsAndBool;
  template <class T> static T apply(T a, T b) { return static_cast<T>(a | b); }
};
struct Xor {
  static constexpr DTypeSet kTypes = kIntsAndBool;
  template <class T> static T apply(T a, T b) { return static_cast<T>(a ^ b); }
};

template <class T>
inline constexpr unsigned kBits = sizeof(T) * 8;

struct ShiftLeft {
  static constexpr DTypeSet kTypes = kInts;
  template <class T> static T apply(T a, T b) {
    using U = std::make_unsigned_t<T>;
    U n = static_cast<U>(b);
    return n >= kBits<T> ? T(0) : static_cast<T>(static_cast<U>(static_cast<U>(a) << n));
  }
};
struct ShiftRightLogical {
  static constexpr DTypeSet kTypes = kInts;
  template <class T> static T apply(T a, T b) {
    using U = std::make_unsigned_t<T>;
    U n = static_cast<U>(b);
    return n >= kBits<T> ? T(0) : static_cast<T>(static_cast<U>(a) >> n);
  }
};
struct ShiftRightArithmetic {
  static constexpr DTypeSet kTypes = kInts;
  template <class T> static T apply(T a, T b) {
    using U = std::make_unsigned_t<T>;
    using S = std::make_signed_t<T>;
    U n = static_cast<U>(b);
    // Shifting by width - 1 already leaves only copies of the sign bit.
    U clamped = n >= kBits<T> ? U(kBits<T> - 1) : n;
    return static_cast<T>(static_cast<S>(a) >> clamped);
  }
};

// Comparisons (result bool). On floats they are IEEE: every comparison with NaN is false except ne.
struct Eq {
  static constexpr DTypeSet kTypes = kAllDTypes;
  template <class T> static bool apply(T a, T b) { return a == b; }
};
struct Ne {
  static constexpr DTypeSet kTypes = kAllDTypes;
  template <class T> static bool apply(T a, T b) { return a != b; }
};
struct Lt {
  static constexpr DTypeSet kTypes = kAllDTypes;
  template <class T> static bool apply(T a, T b) { return a < b; }
};
struct Le {
  static constexpr DTypeSet kTypes = kAllDTypes;
  template <class T> static bool apply(T a, T b) { return a <= b; }
};
struct Gt {
  static constexpr DTypeSet kTypes = kAllDTypes;
  template <class T> static bool apply(T a, T b) { return a > b; }
};
struct Ge {
  static constexpr DTypeSet kTypes = kAllDTypes;
  template <class T> static bool apply(T a, T b) { return a >= b; }
};

// clamp(lo, x, hi) = min(max(x, lo), hi), as in XLA; when lo > hi the result is hi.
struct Clamp {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> static T apply(T lo, T x, T hi) { return Min::apply(Max::apply(x, lo), hi); }
  // g goes to whichever operand the result is: x on the closed range [lo, hi] (as PyTorch: ties at a bound
  // go to x), lo below it, hi above it or when lo > hi. The three masks are disjoint.
  static Cotangents vjp(const Array& g, const Array&, const Array& lo, const Array& x, const Array& hi) {
    Array zero = scalarLike(g, 0.0);
    Array atX = bitwiseAnd(lo <= x, x <= hi);
    Array atLo = bitwiseAnd(x < lo, lo <= hi);
    Array atHi = bitwiseOr(hi < x, hi < lo);
    return {where(atLo, g, zero), where(atX, g, zero), where(atHi, g, zero)};
  }
};

// convert: C casts, except where a C cast would be UB: float -> integer truncates toward zero and then
// saturates to the destination range, NaN -> 0. Integer -> integer wraps around; anything -> bool is x != 0.
template <class D, class S>
D convertElement(S x) {
  using SC = ComputeType<S>;
  SC v = static_cast<SC>(x);
  if constexpr (std::is_same_v<D, bool>) {
    return v != SC(0);
  } else if constexpr (kIsInt<D> && std::is_floating_point_v<SC>) {
    double d = static_cast<double>(v);
    if (std::isnan(d)) return D(0);
    // Both bounds are exact in double, or (the int64 maximum) round up to 2^63, which is out of range.
    constexpr double kLo = static_cast<double>(std::numeric_limits<D>::min());
    constexpr double kHi = static_cast<double>(std::numeric_limits<D>::max());
    if (d <= kLo) return std::numeric_limits<D>::min();
    if (d >= kHi) return std::numeric_limits<D>::max();
    return static_cast<D>(d);
  } else if constexpr (kIsHalf<D>) {
    return D(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

}  // namespace elementwise
}  // namespace tsr::ops
