#include "engine/ops/layout_copy.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/core/check.h"

namespace tsr::ops {

namespace {

struct Dim {
  int64_t n;  // extent
  int64_t s;  // source stride
  int64_t d;  // destination stride
};

// Square tiles for transposing copies: 32x32 elements of 8 bytes is 8 KiB per side, well inside L1.
constexpr int64_t kTile = 32;

// Drops size-1 dims, orders dims so the destination's fastest dim is innermost (writes stream, reads may
// jump) and merges neighbours that are contiguous in both tensors. Returns false when there is nothing to copy.
bool simplify(const StridedCopy& p, std::vector<Dim>& out) {
  std::vector<Dim> dims;
  for (size_t i = 0; i < p.dims.size(); ++i) {
    if (p.dims[i] == 0) return false;
    if (p.dims[i] != 1) dims.push_back({p.dims[i], p.srcStrides[i], p.dstStrides[i]});
  }
  std::stable_sort(dims.begin(), dims.end(),
                   [](const Dim& a, const Dim& b) { return std::llabs(a.d) > std::llabs(b.d); });
  out.clear();
  for (const Dim& dim : dims) {
    if (!out.empty() && out.back().s == dim.s * dim.n && out.back().d == dim.d * dim.n) {
      out.back() = {out.back().n * dim.n, dim.s, dim.d};
    } else {
      out.push_back(dim);
    }
  }
  return true;
}

// When the innermost dim reads with a large stride but another dim reads contiguously (a transpose),
// moves that dim next to the innermost one and returns true: the last two dims are then copied in tiles.
bool planTiles(std::vector<Dim>& dims) {
  size_t r = dims.size();
  if (r < 2 || std::llabs(dims[r - 1].s) <= 1) return false;
  for (size_t k = 0; k + 1 < r; ++k) {
    if (std::llabs(dims[k].s) == 1 && dims[k].n >= 4) {
      Dim moved = dims[k];
      dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(k));
      dims.insert(dims.end() - 1, moved);
      return true;
    }
  }
  return false;
}

// GCC at -O2 only vectorises loops whose trip count is fixed, hence the blocks of kLanes below.
constexpr int64_t kLanes = 8;

template <class T>
inline void copyRow(const T* __restrict s, T* __restrict d, const Dim& a) {
  int64_t full = a.n / kLanes * kLanes;
  if (a.s == 1 && a.d == 1) {
    std::memcpy(d, s, static_cast<size_t>(a.n) * sizeof(T));
  } else if (a.s == 0 && a.d == 1) {  // broadcast along the row
    T v = *s;
    for (int64_t j = 0; j < full; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) d[j + l] = v;
    for (int64_t j = full; j < a.n; ++j) d[j] = v;
  } else if (a.s == -1 && a.d == 1) {  // rev of the innermost dim
    for (int64_t j = 0; j < full; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) d[j + l] = s[-(j + l)];
    for (int64_t j = full; j < a.n; ++j) d[j] = s[-j];
  } else if (a.d == 1) {
    for (int64_t j = 0; j < a.n; ++j) d[j] = s[j * a.s];
  } else {
    for (int64_t j = 0; j < a.n; ++j) d[j * a.d] = s[j * a.s];
  }
}

// b: the dim read contiguously, a: the dim written contiguously.
template <class T>
inline void copyTiles(const T* s, T* d, const Dim& b, const Dim& a) {
  for (int64_t i0 = 0; i0 < b.n; i0 += kTile) {
    int64_t i1 = std::min(b.n, i0 + kTile);
    for (int64_t j0 = 0; j0 < a.n; j0 += kTile) {
      int64_t j1 = std::min(a.n, j0 + kTile);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) d[i * b.d + j * a.d] = s[i * b.s + j * a.s];
    }
  }
}

template <class T>
void copyLoop(const std::vector<Dim>& dims, bool tiled, const T* s, T* d) {
  if (dims.empty()) {
    *d = *s;
    return;
  }
  int inner = tiled ? 2 : 1;
  int outerRank = static_cast<int>(dims.size()) - inner;
  int64_t outerCount = 1;
  for (int k = 0; k < outerRank; ++k) outerCount *= dims[static_cast<size_t>(k)].n;
  std::vector<int64_t> idx(static_cast<size_t>(std::max(outerRank, 0)), 0);
  const Dim& a = dims.back();
  for (int64_t o = 0; o < outerCount; ++o) {
    if (tiled) copyTiles(s, d, dims[dims.size() - 2], a);
    else copyRow(s, d, a);
    if (o + 1 == outerCount) break;
    // Odometer over the outer dims, moving both pointers by their strides.
    for (int k = outerRank - 1; k >= 0; --k) {
      const Dim& dim = dims[static_cast<size_t>(k)];
      s += dim.s;
      d += dim.d;
      if (++idx[static_cast<size_t>(k)] < dim.n) break;
      s -= dim.s * dim.n;
      d -= dim.d * dim.n;
      idx[static_cast<size_t>(k)] = 0;
    }
  }
}

template <class T>
void runTyped(const StridedCopy& plan, const void* src, void* dst) {
  std::vector<Dim> dims;
  if (!simplify(plan, dims)) return;
  bool tiled = planTiles(dims);
  copyLoop(dims, tiled, static_cast<const T*>(src) + plan.srcOffset, static_cast<T*>(dst) + plan.dstOffset);
}

template <class F>
void dispatchSize(int64_t elemSize, F&& f) {
  switch (elemSize) {
    case 1: f.template operator()<uint8_t>(); return;
    case 2: f.template operator()<uint16_t>(); return;
    case 4: f.template operator()<uint32_t>(); return;
    case 8: f.template operator()<uint64_t>(); return;
  }
  TSR_CHECK_MSG(false, "element size must be 1, 2, 4 or 8 bytes");
}

}  // namespace

void runStridedCopy(const StridedCopy& plan, int64_t elemSize, const void* src, void* dst) {
  TSR_CHECK(plan.srcStrides.size() == plan.dims.size() && plan.dstStrides.size() == plan.dims.size());
  dispatchSize(elemSize, [&]<class T>() { runTyped<T>(plan, src, dst); });
}

void fillElements(void* dst, int64_t n, const void* value, int64_t elemSize) {
  dispatchSize(elemSize, [&]<class T>() {
    T v;
    std::memcpy(&v, value, sizeof(T));
    std::fill_n(static_cast<T*>(dst), n, v);
  });
}

StridedCopy blockCopy(const std::vector<int64_t>& wholeDims, const std::vector<int64_t>& start,
                      const std::vector<int64_t>& blockDims, bool toBlock) {
  StridedCopy c;
  c.dims = blockDims;
  std::vector<int64_t> wholeStrides = rowMajorStrides(wholeDims);
  int64_t offset = 0;
  for (size_t d = 0; d < start.size(); ++d) offset += start[d] * wholeStrides[d];
  std::vector<int64_t> blockStrides = rowMajorStrides(blockDims);
  c.srcStrides = toBlock ? wholeStrides : blockStrides;
  c.dstStrides = toBlock ? blockStrides : wholeStrides;
  (toBlock ? c.srcOffset : c.dstOffset) = offset;
  return c;
}

std::vector<int64_t> rowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

}  // namespace tsr::ops
