// gather / scatter_add: tf.gather-style indexing along one axis, with leading batch dims shared by x and idx.
// Out-of-range indices are clamped by gather (JAX's default) and dropped by scatter_add, its transpose.
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

namespace tsr::ops {
namespace {

using ir::GatherAttrs;

bool isIndexDType(DType t) { return t == DType::I32 || t == DType::I64 || t == DType::U32; }

// The gathered aval: x.shape[:axis] + idx.shape[batchDims:] + x.shape[axis+1:], with x's dtype.
Result<Aval> gatherShape(std::string_view op, std::span<const Aval> ops, const Aval& x, const Aval& idx,
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

Result<std::vector<Aval>> inferGather(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("gather", ops, 2));
  TSR_ASSIGN(Aval out, gatherShape("gather", ops, ops[0], ops[1], attrsAs<GatherAttrs>(attrs)));
  return std::vector<Aval>{out};
}

Result<std::vector<Aval>> inferScatterAdd(std::span<const Aval> ops, const ir::Attrs& attrs) {
  constexpr const char* kOp = "scatter_add";
  TSR_TRY(checkArity(kOp, ops, 3));
  const Aval& x = ops[0];
  const Aval& updates = ops[2];
  if (x.dtype == DType::Bool) return opError(kOp, ops, "bool is not supported (numeric dtypes only)");
  if (updates.dtype != x.dtype) return opError(kOp, ops, "x and updates must have equal dtypes");
  TSR_ASSIGN(Aval gathered, gatherShape(kOp, ops, x, ops[1], attrsAs<GatherAttrs>(attrs)));
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

struct Geometry {
  int64_t batch = 1, outer = 1, axisSize = 1, inner = 1, indices = 1;
};

Geometry geometry(const Shape& x, const Shape& idx, const GatherAttrs& at) {
  Geometry g;
  int axis = static_cast<int>(at.axis), bd = static_cast<int>(at.batchDims);
  for (int d = 0; d < bd; ++d) g.batch *= x[d];
  for (int d = bd; d < axis; ++d) g.outer *= x[d];
  g.axisSize = x[axis];
  for (int d = axis + 1; d < x.rank(); ++d) g.inner *= x[d];
  for (int d = bd; d < idx.rank(); ++d) g.indices *= idx[d];
  return g;
}

// idx: [Bt, I] as int64 (u32 indices stay non-negative).
std::vector<int64_t> loadIndices(const ir::TensorView& idx) {
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

// Copies whole rows of S elements, so the kernel is the same for every dtype.
void gatherKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<GatherAttrs>(args.attrs);
  const ir::TensorView& x = args.inputs[0];
  const ir::MutableTensorView& out = args.outputs[0];
  Geometry g = geometry(x.aval.shape, args.inputs[1].aval.shape, at);
  auto* dst = static_cast<uint8_t*>(out.data);
  if (g.axisSize == 0) {  // nothing to clamp into: the result is all zeros
    std::memset(dst, 0, static_cast<size_t>(out.aval.bytes()));
    return;
  }
  std::vector<int64_t> idx = loadIndices(args.inputs[1]);
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
void scatterInto(Acc* acc, const T* upd, const std::vector<int64_t>& idx, const Geometry& g) {
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
  Geometry g = geometry(x.aval.shape, args.inputs[1].aval.shape, at);
  std::vector<int64_t> idx = loadIndices(args.inputs[1]);
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

}  // namespace

void registerIndexingOps(ir::OpRegistry& reg) {
  // Differentiable in x only: the indices are integers.
  ir::OpDef gather = coreOp(ir::OpCode::Gather, "indexing", ir::FusionKind::Opaque, 2);
  gather.infer = inferGather;
  gather.cost = costGather;
  gather.cpu = gatherKernel;
  addCoreOp(reg, std::move(gather));

  // Differentiable in x and updates.
  ir::OpDef scatter = coreOp(ir::OpCode::ScatterAdd, "indexing", ir::FusionKind::Opaque, 3);
  scatter.infer = inferScatterAdd;
  scatter.cost = costScatterAdd;
  scatter.cpu = scatterAddKernel;
  addCoreOp(reg, std::move(scatter));
}

}  // namespace tsr::ops
