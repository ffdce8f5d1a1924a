#pragma once
// Strided element copies: the one data-movement loop behind broadcast_in_dim, transpose, slice, rev, pad,
// concatenate and the dynamic slices. A copy is an iteration shape plus, per dim, a stride in elements
// (0 to broadcast, negative to reverse) into the source and into the destination.
#include <cstdint>
#include <vector>

namespace tsr::ops {

struct StridedCopy {
  std::vector<int64_t> dims;        // iteration shape
  std::vector<int64_t> srcStrides;  // elements; one per dim
  std::vector<int64_t> dstStrides;  // elements; one per dim
  int64_t srcOffset = 0;            // elements from the source pointer to index [0, ..., 0]
  int64_t dstOffset = 0;
};

// Copies prod(dims) elements of elemSize bytes (1, 2, 4 or 8). Dispatches on the size once, drops
// size-1 dims, merges dims that are contiguous in both tensors and tiles transposing copies.
void runStridedCopy(const StridedCopy& plan, int64_t elemSize, const void* src, void* dst);

// Writes the element at `value` (elemSize bytes) to dst[0, n).
void fillElements(void* dst, int64_t n, const void* value, int64_t elemSize);

// A block [start, start + blockDims) of a row-major array of wholeDims, as a copy out of the whole array into a
// dense block (toBlock) or from a dense block into the whole array: a shard and the array it belongs to.
StridedCopy blockCopy(const std::vector<int64_t>& wholeDims, const std::vector<int64_t>& start,
                      const std::vector<int64_t>& blockDims, bool toBlock);

// Row-major strides of `dims` in elements.
std::vector<int64_t> rowMajorStrides(const std::vector<int64_t>& dims);

}  // namespace tsr::ops
