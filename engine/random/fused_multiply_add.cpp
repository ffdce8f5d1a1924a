// f32: the product of two f32 values is exact in f64, and the sum rounded to odd in f64 (53 >= 24 + 2 bits)
// rounds to the same f32 as the exact sum (Boldo and Melquiond, "Emulation of FMA and correctly rounded
// sums: proved algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008).
// f64: their emulated FMA (Algorithm 5.4): an exact product (Dekker with Veltkamp's split), two exact sums,
// one addition rounded to odd and a final rounded addition. Valid away from overflow and subnormals, which
// the uniform sampler's operands (floats in [0, 1), a finite range) do not reach.
#include "engine/random/fused_multiply_add.h"

#include <utility>

#include "engine/transform/trace.h"

namespace tsr::random {

namespace {

using Loc = std::source_location;

Array f64(double v) { return Array::scalar(v, DType::F64); }
Array i64(double v) { return Array::scalar(v, DType::I64); }

// s + e == x + y exactly, s = x + y rounded (Knuth's TwoSum).
std::pair<Array, Array> twoSum(const Array& x, const Array& y, const Loc& loc) {
  Array s = add(x, y, loc);
  Array yv = sub(s, x, loc);
  Array xv = sub(s, yv, loc);
  Array e = add(sub(x, xv, loc), sub(y, yv, loc), loc);
  return {s, e};
}

// hi + lo == x with hi holding the top 26 bits (Veltkamp's split with 2^27 + 1).
std::pair<Array, Array> split(const Array& x, const Loc& loc) {
  Array t = mul(x, f64(134217729.0), loc);
  Array hi = sub(t, sub(t, x, loc), loc);
  return {hi, sub(x, hi, loc)};
}

// p + e == x * y exactly, p = x * y rounded (Dekker's TwoProduct).
std::pair<Array, Array> twoProduct(const Array& x, const Array& y, const Loc& loc) {
  Array p = mul(x, y, loc);
  auto [xh, xl] = split(x, loc);
  auto [yh, yl] = split(y, loc);
  Array e = add(add(add(sub(mul(xh, yh, loc), p, loc), mul(xh, yl, loc), loc), mul(xl, yh, loc), loc),
                mul(xl, yl, loc), loc);
  return {p, e};
}

// x + y rounded to odd: the rounded sum when exact, else the f64 neighbour of the exact sum whose last
// mantissa bit is 1. The rounded sum s is one neighbour; when its last bit is 0, the other lies one step
// towards the error e.
Array addRoundToOdd(const Array& x, const Array& y, const Loc& loc) {
  auto [s, e] = twoSum(x, y, loc);
  Array bits = bitcast(s, DType::I64, loc);
  Array even = equal(bitwiseAnd(bits, i64(1), loc), i64(0), loc);
  Array inexact = bitwiseAnd(notEqual(e, f64(0), loc), isFinite(e, loc), loc);
  Array step = where(equal(greater(e, f64(0), loc), greater(s, f64(0), loc), loc), i64(1), i64(-1), loc);
  Array odd = bitcast(add(bits, step, loc), DType::F64, loc);
  return where(bitwiseAnd(inexact, even, loc), odd, s, loc);
}

}  // namespace

Array fusedMultiplyAdd(const Array& a, const Array& b, const Array& c, std::source_location loc) {
  const DType t = a.dtype();
  if (b.dtype() != t || c.dtype() != t || (t != DType::F32 && t != DType::F64))
    raiseAt(loc, makeError("fusedMultiplyAdd: operands must all be f32 or all f64, got {}, {}, {}",
                           a.aval().toString(), b.aval().toString(), c.aval().toString()));
  if (t == DType::F32) {
    Array p = mul(astype(a, DType::F64, loc), astype(b, DType::F64, loc), loc);  // exact: 24 + 24 bits
    return astype(addRoundToOdd(p, astype(c, DType::F64, loc), loc), DType::F32, loc);
  }
  auto [uh, ul] = twoProduct(a, b, loc);
  auto [th, tl] = twoSum(c, ul, loc);
  auto [vh, vl] = twoSum(uh, th, loc);
  return add(vh, addRoundToOdd(tl, vl, loc), loc);
}

}  // namespace tsr::random
