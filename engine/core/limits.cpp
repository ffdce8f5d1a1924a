#include "engine/core/limits.h"

#include <fmt/format.h>

namespace tsr::limits {

Status checkRange(std::string_view key, int64_t value, int64_t min, int64_t max) {
  if (value < min) return makeError("'{}' is {}, below the minimum of {}", key, value, min);
  if (value > max) return makeError("'{}' is {}, above the limit of {}", key, value, max);
  return {};
}

Result<int64_t> checkedProduct(std::string_view key, std::span<const int64_t> sizes, int64_t limit) {
  int64_t n = 1;
  std::string shown;
  for (int64_t s : sizes) shown += fmt::format("{}{}", shown.empty() ? "" : " x ", s);
  for (int64_t s : sizes) {
    if (s < 0) return makeError("'{}' has a size of {} ({}); sizes cannot be negative", key, s, shown);
    // n * s > limit, without computing n * s.
    if (s > 0 && n > limit / s) return makeError("'{}' is {}, more than the limit of {}", key, shown, limit);
    n *= s;
  }
  return n;
}

}  // namespace tsr::limits
