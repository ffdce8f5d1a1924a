#include "engine/dist/group_sum.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "engine/core/check.h"

namespace tsr::dist {
namespace {

// Elements per block: the accumulator (8 KiB of doubles at most) stays in L1 while every input streams by.
constexpr int64_t kBlock = 1024;

// Acc: the type the sum runs in; T: the stored type. Integers are summed as their unsigned type, where
// overflow wraps (defined), with the same bits as a wrapping signed sum.
template <class T, class Acc>
void sumBlocks(std::span<const void* const> ins, std::span<void* const> outs, int64_t count) {
  Acc acc[kBlock];
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t len = std::min(kBlock, count - b);
    const T* x0 = static_cast<const T*>(ins[0]) + b;
    for (int64_t i = 0; i < len; ++i) acc[i] = static_cast<Acc>(x0[i]);
    for (size_t m = 1; m < ins.size(); ++m) {
      const T* x = static_cast<const T*>(ins[m]) + b;
      for (int64_t i = 0; i < len; ++i) acc[i] = static_cast<Acc>(acc[i] + static_cast<Acc>(x[i]));
    }
    for (void* o : outs) {
      T* y = static_cast<T*>(o) + b;
      if constexpr (std::is_same_v<T, Acc>) {
        std::memcpy(y, acc, static_cast<size_t>(len) * sizeof(T));
      } else {
        for (int64_t i = 0; i < len; ++i) y[i] = T(acc[i]);
      }
    }
  }
}

}  // namespace

Status checkSummable(DType dtype, std::string_view op) {
  if (dtype == DType::Bool) return makeError("{}: cannot sum {} (numeric dtypes only)", op, dtypeName(dtype));
  return {};
}

void sumInGroupOrder(DType dtype, std::span<const void* const> ins, std::span<void* const> outs, int64_t count) {
  TSR_CHECK(!ins.empty());
  if (count <= 0) return;
  switch (dtype) {
    case DType::F32: return sumBlocks<float, float>(ins, outs, count);
    case DType::F64: return sumBlocks<double, double>(ins, outs, count);
    case DType::BF16: return sumBlocks<bf16, float>(ins, outs, count);
    case DType::F16: return sumBlocks<f16, float>(ins, outs, count);
    case DType::I32: case DType::U32: return sumBlocks<uint32_t, uint32_t>(ins, outs, count);
    case DType::I64: return sumBlocks<uint64_t, uint64_t>(ins, outs, count);
    case DType::U8: return sumBlocks<uint8_t, uint8_t>(ins, outs, count);
    case DType::Bool: break;
  }
  TSR_CHECK_MSG(false, "sumInGroupOrder: the caller checks checkSummable first");
}

}  // namespace tsr::dist
