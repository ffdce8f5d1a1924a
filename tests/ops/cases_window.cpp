// Window cases: reduce_window_sum, reduce_window_max, reduce_window_min and select_and_scatter_add over rank 1
// to 5; strides below, equal to and above the window; explicit, asymmetric padding (one wider than the window,
// so whole windows are padding); window dilation; NCHW and NHWC pooling; batch-like dims; in every dtype the
// ops accept. The reference walks, for each result element, its window position by position in double, from
// XLA's definition (padded positions hold the identity; select takes the first maximum in row-major window
// order), sharing nothing with the kernels' tables.
//
// Max, min and select cases get distinct operand values (a shuffled grid) so that finite differences never
// cross a tie; one case of small integers is all ties, to pin the first-maximum rule (not in f32 or f64, which
// the gradient check differentiates).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

using ir::OpCode;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct WindowSpec {
  std::string name;
  Shape shape;
  ir::WindowAttrs attrs;
};

ir::WindowAttrs window(ir::Ints dims, ir::Ints strides = {}, ir::Ints lo = {}, ir::Ints hi = {}, ir::Ints dil = {}) {
  auto orFill = [&](ir::Ints v, int64_t fill) { return v.empty() ? ir::Ints(dims.size(), fill) : v; };
  ir::WindowAttrs a;
  a.windowStrides = orFill(std::move(strides), 1);
  a.paddingLo = orFill(std::move(lo), 0);
  a.paddingHi = orFill(std::move(hi), 0);
  a.windowDilation = orFill(std::move(dil), 1);
  a.windowDimensions = std::move(dims);
  return a;
}

std::vector<WindowSpec> windowSpecs() {
  return {
      {"1d window 3", {7}, window({3})},
      {"1d window 2 stride 2 pad (1,1)", {7}, window({2}, {2}, {1}, {1})},
      {"1d padding wider than the window", {5}, window({2}, {2}, {3}, {2})},
      {"2d stride 3 above window 2", {3, 10}, window({1, 2}, {1, 3})},
      {"NCHW 2x2 stride 2 (max pool)", {2, 3, 6, 6}, window({1, 1, 2, 2}, {1, 1, 2, 2})},
      {"NCHW 3x3 stride 2 pad 1, odd sizes", {2, 2, 7, 5},
       window({1, 1, 3, 3}, {1, 1, 2, 2}, {0, 0, 1, 1}, {0, 0, 1, 1})},
      {"NHWC 3x3 stride 1 pad (1,1)", {2, 5, 4, 3}, window({1, 3, 3, 1}, {}, {0, 1, 1, 0}, {0, 1, 1, 0})},
      {"window dilation 2, asymmetric padding", {2, 9, 8},
       window({1, 2, 3}, {1, 1, 2}, {0, 1, 0}, {0, 2, 1}, {1, 2, 2})},
      {"every dim windowed, overlapping", {3, 4, 5}, window({2, 2, 2})},
      {"3d pooling", {1, 2, 4, 5, 3}, window({1, 1, 2, 2, 2}, {1, 1, 2, 2, 1}, {0, 0, 0, 1, 0}, {0, 0, 1, 0, 0})},
      // Channels last with at least 8 channels: the kernels' lanes paths (each window visited once, rows of
      // channels combined side by side), results and slabs split over the threads.
      {"NHWC 3x3 stride 2 pad 1, 16 channels (lanes, several chunks)", {4, 33, 32, 16},
       window({1, 3, 3, 1}, {1, 2, 2, 1}, {0, 1, 1, 0}, {0, 1, 1, 0})},
      {"NHWC window dilation 2, 12 channels over 2 trailing dims (lanes)", {2, 7, 6, 3, 4},
       window({1, 2, 2, 1, 1}, {1, 1, 2, 1, 1}, {0, 1, 0, 0, 0}, {0, 0, 1, 0, 0}, {1, 2, 2, 1, 1})},
  };
}

// Calls visit(result flat index, operand flat indices inside the operand) for every window, positions in
// row-major window order.
template <class F>
void eachWindow(const Shape& in, const ir::WindowAttrs& at, const Shape& out, F&& visit) {
  const Shape win(at.windowDimensions);
  for (int64_t e = 0; e < out.numel(); ++e) {
    std::vector<int64_t> o = unravel(e, out), inside;
    for (int64_t k = 0; k < win.numel(); ++k) {
      std::vector<int64_t> kk = unravel(k, win), x(kk.size());
      bool ok = true;
      for (size_t d = 0; d < kk.size(); ++d) {
        x[d] = o[d] * at.windowStrides[d] + kk[d] * at.windowDilation[d] - at.paddingLo[d];
        ok &= x[d] >= 0 && x[d] < in[static_cast<int>(d)];
      }
      if (ok) inside.push_back(ravel(x, in));
    }
    visit(e, inside);
  }
}

Shape outShape(const Shape& in, const ir::WindowAttrs& at) {
  std::vector<int64_t> dims;
  for (int d = 0; d < in.rank(); ++d) {
    const auto u = static_cast<size_t>(d);
    const int64_t padded = in[d] + at.paddingLo[u] + at.paddingHi[u];
    const int64_t extent = (at.windowDimensions[u] - 1) * at.windowDilation[u] + 1;
    dims.push_back((padded - extent) / at.windowStrides[u] + 1);
  }
  return Shape(dims);
}

// A window of padding only holds the identity: 0, -inf or +inf, an integer type's limits.
void setIdentity(HostTensor& y, int64_t e, OpCode op) {
  const DType t = y.aval.dtype;
  if (op == OpCode::ReduceWindowSum) return y.set(e, 0);
  const bool isMax = op == OpCode::ReduceWindowMax;
  if (isFloating(t)) return y.set(e, isMax ? -kInf : kInf);
  using I32 = std::numeric_limits<int32_t>;
  using I64 = std::numeric_limits<int64_t>;
  const int64_t limit = t == DType::I32 ? (isMax ? I32::min() : I32::max()) : (isMax ? I64::min() : I64::max());
  y.setBits(e, static_cast<uint64_t>(limit));
}

HostTensor reduceWindowRef(OpCode op, const HostTensor& x, const ir::WindowAttrs& at) {
  const Shape out = outShape(x.aval.shape, at);
  HostTensor y = HostTensor::zeros(Aval{out, x.aval.dtype});
  eachWindow(x.aval.shape, at, out, [&](int64_t e, const std::vector<int64_t>& inside) {
    if (inside.empty()) return setIdentity(y, e, op);
    double acc = x.get(inside[0]);
    for (size_t j = 1; j < inside.size(); ++j) {
      const double v = x.get(inside[j]);
      if (op == OpCode::ReduceWindowSum) acc += v;
      else if (std::isnan(v) || std::isnan(acc)) acc = std::nan("");
      else acc = op == OpCode::ReduceWindowMax ? std::max(acc, v) : std::min(acc, v);
    }
    y.set(e, acc);  // integer test values are small: exact in double
  });
  return y;
}

HostTensor selectAndScatterRef(const HostTensor& source, const HostTensor& x, const ir::WindowAttrs& at) {
  HostTensor y = HostTensor::zeros(x.aval);
  std::vector<double> sums(static_cast<size_t>(x.numel()), 0.0);
  eachWindow(x.aval.shape, at, source.aval.shape, [&](int64_t e, const std::vector<int64_t>& inside) {
    if (inside.empty()) return;
    int64_t best = inside[0];
    for (int64_t i : inside)
      if (x.get(i) > x.get(best)) best = i;  // strictly greater: the first maximum stays
    sums[static_cast<size_t>(best)] += source.get(e);
  });
  for (int64_t i = 0; i < y.numel(); ++i) y.set(i, sums[static_cast<size_t>(i)]);
  return y;
}

// Distinct values in [-2, 2] (distinct after rounding to the dtype up to 256 elements): a shuffled grid.
HostTensor distinctTensor(const Aval& aval, std::mt19937& rng) {
  const int64_t n = aval.numel();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<double> values;
  const int bits = static_cast<int>(std::ceil(std::log2(static_cast<double>(std::max<int64_t>(n, 2)))));
  const double step = isFloating(aval.dtype) ? std::ldexp(1.0, 2 - bits) : 1.0;  // n steps span 4
  for (int64_t i : order) values.push_back(static_cast<double>(i - n / 2) * step);
  return HostTensor::fromValues(aval, values);
}

// Small integers: most windows hold ties.
HostTensor tiedTensor(const Aval& aval, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 2);
  std::vector<double> values;
  for (int64_t i = 0; i < aval.numel(); ++i) values.push_back(pick(rng));
  return HostTensor::fromValues(aval, values);
}

const std::vector<DType>& windowTypes() {
  static const std::vector<DType> types{DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64};
  return types;
}

void addReduceCase(std::vector<OpCase>& cases, OpCode op, const std::string& name, HostTensor x,
                   const ir::WindowAttrs& at) {
  OpCase c;
  c.label = fmt::format("{} {} {} {}", ir::coreOpName(op), name, dtypeName(x.aval.dtype), x.aval.shape.toString());
  c.op = op;
  c.attrs = at;
  c.inputs = {std::move(x)};
  c.reference = [op, at](const std::vector<HostTensor>& in) {
    return std::vector<HostTensor>{reduceWindowRef(op, in[0], at)};
  };
  cases.push_back(std::move(c));
}

void addSelectCase(std::vector<OpCase>& cases, const std::string& name, HostTensor source, HostTensor x,
                   const ir::WindowAttrs& at) {
  OpCase c;
  c.label = fmt::format("select_and_scatter_add {} {} {}", name, dtypeName(x.aval.dtype), x.aval.shape.toString());
  c.op = OpCode::SelectAndScatterAdd;
  c.attrs = at;
  c.inputs = {std::move(source), std::move(x)};
  c.reference = [at](const std::vector<HostTensor>& in) {
    return std::vector<HostTensor>{selectAndScatterRef(in[0], in[1], at)};
  };
  cases.push_back(std::move(c));
}

}  // namespace

void addWindowCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (const WindowSpec& spec : windowSpecs()) {
    for (DType t : windowTypes()) {
      const Aval a{spec.shape, t};
      addReduceCase(cases, OpCode::ReduceWindowSum, spec.name, randomTensor(a, rng), spec.attrs);
      addReduceCase(cases, OpCode::ReduceWindowMax, spec.name, distinctTensor(a, rng), spec.attrs);
      addReduceCase(cases, OpCode::ReduceWindowMin, spec.name, distinctTensor(a, rng), spec.attrs);
      const Aval windows{outShape(spec.shape, spec.attrs), t};
      addSelectCase(cases, spec.name, randomTensor(windows, rng), distinctTensor(a, rng), spec.attrs);
    }
  }
  // Ties: the first maximum in row-major window order takes everything. Channels last, the channels are lanes
  // that select_and_scatter_add's kernel compares side by side.
  const WindowSpec tiedSpecs[] = {
      {"ties, overlapping 3x3 windows", {2, 6, 5}, window({1, 3, 3}, {1, 1, 2}, {0, 1, 1}, {0, 1, 1})},
      {"ties, NHWC overlapping 3x3 stride 2 pad 1", {2, 7, 6, 5},
       window({1, 3, 3, 1}, {1, 2, 2, 1}, {0, 1, 1, 0}, {0, 1, 1, 0})},
      {"ties, NHWC 3x3 stride 2 pad 1, 16 channels", {2, 7, 6, 16},
       window({1, 3, 3, 1}, {1, 2, 2, 1}, {0, 1, 1, 0}, {0, 1, 1, 0})}};
  for (const WindowSpec& tied : tiedSpecs)
    for (DType t : {DType::F32, DType::BF16, DType::I32}) {
      const Aval a{tied.shape, t};
      addReduceCase(cases, OpCode::ReduceWindowMax, tied.name, tiedTensor(a, rng), tied.attrs);
      addReduceCase(cases, OpCode::ReduceWindowMin, tied.name, tiedTensor(a, rng), tied.attrs);
      addSelectCase(cases, tied.name, randomTensor(Aval{outShape(tied.shape, tied.attrs), t}, rng), tiedTensor(a, rng),
                    tied.attrs);
    }
}

}  // namespace tsr::test
