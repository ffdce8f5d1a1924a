// Conformance cases for the cumulative family (cumsum, cumprod, cummax, cumlogsumexp). The reference combines,
// for every output element, its whole prefix (suffix when reverse) from scratch in double: O(n^2), sharing
// nothing with the kernels' running accumulator. logsumexp is taken as m + log(sum exp(x - m)) over the prefix,
// not as the kernels' pairwise log(exp(a) + exp(b)). Integers wrap modulo 2^64 before the cast to the dtype.
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

double prefixFloat(OpCode op, const std::vector<double>& v) {
  if (op == OpCode::Cumsum) {
    double s = 0;
    for (double x : v) s += x;
    return s;
  }
  if (op == OpCode::Cumprod) {
    double p = 1;
    for (double x : v) p *= x;
    return p;
  }
  double m = -kInf;
  for (double x : v) {
    if (std::isnan(x)) return kNaN;
    m = std::max(m, x);
  }
  if (op == OpCode::Cummax || std::isinf(m)) return m;
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

HostTensor cumulativeRef(OpCode op, const HostTensor& x, int64_t axis, bool reverse) {
  const Shape& s = x.aval.shape;
  HostTensor out = HostTensor::zeros(x.aval);
  const int64_t n = s[static_cast<int>(axis)];
  const bool integer = !isFloating(x.aval.dtype);
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, s);
    const int64_t k = idx[static_cast<size_t>(axis)];
    const int64_t from = reverse ? k : 0, to = reverse ? n - 1 : k;
    std::vector<double> prefix;
    std::vector<uint64_t> bits;  // integer operands only: converting a float NaN to an integer is undefined
    for (int64_t j = from; j <= to; ++j) {
      idx[static_cast<size_t>(axis)] = j;
      const int64_t flat = ravel(idx, s);
      prefix.push_back(x.get(flat));
      if (integer) bits.push_back(static_cast<uint64_t>(static_cast<int64_t>(x.get(flat))));
    }
    if (!integer || op == OpCode::Cummax) {
      out.set(i, prefixFloat(op, prefix));  // integer maxima are exact in double for the small test values
    } else {
      uint64_t a = op == OpCode::Cumsum ? 0 : 1;
      for (uint64_t b : bits) a = op == OpCode::Cumsum ? a + b : a * b;
      out.setBits(i, a);
    }
  }
  return out;
}

void addCase(std::vector<OpCase>& cases, OpCode op, HostTensor x, int64_t axis, bool reverse,
             const std::string& note = "") {
  ir::CumulativeAttrs attrs{axis, reverse};
  const ir::OpDef* def = ops::registry().find(op);
  if (!def || !def->infer(std::vector<Aval>{x.aval}, attrs).ok()) return;
  OpCase c;
  c.label = fmt::format("{} {} {} axis {}{}{}", def->name, dtypeName(x.aval.dtype), x.aval.shape.toString(), axis,
                        reverse ? " reverse" : "", note);
  c.op = op;
  c.attrs = attrs;
  c.inputs = {std::move(x)};
  c.reference = [op, axis, reverse](const std::vector<HostTensor>& in) {
    return std::vector<HostTensor>{cumulativeRef(op, in[0], axis, reverse)};
  };
  cases.push_back(std::move(c));
}

}  // namespace

void addCumulativeCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::vector<std::pair<Shape, int64_t>> variants = {
      {Shape{1}, 0},       {Shape{7}, 0},       {Shape{2, 3}, 0},     {Shape{2, 3}, 1}, {Shape{2, 3, 5}, 1},
      {Shape{2, 3, 5}, 2}, {Shape{2, 1, 3, 1}, 2}, {Shape{33, 17}, 0}, {Shape{33, 17}, 1}, {Shape{0, 3}, 0},
      {Shape{4, 0}, 0},
  };
  for (OpCode op : {OpCode::Cumsum, OpCode::Cumprod, OpCode::Cummax, OpCode::Cumlogsumexp}) {
    for (const auto& [shape, axis] : variants) {
      for (bool reverse : {false, true}) {
        for (DType t : allDTypes()) {
          Aval a{shape, t};
          // Products of values in [0.7, 1.4] stay finite over 33 steps; some are negative for the sign changes.
          HostTensor x = op == OpCode::Cumprod && isFloating(t) ? randomTensor(a, rng, 0.7, 1.4) : randomTensor(a, rng);
          if (op == OpCode::Cumprod && isFloating(t))
            for (int64_t i = 0; i < x.numel(); i += 5) x.set(i, -x.get(i));
          addCase(cases, op, std::move(x), axis, reverse);
        }
      }
    }
  }
  // Edges: cumprod through an exact zero (the gradient check differentiates there too), NaN in cummax and
  // cumlogsumexp, -inf (the identity of logsumexp) and +inf.
  addCase(cases, OpCode::Cumprod, HostTensor::fromValues(Aval{Shape{2, 5}, DType::F64}, {1.5, 0, -2, 0.5, 3, 2, -1, 0, 0, 4}),
          1, false, " through zeros");
  addCase(cases, OpCode::Cumprod, HostTensor::fromValues(Aval{Shape{2, 5}, DType::F64}, {1.5, 0, -2, 0.5, 3, 2, -1, 0, 0, 4}),
          1, true, " through zeros");
  const std::vector<double> special = {1, kNaN, 3, -kInf, 2, -kInf, -kInf, 0.5, kInf, 1};
  for (DType t : {DType::F32, DType::F64}) {
    for (OpCode op : {OpCode::Cummax, OpCode::Cumlogsumexp, OpCode::Cumsum}) {
      addCase(cases, op, HostTensor::fromValues(Aval{Shape{2, 5}, t}, special), 1, false, " nan/inf");
      addCase(cases, op, HostTensor::fromValues(Aval{Shape{2, 5}, t}, special), 1, true, " nan/inf");
    }
  }
}

}  // namespace tsr::test
