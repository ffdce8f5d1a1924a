// Layout ops: broadcast_in_dim, reshape, transpose, slice, dynamic_slice, dynamic_update_slice,
// concatenate, pad, iota, rev. Semantics follow XLA/StableHLO. Every kernel except iota is pure data
// movement: it describes itself as a StridedCopy and dispatches on the element size only. Each op's vjp and
// batching rules follow its kernels; registerLayoutOps lists every op with all its rules in one table.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "engine/ops/layout_copy.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/shard_rules.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/trace.h"

namespace tsr::ops {

namespace {

using ir::Ints;

// The op's attrs, or an error naming what it was given (runCpuOp does not check the alternative).
template <class A>
Result<const A*> attrsFor(std::string_view op, std::span<const Aval> x, const ir::Attrs& attrs) {
  if (const A* a = std::get_if<A>(&attrs)) return a;
  return opError(op, x, fmt::format("expects {} but was given {}", ir::attrsTypeNameAt(ir::Attrs(A{}).index()),
                                    ir::attrsTypeName(attrs)));
}

Status checkDims(std::string_view op, std::span<const Aval> x, std::string_view what, const Ints& dims) {
  for (int64_t d : dims)
    if (d < 0) return opError(op, x, fmt::format("{} {} has a negative dim", what, bracket(dims)));
  return {};
}

bool isIndexDType(DType t) { return t == DType::I32 || t == DType::I64 || t == DType::U32; }

// Operands [first, first + rank) are scalar start indices of an integer dtype.
Status checkStartIndices(std::string_view op, std::span<const Aval> x, size_t first, int rank) {
  if (x.size() != first + static_cast<size_t>(rank))
    return opError(op, x, fmt::format("expects {} start index operands (one per dim of rank {}), got {}", rank,
                                      rank, x.size() - first));
  for (size_t i = first; i < x.size(); ++i)
    if (x[i].rank() != 0 || !isIndexDType(x[i].dtype))
      return opError(op, x, fmt::format("start index operand {} must be an i32, i64 or u32 scalar, got {}",
                                        i - first, x[i].toString()));
  return {};
}

// Reads a start index and clamps it so that [start, start + size) fits in [0, dim), as XLA does.
int64_t clampedStart(const ir::TensorView& t, int64_t dim, int64_t size) {
  int64_t v = 0;
  switch (t.aval.dtype) {
    case DType::I32: v = *t.as<int32_t>(); break;
    case DType::I64: v = *t.as<int64_t>(); break;
    case DType::U32: v = *t.as<uint32_t>(); break;
    default: TSR_CHECK_MSG(false, "start index dtype checked by infer");
  }
  return std::clamp<int64_t>(v, 0, dim - size);
}

// A copy that reads `src` in row-major order (offset and stride multipliers per dim optional).
StridedCopy rowMajorCopy(const Shape& shape) {
  StridedCopy c;
  c.dims = shape.dims();
  c.srcStrides = shape.strides();
  c.dstStrides = c.srcStrides;
  return c;
}

int64_t elemSize(const Aval& a) { return dtypeSize(a.dtype); }

ir::Cost layoutCost(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  return movementCost(in, out);
}

// ---- broadcast_in_dim(x){shape, broadcast_dims}: x dim i -> result dim broadcast_dims[i].

Result<std::vector<Aval>> inferBroadcastInDim(std::span<const Aval> x, const ir::Attrs& attrs) {
  constexpr std::string_view op = "broadcast_in_dim";
  TSR_TRY(checkArity(op, x, 1));
  TSR_ASSIGN(const auto* a, attrsFor<ir::BroadcastInDimAttrs>(op, x, attrs));
  TSR_TRY(checkDims(op, x, "shape", a->shape));
  const Ints& bd = a->broadcastDims;
  if (static_cast<int>(bd.size()) != x[0].rank())
    return opError(op, x, fmt::format("broadcast_dims {} has {} entries but the operand has rank {}", bracket(bd),
                                      bd.size(), x[0].rank()));
  for (size_t i = 0; i < bd.size(); ++i) {
    if (bd[i] < 0 || bd[i] >= static_cast<int64_t>(a->shape.size()))
      return opError(op, x, fmt::format("broadcast_dims {} entry {} is out of range for result shape {}",
                                        bracket(bd), bd[i], bracket(a->shape)));
    if (i > 0 && bd[i] <= bd[i - 1])
      return opError(op, x, fmt::format("broadcast_dims {} must be strictly increasing", bracket(bd)));
    int64_t from = x[0].shape[static_cast<int>(i)], to = a->shape[static_cast<size_t>(bd[i])];
    if (from != 1 && from != to)
      return opError(op, x, fmt::format("operand dim {} (size {}) cannot broadcast to dim {} (size {}) of shape {}",
                                        i, from, bd[i], to, bracket(a->shape)));
  }
  return std::vector<Aval>{Aval{Shape(a->shape), x[0].dtype}};
}

void broadcastInDimKernel(const ir::CpuKernelArgs& args) {
  const auto& a = attrsAs<ir::BroadcastInDimAttrs>(args.attrs);
  const Aval& in = args.inputs[0].aval;
  const Aval& out = args.outputs[0].aval;
  StridedCopy c = rowMajorCopy(out.shape);
  std::fill(c.srcStrides.begin(), c.srcStrides.end(), 0);
  auto inStrides = in.shape.strides();
  for (int i = 0; i < in.rank(); ++i)
    if (in.shape[i] != 1) c.srcStrides[static_cast<size_t>(a.broadcastDims[static_cast<size_t>(i)])] = inStrides[i];
  runStridedCopy(c, elemSize(in), args.inputs[0].data, args.outputs[0].data);
}

// ---- reshape(x){shape}: same elements, new dims.

Result<std::vector<Aval>> inferReshape(std::span<const Aval> x, const ir::Attrs& attrs) {
  constexpr std::string_view op = "reshape";
  TSR_TRY(checkArity(op, x, 1));
  TSR_ASSIGN(const auto* a, attrsFor<ir::ReshapeAttrs>(op, x, attrs));
  TSR_TRY(checkDims(op, x, "shape", a->shape));
  Shape s(a->shape);
  if (s.numel() != x[0].numel())
    return opError(op, x, fmt::format("shape {} has {} elements but the operand has {}", bracket(a->shape),
                                      s.numel(), x[0].numel()));
  return std::vector<Aval>{Aval{std::move(s), x[0].dtype}};
}

void reshapeKernel(const ir::CpuKernelArgs& args) {
  auto bytes = static_cast<size_t>(args.outputs[0].aval.bytes());
  if (bytes) std::memcpy(args.outputs[0].data, args.inputs[0].data, bytes);
}

// ---- transpose(x){perm}: result.shape[i] = x.shape[perm[i]].

Result<std::vector<Aval>> inferTranspose(std::span<const Aval> x, const ir::Attrs& attrs) {
  constexpr std::string_view op = "transpose";
  TSR_TRY(checkArity(op, x, 1));
  TSR_ASSIGN(const auto* a, attrsFor<ir::TransposeAttrs>(op, x, attrs));
  int rank = x[0].rank();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  bool ok = static_cast<int>(a->perm.size()) == rank;
  for (size_t i = 0; ok && i < a->perm.size(); ++i) {
    int64_t p = a->perm[i];
    ok = p >= 0 && p < rank && !seen[static_cast<size_t>(p)];
    if (ok) seen[static_cast<size_t>(p)] = true;
  }
  if (!ok) return opError(op, x, fmt::format("perm {} is not a permutation of {} dims", bracket(a->perm), rank));
  Shape s;
  for (int64_t p : a->perm) s.dims().push_back(x[0].shape[static_cast<int>(p)]);
  return std::vector<Aval>{Aval{std::move(s), x[0].dtype}};
}

void transposeKernel(const ir::CpuKernelArgs& args) {
  const auto& a = attrsAs<ir::TransposeAttrs>(args.attrs);
  const Aval& in = args.inputs[0].aval;
  StridedCopy c = rowMajorCopy(args.outputs[0].aval.shape);
  auto inStrides = in.shape.strides();
  for (size_t i = 0; i < a.perm.size(); ++i) c.srcStrides[i] = inStrides[static_cast<size_t>(a.perm[i])];
  runStridedCopy(c, elemSize(in), args.inputs[0].data, args.outputs[0].data);
}

// ---- slice(x){starts, limits, strides}: result dim = ceil((limit - start) / stride).

Result<std::vector<Aval>> inferSlice(std::span<const Aval> x, const ir::Attrs& attrs) {
  constexpr std::string_view op = "slice";
  TSR_TRY(checkArity(op, x, 1));
  TSR_ASSIGN(const auto* a, attrsFor<ir::SliceAttrs>(op, x, attrs));
  auto rank = static_cast<size_t>(x[0].rank());
  if (a->starts.size() != rank || a->limits.size() != rank || a->strides.size() != rank)
    return opError(op, x, fmt::format("starts {}, limits {} and strides {} must each have {} entries (the rank)",
                                      bracket(a->starts), bracket(a->limits), bracket(a->strides), rank));
  Shape s;
  for (size_t i = 0; i < rank; ++i) {
    int64_t start = a->starts[i], limit = a->limits[i], stride = a->strides[i];
    int64_t dim = x[0].shape[static_cast<int>(i)];
    if (stride < 1) return opError(op, x, fmt::format("strides {} must be >= 1", bracket(a->strides)));
    if (start < 0 || start > limit || limit > dim)
      return opError(op, x, fmt::format("dim {}: need 0 <= start <= limit <= {}, got starts {} and limits {}", i,
                                        dim, bracket(a->starts), bracket(a->limits)));
    s.dims().push_back((limit - start + stride - 1) / stride);
  }
  return std::vector<Aval>{Aval{std::move(s), x[0].dtype}};
}

void sliceKernel(const ir::CpuKernelArgs& args) {
  const auto& a = attrsAs<ir::SliceAttrs>(args.attrs);
  const Aval& in = args.inputs[0].aval;
  StridedCopy c = rowMajorCopy(args.outputs[0].aval.shape);
  auto inStrides = in.shape.strides();
  for (size_t i = 0; i < c.dims.size(); ++i) {
    c.srcOffset += a.starts[i] * inStrides[i];
    c.srcStrides[i] = a.strides[i] * inStrides[i];
  }
  runStridedCopy(c, elemSize(in), args.inputs[0].data, args.outputs[0].data);
}

// ---- dynamic_slice(x, i0, i1, ...){sizes}: starts read at run time, clamped so the slice fits.

Result<std::vector<Aval>> inferDynamicSlice(std::span<const Aval> x, const ir::Attrs& attrs) {
  constexpr std::string_view op = "dynamic_slice";
  if (x.empty()) return opError(op, x, "expects the operand and one start index per dim, got no operands");
  TSR_ASSIGN(const auto* a, attrsFor<ir::DynamicSliceAttrs>(op, x, attrs));
  TSR_TRY(checkStartIndices(op, x, 1, x[0].rank()));
  if (static_cast<int>(a->sizes.size()) != x[0].rank())
    return opError(op, x, fmt::format("sizes {} must have {} entries (the rank)", bracket(a->sizes), x[0].rank()));
  for (size_t i = 0; i < a->sizes.size(); ++i)
    if (a->sizes[i] < 0 || a->sizes[i] > x[0].shape[static_cast<int>(i)])
      return opError(op, x, fmt::format("sizes {} entry {} must be in [0, {}]", bracket(a->sizes), i,
                                        x[0].shape[static_cast<int>(i)]));
  return std::vector<Aval>{Aval{Shape(a->sizes), x[0].dtype}};
}

void dynamicSliceKernel(const ir::CpuKernelArgs& args) {
  const Aval& in = args.inputs[0].aval;
  const Aval& out = args.outputs[0].aval;
  StridedCopy c = rowMajorCopy(out.shape);
  auto inStrides = in.shape.strides();
  for (int i = 0; i < in.rank(); ++i) {
    int64_t start = clampedStart(args.inputs[static_cast<size_t>(1 + i)], in.shape[i], out.shape[i]);
    c.srcOffset += start * inStrides[static_cast<size_t>(i)];
    c.srcStrides[static_cast<size_t>(i)] = inStrides[static_cast<size_t>(i)];
  }
  runStridedCopy(c, elemSize(in), args.inputs[0].data, args.outputs[0].data);
}

// ---- dynamic_update_slice(x, update, i0, ...): x with update written at the clamped starts.

Result<std::vector<Aval>> inferDynamicUpdateSlice(std::span<const Aval> x, const ir::Attrs& attrs) {
  constexpr std::string_view op = "dynamic_update_slice";
  if (x.size() < 2) return opError(op, x, "expects x, update and one start index per dim");
  TSR_TRY(attrsFor<ir::NoAttrs>(op, x, attrs));
  const Aval &base = x[0], &upd = x[1];
  if (upd.dtype != base.dtype || upd.rank() != base.rank())
    return opError(op, x, "update must have the dtype and rank of x");
  for (int i = 0; i < base.rank(); ++i)
    if (upd.shape[i] > base.shape[i])
      return opError(op, x, fmt::format("update dim {} (size {}) is larger than x's ({})", i, upd.shape[i],
                                        base.shape[i]));
  TSR_TRY(checkStartIndices(op, x, 2, base.rank()));
  return std::vector<Aval>{base};
}

void dynamicUpdateSliceKernel(const ir::CpuKernelArgs& args) {
  const Aval& base = args.inputs[0].aval;
  const Aval& upd = args.inputs[1].aval;
  void* out = args.outputs[0].data;
  if (base.bytes()) std::memcpy(out, args.inputs[0].data, static_cast<size_t>(base.bytes()));
  StridedCopy c = rowMajorCopy(upd.shape);
  auto outStrides = base.shape.strides();
  for (int i = 0; i < base.rank(); ++i) {
    int64_t start = clampedStart(args.inputs[static_cast<size_t>(2 + i)], base.shape[i], upd.shape[i]);
    c.dstOffset += start * outStrides[static_cast<size_t>(i)];
    c.dstStrides[static_cast<size_t>(i)] = outStrides[static_cast<size_t>(i)];
  }
  runStridedCopy(c, elemSize(base), args.inputs[1].data, out);
}

// ---- concatenate(xs...){axis}: operands joined along axis; every other dim equal.

Result<std::vector<Aval>> inferConcatenate(std::span<const Aval> x, const ir::Attrs& attrs) {
  constexpr std::string_view op = "concatenate";
  if (x.empty()) return opError(op, x, "expects at least one operand");
  TSR_ASSIGN(const auto* a, attrsFor<ir::ConcatenateAttrs>(op, x, attrs));
  int rank = x[0].rank();
  if (a->axis < 0 || a->axis >= rank)
    return opError(op, x, fmt::format("axis {} is out of range for rank {}", a->axis, rank));
  auto axis = static_cast<int>(a->axis);
  Shape s = x[0].shape;
  for (size_t k = 1; k < x.size(); ++k) {
    if (x[k].dtype != x[0].dtype) return opError(op, x, "operands must have equal dtypes");
    bool ok = x[k].rank() == rank;
    for (int i = 0; ok && i < rank; ++i) ok = i == axis || x[k].shape[i] == x[0].shape[i];
    if (!ok) return opError(op, x, fmt::format("operands must have equal dims except axis {}", axis));
    s[axis] += x[k].shape[axis];
  }
  return std::vector<Aval>{Aval{std::move(s), x[0].dtype}};
}

void concatenateKernel(const ir::CpuKernelArgs& args) {
  auto axis = static_cast<size_t>(attrsAs<ir::ConcatenateAttrs>(args.attrs).axis);
  const Aval& out = args.outputs[0].aval;
  auto outStrides = out.shape.strides();
  int64_t at = 0;  // position along axis where the next operand starts
  for (const auto& in : args.inputs) {
    StridedCopy c = rowMajorCopy(in.aval.shape);
    c.dstStrides = outStrides;
    c.dstOffset = at * outStrides[axis];
    runStridedCopy(c, elemSize(out), in.data, args.outputs[0].data);
    at += in.aval.shape[static_cast<int>(axis)];
  }
}

// ---- pad(x, value){low, high, interior}: result dim = low + high + d + max(d - 1, 0) * interior.
// Negative low/high crop; interior inserts `interior` padding elements between neighbours.

Result<std::vector<Aval>> inferPad(std::span<const Aval> x, const ir::Attrs& attrs) {
  constexpr std::string_view op = "pad";
  TSR_TRY(checkArity(op, x, 2));
  TSR_ASSIGN(const auto* a, attrsFor<ir::PadAttrs>(op, x, attrs));
  if (x[1].rank() != 0 || x[1].dtype != x[0].dtype)
    return opError(op, x, "the padding value must be a scalar of the operand's dtype");
  auto rank = static_cast<size_t>(x[0].rank());
  if (a->low.size() != rank || a->high.size() != rank || a->interior.size() != rank)
    return opError(op, x, fmt::format("low {}, high {} and interior {} must each have {} entries (the rank)",
                                      bracket(a->low), bracket(a->high), bracket(a->interior), rank));
  Shape s;
  for (size_t i = 0; i < rank; ++i) {
    if (a->interior[i] < 0) return opError(op, x, fmt::format("interior {} must be >= 0", bracket(a->interior)));
    int64_t d = x[0].shape[static_cast<int>(i)];
    int64_t r = a->low[i] + a->high[i] + d + std::max<int64_t>(d - 1, 0) * a->interior[i];
    if (r < 0)
      return opError(op, x, fmt::format("dim {} would have negative size {} (low {}, high {}, interior {})", i, r,
                                        bracket(a->low), bracket(a->high), bracket(a->interior)));
    s.dims().push_back(r);
  }
  return std::vector<Aval>{Aval{std::move(s), x[0].dtype}};
}

void padKernel(const ir::CpuKernelArgs& args) {
  const auto& a = attrsAs<ir::PadAttrs>(args.attrs);
  const Aval& in = args.inputs[0].aval;
  const Aval& out = args.outputs[0].aval;
  fillElements(args.outputs[0].data, out.numel(), args.inputs[1].data, elemSize(out));
  // Input element j of dim i lands at low + j * (interior + 1); copy only those inside the result.
  StridedCopy c;
  auto inStrides = in.shape.strides(), outStrides = out.shape.strides();
  for (size_t i = 0; i < inStrides.size(); ++i) {
    int64_t step = a.interior[i] + 1, low = a.low[i];
    int64_t d = in.shape[static_cast<int>(i)], outDim = out.shape[static_cast<int>(i)];
    int64_t first = low < 0 ? (-low + step - 1) / step : 0;
    int64_t lastPos = outDim - 1 - low;  // largest j * step that still fits
    int64_t end = lastPos < 0 ? 0 : std::min(d, lastPos / step + 1);
    c.dims.push_back(std::max<int64_t>(end - first, 0));
    c.srcStrides.push_back(inStrides[i]);
    c.dstStrides.push_back(outStrides[i] * step);
    c.srcOffset += first * inStrides[i];
    c.dstOffset += (low + first * step) * outStrides[i];
  }
  runStridedCopy(c, elemSize(in), args.inputs[0].data, args.outputs[0].data);
}

// ---- iota(){shape, dtype, dimension}: result[..., i_dimension, ...] = i_dimension.

Result<std::vector<Aval>> inferIota(std::span<const Aval> x, const ir::Attrs& attrs) {
  constexpr std::string_view op = "iota";
  TSR_TRY(checkArity(op, x, 0));
  TSR_ASSIGN(const auto* a, attrsFor<ir::IotaAttrs>(op, x, attrs));
  TSR_TRY(checkDims(op, x, "shape", a->shape));
  if (a->dtype == DType::Bool) return opError(op, x, "dtype must be numeric, got bool");
  if (a->dimension < 0 || a->dimension >= static_cast<int64_t>(a->shape.size()))
    return opError(op, x, fmt::format("dimension {} is out of range for shape {}", a->dimension, bracket(a->shape)));
  return std::vector<Aval>{Aval{Shape(a->shape), a->dtype}};
}

void iotaKernel(const ir::CpuKernelArgs& args) {
  const auto& a = attrsAs<ir::IotaAttrs>(args.attrs);
  const Shape& s = args.outputs[0].aval.shape;
  // Result viewed as [outer, n, inner] with n the iota dimension.
  auto dim = static_cast<int>(a.dimension);
  int64_t outer = 1, inner = 1, n = s[dim];
  for (int i = 0; i < dim; ++i) outer *= s[i];
  for (int i = dim + 1; i < s.rank(); ++i) inner *= s[i];
  dispatchDType(a.dtype, [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      T* out = args.outputs[0].as<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < n; ++k) {
          T v;
          if constexpr (std::is_integral_v<T>) v = static_cast<T>(k);
          else v = T(static_cast<float>(k));
          std::fill_n(out + (o * n + k) * inner, inner, v);
        }
    }
  });
}

// ---- rev(x){dims}: reverses the listed dims.

Result<std::vector<Aval>> inferRev(std::span<const Aval> x, const ir::Attrs& attrs) {
  constexpr std::string_view op = "rev";
  TSR_TRY(checkArity(op, x, 1));
  TSR_ASSIGN(const auto* a, attrsFor<ir::RevAttrs>(op, x, attrs));
  std::vector<bool> seen(static_cast<size_t>(x[0].rank()), false);
  for (int64_t d : a->dims) {
    if (d < 0 || d >= x[0].rank())
      return opError(op, x, fmt::format("dims {} entry {} is out of range for rank {}", bracket(a->dims), d,
                                        x[0].rank()));
    if (seen[static_cast<size_t>(d)]) return opError(op, x, fmt::format("dims {} repeats {}", bracket(a->dims), d));
    seen[static_cast<size_t>(d)] = true;
  }
  return std::vector<Aval>{x[0]};
}

void revKernel(const ir::CpuKernelArgs& args) {
  const auto& a = attrsAs<ir::RevAttrs>(args.attrs);
  const Aval& in = args.inputs[0].aval;
  StridedCopy c = rowMajorCopy(in.shape);
  for (int64_t d : a.dims) {
    auto i = static_cast<size_t>(d);
    if (c.dims[i] > 0) c.srcOffset += (c.dims[i] - 1) * c.srcStrides[i];
    c.srcStrides[i] = -c.srcStrides[i];
  }
  runStridedCopy(c, elemSize(in), args.inputs[0].data, args.outputs[0].data);
}

// ==== vjp and batching rules ====
// The vjp rules are JAX's transpose rules, written with the Array API so that they differentiate again. The
// batching rules leave the batch dim where it is when the op can carry it along (slice, rev, pad, dynamic_slice
// with shared starts) and move it to dim 0 where the op needs to know where it is (reshape, broadcast_in_dim).

Ints withInserted(Ints v, int at, int64_t value) {
  v.insert(v.begin() + at, value);
  return v;
}

bool allZero(const Ints& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; });
}

// Example dim d of an operand batched on `bdim`, as a dim of the batched operand.
int64_t batchedDim(int64_t d, int bdim) { return bdim >= 0 && d >= bdim ? d + 1 : d; }

// One example's shape: the batched shape without its batch dim.
Shape exampleShape(const Array& x, int bdim) {
  auto dims = x.shape().dims();
  if (bdim >= 0) dims.erase(dims.begin() + bdim);
  return Shape(std::move(dims));
}

Array gatherOp(const Array& x, const Array& idx, int64_t axis, int64_t batchDims) {
  return bind1(ir::OpCode::Gather, {x, idx}, ir::GatherAttrs{axis, batchDims}, std::source_location::current());
}

Array padOp(const Array& x, const Array& value, const ir::PadAttrs& attrs) {
  return bind1(ir::OpCode::Pad, {x, value}, attrs, std::source_location::current());
}

// The start of one dim for every example, clamped as the kernels clamp it (so that [start, start + size) fits
// in [0, dim)): i64 [B]. A start shared by all examples is broadcast.
Array clampedStarts(const Array& start, int bdim, int64_t batchSize, int64_t dim, int64_t size) {
  Array s = moveBatchDim(start, bdim, 0, batchSize);
  s = clamp(s, scalarLike(s, 0), scalarLike(s, static_cast<double>(dim - size)));
  return astype(s, DType::I64);
}

// ---- broadcast_in_dim: the cotangent sums over the broadcast dims.

std::vector<Array> vjpBroadcastInDim(const ir::VjpArgs& a) {
  const auto& at = attrsAs<ir::BroadcastInDimAttrs>(a.attrs);
  return {unbroadcast(a.cotangents[0], a.operands[0].aval(), at.broadcastDims)};
}

// x: [B, ...] -> [B, shape...]; x's other dims keep their targets, one further on.
ir::BatchResult batchBroadcastInDim(const ir::BatchArgs& a) {
  const auto& at = attrsAs<ir::BroadcastInDimAttrs>(a.attrs);
  Array x = moveBatchDim(a.operands[0], a.batchDims[0], 0, a.batchSize);
  Ints dims{0};
  for (int64_t d : at.broadcastDims) dims.push_back(d + 1);
  return {{broadcastInDim(x, Shape(withInserted(at.shape, 0, a.batchSize)), dims)}, {0}};
}

// ---- reshape

std::vector<Array> vjpReshape(const ir::VjpArgs& a) {
  return {reshape(a.cotangents[0], a.operands[0].shape().dims())};
}

// x: [B, ...] -> [B, shape...] (row-major order keeps each example's elements together).
ir::BatchResult batchReshape(const ir::BatchArgs& a) {
  const auto& at = attrsAs<ir::ReshapeAttrs>(a.attrs);
  Array x = moveBatchDim(a.operands[0], a.batchDims[0], 0, a.batchSize);
  return {{reshape(x, withInserted(at.shape, 0, a.batchSize))}, {0}};
}

// ---- transpose: the cotangent goes back through the inverse permutation.

std::vector<Array> vjpTranspose(const ir::VjpArgs& a) {
  const Ints& perm = attrsAs<ir::TransposeAttrs>(a.attrs).perm;
  Ints inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return {transpose(a.cotangents[0], inverse)};
}

// One transpose that also brings the batch dim to the front: [b, perm shifted past b].
ir::BatchResult batchTranspose(const ir::BatchArgs& a) {
  const Ints& perm = attrsAs<ir::TransposeAttrs>(a.attrs).perm;
  int b = a.batchDims[0];
  Ints batched{b};
  for (int64_t p : perm) batched.push_back(batchedDim(p, b));
  return {{transpose(a.operands[0], batched)}, {0}};
}

// ---- slice: the cotangent is padded with zeros back to x's shape: low = start, interior = stride - 1, and
// high = what is left after the last element read.

std::vector<Array> vjpSlice(const ir::VjpArgs& a) {
  const auto& at = attrsAs<ir::SliceAttrs>(a.attrs);
  const Array& ct = a.cotangents[0];
  const Shape& x = a.operands[0].shape();
  Ints high, interior;
  for (int i = 0; i < x.rank(); ++i) {
    auto d = static_cast<size_t>(i);
    int64_t n = ct.shape()[i];
    int64_t covered = n == 0 ? 0 : (n - 1) * at.strides[d] + 1;  // from the first element read to the last
    high.push_back(x[i] - at.starts[d] - covered);
    interior.push_back(at.strides[d] - 1);
  }
  return {pad(ct, at.starts, high, 0.0, interior)};
}

// The batch dim is sliced whole, where it is.
ir::BatchResult batchSlice(const ir::BatchArgs& a) {
  const auto& at = attrsAs<ir::SliceAttrs>(a.attrs);
  int b = a.batchDims[0];
  return {{slice(a.operands[0], withInserted(at.starts, b, 0), withInserted(at.limits, b, a.batchSize),
                 withInserted(at.strides, b, 1))},
          {b}};
}

// ---- dynamic_slice(x, starts...): the cotangent is written into zeros at the same (clamped) starts; the start
// indices get none.

std::vector<Array> vjpDynamicSlice(const ir::VjpArgs& a) {
  std::vector<Array> starts(a.operands.begin() + 1, a.operands.end());
  std::vector<Array> cts(a.operands.size());
  cts[0] = dynamicUpdateSlice(zerosLike(a.operands[0]), a.cotangents[0], starts);
  return cts;
}

// Dims whose start all examples share: one dynamic_slice, taking the batch dim whole. A dim whose start differs
// per example cannot be one dynamic_slice (XLA slices every example at its own offset): it becomes a gather of
// the rows start + [0, size), with the start clamped first as the kernel would clamp it.
ir::BatchResult batchDynamicSlice(const ir::BatchArgs& a) {
  const Ints& sizes = attrsAs<ir::DynamicSliceAttrs>(a.attrs).sizes;
  const int64_t batch = a.batchSize;
  Array x = a.operands[0];
  int xb = a.batchDims[0];
  const Shape example = exampleShape(x, xb);
  auto perExample = [&](size_t d) { return a.batchDims[1 + d] >= 0 && sizes[d] != example[static_cast<int>(d)]; };

  const Array zero = Array::scalar(0, DType::I32);
  std::vector<Array> starts;
  Ints extents;
  bool sliced = false, gathered = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    bool shared = a.batchDims[1 + d] < 0;
    starts.push_back(shared ? a.operands[1 + d] : zero);
    extents.push_back(shared ? sizes[d] : example[static_cast<int>(d)]);
    sliced |= shared && sizes[d] != example[static_cast<int>(d)];
    gathered |= perExample(d);
  }
  if (xb >= 0) {
    starts.insert(starts.begin() + xb, zero);
    extents = withInserted(extents, xb, batch);
  }
  if (sliced) x = dynamicSlice(x, starts, extents);
  if (!gathered) return {{x}, {xb}};

  if (xb >= 0) x = moveBatchDim(x, xb, 0, batch);
  bool batched = xb >= 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!perExample(d)) continue;
    Array s = clampedStarts(a.operands[1 + d], a.batchDims[1 + d], batch, example[static_cast<int>(d)], sizes[d]);
    Shape rows{batch, sizes[d]};
    Array idx = add(broadcastInDim(s, rows, {0}), iota(rows, 1, DType::I64));  // [B, size]: start + j
    auto axis = static_cast<int64_t>(d);
    if (batched) {
      x = gatherOp(x, idx, axis + 1, 1);
    } else {
      // A shared x: [..., B, size, ...] with the batch dim at the gathered axis.
      x = moveBatchDim(gatherOp(x, idx, axis, 0), static_cast<int>(axis), 0, batch);
      batched = true;
    }
  }
  return {{x}, {0}};
}

// ---- dynamic_update_slice(x, update, starts...): x's cotangent is ct with the update's region zeroed, the
// update's is that region of ct; the start indices get none.

std::vector<Array> vjpDynamicUpdateSlice(const ir::VjpArgs& a) {
  const Array& ct = a.cotangents[0];
  const Array& update = a.operands[1];
  std::vector<Array> starts(a.operands.begin() + 2, a.operands.end());
  std::vector<Array> cts(a.operands.size());
  cts[0] = dynamicUpdateSlice(ct, zerosLike(update), starts);
  cts[1] = dynamicSlice(ct, starts, update.shape().dims());
  return cts;
}

// Shared starts: one dynamic_update_slice over the whole batch. Starts that differ per example cannot be one
// dynamic_update_slice; instead the update is spread over x's extent, dim by dim, with a gather (position p of
// x reads update row p - start) and a mask keeps it only inside [start, start + size):
//   result[b] = where(mask[b], spread(update)[b], x[b]), everything [B, x dims...].
ir::BatchResult batchDynamicUpdateSlice(const ir::BatchArgs& a) {
  const int64_t batch = a.batchSize;
  Array x = moveBatchDim(a.operands[0], a.batchDims[0], 0, batch);
  Array update = moveBatchDim(a.operands[1], a.batchDims[1], 0, batch);
  bool perExample = std::any_of(a.batchDims.begin() + 2, a.batchDims.end(), [](int b) { return b >= 0; });
  if (!perExample) {
    std::vector<Array> starts{Array::scalar(0, DType::I32)};
    starts.insert(starts.end(), a.operands.begin() + 2, a.operands.end());
    return {{dynamicUpdateSlice(x, update, starts)}, {0}};
  }
  Array mask;  // bool [B, x dims...]: where the update lands
  for (int d = 0; d + 2 < static_cast<int>(a.operands.size()); ++d) {
    int64_t dim = x.shape()[d + 1], size = update.shape()[d + 1];
    if (size == dim) continue;  // the update spans the dim: its start clamps to 0
    auto k = static_cast<size_t>(2 + d);
    Array s = clampedStarts(a.operands[k], a.batchDims[k], batch, dim, size);
    Shape rows{batch, dim};
    Array rel = sub(iota(rows, 1, DType::I64), broadcastInDim(s, rows, {0}));  // [B, dim]: p - start
    Array inside = bitwiseAnd(greaterEqual(rel, scalarLike(rel, 0)),
                              less(rel, scalarLike(rel, static_cast<double>(size))));
    Array row = clamp(rel, scalarLike(rel, 0), scalarLike(rel, static_cast<double>(size - 1)));
    update = gatherOp(update, row, d + 1, 1);
    Array m = broadcastInDim(inside, x.shape(), {0, d + 1});
    mask = mask.valid() ? bitwiseAnd(mask, m) : m;
  }
  if (!mask.valid()) return {{update}, {0}};  // the update covers all of x
  return {{where(mask, update, x)}, {0}};
}

// ---- concatenate: each operand's cotangent is its slice of ct along the axis.

std::vector<Array> vjpConcatenate(const ir::VjpArgs& a) {
  int64_t axis = attrsAs<ir::ConcatenateAttrs>(a.attrs).axis, offset = 0;
  std::vector<Array> cts;
  for (const Array& x : a.operands) {
    int64_t n = x.shape()[static_cast<int>(axis)];
    cts.push_back(sliceAxis(a.cotangents[0], axis, offset, offset + n));
    offset += n;
  }
  return cts;
}

// Every operand batched on dim 0 (shared ones broadcast), joined along axis + 1.
ir::BatchResult batchConcatenate(const ir::BatchArgs& a) {
  std::vector<Array> xs;
  for (size_t i = 0; i < a.operands.size(); ++i)
    xs.push_back(moveBatchDim(a.operands[i], a.batchDims[i], 0, a.batchSize));
  return {{concatenate(xs, attrsAs<ir::ConcatenateAttrs>(a.attrs).axis + 1)}, {0}};
}

// ---- pad(x, value): x's cotangent undoes low/high (where they were negative, the cropped elements of x get
// zeros back) and then keeps every (interior + 1)-th element; the padding value's is the rest of ct:
// sum(ct) - sum(x's cotangent).

std::vector<Array> vjpPad(const ir::VjpArgs& a) {
  const auto& at = attrsAs<ir::PadAttrs>(a.attrs);
  const Array& ct = a.cotangents[0];
  Ints negLow, negHigh, strides;
  for (size_t i = 0; i < at.low.size(); ++i) {
    negLow.push_back(-at.low[i]);
    negHigh.push_back(-at.high[i]);
    strides.push_back(at.interior[i] + 1);
  }
  Array unpadded = allZero(at.low) && allZero(at.high) ? ct : pad(ct, negLow, negHigh);
  Array ctX = allZero(at.interior) ? unpadded
                                   : slice(unpadded, Ints(at.low.size(), 0), unpadded.shape().dims(), strides);
  return {ctX, sub(sum(ct), sum(ctX))};
}

// The batch dim is padded by nothing, where it is. A per-example padding value cannot be pad's scalar operand:
// pad with zeros, then select each example's value outside x's positions, found by padding ones with zeros.
ir::BatchResult batchPad(const ir::BatchArgs& a) {
  const auto& at = attrsAs<ir::PadAttrs>(a.attrs);
  Array x = a.operands[0];
  int xb = a.batchDims[0];
  if (xb < 0) {
    x = moveBatchDim(x, -1, 0, a.batchSize);
    xb = 0;
  }
  ir::PadAttrs batched{withInserted(at.low, xb, 0), withInserted(at.high, xb, 0), withInserted(at.interior, xb, 0)};
  if (a.batchDims[1] < 0) return {{padOp(x, a.operands[1], batched)}, {xb}};

  Array padded = padOp(x, scalarLike(x, 0), batched);
  Shape example = exampleShape(x, xb);
  Array ones = broadcastTo(Array::scalar(1, DType::Bool), example);
  Array inX = padOp(ones, Array::scalar(0, DType::Bool), at);  // bool [padded example]: x's positions
  Ints exampleDims;
  for (int i = 0; i < inX.rank(); ++i) exampleDims.push_back(batchedDim(i, xb));
  Array mask = broadcastInDim(inX, padded.shape(), exampleDims);
  Array value = broadcastInDim(moveBatchDim(a.operands[1], a.batchDims[1], 0, a.batchSize), padded.shape(), {xb});
  return {{where(mask, padded, value)}, {xb}};
}

// ---- iota has no operands, so vmap never batches it; the rule completes the table: the result is shared.

ir::BatchResult batchIota(const ir::BatchArgs& a) {
  return {{bind1(ir::OpCode::Iota, {}, a.attrs, std::source_location::current())}, {-1}};
}

// ---- rev: the cotangent is reversed back.

std::vector<Array> vjpRev(const ir::VjpArgs& a) {
  return {flip(a.cotangents[0], attrsAs<ir::RevAttrs>(a.attrs).dims)};
}

ir::BatchResult batchRev(const ir::BatchArgs& a) {
  int b = a.batchDims[0];
  Ints dims;
  for (int64_t d : attrsAs<ir::RevAttrs>(a.attrs).dims) dims.push_back(batchedDim(d, b));
  return {{flip(a.operands[0], dims)}, {b}};
}

// One row of the layout table: everything registerLayoutOps needs about one op.
struct LayoutOp {
  ir::OpCode code;
  int numOperands, minOperands;
  ir::InferFn infer;
  ir::CpuKernelFn cpu;
  ir::VjpRule vjp;  // empty: not differentiable
  ir::BatchRule batch;
  ir::ShardRule shard;
};

void addLayoutOp(ir::OpRegistry& reg, LayoutOp op) {
  ir::OpDef d = coreOp(op.code, "layout", ir::FusionKind::Layout, op.numOperands);
  d.minOperands = op.minOperands;
  d.differentiable = static_cast<bool>(op.vjp);
  d.infer = std::move(op.infer);
  d.cost = layoutCost;
  d.cpu = std::move(op.cpu);
  d.vjp = std::move(op.vjp);
  d.batch = std::move(op.batch);
  d.shard = std::move(op.shard);
  addCoreOp(reg, std::move(d));
}

}  // namespace

void registerLayoutOps(ir::OpRegistry& reg) {
  using ir::OpCode;
  const LayoutOp ops[] = {
      {OpCode::BroadcastInDim, 1, 1, inferBroadcastInDim, broadcastInDimKernel, vjpBroadcastInDim, batchBroadcastInDim,
       broadcastInDimShardRule()},
      {OpCode::Reshape, 1, 1, inferReshape, reshapeKernel, vjpReshape, batchReshape, reshapeShardRule()},
      {OpCode::Transpose, 1, 1, inferTranspose, transposeKernel, vjpTranspose, batchTranspose, transposeShardRule()},
      {OpCode::Slice, 1, 1, inferSlice, sliceKernel, vjpSlice, batchSlice, sliceShardRule()},
      {OpCode::DynamicSlice, -1, 1, inferDynamicSlice, dynamicSliceKernel, vjpDynamicSlice, batchDynamicSlice,
       dynamicSliceShardRule()},
      {OpCode::DynamicUpdateSlice, -1, 2, inferDynamicUpdateSlice, dynamicUpdateSliceKernel, vjpDynamicUpdateSlice,
       batchDynamicUpdateSlice, dynamicUpdateSliceShardRule()},
      {OpCode::Concatenate, -1, 1, inferConcatenate, concatenateKernel, vjpConcatenate, batchConcatenate,
       concatenateShardRule()},
      {OpCode::Pad, 2, 2, inferPad, padKernel, vjpPad, batchPad, padShardRule()},
      {OpCode::Iota, 0, 0, inferIota, iotaKernel, nullptr, batchIota, iotaShardRule()},
      {OpCode::Rev, 1, 1, inferRev, revKernel, vjpRev, batchRev, revShardRule()},
  };
  for (const LayoutOp& op : ops) addLayoutOp(reg, op);
}

}  // namespace tsr::ops
