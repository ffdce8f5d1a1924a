// gather / scatter_add: tf.gather-style indexing along one axis, with leading batch dims shared by x and idx.
// Out-of-range indices are clamped by gather (JAX's default) and dropped by scatter_add, its transpose. The other
// scatters (set, mul, min, max) share this layout and live in scatter.cpp.
//
// Both kernels see x as [Bt, P, A, S] and idx as [Bt, I], the gathered values as [Bt, P, I, S], where
// Bt = prod x.shape[:batchDims], P = prod x.shape[batchDims:axis], A = x.shape[axis], S = prod x.shape[axis+1:]
// and I = prod idx.shape[batchDims:].
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/shard_rules.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/trace.h"

namespace tsr::ops {
namespace {

using ir::GatherAttrs;

Result<std::vector<Aval>> inferGather(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("gather", ops, 2));
  TSR_ASSIGN(Aval out, gatheredAval("gather", ops, ops[0], ops[1], attrsAs<GatherAttrs>(attrs)));
  return std::vector<Aval>{out};
}

Result<std::vector<Aval>> inferScatterAdd(std::span<const Aval> ops, const ir::Attrs& attrs) {
  constexpr const char* kOp = "scatter_add";
  TSR_TRY(checkArity(kOp, ops, 3));
  const Aval& x = ops[0];
  const Aval& updates = ops[2];
  if (x.dtype == DType::Bool) return opError(kOp, ops, "bool is not supported (numeric dtypes only)");
  if (updates.dtype != x.dtype) return opError(kOp, ops, "x and updates must have equal dtypes");
  TSR_ASSIGN(Aval gathered, gatheredAval(kOp, ops, x, ops[1], attrsAs<GatherAttrs>(attrs)));
  if (!(updates.shape == gathered.shape))
    return opError(kOp, ops, fmt::format("updates must have the gathered shape {}, got {}", gathered.shape.toString(),
                                         updates.shape.toString()));
  return std::vector<Aval>{x};
}

ir::Cost costGather(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  // Reads the indices and only the gathered part of x.
  ir::Cost c;
  c.bytesRead = in[1].bytes() + out[0].bytes();
  c.bytesWritten = out[0].bytes();
  return c;
}

ir::Cost costScatterAdd(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  ir::Cost c = movementCost(in, out);
  c.flops = static_cast<double>(in[2].numel());  // one add per update element
  return c;
}

// ---- kernels ----


// Copies whole rows of S elements, so the kernel is the same for every dtype.
void gatherKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<GatherAttrs>(args.attrs);
  const ir::TensorView& x = args.inputs[0];
  const ir::MutableTensorView& out = args.outputs[0];
  GatherGeometry g = gatherGeometry(x.aval.shape, args.inputs[1].aval.shape, at);
  auto* dst = static_cast<uint8_t*>(out.data);
  if (g.axisSize == 0) {  // nothing to clamp into: the result is all zeros
    std::memset(dst, 0, static_cast<size_t>(out.aval.bytes()));
    return;
  }
  std::vector<int64_t> idx = loadGatherIndices(args.inputs[1]);
  const auto* src = static_cast<const uint8_t*>(x.data);
  const auto row = static_cast<size_t>(g.inner * dtypeSize(x.aval.dtype));
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t p = 0; p < g.outer; ++p) {
      int64_t slab = b * g.outer + p;
      for (int64_t i = 0; i < g.indices; ++i) {
        int64_t j = std::clamp<int64_t>(idx[static_cast<size_t>(b * g.indices + i)], 0, g.axisSize - 1);
        std::memcpy(dst + static_cast<size_t>(slab * g.indices + i) * row,
                    src + static_cast<size_t>(slab * g.axisSize + j) * row, row);
      }
    }
  }
}

// Integers add modulo 2^bits (through the unsigned type, since signed overflow is UB).
template <class T>
T wrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

// acc: x as [Bt, P, A, S]; upd: [Bt, P, I, S]. Out-of-range indices are dropped; duplicates accumulate.
template <class Acc, class T>
void scatterInto(Acc* acc, const T* upd, const std::vector<int64_t>& idx, const GatherGeometry& g) {
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t p = 0; p < g.outer; ++p) {
      int64_t slab = b * g.outer + p;
      for (int64_t i = 0; i < g.indices; ++i) {
        int64_t j = idx[static_cast<size_t>(b * g.indices + i)];
        if (j < 0 || j >= g.axisSize) continue;
        Acc* d = acc + (slab * g.axisSize + j) * g.inner;
        const T* u = upd + (slab * g.indices + i) * g.inner;
        for (int64_t s = 0; s < g.inner; ++s) d[s] = wrapAdd(d[s], static_cast<Acc>(u[s]));
      }
    }
  }
}

void scatterAddKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<GatherAttrs>(args.attrs);
  const ir::TensorView& x = args.inputs[0];
  const ir::TensorView& updates = args.inputs[2];
  const ir::MutableTensorView& out = args.outputs[0];
  GatherGeometry g = gatherGeometry(x.aval.shape, args.inputs[1].aval.shape, at);
  std::vector<int64_t> idx = loadGatherIndices(args.inputs[1]);
  const int64_t n = x.aval.numel();
  dispatchDType(x.aval.dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
      // Accumulate in f32 and round once, so duplicate indices do not round at every add.
      std::vector<float> acc(x.as<T>(), x.as<T>() + n);
      scatterInto(acc.data(), updates.as<T>(), idx, g);
      for (int64_t i = 0; i < n; ++i) out.as<T>()[i] = T(acc[static_cast<size_t>(i)]);
    } else if constexpr (std::is_same_v<T, bool>) {
      TSR_CHECK_MSG(false, "scatter_add: bool is rejected by infer");
    } else {
      std::copy(x.as<T>(), x.as<T>() + n, out.as<T>());
      scatterInto(out.as<T>(), updates.as<T>(), idx, g);
    }
  });
}

// ==== vjp and batching rules ====

Array gatherOp(const Array& x, const Array& idx, int64_t axis, int64_t batchDims) {
  return bind1(ir::OpCode::Gather, {x, idx}, GatherAttrs{axis, batchDims}, std::source_location::current());
}

Array scatterAddOp(const Array& x, const Array& idx, const Array& updates, int64_t axis, int64_t batchDims) {
  return bind1(ir::OpCode::ScatterAdd, {x, idx, updates}, GatherAttrs{axis, batchDims},
               std::source_location::current());
}

// gather: x's cotangent adds ct back at the positions read. gather clamps out-of-range indices and scatter_add
// drops them, so the indices are clamped first: an element read through a clamped index gets its cotangent.
// The indices get none.
std::vector<Array> vjpGather(const ir::VjpArgs& a) {
  const auto& at = attrsAs<GatherAttrs>(a.attrs);
  const Array& x = a.operands[0];
  const Array& idx = a.operands[1];
  int64_t n = x.shape()[static_cast<int>(at.axis)];
  if (n == 0) return {zerosLike(x), Array()};  // nothing was read
  Array clamped = clamp(idx, scalarLike(idx, 0), scalarLike(idx, static_cast<double>(n - 1)));
  return {scatterAddOp(zerosLike(x), clamped, a.cotangents[0], at.axis, at.batchDims), Array()};
}

// scatter_add: x's cotangent is ct; the updates' is ct read back at their positions, zero for the updates whose
// index is out of range (scatter_add dropped them). The indices get none.
std::vector<Array> vjpScatterAdd(const ir::VjpArgs& a) {
  const auto& at = attrsAs<GatherAttrs>(a.attrs);
  const Array& ct = a.cotangents[0];
  const Array& idx = a.operands[1];
  const Array& updates = a.operands[2];
  auto n = static_cast<double>(ct.shape()[static_cast<int>(at.axis)]);
  Array inRange = bitwiseAnd(greaterEqual(idx, scalarLike(idx, 0)), less(idx, scalarLike(idx, n)));
  // idx [batch dims, I...] -> updates [batch dims, x dims up to axis, I..., x dims after axis].
  Axes dims;
  for (int64_t d = 0; d < at.batchDims; ++d) dims.push_back(d);
  for (int64_t d = at.batchDims; d < idx.rank(); ++d) dims.push_back(at.axis + d - at.batchDims);
  Array mask = broadcastInDim(inRange, updates.shape(), dims);
  Array read = gatherOp(ct, idx, at.axis, at.batchDims);
  return {ct, Array(), where(mask, read, scalarLike(read, 0))};
}

// gather's batching, by which operands are batched (x: [..., A, ...] gathered on axis A; k = batch_dims):
// - both: both batch dims go to 0 and become one more leading batch dim (axis + 1, batch_dims + 1).
// - x only: x's batch dim goes to position k (just after the shared batch dims; it stays put if already at or
//   past k), where it is one more dim of x that the gather keeps; no copy of idx per example.
// - idx only: its batch dim is one more index dim (moved to k if it sits among the shared batch dims); no
//   copy of x per example.
ir::BatchResult batchGather(const ir::BatchArgs& a) {
  const auto& at = attrsAs<GatherAttrs>(a.attrs);
  const int64_t k = at.batchDims;
  Array x = a.operands[0], idx = a.operands[1];
  int xb = a.batchDims[0], ib = a.batchDims[1];
  if (xb >= 0 && ib >= 0) {
    x = moveBatchDim(x, xb, 0, a.batchSize);
    idx = moveBatchDim(idx, ib, 0, a.batchSize);
    return {{gatherOp(x, idx, at.axis + 1, k + 1)}, {0}};
  }
  if (xb >= 0) {
    if (xb < k) {
      x = moveBatchDim(x, xb, static_cast<int>(k), a.batchSize);
      xb = static_cast<int>(k);
    }
    // x's batch dim before the axis: it is kept in place; after it: it follows the index dims.
    if (xb <= at.axis) return {{gatherOp(x, idx, at.axis + 1, k)}, {xb}};
    return {{gatherOp(x, idx, at.axis, k)}, {xb - 1 + idx.rank() - static_cast<int>(k)}};
  }
  if (ib < k) {
    idx = moveBatchDim(idx, ib, static_cast<int>(k), a.batchSize);
    ib = static_cast<int>(k);
  }
  return {{gatherOp(x, idx, at.axis, k)}, {static_cast<int>(at.axis) + ib - static_cast<int>(k)}};
}

// scatter_add's batching. The result is batched whatever is, so x and the updates are batched (broadcast if
// shared). Shared indices: x's and the updates' batch dims go to position k, one more dim of x that the
// scatter keeps (axis + 1), and the indices are not copied. Batched indices: everything is batched on dim 0
// and the batch becomes one more leading batch dim (axis + 1, batch_dims + 1).
ir::BatchResult batchScatterAdd(const ir::BatchArgs& a) {
  const auto& at = attrsAs<GatherAttrs>(a.attrs);
  const int64_t k = at.batchDims;
  const int to = a.batchDims[1] >= 0 ? 0 : static_cast<int>(k);
  Array x = moveBatchDim(a.operands[0], a.batchDims[0], to, a.batchSize);
  Array updates = moveBatchDim(a.operands[2], a.batchDims[2], to, a.batchSize);
  if (a.batchDims[1] < 0) return {{scatterAddOp(x, a.operands[1], updates, at.axis + 1, k)}, {to}};
  Array idx = moveBatchDim(a.operands[1], a.batchDims[1], 0, a.batchSize);
  return {{scatterAddOp(x, idx, updates, at.axis + 1, k + 1)}, {0}};
}

}  // namespace

void registerIndexingOps(ir::OpRegistry& reg) {
  // Differentiable in x only: the indices are integers.
  ir::OpDef gather = coreOp(ir::OpCode::Gather, "indexing", ir::FusionKind::Opaque, 2);
  gather.infer = inferGather;
  gather.cost = costGather;
  gather.cpu = gatherKernel;
  gather.vjp = vjpGather;
  gather.batch = batchGather;
  gather.shard = gatherShardRule();
  addCoreOp(reg, std::move(gather));

  // Differentiable in x and updates.
  ir::OpDef scatter = coreOp(ir::OpCode::ScatterAdd, "indexing", ir::FusionKind::Opaque, 3);
  scatter.cpuWritesWholeResult = true;  // copies its operand into the result before adding
  scatter.infer = inferScatterAdd;
  scatter.cost = costScatterAdd;
  scatter.cpu = scatterAddKernel;
  scatter.vjp = vjpScatterAdd;
  scatter.batch = batchScatterAdd;
  scatter.shard = scatterAddShardRule();
  addCoreOp(reg, std::move(scatter));
}

namespace {
bool isIndexDType(DType t) { return t == DType::I32 || t == DType::I64 || t == DType::U32; }
}  // namespace

Result<Aval> gatheredAval(std::string_view op, std::span<const Aval> ops, const Aval& x, const Aval& idx,
                          const GatherAttrs& at) {
  if (!isIndexDType(idx.dtype))
    return opError(op, ops, fmt::format("indices must be i32, i64 or u32, got {}", dtypeName(idx.dtype)));
  if (at.batchDims < 0 || at.batchDims > idx.rank())
    return opError(op, ops, fmt::format("batch_dims {} must be in [0, {}] (the rank of the indices)", at.batchDims,
                                        idx.rank()));
  if (at.axis < at.batchDims || at.axis >= x.rank())
    return opError(op, ops, fmt::format("axis {} must be in [batch_dims {}, {}) (the rank of x)", at.axis,
                                        at.batchDims, x.rank()));
  for (int d = 0; d < at.batchDims; ++d)
    if (x.shape[d] != idx.shape[d])
      return opError(op, ops, fmt::format("batch dim {} has size {} in x but {} in the indices", d, x.shape[d],
                                          idx.shape[d]));
  std::vector<int64_t> dims(x.shape.dims().begin(), x.shape.dims().begin() + at.axis);
  dims.insert(dims.end(), idx.shape.dims().begin() + at.batchDims, idx.shape.dims().end());
  dims.insert(dims.end(), x.shape.dims().begin() + at.axis + 1, x.shape.dims().end());
  return Aval{Shape(std::move(dims)), x.dtype};
}

std::vector<int64_t> loadGatherIndices(const ir::TensorView& idx) {
  std::vector<int64_t> out(static_cast<size_t>(idx.aval.numel()));
  dispatchDType(idx.aval.dtype, [&]<class T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T* p = idx.as<T>();
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(p[i]);
    } else {
      TSR_CHECK_MSG(false, "gather: infer admits integer indices only");
    }
  });
  return out;
}

GatherGeometry gatherGeometry(const Shape& x, const Shape& idx, const ir::GatherAttrs& at) {
  GatherGeometry g;
  int axis = static_cast<int>(at.axis), bd = static_cast<int>(at.batchDims);
  for (int d = 0; d < bd; ++d) g.batch *= x[d];
  for (int d = bd; d < axis; ++d) g.outer *= x[d];
  g.axisSize = x[axis];
  for (int d = axis + 1; d < x.rank(); ++d) g.inner *= x[d];
  for (int d = bd; d < idx.rank(); ++d) g.indices *= idx[d];
  return g;
}

}  // namespace tsr::ops
