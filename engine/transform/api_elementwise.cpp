// Elementwise part of the Array API: broadcasting, dtype promotion, unary/binary functions and operators.
#include <cmath>
#include <numbers>

#include "engine/transform/api.h"
#include "engine/transform/trace.h"

namespace tsr {

using ir::OpCode;

namespace {

// Promotion lattice rank: bool < u8 < u32 < i32 < i64 < f16/bf16 < f32 < f64 (jax.numpy's lattice with x64 off,
// where an unsigned and a signed type meet in the signed one; bf16 with f16 is f32).
int promotionRank(DType t) {
  switch (t) {
    case DType::Bool: return 0;
    case DType::U8: return 1;
    case DType::U32: return 2;
    case DType::I32: return 3;
    case DType::I64: return 4;
    case DType::F16:
    case DType::BF16: return 5;
    case DType::F32: return 6;
    case DType::F64: return 7;
  }
  return 0;
}

Array unary(OpCode op, const Array& x, const std::source_location& loc) { return bind1(op, {x}, ir::NoAttrs{}, loc); }

// Brings a and b to one dtype and one shape, numpy-style.
std::pair<Array, Array> harmonize(const Array& a, const Array& b, const char* op, const std::source_location& loc) {
  if (!a.valid() || !b.valid()) raise(makeError("{}: an empty (default-constructed) Array was used as an operand", op));
  DType t = promoteTypes(a.dtype(), b.dtype());
  Array x = a.dtype() == t ? a : astype(a, t, loc);
  Array y = b.dtype() == t ? b : astype(b, t, loc);
  if (x.shape() == y.shape()) return {x, y};
  Shape s;
  try {
    s = broadcastShapes(x.shape(), y.shape(), op);
  } catch (const Exception& e) {
    raiseAt(loc, e.error());
  }
  if (!(x.shape() == s)) x = broadcastTo(x, s, loc);
  if (!(y.shape() == s)) y = broadcastTo(y, s, loc);
  return {x, y};
}

Array fitTo(const Array& a, DType t, const Shape& s, const std::source_location& loc) {
  Array x = a.dtype() == t ? a : astype(a, t, loc);
  return x.shape() == s ? x : broadcastTo(x, s, loc);
}

Array binary(OpCode op, const Array& a, const Array& b, const std::source_location& loc) {
  auto [x, y] = harmonize(a, b, ir::coreOpName(op), loc);
  return bind1(op, {x, y}, ir::NoAttrs{}, loc);
}

}  // namespace

DType promoteTypes(DType a, DType b) {
  if (a == b) return a;
  if ((a == DType::BF16 && b == DType::F16) || (a == DType::F16 && b == DType::BF16)) return DType::F32;
  // Unsigned meets signed: u32 with i32 is i32, as jnp.promote_types with x64 off (its default), which promotes
  // to i64 and then canonicalizes that to i32. With an i64 operand present (jnp's x64 mode) the lattice gives i64.
  return promotionRank(a) >= promotionRank(b) ? a : b;
}

Shape broadcastShapes(const Shape& a, const Shape& b, const char* op) {
  int r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    int ia = a.rank() - r + i, ib = b.rank() - r + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      raise(makeError("{}: shapes {} and {} cannot be broadcast together (dim {}: {} vs {})", op, a.toString(),
                      b.toString(), i, da, db));
    out[static_cast<size_t>(i)] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

Array neg(const Array& x, std::source_location loc) { return unary(OpCode::Neg, x, loc); }
Array abs(const Array& x, std::source_location loc) { return unary(OpCode::Abs, x, loc); }
Array sign(const Array& x, std::source_location loc) { return unary(OpCode::Sign, x, loc); }
Array exp(const Array& x, std::source_location loc) { return unary(OpCode::Exp, x, loc); }
Array exp2(const Array& x, std::source_location loc) { return unary(OpCode::Exp2, x, loc); }
Array log(const Array& x, std::source_location loc) { return unary(OpCode::Log, x, loc); }
Array log1p(const Array& x, std::source_location loc) { return unary(OpCode::Log1p, x, loc); }
Array expm1(const Array& x, std::source_location loc) { return unary(OpCode::Expm1, x, loc); }
Array sqrt(const Array& x, std::source_location loc) { return unary(OpCode::Sqrt, x, loc); }
Array rsqrt(const Array& x, std::source_location loc) { return unary(OpCode::Rsqrt, x, loc); }
Array tanh(const Array& x, std::source_location loc) { return unary(OpCode::Tanh, x, loc); }
Array sigmoid(const Array& x, std::source_location loc) { return unary(OpCode::Logistic, x, loc); }
Array sin(const Array& x, std::source_location loc) { return unary(OpCode::Sin, x, loc); }
Array cos(const Array& x, std::source_location loc) { return unary(OpCode::Cos, x, loc); }
Array tan(const Array& x, std::source_location loc) { return unary(OpCode::Tan, x, loc); }
Array erf(const Array& x, std::source_location loc) { return unary(OpCode::Erf, x, loc); }
Array erfInv(const Array& x, std::source_location loc) { return unary(OpCode::ErfInv, x, loc); }
Array floor(const Array& x, std::source_location loc) { return unary(OpCode::Floor, x, loc); }
Array ceil(const Array& x, std::source_location loc) { return unary(OpCode::Ceil, x, loc); }
Array round(const Array& x, std::source_location loc) { return unary(OpCode::Round, x, loc); }
Array isFinite(const Array& x, std::source_location loc) { return unary(OpCode::IsFinite, x, loc); }
Array logicalNot(const Array& x, std::source_location loc) { return unary(OpCode::Not, x, loc); }
Array relu(const Array& x, std::source_location loc) { return unary(OpCode::Relu, x, loc); }
Array square(const Array& x, std::source_location loc) { return unary(OpCode::Square, x, loc); }
Array integerPow(const Array& x, int64_t exponent, std::source_location loc) {
  return bind1(OpCode::IntegerPow, {x}, ir::IntegerPowAttrs{exponent}, loc);
}
Array lgamma(const Array& x, std::source_location loc) { return unary(OpCode::Lgamma, x, loc); }
Array digamma(const Array& x, std::source_location loc) { return unary(OpCode::Digamma, x, loc); }
Array stopGradient(const Array& x, std::source_location loc) { return unary(OpCode::StopGradient, x, loc); }

Array gelu(const Array& x, bool approximate, std::source_location loc) {
  if (approximate) {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const double c = std::sqrt(2.0 / std::numbers::pi);
    Array inner = mul(scalarLike(x, c, loc), add(x, mul(scalarLike(x, 0.044715, loc), mul(x, square(x, loc), loc), loc), loc), loc);
    return mul(mul(scalarLike(x, 0.5, loc), x, loc), add(scalarLike(x, 1.0, loc), tanh(inner, loc), loc), loc);
  }
  // 0.5 x (1 + erf(x / sqrt(2)))
  Array e = erf(mul(x, scalarLike(x, 1.0 / std::numbers::sqrt2, loc), loc), loc);
  return mul(mul(scalarLike(x, 0.5, loc), x, loc), add(scalarLike(x, 1.0, loc), e, loc), loc);
}

Array add(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Add, a, b, loc); }
Array sub(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Sub, a, b, loc); }
Array mul(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Mul, a, b, loc); }
Array div(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Div, a, b, loc); }
Array rem(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Rem, a, b, loc); }
Array pow(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Pow, a, b, loc); }
Array maximum(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Max, a, b, loc); }
Array minimum(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Min, a, b, loc); }
Array atan2(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Atan2, a, b, loc); }
Array bitwiseAnd(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::And, a, b, loc); }
Array bitwiseOr(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Or, a, b, loc); }
Array bitwiseXor(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Xor, a, b, loc); }
Array shiftLeft(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::ShiftLeft, a, b, loc); }
Array shiftRightLogical(const Array& a, const Array& b, std::source_location loc) {
  return binary(OpCode::ShiftRightLogical, a, b, loc);
}
Array shiftRightArithmetic(const Array& a, const Array& b, std::source_location loc) {
  return binary(OpCode::ShiftRightArithmetic, a, b, loc);
}
Array equal(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Eq, a, b, loc); }
Array notEqual(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Ne, a, b, loc); }
Array less(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Lt, a, b, loc); }
Array lessEqual(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Le, a, b, loc); }
Array greater(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Gt, a, b, loc); }
Array greaterEqual(const Array& a, const Array& b, std::source_location loc) { return binary(OpCode::Ge, a, b, loc); }

Array where(const Array& cond, const Array& a, const Array& b, std::source_location loc) {
  Array c = cond.dtype() == DType::Bool ? cond : notEqual(cond, scalarLike(cond, 0, loc), loc);
  DType t = promoteTypes(a.dtype(), b.dtype());
  Shape s = broadcastShapes(broadcastShapes(c.shape(), a.shape(), "where"), b.shape(), "where");
  return bind1(OpCode::Select, {fitTo(c, DType::Bool, s, loc), fitTo(a, t, s, loc), fitTo(b, t, s, loc)},
               ir::NoAttrs{}, loc);
}

Array clamp(const Array& x, const Array& lo, const Array& hi, std::source_location loc) {
  DType t = promoteTypes(promoteTypes(lo.dtype(), x.dtype()), hi.dtype());
  Shape s = broadcastShapes(broadcastShapes(lo.shape(), x.shape(), "clamp"), hi.shape(), "clamp");
  return bind1(OpCode::Clamp, {fitTo(lo, t, s, loc), fitTo(x, t, s, loc), fitTo(hi, t, s, loc)}, ir::NoAttrs{}, loc);
}

Array scalarLike(const Array& x, double value, std::source_location loc) {
  if (!x.valid()) raise(makeError("scalarLike: empty Array"));
  return Array::scalar(value, x.dtype());
}

Array fullLike(const Array& x, double value, std::source_location loc) {
  Array s = scalarLike(x, value, loc);
  return x.rank() == 0 ? s : broadcastTo(s, x.shape(), loc);
}
Array zerosLike(const Array& x, std::source_location loc) { return fullLike(x, 0.0, loc); }
Array onesLike(const Array& x, std::source_location loc) { return fullLike(x, 1.0, loc); }

Array astype(const Array& x, DType dtype, std::source_location loc) {
  if (x.valid() && x.dtype() == dtype) return x;
  return bind1(OpCode::Convert, {x}, ir::ConvertAttrs{dtype}, loc);
}

Array bitcast(const Array& x, DType dtype, std::source_location loc) {
  return bind1(OpCode::BitcastConvert, {x}, ir::ConvertAttrs{dtype}, loc);
}

std::pair<Array, Array> threefry2x32(const Array& k0, const Array& k1, const Array& x0, const Array& x1,
                                     std::source_location loc) {
  Shape s = broadcastShapes(broadcastShapes(k0.shape(), k1.shape(), "threefry2x32"),
                            broadcastShapes(x0.shape(), x1.shape(), "threefry2x32"), "threefry2x32");
  auto fit = [&](const Array& a) { return a.shape() == s ? a : broadcastTo(a, s, loc); };
  auto r = bind(OpCode::Threefry2x32, {fit(k0), fit(k1), fit(x0), fit(x1)}, ir::NoAttrs{}, loc);
  return {r[0], r[1]};
}

Array operator-(Located x) { return neg(x.array, x.where); }
Array operator+(Located a, const Array& b) { return add(a.array, b, a.where); }
Array operator-(Located a, const Array& b) { return sub(a.array, b, a.where); }
Array operator*(Located a, const Array& b) { return mul(a.array, b, a.where); }
Array operator/(Located a, const Array& b) { return div(a.array, b, a.where); }
Array operator%(Located a, const Array& b) { return rem(a.array, b, a.where); }
Array operator+(Located a, double b) { return add(a.array, scalarLike(a.array, b, a.where), a.where); }
Array operator-(Located a, double b) { return sub(a.array, scalarLike(a.array, b, a.where), a.where); }
Array operator*(Located a, double b) { return mul(a.array, scalarLike(a.array, b, a.where), a.where); }
Array operator/(Located a, double b) { return div(a.array, scalarLike(a.array, b, a.where), a.where); }
Array operator+(double a, Located b) { return add(scalarLike(b.array, a, b.where), b.array, b.where); }
Array operator-(double a, Located b) { return sub(scalarLike(b.array, a, b.where), b.array, b.where); }
Array operator*(double a, Located b) { return mul(scalarLike(b.array, a, b.where), b.array, b.where); }
Array operator/(double a, Located b) { return div(scalarLike(b.array, a, b.where), b.array, b.where); }
Array operator<(Located a, const Array& b) { return less(a.array, b, a.where); }
Array operator<=(Located a, const Array& b) { return lessEqual(a.array, b, a.where); }
Array operator>(Located a, const Array& b) { return greater(a.array, b, a.where); }
Array operator>=(Located a, const Array& b) { return greaterEqual(a.array, b, a.where); }
Array operator==(Located a, const Array& b) { return equal(a.array, b, a.where); }
Array operator!=(Located a, const Array& b) { return notEqual(a.array, b, a.where); }
Array operator<(Located a, double b) { return less(a.array, scalarLike(a.array, b, a.where), a.where); }
Array operator>(Located a, double b) { return greater(a.array, scalarLike(a.array, b, a.where), a.where); }

}  // namespace tsr
