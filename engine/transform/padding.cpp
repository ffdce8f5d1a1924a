#include "engine/transform/padding.h"

#include <algorithm>

namespace tsr {

Result<std::vector<std::pair<int64_t, int64_t>>> resolvePadding(const ConvPadding& padding,
                                                                 std::span<const int64_t> in,
                                                                 std::span<const int64_t> extent,
                                                                 std::span<const int64_t> strides) {
  const size_t n = in.size();
  if (padding.mode.empty()) {
    if (padding.pairs.size() != n)
      return makeError("explicit padding needs {} (low, high) pairs, got {}", n, padding.pairs.size());
    return padding.pairs;
  }
  if (padding.mode == "VALID") return std::vector<std::pair<int64_t, int64_t>>(n, {0, 0});
  if (padding.mode != "SAME")
    return makeError("padding '{}' must be \"SAME\", \"VALID\" or (low, high) pairs", padding.mode);
  std::vector<std::pair<int64_t, int64_t>> pads;
  for (size_t d = 0; d < n; ++d) {
    const int64_t s = std::max<int64_t>(strides[d], 1);
    const int64_t out = (in[d] + s - 1) / s;
    const int64_t total = std::max<int64_t>(0, (out - 1) * s + extent[d] - in[d]);
    pads.emplace_back(total / 2, total - total / 2);
  }
  return pads;
}

}  // namespace tsr
