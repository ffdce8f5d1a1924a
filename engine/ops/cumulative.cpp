// Cumulative reductions along one axis: cumsum, cumprod, cummax, cumlogsumexp (x){axis, reverse}, as
// lax.cumsum & co. The result has x's aval; element i along the axis combines elements 0..i (reverse: i..n-1).
//
// Accumulation: floats in double (bf16/f16 rounded once per element), integer sums and products wrap around
// (modulo 2^64, then truncated). cummax propagates NaN from the first NaN on; cumlogsumexp accumulates
// log(exp(a) + exp(b)) without overflow, -inf being its identity.
//
// Gradients: cumsum's cotangent is the cumsum of g in the other direction. cumprod, cummax and cumlogsumexp
// take theirs, as JAX does, from the same reduction written as an associative scan of the Array API (log2 n
// steps of `combine(shifted y, y)`), differentiated by vjp: exact at zeros of cumprod, and cummax splits a tie
// as max does.
// Batching keeps the batch dim in place and moves the axis past it; the scanned axis must be whole on every
// device, the others pass through.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <fmt/format.h>

#include "engine/ops/elementwise_functors.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/shard_rules.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"

namespace tsr::ops {

namespace {

using ir::OpCode;

// ---- Accumulation rules, one per op: Acc<T> the accumulator type, combine(running, next).

template <class T>
using FloatAcc = std::conditional_t<std::is_floating_point_v<ComputeType<T>>, double, uint64_t>;

struct SumRule {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> using Acc = FloatAcc<T>;
  template <class A> static A combine(A a, A b) { return a + b; }  // uint64_t: wraps
};
struct ProdRule {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> using Acc = FloatAcc<T>;
  template <class A> static A combine(A a, A b) { return a * b; }
};
struct MaxRule {
  static constexpr DTypeSet kTypes = kNumeric;
  template <class T> using Acc = std::conditional_t<std::is_floating_point_v<ComputeType<T>>, double, T>;
  template <class A> static A combine(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) return (b > a || b != b) ? b : a;
    else return b > a ? b : a;
  }
};
struct LogSumExpRule {
  static constexpr DTypeSet kTypes = kFloats;
  template <class T> using Acc = double;
  template <class A> static A combine(A a, A b) {
    if (a != a || b != b) return std::numeric_limits<A>::quiet_NaN();
    const A m = a > b ? a : b;
    if (m == -std::numeric_limits<A>::infinity() || m == std::numeric_limits<A>::infinity()) return m;
    return m + std::log1p(std::exp(-std::fabs(a - b)));
  }
};

template <class A, class T>
A toAcc(T v) {
  if constexpr (std::is_same_v<A, uint64_t>) return static_cast<uint64_t>(v);  // signed: modular
  else return static_cast<A>(static_cast<ComputeType<T>>(v));
}

// x viewed as [outer, n, inner] around the axis: each (outer, inner) line scanned in order (or backwards), the
// inner index innermost so that both reads and writes run along memory.
template <class Rule, class T>
void scanKernel(const T* x, T* out, const Shape& shape, int64_t axis, bool reverse) {
  using A = typename Rule::template Acc<T>;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (int d = static_cast<int>(axis) + 1; d < shape.rank(); ++d) inner *= shape[d];
  const int64_t n = shape[static_cast<int>(axis)];
  std::vector<A> acc(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t step = 0; step < n; ++step) {
      const int64_t k = reverse ? n - 1 - step : step;
      const int64_t base = (o * n + k) * inner;
      for (int64_t j = 0; j < inner; ++j) {
        A v = toAcc<A>(x[base + j]);
        A& a = acc[static_cast<size_t>(j)];
        a = step == 0 ? v : Rule::combine(a, v);
        if constexpr (kIsHalf<T>) out[base + j] = T(static_cast<float>(a));
        else out[base + j] = static_cast<T>(a);
      }
    }
  }
}

template <class Rule>
ir::CpuKernelFn cumulativeKernel() {
  return [](const ir::CpuKernelArgs& args) {
    const auto& at = attrsAs<ir::CumulativeAttrs>(args.attrs);
    dispatchDType(args.inputs[0].aval.dtype, [&]<class T>() {
      if constexpr (Rule::kTypes.template contains<T>())
        scanKernel<Rule>(args.inputs[0].as<T>(), args.outputs[0].as<T>(), args.inputs[0].aval.shape, at.axis, at.reverse);
      else
        TSR_CHECK_MSG(false, "cumulative kernel called with a dtype its infer rule rejects");
    });
  };
}

// ---- Shape rule: x: T[...] of rank >= 1, axis in [0, rank) -> T[...].

ir::InferFn cumulativeInfer(std::string op, DTypeSet accepts) {
  return [op, accepts](std::span<const Aval> x, const ir::Attrs& attrs) -> Result<std::vector<Aval>> {
    TSR_TRY(checkArity(op, x, 1));
    const auto* a = std::get_if<ir::CumulativeAttrs>(&attrs);
    if (!a) return opError(op, x, fmt::format("expects CumulativeAttrs but was given {}", ir::attrsTypeName(attrs)));
    if (!accepts.contains(x[0].dtype))
      return opError(op, x, fmt::format("dtype {} is not supported (accepts {})", dtypeName(x[0].dtype), accepts.toString()));
    if (x[0].rank() == 0) return opError(op, x, "needs an operand of rank 1 or more");
    if (a->axis < 0 || a->axis >= x[0].rank())
      return opError(op, x, fmt::format("axis {} is out of range for rank {}", a->axis, x[0].rank()));
    return std::vector<Aval>{x[0]};
  };
}

ir::CostFn cumulativeCost(double flops) {
  return [flops](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
    return elementwiseCost(in, out, flops);
  };
}

// ---- vjp rules.

std::vector<Array> cumsumVjp(const ir::VjpArgs& a) {
  const Array& g = a.cotangents[0];
  if (!g.valid() || !isFloating(g.dtype())) return {Array()};
  const auto& at = attrsAs<ir::CumulativeAttrs>(a.attrs);
  return {cumsum(g, at.axis, !at.reverse)};
}

using Combine = Array (*)(const Array& earlier, const Array& later);

Array mulCombine(const Array& a, const Array& b) { return a * b; }
Array maxCombine(const Array& a, const Array& b) { return maximum(a, b); }
Array logAddExpCombine(const Array& a, const Array& b) { return maximum(a, b) + log1p(exp(-abs(a - b))); }

// The inclusive scan of x along `axis` by doubling (Hillis-Steele): after the step with shift s, y[i] combines
// x[i - 2s + 1 .. i]. Positions i < s keep y[i]: the shifted operand there is padded with 1, a finite value
// that `where` discards, so no inf or NaN reaches the derivatives of the discarded branch.
Array associativeScan(const Array& x, int64_t axis, bool reverse, Combine combine) {
  Array y = reverse ? flip(x, {axis}) : x;
  const int64_t n = y.shape()[static_cast<int>(axis)];
  const int rank = y.rank();
  Array position = iota(y.shape(), axis, DType::I32);
  for (int64_t s = 1; s < n; s *= 2) {
    Axes low(static_cast<size_t>(rank), 0), high(static_cast<size_t>(rank), 0);
    low[static_cast<size_t>(axis)] = s;
    Array shifted = pad(sliceAxis(y, axis, 0, n - s), low, high, 1.0);
    Array reached = greaterEqual(position, scalarLike(position, static_cast<double>(s)));
    y = where(reached, combine(shifted, y), y);
  }
  return reverse ? flip(y, {axis}) : y;
}

ir::VjpRule scanVjp(Combine combine) {
  return [combine](const ir::VjpArgs& a) -> std::vector<Array> {
    const Array& g = a.cotangents[0];
    if (!g.valid() || !isFloating(g.dtype())) return {Array()};
    const auto at = attrsAs<ir::CumulativeAttrs>(a.attrs);
    VjpOutput out = vjp(
        [&](const std::vector<Array>& xs) {
          return std::vector<Array>{associativeScan(xs[0], at.axis, at.reverse, combine)};
        },
        {a.operands[0]});
    return out.pullback({g});
  };
}

// ---- Batching: the example axis a is axis a + (a >= bd) of the batched x; the batch dim stays where it is.

ir::BatchRule cumulativeBatch(OpCode code) {
  return [code](const ir::BatchArgs& a) {
    const int bd = a.batchDims[0];
    ir::CumulativeAttrs at = attrsAs<ir::CumulativeAttrs>(a.attrs);
    if (at.axis >= bd) ++at.axis;
    return ir::BatchResult{bind(code, {a.operands[0]}, at, std::source_location::current()), {bd}};
  };
}

template <class Rule>
void addCumulativeOp(ir::OpRegistry& reg, OpCode code, double flops, ir::VjpRule vjp) {
  ir::OpDef d = coreOp(code, "cumulative", ir::FusionKind::Opaque, 1);
  d.infer = cumulativeInfer(d.name, Rule::kTypes);
  d.cost = cumulativeCost(flops);
  d.cpu = cumulativeKernel<Rule>();
  d.vjp = std::move(vjp);
  d.batch = cumulativeBatch(code);
  d.shard = cumulativeShardRule();
  addCoreOp(reg, std::move(d));
}

}  // namespace

void registerCumulativeOps(ir::OpRegistry& reg) {
  addCumulativeOp<SumRule>(reg, OpCode::Cumsum, 1, cumsumVjp);
  addCumulativeOp<ProdRule>(reg, OpCode::Cumprod, 1, scanVjp(mulCombine));
  addCumulativeOp<MaxRule>(reg, OpCode::Cummax, 1, scanVjp(maxCombine));
  addCumulativeOp<LogSumExpRule>(reg, OpCode::Cumlogsumexp, 20, scanVjp(logAddExpCombine));
}

}  // namespace tsr::ops
