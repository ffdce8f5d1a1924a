#include "engine/transform/array.h"

#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "engine/core/checked_bytes.h"
#include "engine/ir/attrs.h"
#include "engine/ops/layout_copy.h"
#include "engine/sharding/sharding.h"

namespace tsr {

namespace {

runtime::BufferPtr allocateOrRaise(const Aval& aval) {
  const std::optional<int64_t> bytes = checkedBytes(aval);
  if (!bytes) raise(makeError("an array of {} is too large: its byte size overflows 64 bits", aval.toString()));
  auto b = runtime::Buffer::allocate(*bytes);
  if (!b.ok()) raise(b.takeError());
  return std::move(b).value();
}

// Writes `value` into element i of a buffer of dtype t, converting as a C cast (bf16/f16 round to nearest even).
void storeElement(void* base, DType t, int64_t i, double value) {
  dispatchDType(t, [&]<class T>() {
    T v;
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) v = T(static_cast<float>(value));
    else if constexpr (std::is_same_v<T, bool>) v = value != 0.0;
    else v = static_cast<T>(value);
    std::memcpy(static_cast<char*>(base) + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
  });
}

// Element i of a buffer of dtype t as text: integers exactly (an i64, or a u32 word of a random key, is not
// rounded through a double), bools as the IR's text format writes them, floats in %g's shortest form.
std::string elementText(const void* base, DType t, int64_t i) {
  return dispatchDType(t, [&]<class T>() -> std::string {
    T v;
    std::memcpy(&v, static_cast<const char*>(base) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
    else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) return fmt::format("{}", static_cast<int64_t>(v));
    else if constexpr (std::is_integral_v<T>) return fmt::format("{}", static_cast<uint64_t>(v));
    else if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) return fmt::format("{:g}", static_cast<float>(v));
    else return fmt::format("{:g}", static_cast<double>(v));
  });
}

}  // namespace

int64_t Array::dim(int axis) const {
  int a = normalizeAxis(axis, rank());
  if (a < 0) raise(makeError("axis {} is out of range for an array of rank {}", axis, rank()));
  return shape()[a];
}

Array Array::fromBuffer(runtime::BufferPtr buffer, Aval aval) {
  auto impl = std::make_shared<ArrayImpl>();
  impl->aval = std::move(aval);
  impl->buffer = std::move(buffer);
  return Array(std::move(impl));
}

Array Array::fromBytes(const Aval& aval, const void* bytes) {
  auto buf = allocateOrRaise(aval);
  if (aval.bytes()) std::memcpy(buf->data(), bytes, static_cast<size_t>(aval.bytes()));
  return fromBuffer(std::move(buf), aval);
}

Array Array::fromVector(const std::vector<double>& values, Shape shape, DType dtype) {
  Aval aval{std::move(shape), dtype};
  if (static_cast<int64_t>(values.size()) != aval.numel())
    raise(makeError("fromVector: {} values do not fill shape {}", values.size(), aval.shape.toString()));
  auto buf = allocateOrRaise(aval);
  for (size_t i = 0; i < values.size(); ++i) storeElement(buf->data(), dtype, static_cast<int64_t>(i), values[i]);
  return fromBuffer(std::move(buf), std::move(aval));
}

Array Array::fromVector(const std::vector<float>& values, Shape shape) {
  Aval aval{std::move(shape), DType::F32};
  if (static_cast<int64_t>(values.size()) != aval.numel())
    raise(makeError("fromVector: {} values do not fill shape {}", values.size(), aval.shape.toString()));
  return fromBytes(aval, values.data());
}

Array Array::fromVector(const std::vector<int32_t>& values, Shape shape) {
  Aval aval{std::move(shape), DType::I32};
  if (static_cast<int64_t>(values.size()) != aval.numel())
    raise(makeError("fromVector: {} values do not fill shape {}", values.size(), aval.shape.toString()));
  return fromBytes(aval, values.data());
}

Array Array::scalar(double value, DType dtype) { return full(Shape{}, value, dtype); }

Array Array::full(Shape shape, double value, DType dtype) {
  Aval aval{std::move(shape), dtype};
  for (int64_t d : aval.shape.dims())
    if (d < 0) raise(makeError("full: negative dimension in shape {}", aval.shape.toString()));
  auto buf = allocateOrRaise(aval);
  if (value != 0.0)
    for (int64_t i = 0; i < aval.numel(); ++i) storeElement(buf->data(), dtype, i, value);
  return fromBuffer(std::move(buf), std::move(aval));
}

Array Array::fromShards(Aval aval, std::shared_ptr<const sharding::NamedSharding> sharding,
                        std::vector<runtime::BufferPtr> shards) {
  auto impl = std::make_shared<ArrayImpl>();
  impl->aval = std::move(aval);
  impl->sharded = std::make_shared<ShardedStorage>(ShardedStorage{std::move(sharding), std::move(shards)});
  return Array(std::move(impl));
}

const sharding::NamedSharding* Array::sharding() const {
  return m_impl && m_impl->sharded ? m_impl->sharded->sharding.get() : nullptr;
}

Array Array::gathered() const {
  if (!isSharded()) return *this;
  const ShardedStorage& s = *m_impl->sharded;
  auto blocks = s.sharding->layout(shape());
  if (!blocks.ok()) raise(blocks.takeError());
  auto buf = allocateOrRaise(aval());
  const int64_t elem = dtypeSize(dtype());
  for (const sharding::Shard& b : *blocks) {
    const runtime::BufferPtr* src = nullptr;
    for (int dev : b.devices)
      if (static_cast<size_t>(dev) < s.shards.size() && s.shards[static_cast<size_t>(dev)]) {
        src = &s.shards[static_cast<size_t>(dev)];
        break;
      }
    if (!src)
      raise(makeError("the block of {} held by device {} is in another process; gather it with a replicated "
                      "sharding first", aval().toString(), b.devices.front()));
    std::vector<int64_t> size(b.start.size());
    for (size_t d = 0; d < size.size(); ++d) size[d] = b.limit[d] - b.start[d];
    ops::runStridedCopy(ops::blockCopy(shape().dims(), b.start, size, /*toBlock=*/false), elem, (*src)->data(),
                        buf->data());
  }
  return fromBuffer(std::move(buf), aval());
}

std::vector<double> Array::toDoubles() const {
  if (isSharded()) return gathered().toDoubles();
  if (isDeleted())
    raise(makeError("the array ({}) was donated to a jitted function and deleted", aval().toString()));
  if (!isConcrete())
    raise(makeError("the value of a traced array ({}) is not known while tracing; use it as an array instead",
                    valid() ? aval().toString() : "empty"));
  std::vector<double> out(static_cast<size_t>(numel()));
  const auto* base = static_cast<const char*>(buffer()->data());
  dispatchDType(dtype(), [&]<class T>() {
    for (size_t i = 0; i < out.size(); ++i) {
      T v;
      std::memcpy(&v, base + i * sizeof(T), sizeof(T));
      if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) out[i] = static_cast<float>(v);
      else out[i] = static_cast<double>(v);
    }
  });
  return out;
}

std::vector<float> Array::toFloats() const {
  auto d = toDoubles();
  return std::vector<float>(d.begin(), d.end());
}

double Array::item() const {
  if (valid() && numel() != 1) raise(makeError("item: array of shape {} has {} elements, not 1", aval().toString(), numel()));
  return toDoubles()[0];
}

std::string Array::toString() const {
  if (!valid()) return "Array(empty)";
  if (isTracer()) return "Traced<" + aval().toString() + ">";
  if (!isConcrete()) return "<deleted " + aval().toString() + ": donated to a jitted function>";
  const Array host = gathered();
  const void* base = host.buffer() ? host.buffer()->data() : nullptr;  // (none for zero elements)
  std::string s = aval().toString() + " ";
  const auto& dims = shape().dims();
  // Nested brackets; more than 64 elements are elided after the first 64.
  std::vector<int64_t> strides = shape().strides();
  int64_t shown = 0;
  std::function<void(int, int64_t)> rec = [&](int d, int64_t off) {
    if (d == rank()) {
      if (shown++ < 64) s += elementText(base, dtype(), off);
      return;
    }
    s += "[";
    for (int64_t i = 0; i < dims[d]; ++i) {
      if (shown >= 64) { s += "..."; break; }
      if (i) s += ", ";
      rec(d + 1, off + i * strides[d]);
    }
    s += "]";
  };
  rec(0, 0);
  return s;
}

}  // namespace tsr
