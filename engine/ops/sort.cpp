// Sorting: sort (operands...){dimension, is_stable, num_keys} and top_k (x){k}, as lax.sort and lax.top_k.
//
// Order: numpy's. Floats compare by value with every NaN after every number (NaNs equal to each other), so an
// ascending sort puts NaNs last and top_k takes them first; -0.0 and 0.0 are equal. sort compares its first
// num_keys operands lexicographically and moves every operand by the same permutation; is_stable keeps equal
// keys in their order (std::stable_sort), otherwise std::sort; one key sorts as integers (sortableKey), stably. top_k breaks ties by the lower index, so its
// result is one total order (std::partial_sort over indices).
//
// Gradients, as JAX: the cotangent of each result goes back through the permutation, a scatter into the
// operand's positions (sort: the permutation from sorting an iota along with the keys; top_k: its indices).
// Batching moves every batch dim to the front; sharding keeps the sorted dim whole.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <type_traits>

#include <fmt/format.h>

#include "engine/ops/elementwise_functors.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"

namespace tsr::ops {

namespace {

using ir::OpCode;
using ir::ShardingRule;

// ---- Order -------------------------------------------------------------------------------------------------

// -1, 0 or 1 as a sorts before, with or after b; floats put NaN last.
template <class T>
int threeWay(T a, T b) {
  if constexpr (kIsHalf<T> || std::is_floating_point_v<T>) {
    const auto x = static_cast<ComputeType<T>>(a), y = static_cast<ComputeType<T>>(b);
    const bool nx = std::isnan(x), ny = std::isnan(y);
    if (nx || ny) return static_cast<int>(nx) - static_cast<int>(ny);
    return x < y ? -1 : y < x ? 1 : 0;
  } else {
    return a < b ? -1 : b < a ? 1 : 0;
  }
}

// x viewed as [outer, n, inner] around the sorted dim; element j of line l sits at offset(l, j).
struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
  Lines(const Shape& s, int64_t dim) {
    for (int d = 0; d < dim; ++d) outer *= s[d];
    n = s[static_cast<int>(dim)];
    for (int d = static_cast<int>(dim) + 1; d < s.rank(); ++d) inner *= s[d];
  }
  int64_t count() const { return outer * inner; }
  int64_t offset(int64_t line, int64_t j) const { return ((line / inner) * n + j) * inner + line % inner; }
};

using ElementCompare = std::function<int(int64_t, int64_t)>;

ElementCompare elementCompare(const ir::TensorView& v) {
  return dispatchDType(v.aval.dtype, [&]<class T>() -> ElementCompare {
    const T* p = v.as<T>();
    return [p](int64_t a, int64_t b) { return threeWay(p[a], p[b]); };
  });
}

// One key: each element becomes an unsigned integer that orders as threeWay does (NaN above every number, -0
// equal to +0), paired with its position, and the pairs are sorted as integers; ties break by position, so the
// result is the stable one whether or not stability was asked for. Contiguous integer pairs sort several times
// faster than positions compared through the key array.
template <class T>
auto sortableKey(T value) {
  if constexpr (std::is_same_v<T, bool>) {
    return static_cast<uint32_t>(value);
  } else if constexpr (kIsHalf<T> || std::is_same_v<T, float>) {
    float f = static_cast<float>(value);
    if (std::isnan(f)) return uint32_t{0xFFFFFFFFu};
    if (f == 0.0f) f = 0.0f;
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  } else if constexpr (std::is_same_v<T, double>) {
    double f = value;
    if (std::isnan(f)) return uint64_t{~uint64_t{0}};
    if (f == 0.0) f = 0.0;
    uint64_t u;
    std::memcpy(&u, &f, sizeof u);
    return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));
  } else if constexpr (std::is_signed_v<T>) {
    using U = std::conditional_t<(sizeof(T) > 4), uint64_t, uint32_t>;
    return static_cast<U>(static_cast<U>(static_cast<std::make_signed_t<U>>(value)) ^ (U{1} << (sizeof(U) * 8 - 1)));
  } else {
    using U = std::conditional_t<(sizeof(T) > 4), uint64_t, uint32_t>;
    return static_cast<U>(value);
  }
}

// Sorts (key << 32 | position) words by their keys, stably: least significant digit first, 8 bits a pass (the
// positions start in order, so stability keeps ties by position). Passes whose digit is the same everywhere
// are skipped.
void radixSortByHighWord(std::vector<uint64_t>& words) {
  thread_local std::vector<uint64_t> scratch;
  scratch.resize(words.size());
  for (int shift = 32; shift < 64; shift += 8) {
    size_t count[257] = {};
    for (uint64_t w : words) ++count[((w >> shift) & 0xFF) + 1];
    if (std::any_of(count + 1, count + 257, [&](size_t c) { return c == words.size(); })) continue;
    for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
    for (uint64_t w : words) scratch[count[(w >> shift) & 0xFF]++] = w;
    words.swap(scratch);
  }
}

template <class T, class Offset>
void sortLineByKey(std::vector<int64_t>& perm, const T* key, int64_t n, Offset at) {
  using K = decltype(sortableKey(T{}));
  if constexpr (sizeof(K) == 4) {
    thread_local std::vector<uint64_t> packed;
    packed.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j)
      packed[static_cast<size_t>(j)] = (uint64_t{sortableKey(key[at(j)])} << 32) | static_cast<uint64_t>(j);
    if (n >= 2048) radixSortByHighWord(packed);
    else std::sort(packed.begin(), packed.end());
    for (int64_t j = 0; j < n; ++j) perm[static_cast<size_t>(j)] = static_cast<int64_t>(packed[static_cast<size_t>(j)] & 0xFFFFFFFFu);
  } else {
    thread_local std::vector<std::pair<uint64_t, int64_t>> pairs;
    pairs.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) pairs[static_cast<size_t>(j)] = {sortableKey(key[at(j)]), j};
    std::sort(pairs.begin(), pairs.end());
    for (int64_t j = 0; j < n; ++j) perm[static_cast<size_t>(j)] = pairs[static_cast<size_t>(j)].second;
  }
}

// Sorts positions 0..n-1 of one line by `less` (stably or not).
template <class Less>
void sortLine(std::vector<int64_t>& perm, bool stable, Less less) {
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (stable) std::stable_sort(perm.begin(), perm.end(), less);
  else std::sort(perm.begin(), perm.end(), less);
}

void sortKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<ir::SortAttrs>(args.attrs);
  const Lines lines(args.inputs[0].aval.shape, at.dimension);
  std::vector<int64_t> perm(static_cast<size_t>(lines.n));
  std::vector<ElementCompare> keys;
  if (at.numKeys > 1)
    for (int64_t k = 0; k < at.numKeys; ++k) keys.push_back(elementCompare(args.inputs[static_cast<size_t>(k)]));
  for (int64_t line = 0; line < lines.count(); ++line) {
    auto at0 = [&](int64_t j) { return lines.offset(line, j); };
    if (at.numKeys == 1 && lines.n <= (int64_t{1} << 32)) {
      dispatchDType(args.inputs[0].aval.dtype,
                    [&]<class T>() { sortLineByKey(perm, args.inputs[0].as<T>(), lines.n, at0); });
    } else if (at.numKeys == 1) {
      dispatchDType(args.inputs[0].aval.dtype, [&]<class T>() {
        const T* key = args.inputs[0].as<T>();
        sortLine(perm, at.isStable, [&](int64_t a, int64_t b) { return threeWay(key[at0(a)], key[at0(b)]) < 0; });
      });
    } else {
      sortLine(perm, at.isStable, [&](int64_t a, int64_t b) {
        for (const ElementCompare& cmp : keys)
          if (int c = cmp(at0(a), at0(b)); c != 0) return c < 0;
        return false;
      });
    }
    for (size_t i = 0; i < args.inputs.size(); ++i) {
      const size_t size = dtypeSize(args.inputs[i].aval.dtype);
      const auto* src = static_cast<const uint8_t*>(args.inputs[i].data);
      auto* dst = static_cast<uint8_t*>(args.outputs[i].data);
      for (int64_t j = 0; j < lines.n; ++j)
        std::memcpy(dst + static_cast<size_t>(at0(j)) * size, src + static_cast<size_t>(at0(perm[static_cast<size_t>(j)])) * size, size);
    }
  }
}

// x: [..., n] -> values [..., k], indices i32[..., k].
void topKKernel(const ir::CpuKernelArgs& args) {
  const int64_t k = attrsAs<ir::TopKAttrs>(args.attrs).k;
  const Aval& xa = args.inputs[0].aval;
  const int64_t n = xa.shape[xa.rank() - 1];
  const int64_t rows = n == 0 ? 0 : xa.numel() / n;
  std::vector<int64_t> idx(static_cast<size_t>(n));
  dispatchDType(xa.dtype, [&]<class T>() {
    const T* x = args.inputs[0].as<T>();
    T* values = args.outputs[0].as<T>();
    int32_t* indices = args.outputs[1].as<int32_t>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * n;
      std::iota(idx.begin(), idx.end(), int64_t{0});
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [row](int64_t a, int64_t b) {
        const int c = threeWay(row[a], row[b]);
        return c > 0 || (c == 0 && a < b);
      });
      for (int64_t j = 0; j < k; ++j) {
        values[r * k + j] = row[idx[static_cast<size_t>(j)]];
        indices[r * k + j] = static_cast<int32_t>(idx[static_cast<size_t>(j)]);
      }
    }
  });
}

// ---- Shape rules -------------------------------------------------------------------------------------------

Result<std::vector<Aval>> inferSort(std::span<const Aval> ops, const ir::Attrs& attrs) {
  const auto* a = std::get_if<ir::SortAttrs>(&attrs);
  if (!a) return opError("sort", ops, fmt::format("expects SortAttrs but was given {}", ir::attrsTypeName(attrs)));
  if (ops.empty()) return opError("sort", ops, "needs at least one operand");
  for (const Aval& x : ops)
    if (x.shape != ops[0].shape) return opError("sort", ops, "operands must have equal shapes");
  if (ops[0].rank() == 0) return opError("sort", ops, "needs operands of rank 1 or more");
  if (a->dimension < 0 || a->dimension >= ops[0].rank())
    return opError("sort", ops, fmt::format("dimension {} is out of range for rank {}", a->dimension, ops[0].rank()));
  if (a->numKeys < 1 || a->numKeys > static_cast<int64_t>(ops.size()))
    return opError("sort", ops, fmt::format("num_keys {} must be between 1 and the {} operands", a->numKeys, ops.size()));
  return std::vector<Aval>(ops.begin(), ops.end());
}

Result<std::vector<Aval>> inferTopK(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("top_k", ops, 1));
  const auto* a = std::get_if<ir::TopKAttrs>(&attrs);
  if (!a) return opError("top_k", ops, fmt::format("expects TopKAttrs but was given {}", ir::attrsTypeName(attrs)));
  if (ops[0].rank() == 0) return opError("top_k", ops, "needs an operand of rank 1 or more");
  if (!kNumeric.contains(ops[0].dtype))
    return opError("top_k", ops, fmt::format("dtype {} is not supported (accepts {})", dtypeName(ops[0].dtype), kNumeric.toString()));
  const int64_t n = ops[0].shape[ops[0].rank() - 1];
  if (a->k < 0 || a->k > n)
    return opError("top_k", ops, fmt::format("k = {} must be between 0 and the last dimension, {}", a->k, n));
  Shape s = ops[0].shape;
  s.dims().back() = a->k;
  return std::vector<Aval>{Aval{s, ops[0].dtype}, Aval{s, DType::I32}};
}

ir::Cost sortCost(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) {
  const Aval& x = in[0];
  double n = 1;
  if (const auto* s = std::get_if<ir::SortAttrs>(&attrs)) n = static_cast<double>(x.shape[static_cast<int>(s->dimension)]);
  else if (x.rank() > 0) n = static_cast<double>(x.shape[x.rank() - 1]);
  ir::Cost c = movementCost(in, out);
  c.flops = static_cast<double>(x.numel()) * std::max(1.0, std::log2(std::max(n, 1.0)));
  return c;
}

// ---- Transformation rules -----------------------------------------------------------------------------------

// x with `dim` moved last, and back.
Axes lastPerm(int rank, int64_t dim) {
  Axes p;
  for (int i = 0; i < rank; ++i)
    if (i != dim) p.push_back(i);
  p.push_back(dim);
  return p;
}
Axes inversePerm(const Axes& p) {
  Axes inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return inv;
}

// g [..., m] (indices i32[..., m] into the last dim of x [..., n]) scattered into zeros of x: positions not
// picked get 0, so the same rule serves sort (m = n, a permutation) and top_k.
Array scatterLast(const Array& x, const Array& indices, const Array& g) {
  const int r = x.rank();
  return scatterAdd(zerosLike(x), indices, g, r - 1, r - 1);
}

std::vector<Array> sortVjp(const ir::VjpArgs& a) {
  const auto& at = attrsAs<ir::SortAttrs>(a.attrs);
  const int rank = a.operands[0].rank();
  bool any = false;
  for (size_t i = 0; i < a.cotangents.size(); ++i)
    any |= a.cotangents[i].valid() && isFloating(a.cotangents[i].dtype());
  std::vector<Array> cts(a.operands.size());
  if (!any) return cts;
  // The permutation: sorting an iota along with the keys, as the forward sort did.
  std::vector<Array> withIota = a.operands;
  withIota.push_back(iota(a.operands[0].shape(), at.dimension, DType::I32));
  Array perm = bind(OpCode::Sort, withIota, a.attrs, std::source_location::current()).back();
  const Axes toLast = lastPerm(rank, at.dimension), back = inversePerm(toLast);
  const Array permLast = transpose(perm, toLast);
  for (size_t i = 0; i < a.operands.size(); ++i) {
    const Array& g = a.cotangents[i];
    if (!g.valid() || !isFloating(g.dtype())) continue;
    cts[i] = transpose(scatterLast(transpose(a.operands[i], toLast), permLast, transpose(g, toLast)), back);
  }
  return cts;
}

std::vector<Array> topKVjp(const ir::VjpArgs& a) {
  const Array& g = a.cotangents[0];
  if (!g.valid() || !isFloating(g.dtype())) return {Array()};
  return {scatterLast(a.operands[0], a.results[1], g)};
}

ir::BatchResult sortBatch(const ir::BatchArgs& a) {
  std::vector<Array> xs;
  for (size_t i = 0; i < a.operands.size(); ++i) xs.push_back(moveBatchDim(a.operands[i], a.batchDims[i], 0, a.batchSize));
  ir::SortAttrs at = attrsAs<ir::SortAttrs>(a.attrs);
  ++at.dimension;
  auto r = bind(OpCode::Sort, xs, at, std::source_location::current());
  return {r, std::vector<int>(r.size(), 0)};
}

ir::BatchResult topKBatch(const ir::BatchArgs& a) {
  Array x = moveBatchDim(a.operands[0], a.batchDims[0], 0, a.batchSize);
  return {bind(OpCode::TopK, {x}, a.attrs, std::source_location::current()), {0, 0}};
}

// Every dim but the sorted one is one factor across all operands and results; the sorted dim is whole.
ShardingRule sortedDimWhole(std::span<const Aval> in, std::span<const Aval> out, int64_t dim) {
  ShardingRule r;
  for (const Aval& x : in) r.operandDims.emplace_back(static_cast<size_t>(x.rank()), -1);
  for (const Aval& y : out) r.resultDims.emplace_back(static_cast<size_t>(y.rank()), -1);
  for (int d = 0; d < in[0].rank(); ++d) {
    if (d == dim) continue;
    const int f = r.addFactor(ir::FactorKind::PassThrough);
    for (auto& dims : r.operandDims) dims[static_cast<size_t>(d)] = f;
    for (auto& dims : r.resultDims) dims[static_cast<size_t>(d)] = f;
  }
  return r;
}

}  // namespace

void registerSortOps(ir::OpRegistry& reg) {
  ir::OpDef sort = coreOp(OpCode::Sort, "sort", ir::FusionKind::Opaque, -1, -1);
  sort.minOperands = 1;
  sort.infer = inferSort;
  sort.cost = sortCost;
  sort.cpu = sortKernel;
  sort.vjp = sortVjp;
  sort.batch = sortBatch;
  sort.shard = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    return sortedDimWhole(in, out, attrsAs<ir::SortAttrs>(attrs).dimension);
  };
  addCoreOp(reg, std::move(sort));

  ir::OpDef topK = coreOp(OpCode::TopK, "sort", ir::FusionKind::Opaque, 1, 2);
  topK.infer = inferTopK;
  topK.cost = sortCost;
  topK.cpu = topKKernel;
  topK.vjp = topKVjp;
  topK.batch = topKBatch;
  topK.shard = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) -> Result<ShardingRule> {
    return sortedDimWhole(in, out, in[0].rank() - 1);
  };
  addCoreOp(reg, std::move(topK));
}

}  // namespace tsr::ops
