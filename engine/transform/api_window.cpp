// The window API: reduce_window's computations and SAME/VALID padding resolved into the window ops' attrs, and
// the pooling layers written with them (flax.linen's max_pool and avg_pool).
#include <string>

#include <fmt/format.h>

#include "engine/ir/attrs.h"
#include "engine/transform/api.h"
#include "engine/transform/padding.h"
#include "engine/transform/trace.h"

namespace tsr {

using ir::OpCode;

namespace {

OpCode reductionOp(WindowReduction r) {
  switch (r) {
    case WindowReduction::Sum: return OpCode::ReduceWindowSum;
    case WindowReduction::Max: return OpCode::ReduceWindowMax;
    case WindowReduction::Min: return OpCode::ReduceWindowMin;
  }
  return OpCode::ReduceWindowSum;
}

// The attrs of a window over `x` (the operand its windows cover); errors name `op` and the operands.
ir::WindowAttrs windowAttrs(const char* op, const std::vector<Array>& operands, const Array& x, Axes window,
                            Axes strides, const ConvPadding& padding, Axes dilation, const std::source_location& loc) {
  auto fail = [&](const std::string& what) {
    std::string avals;
    for (const Array& a : operands) avals += (avals.empty() ? "" : ", ") + a.aval().toString();
    raiseAt(loc, makeError("{}: {} ({})", op, what, avals));
  };
  const auto rank = static_cast<size_t>(x.rank());
  if (window.size() != rank)
    fail(fmt::format("window_dimensions [{}] must have one entry per dim of the operand ({})", joinInts(window), rank));
  ir::WindowAttrs at;
  at.windowDimensions = std::move(window);
  at.windowStrides = strides.empty() ? Axes(rank, 1) : std::move(strides);
  at.windowDilation = dilation.empty() ? Axes(rank, 1) : std::move(dilation);
  if (at.windowStrides.size() != rank || at.windowDilation.size() != rank)
    fail(fmt::format("window_strides [{}] and window_dilation [{}] need one entry per dim ({})",
                     joinInts(at.windowStrides), joinInts(at.windowDilation), rank));
  std::vector<int64_t> extent;
  for (size_t d = 0; d < rank; ++d) extent.push_back((at.windowDimensions[d] - 1) * at.windowDilation[d] + 1);
  auto pads = resolvePadding(padding, x.shape().dims(), extent, at.windowStrides);
  if (!pads.ok()) fail(pads.error().message);
  for (auto [lo, hi] : *pads) {
    at.paddingLo.push_back(lo);
    at.paddingHi.push_back(hi);
  }
  return at;
}

// Pooling's window over x [batch..., spatial..., features]: windowShape and strides over the spatial dims, 1
// elsewhere; explicit padding pairs are given for the spatial dims only.
struct PoolWindow {
  Axes window, strides;
  ConvPadding padding{"VALID"};
};

PoolWindow poolWindow(const char* op, const Array& x, const Axes& windowShape, const Axes& strides,
                      const ConvPadding& padding, const std::source_location& loc) {
  const auto ns = windowShape.size();
  const auto rank = static_cast<size_t>(x.rank());
  if (rank < ns + 1)
    raiseAt(loc, makeError("{}: x {} needs the {} window dims and a features dim last", op, x.aval().toString(), ns));
  if (!strides.empty() && strides.size() != ns)
    raiseAt(loc, makeError("{}: strides [{}] need one entry per window dim ({}) (x {})", op, joinInts(strides), ns,
                           x.aval().toString()));
  const size_t first = rank - 1 - ns;  // the first spatial dim
  PoolWindow p;
  p.window.assign(rank, 1);
  p.strides.assign(rank, 1);
  for (size_t d = 0; d < ns; ++d) {
    p.window[first + d] = windowShape[d];
    p.strides[first + d] = strides.empty() ? 1 : strides[d];
  }
  p.padding = padding;
  if (padding.mode.empty()) {
    if (padding.pairs.size() != ns)
      raiseAt(loc, makeError("{}: explicit padding needs {} (low, high) pairs, one per window dim, got {} (x {})", op,
                             ns, padding.pairs.size(), x.aval().toString()));
    p.padding.pairs.assign(rank, {0, 0});
    for (size_t d = 0; d < ns; ++d) p.padding.pairs[first + d] = padding.pairs[d];
  }
  return p;
}

}  // namespace

Array reduceWindow(const Array& x, WindowReduction computation, Axes windowDimensions, Axes windowStrides,
                   const ConvPadding& padding, Axes windowDilation, std::source_location loc) {
  const OpCode op = reductionOp(computation);
  ir::WindowAttrs at = windowAttrs(ir::coreOpName(op), {x}, x, std::move(windowDimensions), std::move(windowStrides),
                                   padding, std::move(windowDilation), loc);
  return bind1(op, {x}, at, loc);
}

Array selectAndScatterAdd(const Array& source, const Array& operand, Axes windowDimensions, Axes windowStrides,
                          const ConvPadding& padding, Axes windowDilation, std::source_location loc) {
  ir::WindowAttrs at = windowAttrs("select_and_scatter_add", {source, operand}, operand, std::move(windowDimensions),
                                   std::move(windowStrides), padding, std::move(windowDilation), loc);
  return bind1(OpCode::SelectAndScatterAdd, {source, operand}, at, loc);
}

Array maxPool(const Array& x, Axes windowShape, Axes strides, const ConvPadding& padding, std::source_location loc) {
  PoolWindow p = poolWindow("max_pool", x, windowShape, strides, padding, loc);
  return reduceWindow(x, WindowReduction::Max, p.window, p.strides, p.padding, {}, loc);
}

Array avgPool(const Array& x, Axes windowShape, Axes strides, const ConvPadding& padding, bool countIncludePad,
              std::source_location loc) {
  PoolWindow p = poolWindow("avg_pool", x, windowShape, strides, padding, loc);
  Array sums = reduceWindow(x, WindowReduction::Sum, p.window, p.strides, p.padding, {}, loc);
  if (countIncludePad) {
    int64_t size = 1;
    for (int64_t w : windowShape) size *= w;
    return div(sums, scalarLike(sums, static_cast<double>(size), loc), loc);
  }
  // Each window's positions inside x: the window sum of ones, whose padding is zeros.
  Array counts = reduceWindow(onesLike(x, loc), WindowReduction::Sum, p.window, p.strides, p.padding, {}, loc);
  return div(sums, counts, loc);
}

}  // namespace tsr
