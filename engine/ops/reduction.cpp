// Reductions: reduce_sum, reduce_max, reduce_min, reduce_prod, reduce_and, reduce_or (x){axes} and argmax, argmin (x){axis, index_dtype}.
//
// Accumulation: bf16/f16 accumulate in float, f32 sums and products in double, f64 in double. Integer sums
// and products wrap like C's unsigned arithmetic (computed modulo 2^64, then truncated). reduce_max/min of
// floats propagate NaN, as XLA and JAX do. Empty reductions give the identity: sum 0, prod 1, max -inf (or
// the lowest integer, false), min +inf (or the highest integer, true).
//
// argmax/argmin return the first index of the extreme value (ties -> smallest index). NaN counts as more
// extreme than any number for both, so the first NaN wins, as in JAX.
//
// Gradients: reduce_sum broadcasts the cotangent back; reduce_max/min split it equally among the elements
// equal to the result; reduce_prod multiplies the others, so it is exact at zeros (see prodVjp); argmax/argmin
// are not differentiable.
// Batching keeps the batch dim in place and shifts the reduced axes past it, so no transpose is needed.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>

#include <fmt/format.h>

#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/shard_rules.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"

namespace tsr::ops {

namespace {

using ir::Ints;

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// The type elements are compared in: halves as float, bool as a byte (std::vector<bool> has no data()).
template <class T>
using CompareType = std::conditional_t<kIsHalf<T>, float, std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>>;

// ---- accumulation rules, one struct per reduce op.

struct SumOp {
  static constexpr bool kAcceptsBool = false;
  template <class T>
  using Acc = std::conditional_t<kIsHalf<T>, float,
                                 std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>>;
  template <class A> static A identity() { return A(0); }
  template <class A> static A combine(A a, A b) { return a + b; }
};

struct ProdOp {
  static constexpr bool kAcceptsBool = false;
  template <class T>
  using Acc = SumOp::Acc<T>;
  template <class A> static A identity() { return A(1); }
  template <class A> static A combine(A a, A b) { return a * b; }
};

struct MaxOp {
  static constexpr bool kAcceptsBool = true;
  template <class T>
  using Acc = CompareType<T>;
  template <class A> static A identity() {
    if constexpr (std::is_floating_point_v<A>) return -std::numeric_limits<A>::infinity();
    else return std::numeric_limits<A>::lowest();
  }
  // b != b: a NaN operand wins and then stays (NaN > x is false).
  template <class A> static A combine(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) return (b > a || b != b) ? b : a;
    else return b > a ? b : a;
  }
};

struct MinOp {
  static constexpr bool kAcceptsBool = true;
  template <class T>
  using Acc = MaxOp::Acc<T>;
  template <class A> static A identity() {
    if constexpr (std::is_floating_point_v<A>) return std::numeric_limits<A>::infinity();
    else return std::numeric_limits<A>::max();
  }
  template <class A> static A combine(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) return (b < a || b != b) ? b : a;
    else return b < a ? b : a;
  }
};

// reduce_and / reduce_or: bool operands only (bytes 0/1); empty reductions give true / false.
struct AndOp {
  static constexpr bool kAcceptsBool = true;
  static constexpr bool kBoolOnly = true;
  template <class T>
  using Acc = uint8_t;
  template <class A> static A identity() { return A(1); }
  template <class A> static A combine(A a, A b) { return static_cast<A>(a & b); }
};

struct OrOp {
  static constexpr bool kAcceptsBool = true;
  static constexpr bool kBoolOnly = true;
  template <class T>
  using Acc = uint8_t;
  template <class A> static A identity() { return A(0); }
  template <class A> static A combine(A a, A b) { return static_cast<A>(a | b); }
};

template <class Op>
concept BoolOnly = requires { Op::kBoolOnly; };

template <class A, class T>
inline A toAcc(T v) {
  // bf16 is the top half of an f32: widen inline rather than through the out-of-line converter.
  if constexpr (std::is_same_v<T, bf16>) return static_cast<A>(std::bit_cast<float>(uint32_t{v.bits} << 16));
  else if constexpr (kIsHalf<T>) return static_cast<A>(static_cast<float>(v));
  else return static_cast<A>(v);  // signed -> uint64_t is modular, which is what wrapping sums need
}

template <class T, class A>
inline T fromAcc(A v) {
  if constexpr (kIsHalf<T>) return T(static_cast<float>(v));
  else return static_cast<T>(v);  // uint64_t -> narrower integer truncates modulo 2^bits
}

// A run of neighbouring input dims that are all kept or all reduced.
struct Run {
  int64_t n;
  bool reduced;
  int64_t outStride = 0;  // 0 for reduced runs
};

// x: [d0, ..., dk] with `axes` reduced -> alternating kept/reduced runs, size-1 dims dropped.
std::vector<Run> splitRuns(const Shape& shape, const Ints& axes) {
  std::vector<bool> reduced(static_cast<size_t>(shape.rank()), false);
  for (int64_t a : axes) reduced[static_cast<size_t>(a)] = true;
  std::vector<Run> runs;
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] == 1) continue;
    bool r = reduced[static_cast<size_t>(i)];
    if (!runs.empty() && runs.back().reduced == r) runs.back().n *= shape[i];
    else runs.push_back({shape[i], r});
  }
  int64_t stride = 1;
  for (size_t i = runs.size(); i-- > 0;) {
    if (runs[i].reduced) continue;
    runs[i].outStride = stride;
    stride *= runs[i].n;
  }
  return runs;
}

// Rows are folded in fixed blocks of kLanes independent accumulators: the fixed inner trip count lets
// the compiler vectorise at -O2 (about 2x for sums and 6x for NaN-propagating max/min over a plain loop).
constexpr int kLanes = 8;

// Folds one contiguous row in[0, n) into a single accumulator.
template <class Op, class A, class T>
inline A reduceRow(const T* in, int64_t n) {
  A lanes[kLanes];
  std::fill_n(lanes, kLanes, Op::template identity<A>());
  int64_t full = n / kLanes * kLanes;
  for (int64_t j = 0; j < full; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] = Op::combine(lanes[l], toAcc<A>(in[j + l]));
  A r = Op::template identity<A>();
  for (int64_t j = full; j < n; ++j) r = Op::combine(r, toAcc<A>(in[j]));
  for (int l = 0; l < kLanes; ++l) r = Op::combine(r, lanes[l]);
  return r;
}

// Folds in[0, n) elementwise into acc[0, n).
template <class Op, class A, class T>
inline void accumulateRow(A* __restrict acc, const T* __restrict in, int64_t n) {
  int64_t full = n / kLanes * kLanes;
  for (int64_t j = 0; j < full; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[j + l] = Op::combine(acc[j + l], toAcc<A>(in[j + l]));
  for (int64_t j = full; j < n; ++j) acc[j] = Op::combine(acc[j], toAcc<A>(in[j]));
}

// Reads the input once in row-major order. The innermost run is either reduced (a row folds into one
// accumulator) or kept (a row folds elementwise into a row of accumulators); outer runs step an odometer.
template <class Op, class T>
void reduceKernel(const T* in, const Shape& inShape, const Ints& axes, T* out, int64_t outNumel) {
  using A = typename Op::template Acc<T>;
  std::vector<A> acc(static_cast<size_t>(outNumel), Op::template identity<A>());
  std::vector<Run> runs = splitRuns(inShape, axes);
  if (inShape.numel() > 0) {
    Run last = runs.empty() ? Run{1, false, 1} : runs.back();
    if (!runs.empty()) runs.pop_back();
    int64_t rows = 1;
    for (const Run& r : runs) rows *= r.n;
    std::vector<int64_t> idx(runs.size(), 0);
    int64_t o = 0;  // accumulator offset of the current row
    for (int64_t row = 0; row < rows; ++row, in += last.n) {
      if (last.reduced) {
        acc[static_cast<size_t>(o)] = Op::combine(acc[static_cast<size_t>(o)], reduceRow<Op, A>(in, last.n));
      } else {
        accumulateRow<Op>(acc.data() + o, in, last.n);
      }
      for (size_t k = runs.size(); k-- > 0;) {
        o += runs[k].outStride;
        if (++idx[k] < runs[k].n) break;
        o -= runs[k].outStride * runs[k].n;
        idx[k] = 0;
      }
    }
  }
  for (int64_t i = 0; i < outNumel; ++i) out[i] = fromAcc<T>(acc[static_cast<size_t>(i)]);
}

Result<std::vector<Aval>> inferReduce(std::string_view op, bool acceptsBool, bool boolOnly, std::span<const Aval> x,
                                      const ir::Attrs& attrs) {
  TSR_TRY(checkArity(op, x, 1));
  const auto* a = std::get_if<ir::ReduceAttrs>(&attrs);
  if (!a) return opError(op, x, fmt::format("expects ReduceAttrs but was given {}", ir::attrsTypeName(attrs)));
  if (x[0].dtype == DType::Bool && !acceptsBool) return opError(op, x, "does not accept bool operands");
  if (x[0].dtype != DType::Bool && boolOnly)
    return opError(op, x, fmt::format("takes a bool operand, not {} (compare with zero first)", dtypeName(x[0].dtype)));
  int rank = x[0].rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t axis : a->axes) {
    if (axis < 0)
      return opError(op, x, fmt::format("axes {} holds the negative axis {}; axes must be normalised to [0, {})",
                                        bracket(a->axes), axis, rank));
    if (axis >= rank)
      return opError(op, x, fmt::format("axes {}: axis {} is out of range for rank {}", bracket(a->axes), axis, rank));
    if (reduced[static_cast<size_t>(axis)])
      return opError(op, x, fmt::format("axes {} repeats axis {}", bracket(a->axes), axis));
    reduced[static_cast<size_t>(axis)] = true;
  }
  Shape s;
  for (int i = 0; i < rank; ++i)
    if (!reduced[static_cast<size_t>(i)]) s.dims().push_back(x[0].shape[i]);
  return std::vector<Aval>{Aval{std::move(s), x[0].dtype}};
}

ir::Cost reductionCost(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  ir::Cost c;
  for (const auto& a : in) {
    c.flops += static_cast<double>(a.numel());
    c.bytesRead += a.bytes();
  }
  for (const auto& a : out) c.bytesWritten += a.bytes();
  return c;
}

// ---- vjp rules. x: the operand, y: the result (x without the reduced axes), g: y's cotangent.

// The dims of x that the reduction keeps, in order: where y's dims sit in x, for broadcastInDim.
Ints keptDims(int rank, const Ints& axes) {
  Ints kept;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(d);
  return kept;
}

// The pieces every reduction's vjp reads. `back` broadcasts a y-shaped array back to x's shape.
struct ReduceVjp {
  const Array& x;
  const Array& y;
  const Array& g;
  const Ints& axes;
  Ints kept;
  Array back(const Array& v) const { return broadcastInDim(v, x.shape(), kept); }
};

// Wraps a rule so it sees only floating operands with a cotangent and at least one reduced axis (with none,
// the op is the identity, and tsr::sum(x, {}) would reduce every axis instead).
template <class Rule>
ir::VjpRule reduceVjp(Rule rule) {
  return [rule](const ir::VjpArgs& a) -> std::vector<Array> {
    const Array& x = a.operands[0];
    const Array& g = a.cotangents[0];
    if (!g.valid() || !isFloating(x.dtype())) return {Array()};
    const Ints& axes = attrsAs<ir::ReduceAttrs>(a.attrs).axes;
    if (axes.empty()) return {g};
    return {rule(ReduceVjp{x, a.results[0], g, axes, keptDims(x.rank(), axes)})};
  };
}

// Every summed element gets the cotangent of its sum.
Array sumVjp(const ReduceVjp& r) { return r.back(r.g); }

// The cotangent goes to the elements equal to the result, split equally among ties as JAX does: max of
// [3, 1, 3] has gradient [1/2, 0, 1/2]. A NaN result equals no element, so its gradient is NaN (as in JAX).
Array chooserVjp(const ReduceVjp& r) {
  Array hit = astype(equal(r.x, r.back(r.y)), r.x.dtype());
  return r.back(r.g / sum(hit, r.axes)) * hit;
}

// The product of the other elements along the last axis, x: [k, n] -> [k, n]: an exclusive prefix product
// times an exclusive suffix product, each a Hillis-Steele scan (log2 n steps of a shifted copy and a mul).
// Only pads and muls, never a division: exact at zeros, and a polynomial, so grad of grad is exact too.
Array othersProduct(const Array& x) {
  const int64_t n = x.shape()[1];
  if (n == 0) return x;
  // v moved s places along the last axis (s < 0: leftwards), the vacated places filled with 1.
  auto shifted = [](const Array& v, int64_t s) { return pad(v, {0, s}, {0, -s}, 1.0); };
  Array before = shifted(x, 1);  // [1, x0, ..., x_{n-2}]
  Array after = shifted(x, -1);  // [x1, ..., x_{n-1}, 1]
  for (int64_t s = 1; s < n; s *= 2) {
    before = before * shifted(before, s);
    after = after * shifted(after, -s);
  }
  return before * after;
}

// d prod / d x_i is the product of the others, computed without dividing by x_i (y / x_i fails at zeros):
// x is viewed as [kept, reduced] rows, each row's others-products are scaled by its g, and the result is
// laid out as x again.
Array prodVjp(const ReduceVjp& r) {
  Ints perm = r.kept;
  perm.insert(perm.end(), r.axes.begin(), r.axes.end());
  int64_t k = 1, n = 1;
  std::vector<int64_t> permuted;
  for (int64_t d : perm) permuted.push_back(r.x.shape()[static_cast<int>(d)]);
  for (int64_t d : r.kept) k *= r.x.shape()[static_cast<int>(d)];
  for (int64_t d : r.axes) n *= r.x.shape()[static_cast<int>(d)];
  bool identity = std::is_sorted(perm.begin(), perm.end());
  Array rows = reshape(identity ? r.x : transpose(r.x, perm), {k, n});
  Array ct = reshape(othersProduct(rows) * reshape(r.g, {k, 1}), permuted);
  if (identity) return ct;
  Ints inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return transpose(ct, inverse);
}

// ---- batching rules: x is batched on dim bd; an example axis a is axis a + (a >= bd) of the batched x, and
// the result's batch dim is bd less the reduced axes before it (as JAX's reducer batcher does).

ir::BatchResult reduceBatch(ir::OpCode code, const ir::BatchArgs& a) {
  int bd = a.batchDims[0];
  Ints axes = attrsAs<ir::ReduceAttrs>(a.attrs).axes;
  int before = 0;
  for (int64_t& ax : axes) {
    if (ax >= bd) ++ax;
    else ++before;
  }
  auto r = bind(code, {a.operands[0]}, ir::ReduceAttrs{axes}, std::source_location::current());
  return {r, {bd - before}};
}

ir::BatchResult argBatch(ir::OpCode code, const ir::BatchArgs& a) {
  int bd = a.batchDims[0];
  ir::ArgReduceAttrs attrs = attrsAs<ir::ArgReduceAttrs>(a.attrs);
  bool before = attrs.axis < bd;
  if (!before) ++attrs.axis;
  auto r = bind(code, {a.operands[0]}, attrs, std::source_location::current());
  return {r, {before ? bd - 1 : bd}};
}

template <class Op>
void addReduceOp(ir::OpRegistry& reg, ir::OpCode code, ir::VjpRule vjp) {
  ir::OpDef d = coreOp(code, "reduction", ir::FusionKind::Reduction, 1);
  d.minOperands = 1;
  std::string name = d.name;
  d.infer = [name](std::span<const Aval> x, const ir::Attrs& attrs) {
    return inferReduce(name, Op::kAcceptsBool, BoolOnly<Op>, x, attrs);
  };
  d.cost = reductionCost;
  d.shard = reduceShardRule(code == ir::OpCode::ReduceSum);
  d.cpu = [](const ir::CpuKernelArgs& args) {
    const auto& axes = attrsAs<ir::ReduceAttrs>(args.attrs).axes;
    const auto& in = args.inputs[0];
    const auto& out = args.outputs[0];
    dispatchDType(in.aval.dtype, [&]<class T>() {
      if constexpr (BoolOnly<Op>) {
        if constexpr (std::is_same_v<T, bool>)
          reduceKernel<Op>(in.as<uint8_t>(), in.aval.shape, axes, out.as<uint8_t>(), out.aval.numel());
      } else if constexpr (Op::kAcceptsBool || !std::is_same_v<T, bool>) {
        reduceKernel<Op>(in.as<T>(), in.aval.shape, axes, out.as<T>(), out.aval.numel());
      }
    });
  };
  d.differentiable = vjp != nullptr;
  d.vjp = std::move(vjp);
  d.batch = [code](const ir::BatchArgs& a) { return reduceBatch(code, a); };
  addCoreOp(reg, std::move(d));
}

// ---- argmax / argmin: x viewed as [outer, n, inner] with n the reduced axis.

template <bool kMax, class C>
inline bool better(C v, C best) {
  if constexpr (std::is_floating_point_v<C>) {
    // The first NaN wins: a NaN beats any number, nothing beats a NaN.
    if (v != v) return best == best;
  }
  return kMax ? v > best : v < best;
}

template <bool kMax, class T, class I>
void argKernel(const T* in, int64_t outer, int64_t n, int64_t inner, I* out) {
  using C = CompareType<T>;
  std::vector<C> best(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o, in += n * inner, out += inner) {
    if (inner == 1) {
      C b = toAcc<C>(in[0]);
      int64_t bi = 0;
      for (int64_t k = 1; k < n; ++k) {
        C v = toAcc<C>(in[k]);
        if (better<kMax>(v, b)) {
          b = v;
          bi = k;
        }
      }
      out[0] = static_cast<I>(bi);
      continue;
    }
    for (int64_t j = 0; j < inner; ++j) {
      best[static_cast<size_t>(j)] = toAcc<C>(in[j]);
      out[j] = 0;
    }
    for (int64_t k = 1; k < n; ++k) {
      const T* row = in + k * inner;
      for (int64_t j = 0; j < inner; ++j) {
        C v = toAcc<C>(row[j]);
        if (better<kMax>(v, best[static_cast<size_t>(j)])) {
          best[static_cast<size_t>(j)] = v;
          out[j] = static_cast<I>(k);
        }
      }
    }
  }
}

Result<std::vector<Aval>> inferArg(std::string_view op, std::span<const Aval> x, const ir::Attrs& attrs) {
  TSR_TRY(checkArity(op, x, 1));
  const auto* a = std::get_if<ir::ArgReduceAttrs>(&attrs);
  if (!a) return opError(op, x, fmt::format("expects ArgReduceAttrs but was given {}", ir::attrsTypeName(attrs)));
  int rank = x[0].rank();
  if (a->axis < 0 || a->axis >= rank)
    return opError(op, x, fmt::format("axis {} is out of range for rank {} (axes must be normalised)", a->axis, rank));
  if (a->indexDtype != DType::I32 && a->indexDtype != DType::I64)
    return opError(op, x, fmt::format("index_dtype must be i32 or i64, got {}", dtypeName(a->indexDtype)));
  auto axis = static_cast<int>(a->axis);
  if (x[0].shape[axis] == 0) return opError(op, x, fmt::format("cannot reduce the empty axis {}", axis));
  Shape s = x[0].shape;
  s.dims().erase(s.dims().begin() + axis);
  return std::vector<Aval>{Aval{std::move(s), a->indexDtype}};
}

template <bool kMax>
void addArgOp(ir::OpRegistry& reg, ir::OpCode code) {
  ir::OpDef d = coreOp(code, "reduction", ir::FusionKind::Reduction, 1);
  d.minOperands = 1;
  d.differentiable = false;
  std::string name = d.name;
  d.infer = [name](std::span<const Aval> x, const ir::Attrs& attrs) { return inferArg(name, x, attrs); };
  d.cost = reductionCost;
  d.cpu = [](const ir::CpuKernelArgs& args) {
    const auto& a = attrsAs<ir::ArgReduceAttrs>(args.attrs);
    const auto& in = args.inputs[0];
    const Shape& s = in.aval.shape;
    auto axis = static_cast<int>(a.axis);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; ++i) outer *= s[i];
    for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
    if (outer * inner == 0) return;
    dispatchDType(in.aval.dtype, [&]<class T>() {
      if (a.indexDtype == DType::I32) argKernel<kMax>(in.as<T>(), outer, s[axis], inner, args.outputs[0].as<int32_t>());
      else argKernel<kMax>(in.as<T>(), outer, s[axis], inner, args.outputs[0].as<int64_t>());
    });
  };
  d.batch = [code](const ir::BatchArgs& a) { return argBatch(code, a); };
  d.shard = argReduceShardRule();
  addCoreOp(reg, std::move(d));
}

}  // namespace

void registerReductionOps(ir::OpRegistry& reg) {
  addReduceOp<SumOp>(reg, ir::OpCode::ReduceSum, reduceVjp(sumVjp));
  addReduceOp<MaxOp>(reg, ir::OpCode::ReduceMax, reduceVjp(chooserVjp));
  addReduceOp<MinOp>(reg, ir::OpCode::ReduceMin, reduceVjp(chooserVjp));
  addReduceOp<ProdOp>(reg, ir::OpCode::ReduceProd, reduceVjp(prodVjp));
  addReduceOp<AndOp>(reg, ir::OpCode::ReduceAnd, nullptr);  // bool results: not differentiable
  addReduceOp<OrOp>(reg, ir::OpCode::ReduceOr, nullptr);
  addArgOp<true>(reg, ir::OpCode::Argmax);
  addArgOp<false>(reg, ir::OpCode::Argmin);
}

}  // namespace tsr::ops
