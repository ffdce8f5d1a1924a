#pragma once
// FNV-1a, 64 bits: the content hash that names generated kernels and their cache entries (equal sources, equal
// names). Not for anything adversarial.
#include <cstdint>
#include <string_view>

namespace tsr {

inline constexpr uint64_t kFnv1aOffset = 1469598103934665603ull;

inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aOffset) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace tsr
