// The elementwise family: unary and binary math, comparisons, select, clamp, convert and bitcast_convert.
// The map ops are one table (registerElementwiseOps): each row names a functor from elementwise_functors.h
// and its flops per element; infer, cost, the CPU kernel and the vjp rule (the functor's, where it has one)
// follow from that. Every op of the family shares one batching rule.
//
// Shape rule: binary ops, select and clamp take operands of equal shapes (the Array API broadcasts with
// broadcast_in_dim first), so every kernel is a flat loop over contiguous arrays.
#include <algorithm>
#include <cstring>
#include <numbers>
#include <optional>

#include <fmt/format.h>

#include "engine/ops/elementwise_functors.h"
#include "engine/ops/loop_lowering.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/shard_rules.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/trace.h"

namespace tsr::ops {

std::string DTypeSet::toString() const {
  std::string s;
  for (int i = 0; i < kNumDTypes; ++i) {
    auto t = static_cast<DType>(i);
    if (!contains(t)) continue;
    if (!s.empty()) s += ", ";
    s += dtypeName(t);
  }
  return s;
}

namespace {

// Evaluates c[0] + w * (c[1] + w * (...)) with the coefficients listed highest degree first.
template <class T, size_t N>
T horner(const T (&c)[N], T w) {
  T p = c[0];
  for (size_t i = 1; i < N; ++i) p = c[i] + p * w;
  return p;
}

template <class T>
std::optional<T> erfInvEdge(T x) {
  T a = std::fabs(x);
  if (a < T(1)) return std::nullopt;
  // The polynomials would give the wrong sign at +-1 and garbage beyond.
  if (a == T(1)) return std::copysign(std::numeric_limits<T>::infinity(), x);
  return std::numeric_limits<T>::quiet_NaN();
}

}  // namespace

float erfInv(float x) {
  if (auto edge = erfInvEdge(x)) return *edge;
  static constexpr float kCentral[] = {2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f,
                                       -4.39150654e-06f, 0.00021858087f,  -0.00125372503f,
                                       -0.00417768164f,  0.246640727f,    1.50140941f};
  static constexpr float kTail[] = {-0.000200214257f, 0.000100950558f, 0.00134934322f,
                                    -0.00367342844f,  0.00573950773f,  -0.0076224613f,
                                    0.00943887047f,   1.00167406f,     2.83297682f};
  // (1 - x)(1 + x) rather than 1 - x*x: 1 - x is exact near |x| = 1, where the tail needs it.
  float w = -std::log((1.0f - x) * (1.0f + x));
  float p = w < 5.0f ? horner(kCentral, w - 2.5f) : horner(kTail, std::sqrt(w) - 3.0f);
  return p * x;
}

double erfInv(double x) {
  if (auto edge = erfInvEdge(x)) return *edge;
  static constexpr double kCentral[] = {
      -3.6444120640178196996e-21, -1.685059138182016589e-19,  1.2858480715256400167e-18,
      1.115787767802518096e-17,   -1.333171662854620906e-16,  2.0972767875968561637e-17,
      6.6376381343583238325e-15,  -4.0545662729752068639e-14, -8.1519341976054721522e-14,
      2.6335093153082322977e-12,  -1.2975133253453532498e-11, -5.4154120542946279317e-11,
      1.051212273321532285e-09,   -4.1126339803469836976e-09, -2.9070369957882005086e-08,
      4.2347877827932403518e-07,  -1.3654692000834678645e-06, -1.3882523362786468719e-05,
      0.0001867342080340571352,   -0.00074070253416626697512, -0.0060336708714301490533,
      0.24015818242558961693,     1.6536545626831027356};
  static constexpr double kMiddle[] = {
      2.2137376921775787049e-09,  9.0756561938885390979e-08,  -2.7517406297064545428e-07,
      1.8239629214389227755e-08,  1.5027403968909827627e-06,  -4.013867526981545969e-06,
      2.9234449089955446044e-06,  1.2475304481671778723e-05,  -4.7318229009055733981e-05,
      6.8284851459573175448e-05,  2.4031110387097893999e-05,  -0.0003550375203628474796,
      0.00095328937973738049703,  -0.0016882755560235047313,  0.0024914420961078508066,
      -0.0037512085075692412107,  0.005370914553590063617,    1.0052589676941592334,
      3.0838856104922207635};
  static constexpr double kTail[] = {
      -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
      -3.7894654401267369937e-09, 7.6157012080783393804e-09,  -1.4960026627149240478e-08,
      2.9147953450901080826e-08,  -6.7711997758452339498e-08, 2.2900482228026654717e-07,
      -9.9298272942317002539e-07, 4.5260625972231537039e-06,  -1.9681778105531670567e-05,
      7.5995277030017761139e-05,  -0.00021503011930044477347, -0.00013871931833623122026,
      1.0103004648645343977,      4.8499064014085844221};
  double w = -std::log((1.0 - x) * (1.0 + x));
  double p;
  if (w < 6.25) p = horner(kCentral, w - 3.125);
  else if (w < 16.0) p = horner(kMiddle, std::sqrt(w) - 3.25);
  else p = horner(kTail, std::sqrt(w) - 5.0);
  return p * x;
}

double digammaOf(double x) {
  constexpr double kPi = std::numbers::pi;
  double r = 0;
  if (x <= 0) {
    if (x == std::floor(x)) return std::numeric_limits<double>::quiet_NaN();
    // tan has period pi: tan(pi x) from the fractional part keeps its precision for large |x|.
    r = -kPi / std::tan(kPi * (x - std::floor(x)));
    x = 1 - x;
  }
  for (; x < 10; x += 1) r -= 1 / x;
  // psi(x) ~ ln x - 1/2x - 1/12x^2 + 1/120x^4 - 1/252x^6 + 1/240x^8 - 1/132x^10 (next term < 1e-13 at x >= 10)
  const double f = 1 / (x * x);
  return r + std::log(x) - 0.5 / x -
         f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))));
}

float digammaOf(float x) { return loop_dialect::tsr_digamma1(x); }

Array trigamma(const Array& x) {
  constexpr double kPi = std::numbers::pi;
  Array reflect = less(x, scalarLike(x, 0.5));
  Array z = where(reflect, 1.0 - x, x);  // z >= 1/2
  Array sum = zerosLike(x);
  for (int k = 0; k < 6; ++k) {
    Array zk = z + static_cast<double>(k);
    sum = sum + 1.0 / (zk * zk);
  }
  // psi'(w) ~ 1/w + 1/2w^2 + 1/6w^3 - 1/30w^5 + 1/42w^7 - 1/30w^9 + 5/66w^11 (next term < 1e-11 at w >= 6.5)
  Array iw = 1.0 / (z + 6.0);
  Array f = iw * iw;
  Array series = iw + 0.5 * f + iw * f * (1.0 / 6 - f * (1.0 / 30 - f * (1.0 / 42 - f * (1.0 / 30 - f * (5.0 / 66)))));
  Array positive = sum + series;
  // psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x)
  Array s = sin(x * kPi);
  return where(reflect, (kPi * kPi) / (s * s) - positive, positive);
}

namespace {

namespace ew = elementwise;
using ir::OpCode;

// ---- Kernels ----------------------------------------------------------------------------------------------

// out[i] = Op::apply(in0[i], ...) over the flat arrays, for the dtype of operand 0. Halves are computed in
// float and rounded once on store. Only dtypes in Op::kTypes are instantiated; infer rejects the others.
// The loops are plain indexed loops so the compiler can vectorise them; note GCC 12 does so only with -O3
// or -fvect-cost-model=dynamic (its -O2 model leaves loops of unknown trip count scalar). Chunks of
// kMapGrain elements go to the lent threads (eager ops and the interpreter: jitted code runs fused loops).
constexpr int64_t kMapGrain = int64_t{1} << 15;

template <class Op, bool kBoolResult, size_t kArity>
void mapKernel(const ir::CpuKernelArgs& args) {
  dispatchDType(args.inputs[0].aval.dtype, [&]<class T>() {
    if constexpr (Op::kTypes.template contains<T>()) {
      using C = ComputeType<T>;
      using R = std::conditional_t<kBoolResult, bool, T>;
      R* out = args.outputs[0].template as<R>();
      const int64_t n = args.outputs[0].aval.numel();
      const T* a = args.inputs[0].template as<T>();
      const T* b = kArity >= 2 ? args.inputs[1].template as<T>() : nullptr;
      const T* c = kArity == 3 ? args.inputs[2].template as<T>() : nullptr;
      args.forChunks(n, kMapGrain, [&](int64_t lo, int64_t hi, int) {
        if constexpr (kArity == 1) {
          for (int64_t i = lo; i < hi; ++i) out[i] = static_cast<R>(Op::apply(static_cast<C>(a[i])));
        } else if constexpr (kArity == 2) {
          for (int64_t i = lo; i < hi; ++i)
            out[i] = static_cast<R>(Op::apply(static_cast<C>(a[i]), static_cast<C>(b[i])));
        } else {
          static_assert(kArity == 3);
          for (int64_t i = lo; i < hi; ++i)
            out[i] = static_cast<R>(Op::apply(static_cast<C>(a[i]), static_cast<C>(b[i]), static_cast<C>(c[i])));
        }
      });
    } else {
      TSR_CHECK_MSG(false, "elementwise kernel called with a dtype its infer rule rejects");
    }
  });
}

// select(pred, on_true, on_false): out = pred ? on_true : on_false. A pure move of bits, so it runs on the
// unsigned integer of the element size, as a mask blend: all integer ops of one width, which vectorise.
void selectKernel(const ir::CpuKernelArgs& args) {
  auto run = [&]<class U>() {
    const uint8_t* pred = args.inputs[0].as<uint8_t>();  // bools as their 0/1 bytes
    const U* t = args.inputs[1].as<U>();
    const U* f = args.inputs[2].as<U>();
    U* out = args.outputs[0].as<U>();
    const int64_t n = args.outputs[0].aval.numel();
    for (int64_t i = 0; i < n; ++i) {
      U mask = static_cast<U>(U(0) - static_cast<U>(pred[i]));  // all ones where pred
      out[i] = static_cast<U>((t[i] & mask) | (f[i] & static_cast<U>(~mask)));
    }
  };
  switch (dtypeSize(args.inputs[1].aval.dtype)) {
    case 1: return run.operator()<uint8_t>();
    case 2: return run.operator()<uint16_t>();
    case 4: return run.operator()<uint32_t>();
    case 8: return run.operator()<uint64_t>();
    default: TSR_CHECK_MSG(false, "select: unexpected element size");
  }
}

void convertKernel(const ir::CpuKernelArgs& args) {
  const int64_t n = args.outputs[0].aval.numel();
  dispatchDType(args.inputs[0].aval.dtype, [&]<class S>() {
    dispatchDType(args.outputs[0].aval.dtype, [&]<class D>() {
      const S* in = args.inputs[0].as<S>();
      D* out = args.outputs[0].as<D>();
      for (int64_t i = 0; i < n; ++i) out[i] = ew::convertElement<D>(in[i]);
    });
  });
}

void bitcastKernel(const ir::CpuKernelArgs& args) {
  auto bytes = static_cast<size_t>(args.outputs[0].aval.bytes());
  if (bytes) std::memcpy(args.outputs[0].data, args.inputs[0].data, bytes);
}

// x^n by squaring, m = |n|; integers wrap around (Mul's rule), halves compute in float.
template <class C>
C powBySquaring(C x, uint64_t m) {
  C acc = C(1);
  for (; m; m >>= 1) {
    if (m & 1u) acc = ew::Mul::apply(acc, x);
    x = ew::Mul::apply(x, x);
  }
  return acc;
}

// integer_pow(x){exponent}: a negative exponent (floats only) is 1 / x^|n|, as JAX computes it.
void integerPowKernel(const ir::CpuKernelArgs& args) {
  const int64_t n = std::get<ir::IntegerPowAttrs>(args.attrs).exponent;
  const uint64_t m = n < 0 ? uint64_t(0) - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  dispatchDType(args.inputs[0].aval.dtype, [&]<class T>() {
    if constexpr (kNumeric.contains<T>()) {
      using C = ComputeType<T>;
      const T* x = args.inputs[0].as<T>();
      T* out = args.outputs[0].as<T>();
      const int64_t count = args.outputs[0].aval.numel();
      for (int64_t i = 0; i < count; ++i) {
        C p = powBySquaring(static_cast<C>(x[i]), m);
        if constexpr (std::is_floating_point_v<C>) {
          if (n < 0) p = C(1) / p;
        }
        out[i] = static_cast<T>(p);
      }
    } else {
      TSR_CHECK_MSG(false, "integer_pow kernel called with a dtype its infer rule rejects");
    }
  });
}

// ---- Shape rules --------------------------------------------------------------------------------------------

Status checkEqualAvals(std::string_view op, std::span<const Aval> operands) {
  for (const Aval& a : operands)
    if (a.shape != operands[0].shape) return opError(op, operands, "operands must have equal shapes");
  for (const Aval& a : operands)
    if (a.dtype != operands[0].dtype) return opError(op, operands, "operands must have equal dtypes");
  return {};
}

Status checkAccepts(std::string_view op, std::span<const Aval> operands, DType t, DTypeSet accepts) {
  if (accepts.contains(t)) return {};
  return opError(op, operands, fmt::format("dtype {} is not supported (accepts {})", dtypeName(t), accepts.toString()));
}

template <class A>
Result<const A*> checkAttrs(std::string_view op, const ir::Attrs& attrs) {
  if (const A* a = std::get_if<A>(&attrs)) return a;
  return makeError("{}: expects {}, got {}", op, ir::attrsTypeNameAt(ir::Attrs{A{}}.index()), ir::attrsTypeName(attrs));
}

// Operands of equal avals, with a dtype in `accepts`; the result has their shape, and bool or their dtype.
ir::InferFn mapInfer(std::string op, size_t arity, DTypeSet accepts, bool boolResult) {
  return [=](std::span<const Aval> operands, const ir::Attrs&) -> Result<std::vector<Aval>> {
    TSR_TRY(checkArity(op, operands, arity));
    TSR_TRY(checkEqualAvals(op, operands));
    TSR_TRY(checkAccepts(op, operands, operands[0].dtype, accepts));
    std::vector<Aval> result(1, operands[0]);  // one copy: an initializer list would copy twice
    if (boolResult) result[0].dtype = DType::Bool;
    return result;
  };
}

// select(pred: bool[S], on_true: T[S], on_false: T[S]) -> T[S]
Result<std::vector<Aval>> inferSelect(std::span<const Aval> operands, const ir::Attrs&) {
  TSR_TRY(checkArity("select", operands, 3));
  if (operands[0].dtype != DType::Bool) return opError("select", operands, "the predicate must be bool");
  for (const Aval& a : operands)
    if (a.shape != operands[0].shape) return opError("select", operands, "operands must have equal shapes");
  if (operands[1].dtype != operands[2].dtype)
    return opError("select", operands, "on_true and on_false must have equal dtypes");
  return std::vector<Aval>{operands[1]};
}

// convert(x: S[...]) -> dtype[...], any S and dtype.
Result<std::vector<Aval>> inferConvert(std::span<const Aval> operands, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("convert", operands, 1));
  TSR_ASSIGN(const ir::ConvertAttrs* a, checkAttrs<ir::ConvertAttrs>("convert", attrs));
  return std::vector<Aval>{Aval{operands[0].shape, a->dtype}};
}

// bitcast_convert(x: S[...]) -> dtype[...], with sizeof(S) == sizeof(dtype). Bool is excluded on both
// sides: most byte values are not a valid bool.
Result<std::vector<Aval>> inferBitcast(std::span<const Aval> operands, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("bitcast_convert", operands, 1));
  TSR_ASSIGN(const ir::ConvertAttrs* a, checkAttrs<ir::ConvertAttrs>("bitcast_convert", attrs));
  DType from = operands[0].dtype;
  if (from == DType::Bool || a->dtype == DType::Bool)
    return opError("bitcast_convert", operands, "bool cannot be bitcast; use convert");
  if (dtypeSize(from) != dtypeSize(a->dtype)) {
    return opError("bitcast_convert", operands,
                   fmt::format("element sizes differ: {} has {} bytes, {} has {}", dtypeName(from), dtypeSize(from),
                               dtypeName(a->dtype), dtypeSize(a->dtype)));
  }
  return std::vector<Aval>{Aval{operands[0].shape, a->dtype}};
}

// integer_pow(x: T[...]){exponent} -> T[...], T numeric; a negative exponent needs a floating T.
Result<std::vector<Aval>> inferIntegerPow(std::span<const Aval> operands, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("integer_pow", operands, 1));
  TSR_ASSIGN(const ir::IntegerPowAttrs* a, checkAttrs<ir::IntegerPowAttrs>("integer_pow", attrs));
  TSR_TRY(checkAccepts("integer_pow", operands, operands[0].dtype, kNumeric));
  if (a->exponent < 0 && !isFloating(operands[0].dtype))
    return opError("integer_pow", operands,
                   fmt::format("the negative exponent {} needs a floating operand", a->exponent));
  return std::vector<Aval>{operands[0]};
}

// ---- Transformation rules ----------------------------------------------------------------------------------

template <class Op>
concept HasVjp = requires { &Op::vjp; };

// The functor's vjp(g, y, operands...), or none: a functor without one has a zero gradient. Integer results
// (add, max, abs, ... on integers) carry no cotangent, so the rules only ever see floating ones.
template <class Op, size_t kArity>
ir::VjpRule mapVjp() {
  if constexpr (!HasVjp<Op>) {
    return nullptr;
  } else {
    return [](const ir::VjpArgs& a) -> std::vector<Array> {
      const Array& g = a.cotangents[0];
      if (!g.valid() || !isFloating(g.dtype())) return std::vector<Array>(kArity);
      const Array& y = a.results[0];
      const std::vector<Array>& x = a.operands;
      if constexpr (kArity == 1) return Op::vjp(g, y, x[0]);
      else if constexpr (kArity == 2) return Op::vjp(g, y, x[0], x[1]);
      else return Op::vjp(g, y, x[0], x[1], x[2]);
    };
  }
}

// select(pred, on_true, on_false): g goes to the branch that was taken; the predicate has no cotangent.
std::vector<Array> selectVjp(const ir::VjpArgs& a) {
  const Array& p = a.operands[0];
  const Array& g = a.cotangents[0];
  Array zero = scalarLike(g, 0.0);
  return {Array(), where(p, g, zero), where(p, zero, g)};
}

// convert: g converted back to the operand's dtype. Through an integer or bool on either side no gradient
// flows (the values are piecewise constant), so the operand gets none.
std::vector<Array> convertVjp(const ir::VjpArgs& a) {
  const Array& x = a.operands[0];
  const Array& g = a.cotangents[0];
  if (!g.valid() || !isFloating(g.dtype()) || !isFloating(x.dtype())) return {Array()};
  return {astype(g, x.dtype())};
}

// d/dx x^n = n x^(n-1) (0 for n = 0).
std::vector<Array> integerPowVjp(const ir::VjpArgs& a) {
  const Array& g = a.cotangents[0];
  const Array& x = a.operands[0];
  if (!g.valid() || !isFloating(g.dtype())) return {Array()};
  const int64_t n = attrsAs<ir::IntegerPowAttrs>(a.attrs).exponent;
  if (n == 0) return {zerosLike(x)};
  Array slope = n == 1 ? onesLike(x) : integerPow(x, n - 1);
  return {g * (static_cast<double>(n) * slope)};
}

// One batching rule for the whole family. Operands batched on one common dim line up element for element,
// so the op applies as is and the result keeps that dim (no transpose: the common case of unary ops and of
// chains of ops on one batched value). Otherwise batchElementwise moves every batch dim to the front and
// broadcasts the unbatched operands.
ir::BatchRule mapBatch(OpCode code) {
  return [code](const ir::BatchArgs& a) {
    int d = a.batchDims[0];
    bool aligned = d >= 0 && std::all_of(a.batchDims.begin(), a.batchDims.end(), [d](int b) { return b == d; });
    if (!aligned) return batchElementwise(code, a);
    return ir::BatchResult{bind(code, a.operands, a.attrs, std::source_location::current()), {d}};
  };
}

// ---- The table ---------------------------------------------------------------------------------------------

struct MapOp {
  OpCode code;
  size_t arity;
  DTypeSet accepts;
  bool boolResult;
  double flops;  // per output element
  ir::CpuKernelFn cpu;
  ir::VjpRule vjp;  // none: not differentiable (the gradient is zero or undefined)
  ir::LoopLowering loop;  // its form in fused loops (none: it runs unfused)
};

template <class Op>
MapOp unary(OpCode code, double flops, ir::LoopLowering loop) {
  return {code, 1, Op::kTypes, false, flops, mapKernel<Op, false, 1>, mapVjp<Op, 1>(), std::move(loop)};
}
template <class Op>
MapOp binary(OpCode code, double flops, ir::LoopLowering loop) {
  return {code, 2, Op::kTypes, false, flops, mapKernel<Op, false, 2>, mapVjp<Op, 2>(), std::move(loop)};
}
template <class Op>
MapOp ternary(OpCode code, double flops, ir::LoopLowering loop) {
  return {code, 3, Op::kTypes, false, flops, mapKernel<Op, false, 3>, mapVjp<Op, 3>(), std::move(loop)};
}
template <class Op>
MapOp predicate(OpCode code, ir::LoopLowering loop) {
  return {code, 1, Op::kTypes, true, 1, mapKernel<Op, true, 1>, nullptr, std::move(loop)};
}
template <class Op>
MapOp compare(OpCode code, ir::LoopLowering loop) {
  return {code, 2, Op::kTypes, true, 1, mapKernel<Op, true, 2>, nullptr, std::move(loop)};
}

std::vector<MapOp> mapOps() {
  return {
      unary<ew::Neg>(OpCode::Neg, 1, TSR_LOOP_LOWERING(1, -a)),
      unary<ew::Abs>(OpCode::Abs, 1, TSR_LOOP_LOWERING(1, tsr_abs(a))),
      unary<ew::Sign>(OpCode::Sign, 1, TSR_LOOP_LOWERING(1, tsr_sign(a))),
      unary<ew::Exp>(OpCode::Exp, 10, TSR_LOOP_LOWERING(1, tsr_exp(a))),
      unary<ew::Exp2>(OpCode::Exp2, 10, TSR_LOOP_LOWERING(1, tsr_exp2(a))),
      unary<ew::Log>(OpCode::Log, 10, TSR_LOOP_LOWERING(1, tsr_log(a))),
      unary<ew::Log1p>(OpCode::Log1p, 12, TSR_LOOP_LOWERING(1, tsr_log1p(a))),
      unary<ew::Expm1>(OpCode::Expm1, 12, TSR_LOOP_LOWERING(1, tsr_expm1(a))),
      unary<ew::Sqrt>(OpCode::Sqrt, 4, TSR_LOOP_LOWERING(1, tsr_sqrt(a))),
      unary<ew::Rsqrt>(OpCode::Rsqrt, 5, TSR_LOOP_LOWERING(1, 1.0f / tsr_sqrt(a))),
      unary<ew::Tanh>(OpCode::Tanh, 15, TSR_LOOP_LOWERING(1, tsr_tanh(a))),
      unary<ew::Logistic>(OpCode::Logistic, 13, TSR_LOOP_LOWERING(1, tsr_logistic(a))),
      unary<ew::Sin>(OpCode::Sin, 15, TSR_LOOP_LOWERING(1, tsr_sin(a))),
      unary<ew::Cos>(OpCode::Cos, 15, TSR_LOOP_LOWERING(1, tsr_cos(a))),
      unary<ew::Tan>(OpCode::Tan, 20, TSR_LOOP_LOWERING(1, tsr_tan(a))),
      unary<ew::Erf>(OpCode::Erf, 20, TSR_LOOP_LOWERING(1, tsr_erf(a))),
      unary<ew::ErfInv>(OpCode::ErfInv, 25, ir::LoopLowering{}),
      unary<ew::Floor>(OpCode::Floor, 1, TSR_LOOP_LOWERING(1, tsr_floor(a))),
      unary<ew::Ceil>(OpCode::Ceil, 1, TSR_LOOP_LOWERING(1, tsr_ceil(a))),
      unary<ew::Round>(OpCode::Round, 1, TSR_LOOP_LOWERING(1, tsr_round(a))),
      predicate<ew::IsFinite>(OpCode::IsFinite, TSR_LOOP_LOWERING(1, tsr_b(tsr_isfinite(a)))),
      unary<ew::Not>(OpCode::Not, 1, TSR_LOOP_LOWERING(1, tsr_b(a == 0.0f))),
      unary<ew::Relu>(OpCode::Relu, 1, TSR_LOOP_LOWERING(1, tsr_select(a < 0.0f, 0.0f, a))),
      unary<ew::Square>(OpCode::Square, 1, TSR_LOOP_LOWERING(1, a * a)),
      unary<ew::Lgamma>(OpCode::Lgamma, 40, TSR_LOOP_LOWERING(1, tsr_lgamma(a))),
      unary<ew::Digamma>(OpCode::Digamma, 40, TSR_LOOP_LOWERING(1, tsr_digamma(a))),

      binary<ew::Add>(OpCode::Add, 1, TSR_LOOP_LOWERING(2, a + b)),
      binary<ew::Sub>(OpCode::Sub, 1, TSR_LOOP_LOWERING(2, a - b)),
      binary<ew::Mul>(OpCode::Mul, 1, TSR_LOOP_LOWERING(2, a * b)),
      binary<ew::Div>(OpCode::Div, 4, TSR_LOOP_LOWERING(2, a / b)),
      binary<ew::Rem>(OpCode::Rem, 8, TSR_LOOP_LOWERING(2, tsr_fmod(a, b))),
      binary<ew::Pow>(OpCode::Pow, 25, TSR_LOOP_LOWERING(2, tsr_pow(a, b))),
      binary<ew::Max>(OpCode::Max, 1, TSR_LOOP_LOWERING(2, tsr_max(a, b))),
      binary<ew::Min>(OpCode::Min, 1, TSR_LOOP_LOWERING(2, tsr_min(a, b))),
      binary<ew::Atan2>(OpCode::Atan2, 25, TSR_LOOP_LOWERING(2, tsr_atan2(a, b))),
      binary<ew::And>(OpCode::And, 1, TSR_LOOP_LOWERING(2, tsr_b(tsr_nz(a) & tsr_nz(b)))),
      binary<ew::Or>(OpCode::Or, 1, TSR_LOOP_LOWERING(2, tsr_b(tsr_nz(a) | tsr_nz(b)))),
      binary<ew::Xor>(OpCode::Xor, 1, TSR_LOOP_LOWERING(2, tsr_b(tsr_nz(a) ^ tsr_nz(b)))),
      binary<ew::ShiftLeft>(OpCode::ShiftLeft, 1, ir::LoopLowering{}),
      binary<ew::ShiftRightLogical>(OpCode::ShiftRightLogical, 1, ir::LoopLowering{}),
      binary<ew::ShiftRightArithmetic>(OpCode::ShiftRightArithmetic, 1, ir::LoopLowering{}),

      compare<ew::Eq>(OpCode::Eq, TSR_LOOP_LOWERING(2, tsr_b(a == b))),
      compare<ew::Ne>(OpCode::Ne, TSR_LOOP_LOWERING(2, tsr_b(a != b))),
      compare<ew::Lt>(OpCode::Lt, TSR_LOOP_LOWERING(2, tsr_b(a < b))),
      compare<ew::Le>(OpCode::Le, TSR_LOOP_LOWERING(2, tsr_b(a <= b))),
      compare<ew::Gt>(OpCode::Gt, TSR_LOOP_LOWERING(2, tsr_b(a > b))),
      compare<ew::Ge>(OpCode::Ge, TSR_LOOP_LOWERING(2, tsr_b(a >= b))),

      ternary<ew::Clamp>(OpCode::Clamp, 2, TSR_LOOP_LOWERING(3, tsr_min(tsr_max(b, a), c))),
  };
}

ir::CostFn costWithFlops(double flops) {
  return [flops](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
    return elementwiseCost(in, out, flops);
  };
}

ir::OpDef elementwiseOp(OpCode code, int numOperands) {
  ir::OpDef def = coreOp(code, "elementwise", ir::FusionKind::Elementwise, numOperands);
  def.cpuWritesWholeResult = true;  // every kernel of the family writes each element once
  def.batch = mapBatch(code);
  def.shard = elementwiseShardRule();
  return def;
}

}  // namespace

void registerElementwiseOps(ir::OpRegistry& reg) {
  for (MapOp& m : mapOps()) {
    ir::OpDef def = elementwiseOp(m.code, static_cast<int>(m.arity));
    def.infer = mapInfer(def.name, m.arity, m.accepts, m.boolResult);
    def.cost = costWithFlops(m.flops);
    def.cpu = std::move(m.cpu);
    def.differentiable = m.vjp != nullptr;
    def.vjp = std::move(m.vjp);
    def.loop = std::move(m.loop);
    addCoreOp(reg, std::move(def));
  }

  ir::OpDef select = elementwiseOp(OpCode::Select, 3);
  select.infer = inferSelect;
  select.cost = costWithFlops(1);
  select.cpu = selectKernel;
  select.vjp = selectVjp;
  select.loop = TSR_LOOP_LOWERING(3, tsr_select(tsr_nz(a), b, c));
  addCoreOp(reg, std::move(select));

  // Differentiable as an op; a conversion to or from an integer type gets no gradient from its vjp rule.
  ir::OpDef convert = elementwiseOp(OpCode::Convert, 1);
  convert.infer = inferConvert;
  convert.cost = costWithFlops(1);
  convert.cpu = convertKernel;
  convert.vjp = convertVjp;
  convert.loop = TSR_LOOP_LOWERING(1, a);  // f32 to f32 inside a loop: bool operands are 0/1 floats already
  convert.loopToBool = TSR_LOOP_LOWERING(1, tsr_b(tsr_nz(a)));
  addCoreOp(reg, std::move(convert));

  // The exponent is an attribute, which loop expressions cannot see: integer_pow runs unfused (CUDA: its own
  // node kernel, engine/backends/cuda/node_kernels.cpp).
  ir::OpDef intPow = elementwiseOp(OpCode::IntegerPow, 1);
  intPow.infer = inferIntegerPow;
  intPow.cost = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) {
    const int64_t n = std::get<ir::IntegerPowAttrs>(attrs).exponent;
    return elementwiseCost(in, out, 1.0 + std::floor(std::log2(static_cast<double>(std::max<int64_t>(std::abs(n), 1)))));
  };
  intPow.cpu = integerPowKernel;
  intPow.vjp = integerPowVjp;
  addCoreOp(reg, std::move(intPow));

  // The identity whose operand gets no cotangent (lax.stop_gradient): marked non-differentiable, so autodiff
  // gives the operand a zero cotangent without a rule. Any dtype; in loops it is its operand.
  ir::OpDef stop = elementwiseOp(OpCode::StopGradient, 1);
  stop.infer = mapInfer(stop.name, 1, kAllDTypes, false);
  stop.cost = costWithFlops(0);
  stop.cpu = bitcastKernel;
  stop.differentiable = false;
  stop.loop = TSR_LOOP_LOWERING(1, a);
  addCoreOp(reg, std::move(stop));

  ir::OpDef bitcast = elementwiseOp(OpCode::BitcastConvert, 1);
  bitcast.infer = inferBitcast;
  bitcast.cost = costWithFlops(0);
  bitcast.cpu = bitcastKernel;
  bitcast.differentiable = false;
  addCoreOp(reg, std::move(bitcast));
}

}  // namespace tsr::ops
