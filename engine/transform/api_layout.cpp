// Layout part of the Array API: broadcasting, reshapes, transposes, slices, padding, iota.
#include <algorithm>
#include <numeric>

#include "engine/transform/api.h"
#include "engine/transform/trace.h"

namespace tsr {

using ir::OpCode;

namespace {

int64_t axisOrRaise(int64_t axis, int rank, const char* op, const std::source_location& loc) {
  int a = normalizeAxis(axis, rank);
  if (a < 0) raiseAt(loc, makeError("{}: axis {} is out of range for rank {}", op, axis, rank));
  return a;
}

}  // namespace

Array broadcastInDim(const Array& x, const Shape& shape, const Axes& broadcastDims, std::source_location loc) {
  return bind1(OpCode::BroadcastInDim, {x}, ir::BroadcastInDimAttrs{shape.dims(), broadcastDims}, loc);
}

Array broadcastTo(const Array& x, const Shape& shape, std::source_location loc) {
  if (x.shape() == shape) return x;
  if (x.rank() > shape.rank())
    raiseAt(loc, makeError("broadcastTo: cannot broadcast {} to the lower-rank shape {}", x.shape().toString(),
                           shape.toString()));
  // Trailing dims align, numpy-style.
  Axes dims(static_cast<size_t>(x.rank()));
  std::iota(dims.begin(), dims.end(), shape.rank() - x.rank());
  return broadcastInDim(x, shape, dims, loc);
}

Array reshape(const Array& x, std::vector<int64_t> shape, std::source_location loc) {
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) raiseAt(loc, makeError("reshape: more than one -1 in {}", Shape(shape).toString()));
      inferred = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || x.numel() % known != 0)
      raiseAt(loc, makeError("reshape: cannot reshape {} into {}", x.aval().toString(), Shape(shape).toString()));
    shape[static_cast<size_t>(inferred)] = x.numel() / known;
  }
  if (Shape(shape) == x.shape()) return x;
  return bind1(OpCode::Reshape, {x}, ir::ReshapeAttrs{std::move(shape)}, loc);
}

Array transpose(const Array& x, Axes perm, std::source_location loc) {
  if (perm.empty()) {
    perm.resize(static_cast<size_t>(x.rank()));
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  for (auto& p : perm) p = axisOrRaise(p, x.rank(), "transpose", loc);
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity && static_cast<int>(perm.size()) == x.rank()) return x;
  return bind1(OpCode::Transpose, {x}, ir::TransposeAttrs{std::move(perm)}, loc);
}

Array swapAxes(const Array& x, int64_t a, int64_t b, std::source_location loc) {
  Axes perm(static_cast<size_t>(x.rank()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(axisOrRaise(a, x.rank(), "swapAxes", loc))],
            perm[static_cast<size_t>(axisOrRaise(b, x.rank(), "swapAxes", loc))]);
  return transpose(x, perm, loc);
}

Array expandDims(const Array& x, int64_t axis, std::source_location loc) {
  int64_t a = axisOrRaise(axis, x.rank() + 1, "expandDims", loc);
  auto dims = x.shape().dims();
  dims.insert(dims.begin() + a, 1);
  return reshape(x, dims, loc);
}

Array squeeze(const Array& x, Axes axes, std::source_location loc) {
  std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
  if (axes.empty()) {
    for (int i = 0; i < x.rank(); ++i) drop[static_cast<size_t>(i)] = x.shape()[i] == 1;
  } else {
    for (int64_t a : axes) {
      int64_t n = axisOrRaise(a, x.rank(), "squeeze", loc);
      if (x.shape()[static_cast<int>(n)] != 1)
        raiseAt(loc, makeError("squeeze: dim {} of {} has size {}, not 1", n, x.aval().toString(), x.shape()[static_cast<int>(n)]));
      drop[static_cast<size_t>(n)] = true;
    }
  }
  std::vector<int64_t> dims;
  for (int i = 0; i < x.rank(); ++i)
    if (!drop[static_cast<size_t>(i)]) dims.push_back(x.shape()[i]);
  return reshape(x, dims, loc);
}

Array slice(const Array& x, Axes starts, Axes limits, Axes strides, std::source_location loc) {
  if (strides.empty()) strides.assign(starts.size(), 1);
  return bind1(OpCode::Slice, {x}, ir::SliceAttrs{std::move(starts), std::move(limits), std::move(strides)}, loc);
}

Array sliceAxis(const Array& x, int64_t axis, int64_t start, int64_t limit, std::source_location loc) {
  int64_t a = axisOrRaise(axis, x.rank(), "sliceAxis", loc);
  Axes starts(static_cast<size_t>(x.rank()), 0);
  Axes limits = x.shape().dims();
  starts[static_cast<size_t>(a)] = start;
  limits[static_cast<size_t>(a)] = limit;
  return slice(x, starts, limits, {}, loc);
}

Array dynamicSlice(const Array& x, const std::vector<Array>& starts, Axes sizes, std::source_location loc) {
  std::vector<Array> operands{x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return bind1(OpCode::DynamicSlice, operands, ir::DynamicSliceAttrs{std::move(sizes)}, loc);
}

Array dynamicUpdateSlice(const Array& x, const Array& update, const std::vector<Array>& starts,
                         std::source_location loc) {
  std::vector<Array> operands{x, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return bind1(OpCode::DynamicUpdateSlice, operands, ir::NoAttrs{}, loc);
}

Array concatenate(const std::vector<Array>& xs, int64_t axis, std::source_location loc) {
  if (xs.empty()) raiseAt(loc, makeError("concatenate: needs at least one array"));
  int64_t a = axisOrRaise(axis, xs[0].rank(), "concatenate", loc);
  if (xs.size() == 1) return xs[0];
  // Operands of different dtypes meet in their promoted dtype, as jnp.concatenate's do (an f32 class token and
  // bf16 patches under autocast give f32).
  DType t = xs[0].dtype();
  for (const Array& x : xs) t = promoteTypes(t, x.dtype());
  std::vector<Array> same;
  for (const Array& x : xs) same.push_back(astype(x, t, loc));
  return bind1(OpCode::Concatenate, same, ir::ConcatenateAttrs{a}, loc);
}

Array stack(const std::vector<Array>& xs, int64_t axis, std::source_location loc) {
  if (xs.empty()) raiseAt(loc, makeError("stack: needs at least one array"));
  int64_t a = axisOrRaise(axis, xs[0].rank() + 1, "stack", loc);
  std::vector<Array> expanded;
  for (const auto& x : xs) expanded.push_back(expandDims(x, a, loc));
  return concatenate(expanded, a, loc);
}

Array pad(const Array& x, Axes low, Axes high, double value, Axes interior, std::source_location loc) {
  if (interior.empty()) interior.assign(low.size(), 0);
  return bind1(OpCode::Pad, {x, scalarLike(x, value, loc)},
               ir::PadAttrs{std::move(low), std::move(high), std::move(interior)}, loc);
}

Array iota(const Shape& shape, int64_t dimension, DType dtype, std::source_location loc) {
  return bind1(OpCode::Iota, {}, ir::IotaAttrs{shape.dims(), dtype, dimension}, loc);
}

Array arange(int64_t n, DType dtype, std::source_location loc) { return iota(Shape{n}, 0, dtype, loc); }

Array flip(const Array& x, Axes axes, std::source_location loc) {
  for (auto& a : axes) a = axisOrRaise(a, x.rank(), "flip", loc);
  return bind1(OpCode::Rev, {x}, ir::RevAttrs{std::move(axes)}, loc);
}

}  // namespace tsr
