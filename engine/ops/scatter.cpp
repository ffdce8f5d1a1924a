// scatter, scatter_mul, scatter_min, scatter_max: lax.scatter and its combining variants over the layout of
// gather and scatter_add (indexing.cpp): updates = x.shape[:axis] + idx.shape[batchDims:] + x.shape[axis+1:],
// and update u lands on x's element at its index along `axis`. Out-of-range indices are dropped.
//
// Where an index repeats, the updates meet in index order (idx flattened row-major within its batch): scatter
// keeps the last one, so the result is deterministic on every backend (XLA leaves the choice open);
// scatter_mul multiplies them all into x; scatter_min and scatter_max keep the extreme, NaN winning as in the
// elementwise min and max.
//
// Kernels see x as [Bt, P, A, S], idx as [Bt, I] and the updates as [Bt, P, I, S] (op_helpers.h: GatherGeometry).
#include <cstring>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "engine/ops/elementwise_functors.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/ops/shard_rules.h"
#include "engine/transform/trace.h"

namespace tsr::ops {
namespace {

using ir::GatherAttrs;
using ir::OpCode;
using elementwise::isZero;
using elementwise::replaceZero;

// ---- infer and cost ----

Result<std::vector<Aval>> inferScatter(OpCode code, std::span<const Aval> ops, const ir::Attrs& attrs) {
  const std::string op = ir::coreOpName(code);
  TSR_TRY(checkArity(op, ops, 3));
  const Aval& x = ops[0];
  const Aval& updates = ops[2];
  if (code != OpCode::Scatter && x.dtype == DType::Bool)
    return opError(op, ops, "bool is not supported (numeric dtypes only)");
  if (updates.dtype != x.dtype) return opError(op, ops, "x and updates must have equal dtypes");
  TSR_ASSIGN(Aval gathered, gatheredAval(op, ops, x, ops[1], attrsAs<GatherAttrs>(attrs)));
  if (!(updates.shape == gathered.shape))
    return opError(op, ops, fmt::format("updates must have the gathered shape {}, got {}", gathered.shape.toString(),
                                        updates.shape.toString()));
  return std::vector<Aval>{x};
}

ir::Cost costScatter(OpCode code, std::span<const Aval> in, std::span<const Aval> out) {
  ir::Cost c = movementCost(in, out);
  if (code != OpCode::Scatter) c.flops = static_cast<double>(in[2].numel());  // one multiply or compare per update
  return c;
}

// ---- kernels ----

// Calls f(xRow, updateRow) for every in-range update row of S elements, in index order within each slab.
template <class F>
void forEachUpdateRow(const std::vector<int64_t>& idx, const GatherGeometry& g, F&& f) {
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t p = 0; p < g.outer; ++p) {
      const int64_t slab = b * g.outer + p;
      for (int64_t i = 0; i < g.indices; ++i) {
        const int64_t j = idx[static_cast<size_t>(b * g.indices + i)];
        if (j < 0 || j >= g.axisSize) continue;
        f((slab * g.axisSize + j) * g.inner, (slab * g.indices + i) * g.inner);
      }
    }
  }
}

// scatter: x copied, then each update row over its target; the last one written stays. Moves bytes, so one
// kernel serves every dtype.
void scatterKernel(const ir::CpuKernelArgs& args) {
  const ir::TensorView& x = args.inputs[0];
  const ir::MutableTensorView& out = args.outputs[0];
  GatherGeometry g = gatherGeometry(x.aval.shape, args.inputs[1].aval.shape, attrsAs<GatherAttrs>(args.attrs));
  std::vector<int64_t> idx = loadGatherIndices(args.inputs[1]);
  const auto size = static_cast<size_t>(dtypeSize(x.aval.dtype));
  auto* dst = static_cast<uint8_t*>(out.data);
  const auto* upd = static_cast<const uint8_t*>(args.inputs[2].data);
  if (x.aval.numel()) std::memcpy(dst, x.data, static_cast<size_t>(x.aval.bytes()));
  forEachUpdateRow(idx, g, [&](int64_t to, int64_t from) {
    std::memcpy(dst + static_cast<size_t>(to) * size, upd + static_cast<size_t>(from) * size,
                static_cast<size_t>(g.inner) * size);
  });
}

// scatter_mul / scatter_min / scatter_max: Combine (the elementwise functor) folds each update into its target
// in index order. bf16 and f16 compute in f32 and round once at the end.
template <class Combine>
void combiningKernel(const ir::CpuKernelArgs& args) {
  const ir::TensorView& x = args.inputs[0];
  const ir::TensorView& updates = args.inputs[2];
  const ir::MutableTensorView& out = args.outputs[0];
  GatherGeometry g = gatherGeometry(x.aval.shape, args.inputs[1].aval.shape, attrsAs<GatherAttrs>(args.attrs));
  std::vector<int64_t> idx = loadGatherIndices(args.inputs[1]);
  const int64_t n = x.aval.numel();
  dispatchDType(x.aval.dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      TSR_CHECK_MSG(false, "scatter: bool is rejected by infer");
    } else {
      using C = std::conditional_t<std::is_same_v<T, bf16> || std::is_same_v<T, f16>, float, T>;
      std::vector<C> acc(x.as<T>(), x.as<T>() + n);
      const T* u = updates.as<T>();
      forEachUpdateRow(idx, g, [&](int64_t to, int64_t from) {
        for (int64_t s = 0; s < g.inner; ++s) {
          C& a = acc[static_cast<size_t>(to + s)];
          a = Combine::template apply<C>(a, static_cast<C>(u[from + s]));
        }
      });
      for (int64_t i = 0; i < n; ++i) out.as<T>()[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
    }
  });
}

// ==== vjp and batching rules ====

Array scatterOp(OpCode code, const Array& x, const Array& idx, const Array& updates, const GatherAttrs& at) {
  return bind1(code, {x, idx, updates}, at, std::source_location::current());
}

Array gatherOp(const Array& x, const Array& idx, const GatherAttrs& at) {
  return bind1(OpCode::Gather, {x, idx}, at, std::source_location::current());
}

// The dims of the updates that the indices' dims map to: batch dims to themselves, index dims from `axis` on.
Axes indexDimsInUpdates(const Array& idx, const GatherAttrs& at) {
  Axes dims;
  for (int64_t d = 0; d < at.batchDims; ++d) dims.push_back(d);
  for (int64_t d = at.batchDims; d < idx.rank(); ++d) dims.push_back(at.axis + d - at.batchDims);
  return dims;
}

// Per update element: whether its index is in range (the update took part), as bool of the updates' shape.
Array updateInRange(const Array& idx, const Array& updates, const GatherAttrs& at, int64_t axisSize) {
  Array inRange = bitwiseAnd(greaterEqual(idx, scalarLike(idx, 0)),
                             less(idx, scalarLike(idx, static_cast<double>(axisSize))));
  return broadcastInDim(inRange, updates.shape(), indexDimsInUpdates(idx, at));
}

// Per update element: its position among the slab's indices (0 .. I-1), of the updates' shape.
Array updatePositions(const Array& idx, const Array& updates, const GatherAttrs& at) {
  std::vector<int64_t> own(idx.shape().dims().begin() + at.batchDims, idx.shape().dims().end());
  int64_t count = 1;
  for (int64_t d : own) count *= d;
  const DType t = count < (int64_t{1} << 31) ? DType::I32 : DType::I64;
  Array pos = reshape(arange(count, t), own);
  Axes dims;
  for (int64_t d = 0; d < static_cast<int64_t>(own.size()); ++d) dims.push_back(at.axis + d);
  return broadcastInDim(pos, updates.shape(), dims);
}

// scatter: x's cotangent is ct with the written positions zeroed (a scatter of zeros into ct); an update's is
// ct at its position if it is the one that stayed there, else zero (a later update with the same index
// overwrote it, or its index was out of range). The winners are found by scattering the updates' positions
// the same way: an update won where the position left at its target is its own.
std::vector<Array> vjpScatter(const ir::VjpArgs& a) {
  const auto& at = attrsAs<GatherAttrs>(a.attrs);
  const Array& ct = a.cotangents[0];
  const Array& idx = a.operands[1];
  const Array& updates = a.operands[2];
  Array ctX = scatterOp(OpCode::Scatter, ct, idx, zerosLike(updates), at);
  if (ct.shape()[static_cast<int>(at.axis)] == 0) return {ctX, Array(), zerosLike(updates)};
  Array pos = updatePositions(idx, updates, at);
  Array none = broadcastTo(scalarLike(pos, -1), ct.shape());
  Array left = scatterOp(OpCode::Scatter, none, idx, pos, at);  // out-of-range updates never match: positions are unique
  Array won = equal(gatherOp(left, idx, at), pos);
  return {ctX, Array(), where(won, gatherOp(ct, idx, at), zerosLike(updates))};
}

// scatter_mul: y_j = x_j * prod_{k -> j} u_k. Division by an update would fail where it is zero, so each
// position keeps the product q of its nonzero updates and the count z of its zero ones:
//   dy_j/dx_j = prod u = (z == 0 ? q : 0);
//   dy_j/du_i = x_j * prod_{k != i} u_k = x_j * (u_i != 0 ? (z == 0 ? q / u_i : 0) : (z == 1 ? q : 0)).
// Exact for repeated indices and zeros (JAX requires unique indices for the updates' gradient).
std::vector<Array> vjpScatterMul(const ir::VjpArgs& a) {
  const auto& at = attrsAs<GatherAttrs>(a.attrs);
  const Array& ct = a.cotangents[0];
  const Array& x = a.operands[0];
  const Array& idx = a.operands[1];
  const Array& updates = a.operands[2];
  const int64_t size = x.shape()[static_cast<int>(at.axis)];
  if (size == 0) return {zerosLike(x), Array(), zerosLike(updates)};
  Array isZ = isZero(updates);
  Array nonzero = replaceZero(updates);
  Array q = scatterOp(OpCode::ScatterMul, onesLike(x), idx, nonzero, at);
  Array z = bind1(OpCode::ScatterAdd, {zerosLike(x), idx, astype(isZ, x.dtype())}, at, std::source_location::current());
  Array zero = zerosLike(x);
  Array ctX = ct * where(isZero(z), q, zero);
  Array qi = gatherOp(q, idx, at), zi = gatherOp(z, idx, at);
  Array zeroU = zerosLike(updates);
  Array others = where(isZ, where(equal(zi, scalarLike(zi, 1.0)), qi, zeroU), where(isZero(zi), qi / nonzero, zeroU));
  Array ctU = gatherOp(ct * x, idx, at) * others;
  return {ctX, Array(), where(updateInRange(idx, updates, at, size), ctU, zeroU)};
}

// scatter_min / scatter_max: the cotangent of y_j goes to whichever of x_j and the updates at j equal y_j,
// split evenly between ties (as JAX's scatter_min/max JVP and the elementwise min/max do). Where y_j is NaN
// nothing matches and no one gets it.
std::vector<Array> vjpScatterExtremum(const ir::VjpArgs& a) {
  const auto& at = attrsAs<GatherAttrs>(a.attrs);
  const Array& ct = a.cotangents[0];
  const Array& x = a.operands[0];
  const Array& idx = a.operands[1];
  const Array& updates = a.operands[2];
  const Array& y = a.results[0];
  const int64_t size = x.shape()[static_cast<int>(at.axis)];
  if (size == 0) return {zerosLike(x), Array(), zerosLike(updates)};
  Array zeroU = zerosLike(updates);
  Array wonX = equal(x, y);
  Array wonU = bitwiseAnd(equal(updates, gatherOp(y, idx, at)), updateInRange(idx, updates, at, size));
  Array ties = bind1(OpCode::ScatterAdd, {astype(wonX, x.dtype()), idx, astype(wonU, x.dtype())}, at,
                     std::source_location::current());
  Array share = ct / maximum(ties, scalarLike(ties, 1.0));
  return {where(wonX, share, zerosLike(x)), Array(), where(wonU, gatherOp(share, idx, at), zeroU)};
}

// Batching as scatter_add's: the result is batched whatever is, so x and the updates are batched (broadcast if
// shared). Shared indices: x's and the updates' batch dims go to position k, one more dim of x that the
// scatter keeps (axis + 1); batched indices: everything batched on dim 0, one more leading batch dim.
ir::BatchResult batchScatter(OpCode code, const ir::BatchArgs& a) {
  const auto& at = attrsAs<GatherAttrs>(a.attrs);
  const int64_t k = at.batchDims;
  const int to = a.batchDims[1] >= 0 ? 0 : static_cast<int>(k);
  Array x = moveBatchDim(a.operands[0], a.batchDims[0], to, a.batchSize);
  Array updates = moveBatchDim(a.operands[2], a.batchDims[2], to, a.batchSize);
  if (a.batchDims[1] < 0) return {{scatterOp(code, x, a.operands[1], updates, GatherAttrs{at.axis + 1, k})}, {to}};
  Array idx = moveBatchDim(a.operands[1], a.batchDims[1], 0, a.batchSize);
  return {{scatterOp(code, x, idx, updates, GatherAttrs{at.axis + 1, k + 1})}, {0}};
}

void addScatterOp(ir::OpRegistry& reg, OpCode code, ir::CpuKernelFn kernel, ir::VjpRule vjp) {
  // Differentiable in x and updates; the indices are integers.
  ir::OpDef def = coreOp(code, "indexing", ir::FusionKind::Opaque, 3);
  def.cpuWritesWholeResult = true;  // copies its operand into the result before scattering
  def.infer = [code](std::span<const Aval> ops, const ir::Attrs& attrs) { return inferScatter(code, ops, attrs); };
  def.cost = [code](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
    return costScatter(code, in, out);
  };
  def.cpu = std::move(kernel);
  def.vjp = std::move(vjp);
  def.batch = [code](const ir::BatchArgs& a) { return batchScatter(code, a); };
  def.shard = scatterShardRule();
  addCoreOp(reg, std::move(def));
}

}  // namespace

void registerScatterOps(ir::OpRegistry& reg) {
  addScatterOp(reg, OpCode::Scatter, scatterKernel, vjpScatter);
  addScatterOp(reg, OpCode::ScatterMul, combiningKernel<elementwise::Mul>, vjpScatterMul);
  addScatterOp(reg, OpCode::ScatterMin, combiningKernel<elementwise::Min>, vjpScatterExtremum);
  addScatterOp(reg, OpCode::ScatterMax, combiningKernel<elementwise::Max>, vjpScatterExtremum);
}

}  // namespace tsr::ops
