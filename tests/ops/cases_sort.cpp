// Conformance cases for sort and top_k. The references sort nothing: each element's place is its rank, counted
// naively (O(n^2)) as the number of elements that come before it in numpy's order (NaN after every number;
// ties by position), so they share no code with the kernels' std::stable_sort and std::partial_sort.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

using ir::OpCode;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// -1, 0, 1: a before, level with, after b (NaN last).
int order(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return static_cast<int>(std::isnan(a)) - static_cast<int>(std::isnan(b));
  return a < b ? -1 : b < a ? 1 : 0;
}

// Stable sort of every operand along `dim` by the first numKeys operands: element j of a line goes to the
// number of elements i whose keys come before its own, or equal them with i < j.
std::vector<HostTensor> sortRef(const std::vector<HostTensor>& in, int64_t dim, int64_t numKeys) {
  const Shape& s = in[0].aval.shape;
  std::vector<HostTensor> out;
  for (const HostTensor& x : in) out.push_back(HostTensor::zeros(x.aval));
  const int64_t n = s[static_cast<int>(dim)];
  for (int64_t flat = 0; flat < in[0].numel(); ++flat) {
    std::vector<int64_t> idx = unravel(flat, s);
    const int64_t j = idx[static_cast<size_t>(dim)];
    int64_t rank = 0;
    for (int64_t i = 0; i < n; ++i) {
      idx[static_cast<size_t>(dim)] = i;
      const int64_t other = ravel(idx, s);
      int c = 0;
      for (int64_t k = 0; k < numKeys && c == 0; ++k) c = order(in[static_cast<size_t>(k)].get(other), in[static_cast<size_t>(k)].get(flat));
      if (c < 0 || (c == 0 && i < j)) ++rank;
    }
    idx[static_cast<size_t>(dim)] = rank;
    const int64_t to = ravel(idx, s);
    for (size_t o = 0; o < in.size(); ++o) out[o].setBits(to, in[o].getBits(flat));
  }
  return out;
}

// top_k along the last dim: element j of a row is among the k largest when fewer than k elements come before it
// in descending order (larger, NaN first; ties by position).
std::vector<HostTensor> topKRef(const HostTensor& x, int64_t k) {
  const Shape& s = x.aval.shape;
  const int64_t n = s[s.rank() - 1];
  Shape rs = s;
  rs.dims().back() = k;
  HostTensor values = HostTensor::zeros(Aval{rs, x.aval.dtype}), indices = HostTensor::zeros(Aval{rs, DType::I32});
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t rank = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int c = order(x.get(r * n + i), x.get(r * n + j));
        if (c > 0 || (c == 0 && i < j)) ++rank;
      }
      if (rank >= k) continue;
      values.setBits(r * k + rank, x.getBits(r * n + j));
      indices.set(r * k + rank, static_cast<double>(j));
    }
  }
  return {values, indices};
}

bool accepted(OpCode op, const std::vector<HostTensor>& in, const ir::Attrs& attrs) {
  std::vector<Aval> avals;
  for (const auto& t : in) avals.push_back(t.aval);
  return ops::registry().get(op).infer(avals, attrs).ok();
}

void addSort(std::vector<OpCase>& cases, std::vector<HostTensor> in, int64_t dim, int64_t numKeys, bool stable,
             const std::string& note = "") {
  ir::SortAttrs attrs{dim, stable, numKeys};
  if (!accepted(OpCode::Sort, in, attrs)) return;
  std::string types;
  for (const auto& t : in) types += std::string(types.empty() ? "" : ",") + std::string(dtypeName(t.aval.dtype));
  OpCase c;
  c.label = fmt::format("sort {} {} dim {} keys {}{}{}", types, in[0].aval.shape.toString(), dim, numKeys,
                        stable ? "" : " unstable", note);
  c.op = OpCode::Sort;
  c.attrs = attrs;
  c.inputs = std::move(in);
  c.reference = [dim, numKeys](const std::vector<HostTensor>& x) { return sortRef(x, dim, numKeys); };
  cases.push_back(std::move(c));
}

void addTopK(std::vector<OpCase>& cases, HostTensor x, int64_t k, const std::string& note = "") {
  ir::TopKAttrs attrs{k};
  if (!accepted(OpCode::TopK, {x}, attrs)) return;
  OpCase c;
  c.label = fmt::format("top_k {} {} k {}{}", dtypeName(x.aval.dtype), x.aval.shape.toString(), k, note);
  c.op = OpCode::TopK;
  c.attrs = attrs;
  c.inputs = {std::move(x)};
  c.reference = [k](const std::vector<HostTensor>& in) { return topKRef(in[0], k); };
  cases.push_back(std::move(c));
}

}  // namespace

void addSortCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::vector<std::pair<Shape, int64_t>> variants = {
      {Shape{1}, 0}, {Shape{7}, 0}, {Shape{2, 3}, 0}, {Shape{2, 3}, 1}, {Shape{2, 3, 5}, 1}, {Shape{2, 3, 5}, 2},
      {Shape{33, 17}, 0}, {Shape{33, 17}, 1}, {Shape{0, 3}, 1}, {Shape{4, 0}, 1},
  };
  for (const auto& [shape, dim] : variants)
    for (DType t : allDTypes()) addSort(cases, {randomTensor(Aval{shape, t}, rng)}, dim, 1, true);
  // Unstable sorts of one key: equal keys are indistinguishable, so the result is still the stable one.
  for (DType t : {DType::F32, DType::I32}) addSort(cases, {randomTensor(Aval{Shape{9, 12}, t}, rng)}, 1, 1, false);
  // Several operands: keys with many ties (integers in a small range), a float payload that records the
  // original order, two keys compared lexicographically.
  for (const auto& [shape, dim] : variants) {
    Aval ia{shape, DType::I32}, fa{shape, DType::F64};
    HostTensor k0 = HostTensor::zeros(ia), k1 = HostTensor::zeros(ia);
    for (int64_t i = 0; i < k0.numel(); ++i) {
      k0.set(i, static_cast<double>(rng() % 3));
      k1.set(i, static_cast<double>(rng() % 4));
    }
    HostTensor payload = randomTensor(fa, rng);
    addSort(cases, {k0, payload}, dim, 1, true, " payload");
    addSort(cases, {k0, k1, payload}, dim, 2, true, " two keys");
    addSort(cases, {payload, k0}, dim, 1, true, " float keys");
  }
  // NaN, infinities and signed zeros: NaNs last (among themselves in their order), -0.0 level with 0.0.
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    HostTensor x = HostTensor::fromValues(Aval{Shape{2, 6}, t}, {kNaN, 1, -kInf, 0.0, kNaN, -0.0, 3, -0.0, kInf, 0.0, -2, kNaN});
    addSort(cases, {x}, 1, 1, true, " nan/inf");
    addSort(cases, {x, randomTensor(Aval{Shape{2, 6}, DType::F32}, rng)}, 1, 1, true, " nan/inf payload");
  }

  const std::vector<std::pair<Shape, int64_t>> topVariants = {
      {Shape{1}, 1}, {Shape{7}, 3}, {Shape{7}, 7}, {Shape{7}, 0}, {Shape{2, 3}, 2}, {Shape{2, 3, 5}, 1},
      {Shape{33, 17}, 5}, {Shape{4, 40}, 40}, {Shape{0, 3}, 2},
  };
  for (const auto& [shape, k] : topVariants)
    for (DType t : allDTypes()) addTopK(cases, randomTensor(Aval{shape, t}, rng), k);
  HostTensor ties = HostTensor::zeros(Aval{Shape{3, 8}, DType::I32});
  for (int64_t i = 0; i < ties.numel(); ++i) ties.set(i, static_cast<double>(rng() % 3));
  addTopK(cases, ties, 4, " ties");
  for (DType t : {DType::F32, DType::F64})
    addTopK(cases, HostTensor::fromValues(Aval{Shape{2, 5}, t}, {1, kNaN, kInf, -kInf, 2, kNaN, kNaN, 0.0, -0.0, 5}), 3,
            " nan/inf");
}

}  // namespace tsr::test
