#pragma once
// Padding given as JAX gives it ("SAME", "VALID" or explicit (low, high) pairs) resolved per dim, as JAX's
// padtype_to_pads: shared by the convolution and the window APIs.
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/result.h"
#include "engine/transform/api.h"

namespace tsr {

// Per dim: the input size, the window's extent (dilated) and the stride. "SAME" gives ceil(in / stride) windows
// with the odd unit of padding on the high side; an error names the padding and what it needed (the caller adds
// the op and the shapes).
Result<std::vector<std::pair<int64_t, int64_t>>> resolvePadding(const ConvPadding& padding,
                                                                 std::span<const int64_t> in,
                                                                 std::span<const int64_t> extent,
                                                                 std::span<const int64_t> strides);

}  // namespace tsr
