#include "engine/core/shape.h"

#include <fmt/format.h>

namespace tsr {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : m_dims) n *= d;
  return n;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(m_dims.size(), 1);
  for (int i = rank() - 2; i >= 0; --i) s[i] = s[i + 1] * m_dims[i + 1];
  return s;
}

std::string joinInts(std::span<const int64_t> v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(v[i]);
  }
  return out;
}

std::string Shape::toString() const { return "[" + joinInts(m_dims) + "]"; }

std::string Aval::toString() const { return std::string(dtypeName(dtype)) + shape.toString(); }

int normalizeAxis(int64_t axis, int rank) {
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return -1;
  return static_cast<int>(axis);
}

}  // namespace tsr
