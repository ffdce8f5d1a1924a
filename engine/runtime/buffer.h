#pragma once
// Buffer: a block of device memory. On the CPU, 64-byte aligned host memory from a caching allocator,
// zero-filled.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/core/result.h"
#include "engine/core/shape.h"
#include "engine/ir/op_def.h"

namespace tsr::runtime {

class Buffer {
 public:
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Zero-filled. Fails (with a message naming the size) when memory runs out.
  static Result<std::shared_ptr<Buffer>> allocate(int64_t bytes);
  // Contents undefined: for results that a kernel writes in full.
  static Result<std::shared_ptr<Buffer>> allocateUninitialized(int64_t bytes);

  void* data() { return m_data; }
  const void* data() const { return m_data; }
  int64_t size() const { return m_size; }

 private:
  Buffer(void* data, int64_t size, size_t capacity) : m_data(data), m_size(size), m_capacity(capacity) {}
  void* m_data = nullptr;
  int64_t m_size = 0;
  size_t m_capacity = 0;  // the allocator's block size (a power of two >= size)
};

using BufferPtr = std::shared_ptr<Buffer>;

// The bytes of all Buffers alive in the process (their sizes, not the allocator's rounded blocks). While a
// profiler records, each change is also a MemorySample of it.
int64_t liveBufferBytes();

// Runs one op with its CPU kernel: infers the results, allocates them and calls the kernel.
Result<std::vector<BufferPtr>> runCpuOp(const ir::OpDef& def, std::span<const BufferPtr> inputs,
                                        std::span<const Aval> inputAvals, const ir::Attrs& attrs,
                                        std::vector<Aval>* resultAvals = nullptr);

}  // namespace tsr::runtime
