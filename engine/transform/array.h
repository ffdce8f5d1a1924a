#pragma once
// Array: a refcounted handle to either a concrete value (a buffer on a device) or a tracer inside an active
// trace. The numpy-like free functions in api.h work on both: eagerly, or by recording IR.
#include <cstdint>
#include <memory>
#include <source_location>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/core/shape.h"
#include "engine/core/tree.h"
#include "engine/ir/graph.h"
#include "engine/runtime/buffer.h"

namespace tsr {
namespace sharding {
struct NamedSharding;
}

class Trace;

// Thrown by the Array API on errors a user can cause (bad shapes, bad axes); the entry points that run user
// functions (jit, makeGraph, capture) turn it into a Result, so it never escapes the engine's boundaries.
class Exception : public std::runtime_error {
 public:
  explicit Exception(Error e) : std::runtime_error(e.message), m_error(std::move(e)) {}
  const Error& error() const { return m_error; }

 private:
  Error m_error;
};

[[noreturn]] void raise(Error e);

// The shards of an array split over a mesh (devicePut, or a jitted function's output): one buffer per device
// id, each holding that device's block; null for devices that belong to another process.
struct ShardedStorage {
  std::shared_ptr<const sharding::NamedSharding> sharding;
  std::vector<runtime::BufferPtr> shards;
};

struct ArrayImpl {
  Aval aval;
  runtime::BufferPtr buffer;  // concrete values on one device
  std::shared_ptr<ShardedStorage> sharded;  // concrete values split over a mesh
  Trace* trace = nullptr;     // tracers: the trace that owns the value
  uint64_t traceId = 0;       // guards against tracers that outlive their trace
  ir::ValueId value = ir::kNone;
};

class Array {
 public:
  Array() = default;
  explicit Array(std::shared_ptr<ArrayImpl> impl) : m_impl(std::move(impl)) {}

  // Concrete arrays from host data.
  static Array fromBuffer(runtime::BufferPtr buffer, Aval aval);
  static Array fromBytes(const Aval& aval, const void* bytes);
  static Array fromVector(const std::vector<float>& values, Shape shape);
  static Array fromVector(const std::vector<double>& values, Shape shape, DType dtype);
  static Array fromVector(const std::vector<int32_t>& values, Shape shape);
  static Array scalar(double value, DType dtype = DType::F32);
  static Array full(Shape shape, double value, DType dtype = DType::F32);
  // A sharded array from its per-device blocks (by device id).
  static Array fromShards(Aval aval, std::shared_ptr<const sharding::NamedSharding> sharding,
                          std::vector<runtime::BufferPtr> shards);
  static Array zeros(Shape shape, DType dtype = DType::F32) { return full(std::move(shape), 0.0, dtype); }
  static Array ones(Shape shape, DType dtype = DType::F32) { return full(std::move(shape), 1.0, dtype); }

  bool valid() const { return m_impl != nullptr; }
  const Aval& aval() const { return m_impl->aval; }
  const Shape& shape() const { return m_impl->aval.shape; }
  DType dtype() const { return m_impl->aval.dtype; }
  int rank() const { return m_impl->aval.rank(); }
  int64_t numel() const { return m_impl->aval.numel(); }
  int64_t dim(int axis) const;  // negative axes count from the end

  bool isConcrete() const { return m_impl && (m_impl->buffer != nullptr || m_impl->sharded != nullptr); }
  // Split over a mesh (JAX's Array.sharding); null for an array on one device.
  bool isSharded() const { return m_impl && m_impl->sharded != nullptr; }
  const sharding::NamedSharding* sharding() const;
  const ShardedStorage* shards() const { return m_impl ? m_impl->sharded.get() : nullptr; }
  // The whole array on one device, assembled from its shards (the array itself when it is not sharded).
  // Raises when a block lives only in another process.
  Array gathered() const;
  bool isTracer() const { return m_impl && m_impl->trace != nullptr; }
  // Donated to a jitted function: the handle remains, its buffer went to the call's outputs (jax.Array.is_deleted).
  bool isDeleted() const { return m_impl && !isConcrete() && !isTracer(); }
  const runtime::BufferPtr& buffer() const { return m_impl->buffer; }  // one device's buffer (null if sharded)
  ArrayImpl* impl() const { return m_impl.get(); }
  // How many Array handles share this array (jit's donation checks that the caller gave up its own).
  long useCount() const { return m_impl.use_count(); }

  // Host access to concrete values (a tracer raises: its value is not known while tracing).
  std::vector<double> toDoubles() const;
  std::vector<float> toFloats() const;
  double item() const;  // a one-element array's value
  std::string toString() const;  // "f32[2,2] [[1, 2], [3, 4]]" (elided when large)

 private:
  std::shared_ptr<ArrayImpl> m_impl;
};

using Tree = TreeOf<Array>;

}  // namespace tsr
