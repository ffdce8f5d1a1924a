// jax.random on the Array API. Each function follows its JAX counterpart (jax/_src/prng.py, threefry
// functions; jax/_src/random.py, samplers) op for op, so that rounding happens at the same places and the
// results agree bit for bit. Where JAX uses a dtype we do not have (u16, u64), the same value is computed
// exactly another way; the comments say so.
#include "engine/random/random.h"

#include <cmath>
#include <limits>

#include "engine/random/fused_multiply_add.h"
#include "engine/transform/trace.h"

namespace tsr::random {

namespace {

using Loc = std::source_location;

struct FloatInfo {
  int nmant;    // explicit mantissa bits (numpy's finfo.nmant)
  double tiny;  // smallest positive normal number
};

FloatInfo floatInfo(DType t, const char* fn, const Loc& loc) {
  switch (t) {
    case DType::F32: return {23, std::ldexp(1.0, -126)};
    case DType::F64: return {52, std::ldexp(1.0, -1022)};
    case DType::F16: return {10, std::ldexp(1.0, -14)};
    case DType::BF16: return {7, std::ldexp(1.0, -126)};
    default: break;
  }
  raiseAt(loc, makeError("random.{}: dtype must be a float dtype (f32, f64, bf16, f16), got {}", fn, dtypeName(t)));
}

void checkKey(const Array& key, const char* fn, const Loc& loc) {
  if (!key.valid()) raiseAt(loc, makeError("random.{}: the key is an empty Array", fn));
  if (key.dtype() != DType::U32 || !(key.shape() == Shape{2}))
    raiseAt(loc, makeError("random.{}: a key is a u32[2] array (one row of split's result), got {}", fn,
                           key.aval().toString()));
}

// The result shape must be `shape` after broadcasting with each parameter's shape (JAX's _check_shape).
void checkBroadcastsTo(const Shape& shape, const Shape& param, const char* fn, const char* what, const Loc& loc) {
  bool ok = param.rank() <= shape.rank();
  for (int i = 0; ok && i < param.rank(); ++i) {
    int64_t d = param[param.rank() - 1 - i];
    ok = d == 1 || d == shape[shape.rank() - 1 - i];
  }
  if (!ok)
    raiseAt(loc, makeError("random.{}: {} of shape {} does not broadcast to the requested shape {}", fn, what,
                           param.toString(), shape.toString()));
}

Array constant(double value, DType t) { return Array::scalar(value, t); }
Array u32(uint32_t value) { return Array::scalar(static_cast<double>(value), DType::U32); }

// key[i] as a u32 scalar.
Array keyWord(const Array& key, int64_t i, const Loc& loc) { return reshape(sliceAxis(key, 0, i, i + 1, loc), {}, loc); }

// JAX's _random_bits for widths 8, 16 and 32 (jax_threefry_partitionable=False): the hash of the counters
// 0 .. ceil(width * size / 32) - 1, each 32-bit word cut into 32 / width values, lowest bits first.
// Returns u32[size] holding `width`-bit values.
Array randomWords(const Array& key, int width, int64_t size, const Loc& loc) {
  int64_t maxCount = (width * size + 31) / 32;
  // JAX switches to a split-per-2^32-block scheme beyond this; no array here is that large.
  if (maxCount >= int64_t{0xffffffff})
    raiseAt(loc, makeError("random: {} random words exceed the 2^32 - 1 counters of one key", maxCount));
  Array words = threefry2x32(key, arange(maxCount, DType::U32, loc), loc);
  if (width == 32) return words;
  const int per = 32 / width;
  std::vector<Array> parts;  // parts[j]: [maxCount, 1], bits width*j .. width*(j+1)-1 of each word
  for (int j = 0; j < per; ++j) {
    Array part = bitwiseAnd(shiftRightLogical(words, u32(static_cast<uint32_t>(width * j)), loc),
                            u32((1u << width) - 1u), loc);
    parts.push_back(reshape(part, {maxCount, 1}, loc));
  }
  Array flat = reshape(concatenate(parts, 1, loc), {maxCount * per}, loc);
  return flat.dim(0) == size ? flat : sliceAxis(flat, 0, 0, size, loc);
}

// Uniform floats in [0, 1) of `shape`, as JAX's _uniform makes them: random bits as the mantissa of a float
// in [1, 2), minus 1. The value is m * 2^-nmant for the top nmant random bits m.
Array unitFloats(const Array& key, const Shape& shape, DType dtype, const FloatInfo& fi, const Loc& loc) {
  const int64_t n = shape.numel();
  Array floats;
  if (dtype == DType::F32) {
    // float_bits = bits >> (32 - 23) | bits(1.0f); bitcast; minus 1, exactly as JAX writes it.
    Array w = randomWords(key, 32, n, loc);
    Array fb = bitwiseOr(shiftRightLogical(w, u32(32 - 23), loc), u32(0x3f800000u), loc);
    floats = sub(bitcast(fb, DType::F32, loc), constant(1.0, DType::F32), loc);
  } else if (dtype == DType::F64) {
    // JAX: u64 = hi << 32 | lo with hi, lo the first and second halves of 2n words, then (u64 >> 12) as the
    // mantissa. Without u64: m = hi * 2^20 + (lo >> 12) < 2^52, and m * 2^-52 is exact in f64.
    Array w = threefry2x32(key, arange(2 * n, DType::U32, loc), loc);
    Array hi = astype(sliceAxis(w, 0, 0, n, loc), DType::F64, loc);
    Array lo = astype(shiftRightLogical(sliceAxis(w, 0, n, 2 * n, loc), u32(12), loc), DType::F64, loc);
    floats = add(mul(hi, constant(std::ldexp(1.0, -32), DType::F64), loc),
                 mul(lo, constant(std::ldexp(1.0, -52), DType::F64), loc), loc);
  } else {
    // Halves: JAX draws 16-bit words for f16 and 8-bit words for bf16 (fewer than 8 mantissa bits), widens
    // them to u16 and uses the u16 mantissa trick. m < 2^nmant converts exactly, and m * 2^-nmant is exact.
    const int width = fi.nmant < 8 ? 8 : 16;
    Array m = shiftRightLogical(randomWords(key, width, n, loc), u32(static_cast<uint32_t>(width - fi.nmant)), loc);
    floats = mul(astype(m, dtype, loc), constant(std::ldexp(1.0, -fi.nmant), dtype), loc);
  }
  return reshape(floats, shape.dims(), loc);
}

// JAX's _uniform after the bits: floats * (maxval - minval) + minval, then max(minval, .) so that rounding
// never goes below minval. The bounds have the sample's dtype. XLA contracts the multiply and add of f32 and
// f64 into an FMA (on CPU and GPU), so we round once too, unless the product is exact anyway (a range that
// is a power of two, as for [0, 1) and normal's (-1, 1)). XLA computes halves op by op, rounding each.
Array scaleUniform(const Array& floats, const Array& minval, const Array& maxval, bool exactProduct,
                   const Loc& loc) {
  Array range = sub(maxval, minval, loc);
  const DType t = floats.dtype();
  Array scaled = exactProduct || (t != DType::F32 && t != DType::F64)
                     ? add(mul(floats, range, loc), minval, loc)
                     : fusedMultiplyAdd(floats, range, minval, loc);
  Array out = maximum(minval, scaled, loc);
  return out.shape() == floats.shape() ? out : broadcastTo(out, floats.shape(), loc);
}

Array uniformImpl(const Array& key, const Shape& shape, DType dtype, const Array& minval, const Array& maxval,
                  bool exactProduct, const char* fn, const Loc& loc) {
  checkKey(key, fn, loc);
  FloatInfo fi = floatInfo(dtype, fn, loc);
  checkBroadcastsTo(shape, minval.shape(), fn, "minval", loc);
  checkBroadcastsTo(shape, maxval.shape(), fn, "maxval", loc);
  Array floats = unitFloats(key, shape, dtype, fi, loc);
  return scaleUniform(floats, astype(minval, dtype, loc), astype(maxval, dtype, loc), exactProduct, loc);
}

// Uniform samples between host bounds. When maxval - minval, rounded in the dtype, is a power of two, the
// product floats * range is exact and the FMA is not needed.
Array uniformBetween(const Array& key, const Shape& shape, DType dtype, double minval, double maxval,
                     const char* fn, const Loc& loc) {
  floatInfo(dtype, fn, loc);
  Array lo = constant(minval, dtype), hi = constant(maxval, dtype);
  double range = dtype == DType::F64 ? maxval - minval
                                     : static_cast<double>(static_cast<float>(hi.item()) - static_cast<float>(lo.item()));
  int exponent = 0;
  bool powerOfTwo = std::fabs(std::frexp(range, &exponent)) == 0.5 && exponent > -60 && exponent < 60;
  return uniformImpl(key, shape, dtype, lo, hi, powerOfTwo, fn, loc);
}

// The float next to x in the direction of +inf (up) or -inf, elementwise, as lax.nextafter(x, +-inf):
// one step of the bit pattern, away from zero or towards it. Zero steps to the smallest subnormal, NaN and
// the infinity in the direction of travel stay. Halves have no 16-bit integer dtype here: their bit pattern
// is the top half of the f32 bit pattern of the bf16 with the same bits.
Array nextAfter(const Array& x, bool up, const Loc& loc) {
  const DType t = x.dtype();
  // Zero, NaN and the infinity ahead are handled below, so the sign of x tells the direction of the step.
  Array away = up ? greater(x, zerosLike(x, loc), loc) : less(x, zerosLike(x, loc), loc);
  Array stepped;
  if (t == DType::F32 || t == DType::F64) {
    DType it = t == DType::F32 ? DType::I32 : DType::I64;
    Array step = where(away, constant(1, it), constant(-1, it), loc);
    stepped = bitcast(add(bitcast(x, it, loc), step, loc), t, loc);
  } else {
    // b16: the 16-bit pattern, sign-extended in an i32.
    Array asBf16 = t == DType::BF16 ? x : bitcast(x, DType::BF16, loc);
    Array b16 = shiftRightArithmetic(bitcast(astype(asBf16, DType::F32, loc), DType::I32, loc),
                                     constant(16, DType::I32), loc);
    Array step = where(away, constant(1, DType::I32), constant(-1, DType::I32), loc);
    Array f32 = bitcast(shiftLeft(add(b16, step, loc), constant(16, DType::I32), loc), DType::F32, loc);
    Array bf = astype(f32, DType::BF16, loc);  // exact: the low 16 bits are zero
    stepped = t == DType::BF16 ? bf : bitcast(bf, t, loc);
  }
  // The smallest subnormal of x's dtype, with the sign of the direction.
  double denormMin = 0;
  switch (t) {
    case DType::F32: denormMin = std::numeric_limits<float>::denorm_min(); break;
    case DType::F64: denormMin = std::numeric_limits<double>::denorm_min(); break;
    case DType::F16: denormMin = std::ldexp(1.0, -24); break;
    default: denormMin = std::ldexp(1.0, -133); break;  // bf16
  }
  Array fromZero = constant(up ? denormMin : -denormMin, t);
  Array target = constant(up ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity(), t);
  Array stays = bitwiseOr(notEqual(x, x, loc), equal(x, target, loc), loc);
  Array r = where(equal(x, zerosLike(x, loc), loc), fromZero, stepped, loc);
  return where(stays, x, r, loc);
}

}  // namespace

Array key(uint64_t seed, [[maybe_unused]] std::source_location loc) {
  std::vector<double> words = {static_cast<double>(seed >> 32), static_cast<double>(seed & 0xffffffffu)};
  return Array::fromVector(words, Shape{2}, DType::U32);
}

Array key(const Array& seed, std::source_location loc) {
  if (!seed.valid() || seed.rank() != 0 || !isInteger(seed.dtype()))
    raiseAt(loc, makeError("random.key: the seed must be an integer scalar, got {}",
                           seed.valid() ? seed.aval().toString() : "an empty Array"));
  Array lo = reshape(astype(seed, DType::U32, loc), {1}, loc);
  Array hi = seed.dtype() == DType::I64
                 ? reshape(astype(shiftRightLogical(seed, constant(32, DType::I64), loc), DType::U32, loc), {1}, loc)
                 : reshape(u32(0), {1}, loc);
  return concatenate({hi, lo}, 0, loc);
}

Array threefry2x32(const Array& key, const Array& count, std::source_location loc) {
  checkKey(key, "threefry2x32", loc);
  if (!count.valid() || count.dtype() != DType::U32)
    raiseAt(loc, makeError("random.threefry2x32: counts must be u32, got {}",
                           count.valid() ? count.aval().toString() : "an empty Array"));
  const int64_t n = count.numel();
  if (n == 0) return count;
  const bool odd = n % 2 != 0;
  Array flat = reshape(count, {n}, loc);
  if (odd) flat = concatenate({flat, reshape(u32(0), {1}, loc)}, 0, loc);
  const int64_t half = (n + 1) / 2;
  auto [y0, y1] = tsr::threefry2x32(keyWord(key, 0, loc), keyWord(key, 1, loc), sliceAxis(flat, 0, 0, half, loc),
                                    sliceAxis(flat, 0, half, 2 * half, loc), loc);
  Array out = concatenate({y0, y1}, 0, loc);
  if (odd) out = sliceAxis(out, 0, 0, n, loc);
  return reshape(out, count.shape().dims(), loc);
}

Array split(const Array& key, int64_t num, std::source_location loc) {
  checkKey(key, "split", loc);
  if (num < 0) raiseAt(loc, makeError("random.split: the number of keys must be >= 0, got {}", num));
  return reshape(threefry2x32(key, arange(2 * num, DType::U32, loc), loc), {num, 2}, loc);
}

Array foldIn(const Array& key, uint32_t data, std::source_location loc) {
  return foldIn(key, u32(data), loc);
}

Array foldIn(const Array& key, const Array& data, std::source_location loc) {
  checkKey(key, "foldIn", loc);
  if (!data.valid() || data.rank() != 0 || !isInteger(data.dtype()))
    raiseAt(loc, makeError("random.foldIn: data must be an integer scalar, got {}",
                           data.valid() ? data.aval().toString() : "an empty Array"));
  // threefry_seed(uint32 data) = [data >> 32, data] = [0, data].
  Array counts = concatenate({reshape(u32(0), {1}, loc), reshape(astype(data, DType::U32, loc), {1}, loc)}, 0, loc);
  return threefry2x32(key, counts, loc);
}

Array bits(const Array& key, const Shape& shape, DType dtype, std::source_location loc) {
  checkKey(key, "bits", loc);
  if (dtype != DType::U32 && dtype != DType::U8)
    raiseAt(loc, makeError("random.bits: dtype must be u32 or u8, got {}", dtypeName(dtype)));
  Array w = randomWords(key, dtype == DType::U32 ? 32 : 8, shape.numel(), loc);
  return reshape(astype(w, dtype, loc), shape.dims(), loc);
}

Array uniform(const Array& key, const Shape& shape, DType dtype, double minval, double maxval,
              std::source_location loc) {
  return uniformBetween(key, shape, dtype, minval, maxval, "uniform", loc);
}

Array uniform(const Array& key, const Shape& shape, DType dtype, const Array& minval, const Array& maxval,
              std::source_location loc) {
  return uniformImpl(key, shape, dtype, minval, maxval, false, "uniform", loc);
}

Array normal(const Array& key, const Shape& shape, DType dtype, std::source_location loc) {
  FloatInfo fi = floatInfo(dtype, "normal", loc);
  // lo = nextafter(-1, 0): u lies in the open interval (-1, 1), so erf_inv stays finite.
  double lo = -1.0 + std::ldexp(1.0, -(fi.nmant + 1));
  Array u = uniformBetween(key, shape, dtype, lo, 1.0, "normal", loc);
  return mul(constant(std::sqrt(2.0), dtype), erfInv(u, loc), loc);
}

Array truncatedNormal(const Array& key, double lower, double upper, const Shape& shape, DType dtype,
                      std::source_location loc) {
  floatInfo(dtype, "truncatedNormal", loc);
  return truncatedNormal(key, constant(lower, dtype), constant(upper, dtype), shape, dtype, loc);
}

Array truncatedNormal(const Array& key, const Array& lower, const Array& upper, const std::optional<Shape>& shape,
                      DType dtype, std::source_location loc) {
  checkKey(key, "truncatedNormal", loc);
  floatInfo(dtype, "truncatedNormal", loc);
  auto bounds = capture([&] { return broadcastShapes(lower.shape(), upper.shape(), "random.truncatedNormal"); });
  if (!bounds.ok()) raiseAt(loc, bounds.error());
  Shape s = shape ? *shape : *bounds;
  checkBroadcastsTo(s, lower.shape(), "truncatedNormal", "lower", loc);
  checkBroadcastsTo(s, upper.shape(), "truncatedNormal", "upper", loc);
  Array sqrt2 = constant(std::sqrt(2.0), dtype);
  Array lo = astype(lower, dtype, loc), hi = astype(upper, dtype, loc);
  Array a = erf(div(lo, sqrt2, loc), loc);
  Array b = erf(div(hi, sqrt2, loc), loc);
  Array u = uniformImpl(key, s, dtype, a, b, false, "truncatedNormal", loc);
  Array out = mul(sqrt2, erfInv(u, loc), loc);
  // Clamp into the open interval (lower, upper): rounding, or u == a, could land on or outside a bound.
  out = minimum(maximum(out, nextAfter(lo, true, loc), loc), nextAfter(hi, false, loc), loc);
  return out.shape() == s ? out : broadcastTo(out, s, loc);
}

Array bernoulli(const Array& key, double p, const Shape& shape, std::source_location loc) {
  return bernoulli(key, constant(p, DType::F32), shape, loc);
}

Array bernoulli(const Array& key, const Array& p, const std::optional<Shape>& shape, std::source_location loc) {
  checkKey(key, "bernoulli", loc);
  if (!p.valid() || !isFloating(p.dtype()))
    raiseAt(loc, makeError("random.bernoulli: the probability p must have a float dtype, got {}",
                           p.valid() ? p.aval().toString() : "an empty Array"));
  Shape s = shape ? *shape : p.shape();
  checkBroadcastsTo(s, p.shape(), "bernoulli", "p", loc);
  Array u = uniformBetween(key, s, p.dtype(), 0.0, 1.0, "bernoulli", loc);
  return less(u, p, loc);
}

Array gumbel(const Array& key, const Shape& shape, DType dtype, std::source_location loc) {
  FloatInfo fi = floatInfo(dtype, "gumbel", loc);
  Array u = uniformBetween(key, shape, dtype, fi.tiny, 1.0, "gumbel", loc);
  return neg(log(neg(log(u, loc), loc), loc), loc);
}

Array categorical(const Array& key, const Array& logits, int64_t axis, const std::optional<Shape>& shape,
                  std::source_location loc) {
  checkKey(key, "categorical", loc);
  if (!logits.valid() || !isFloating(logits.dtype()) || logits.rank() == 0)
    raiseAt(loc, makeError("random.categorical: logits must be a float array of rank >= 1, got {}",
                           logits.valid() ? logits.aval().toString() : "an empty Array"));
  const int rank = logits.rank();
  const int ax = normalizeAxis(axis, rank);
  if (ax < 0) raiseAt(loc, makeError("random.categorical: axis {} is out of range for logits {}", axis,
                                     logits.aval().toString()));
  std::vector<int64_t> batch = logits.shape().dims();
  batch.erase(batch.begin() + ax);
  Shape s = shape ? *shape : Shape(batch);
  checkBroadcastsTo(s, Shape(batch), "categorical", "the logits' batch shape", loc);
  // The noise has shape prefix + s[-batch:] with the category axis put back at its place.
  std::vector<int64_t> noiseShape = s.dims();
  noiseShape.insert(noiseShape.end() - static_cast<int64_t>(batch.size()) + ax, logits.shape()[ax]);
  Array g = gumbel(key, Shape(noiseShape), logits.dtype(), loc);
  return argmax(add(g, logits, loc), ax - rank, DType::I32, loc);
}

}  // namespace tsr::random
