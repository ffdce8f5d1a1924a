#pragma once
// Shape: dimensions of a row-major array. Aval: shape + dtype, the abstract value every IR value carries.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "engine/core/dtype.h"

namespace tsr {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : m_dims(dims) {}
  explicit Shape(std::vector<int64_t> dims) : m_dims(std::move(dims)) {}
  explicit Shape(std::span<const int64_t> dims) : m_dims(dims.begin(), dims.end()) {}

  int rank() const { return static_cast<int>(m_dims.size()); }
  int64_t operator[](int i) const { return m_dims[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return m_dims[static_cast<size_t>(i)]; }
  int64_t numel() const;
  const std::vector<int64_t>& dims() const { return m_dims; }
  std::vector<int64_t>& dims() { return m_dims; }
  // Row-major strides in elements.
  std::vector<int64_t> strides() const;

  bool operator==(const Shape&) const = default;
  std::string toString() const;  // "[8,784]"

 private:
  std::vector<int64_t> m_dims;
};

struct Aval {
  Shape shape;
  DType dtype = DType::F32;

  int rank() const { return shape.rank(); }
  int64_t numel() const { return shape.numel(); }
  int64_t bytes() const { return shape.numel() * dtypeSize(dtype); }
  bool operator==(const Aval&) const = default;
  std::string toString() const;  // "f32[8,784]"
};

// Normalises a possibly negative axis against `rank`; returns -1 when out of range.
int normalizeAxis(int64_t axis, int rank);

std::string joinInts(std::span<const int64_t> v, const char* sep = ",");

}  // namespace tsr
