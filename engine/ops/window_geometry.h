#pragma once
// The window arithmetic of reduce_window_* and select_and_scatter_add (ir::WindowAttrs), shared by their rules
// and by every backend's kernels. The attrs must have passed the ops' infer checks (one entry per dim, the
// window fits the padded operand).
#include <cstdint>
#include <vector>

#include "engine/core/shape.h"
#include "engine/ir/attrs.h"
#include "engine/ops/conv_geometry.h"

namespace tsr::ops {

// The extent of a window of k positions, dil apart.
inline int64_t dilatedWindow(int64_t k, int64_t dil) { return (k - 1) * dil + 1; }

// A dim is batch-like (it passes through vmap and sharding unchanged) when its window is one element wide,
// unstrided and unpadded.
inline bool isWindowed(const ir::WindowAttrs& at, size_t d) {
  return at.windowDimensions[d] != 1 || at.windowStrides[d] != 1 || at.paddingLo[d] != 0 || at.paddingHi[d] != 0;
}

// The result shape: one element per window (XLA's window arithmetic, conv's without lhs dilation).
inline Shape windowOutputShape(const Shape& operand, const ir::WindowAttrs& at) {
  std::vector<int64_t> dims;
  for (int d = 0; d < operand.rank(); ++d) {
    const auto u = static_cast<size_t>(d);
    dims.push_back(convOutputSize(operand[d], at.windowDimensions[u], at.windowStrides[u], at.paddingLo[u],
                                  at.paddingHi[u], 1, at.windowDilation[u]));
  }
  return Shape(std::move(dims));
}

inline int64_t windowSize(const ir::WindowAttrs& at) {
  int64_t k = 1;
  for (int64_t w : at.windowDimensions) k *= w;
  return k;
}

}  // namespace tsr::ops
