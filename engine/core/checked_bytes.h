#pragma once
// An array's size in bytes where it may not fit: Aval::bytes() wraps past 64 bits, so a shape from user input
// (such as (2^31, 2^31) of f32) would give a small or zero size and its kernel would write past the buffer.
#include <cstdint>
#include <optional>

#include "engine/core/shape.h"

namespace tsr {

// dtypeSize * the dims, or nullopt where the product overflows int64.
inline std::optional<int64_t> checkedBytes(const Aval& a) {
  int64_t bytes = dtypeSize(a.dtype);
  for (int64_t d : a.shape.dims())
    if (__builtin_mul_overflow(bytes, d, &bytes)) return std::nullopt;
  return bytes;
}

}  // namespace tsr
