// The vmap check of one op case (vmap_check.h).
#include "tests/ops/vmap_check.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"
#include "engine/transform/vmap.h"

namespace tsr::test {

namespace {

constexpr int64_t kBatch = 3;

// ---- Examples and stacking -------------------------------------------------------------------------------------

// Example k of one operand: its flat data rotated by k; a one-element operand varied in place instead.
HostTensor exampleOf(const HostTensor& t, int64_t k) {
  const int64_t n = t.numel();
  if (n == 0 || k == 0) return t;
  HostTensor r = HostTensor::zeros(t.aval);
  if (n > 1) {
    for (int64_t i = 0; i < n; ++i) r.setBits(i, t.getBits((i + k) % n));
    return r;
  }
  if (t.aval.dtype == DType::Bool) r.setBits(0, t.getBits(0) ^ static_cast<uint64_t>(k & 1));
  else if (isFloating(t.aval.dtype)) r.set(0, t.get(0) * (1.0 - 0.25 * static_cast<double>(k)));
  else r.setBits(0, t.getBits(0) + static_cast<uint64_t>(k));  // wraps within the dtype's width below
  if (!isFloating(t.aval.dtype) && t.aval.dtype != DType::Bool) {
    uint64_t bits = r.getBits(0);
    size_t width = dtypeSize(t.aval.dtype) * 8;
    if (width < 64) bits &= (uint64_t(1) << width) - 1;
    r.setBits(0, bits);
  }
  return r;
}

// Stacks equal-aval tensors along a new axis `axis` of the result.
HostTensor stackAt(const std::vector<HostTensor>& xs, int axis) {
  std::vector<int64_t> dims = xs[0].aval.shape.dims();
  dims.insert(dims.begin() + axis, static_cast<int64_t>(xs.size()));
  Shape s(dims);
  HostTensor out = HostTensor::zeros(Aval{s, xs[0].aval.dtype});
  for (int64_t o = 0; o < out.numel(); ++o) {
    std::vector<int64_t> idx = unravel(o, s);
    auto k = static_cast<size_t>(idx[static_cast<size_t>(axis)]);
    idx.erase(idx.begin() + axis);
    out.setBits(o, xs[k].getBits(ravel(idx, xs[k].aval.shape)));
  }
  return out;
}

// ---- Comparison ----------------------------------------------------------------------------------------------

void tolerance(DType t, double& rtol, double& atol) {
  switch (t) {
    case DType::F64: rtol = 1e-12; atol = 1e-12; break;
    case DType::F32: rtol = 1e-5; atol = 1e-5; break;
    case DType::F16: rtol = 2e-3; atol = 2e-3; break;
    case DType::BF16: rtol = 1.6e-2; atol = 1.6e-2; break;
    default: rtol = 0; atol = 0; break;
  }
}

// "" when equal: bitwise for integers and bools; for floats NaN matches NaN, and values agree within rtol
// plus an atol relative to the largest magnitude of the expected tensor (sums may cancel).
std::string compare(const HostTensor& got, const HostTensor& want) {
  if (!(got.aval == want.aval)) return "result " + got.aval.toString() + ", expected " + want.aval.toString();
  double rtol, atol;
  tolerance(want.aval.dtype, rtol, atol);
  double scale = 1;
  if (isFloating(want.aval.dtype))
    for (int64_t i = 0; i < want.numel(); ++i)
      if (std::isfinite(want.get(i))) scale = std::max(scale, std::fabs(want.get(i)));
  for (int64_t i = 0; i < want.numel(); ++i) {
    bool ok;
    double g = got.get(i), w = want.get(i);
    if (!isFloating(want.aval.dtype)) ok = got.getBits(i) == want.getBits(i);
    else if (std::isnan(w) || std::isnan(g)) ok = std::isnan(w) && std::isnan(g);
    else if (std::isinf(w) || std::isinf(g)) ok = g == w;
    else ok = std::fabs(g - w) <= atol * scale + rtol * std::fabs(w);
    if (!ok)
      return fmt::format("element {} [{}] of {}: vmap {:.9g}, per-example {:.9g}", i,
                         joinInts(unravel(i, want.aval.shape)), want.aval.toString(), g, w);
  }
  return "";
}

}  // namespace

// ---- One case, one layout ----------------------------------------------------------------------------------------


std::vector<Layout> layoutsFor(const OpCase& c) {
  std::vector<Layout> out;
  const size_t n = c.inputs.size();
  out.push_back({"in_axes 0", std::vector<int>(n, 0), 0});
  Layout last{"in_axes last, out_axes -1", {}, -1};
  for (const auto& in : c.inputs) last.inAxes.push_back(in.aval.rank());
  out.push_back(last);
  // A middle axis: axis 1 of every operand that has a dim (0 for scalars), and axis 1 of the results where
  // every result has a dim.
  bool anyDims = false;
  for (const auto& in : c.inputs) anyDims |= in.aval.rank() >= 1;
  if (anyDims) {
    std::vector<Aval> avals;
    for (const auto& in : c.inputs) avals.push_back(in.aval);
    auto results = ops::registry().find(c.op)->infer(avals, c.attrs);
    bool resultsHaveDims = results.ok();
    if (results.ok())
      for (const auto& r : *results) resultsHaveDims &= r.rank() >= 1;
    Layout middle{resultsHaveDims ? "in_axes 1, out_axes 1" : "in_axes 1", {}, resultsHaveDims ? 1 : 0};
    for (const auto& in : c.inputs) middle.inAxes.push_back(std::min(1, in.aval.rank()));
    out.push_back(middle);
  }
  if (n > 1)
    for (size_t j = 0; j < n; ++j) {
      Layout l{fmt::format("operand {} unbatched", j), std::vector<int>(n, 0), 0};
      l.inAxes[j] = -1;
      out.push_back(l);
    }
  return out;
}


// Returns "" or what went wrong.
std::string checkLayout(const OpCase& c, const Layout& layout) {
  const size_t n = c.inputs.size();
  // Per-example operands (an unbatched operand is example 0's for every example) and their eager results.
  std::vector<std::vector<HostTensor>> examples(kBatch);
  std::vector<std::vector<HostTensor>> wants(kBatch);
  for (int64_t k = 0; k < kBatch; ++k) {
    for (size_t i = 0; i < n; ++i) examples[k].push_back(exampleOf(c.inputs[i], layout.inAxes[i] < 0 ? 0 : k));
    auto r = capture([&] {
      std::vector<Array> xs;
      for (const auto& t : examples[k]) xs.push_back(toArray(t));
      return applyOp(c, xs);
    });
    if (!r.ok()) return fmt::format("eager op on example {}: {}", k, r.error().message);
    for (const auto& a : *r) wants[k].push_back(toHost(a));
  }
  std::vector<Array> stacked;
  for (size_t i = 0; i < n; ++i) {
    if (layout.inAxes[i] < 0) {
      stacked.push_back(toArray(examples[0][i]));
      continue;
    }
    std::vector<HostTensor> column;
    for (int64_t k = 0; k < kBatch; ++k) column.push_back(examples[k][i]);
    stacked.push_back(toArray(stackAt(column, layout.inAxes[i])));
  }
  auto got = capture([&] {
    ArrayFn f = [&c](const std::vector<Array>& xs) { return applyOp(c, xs); };
    return vmap(f, layout.inAxes, {layout.outAxis})(stacked);
  });
  if (!got.ok()) return "vmap: " + got.error().message;
  if (got->size() != wants[0].size())
    return fmt::format("vmap gave {} results, the op {}", got->size(), wants[0].size());
  for (size_t r = 0; r < got->size(); ++r) {
    std::vector<HostTensor> column;
    for (int64_t k = 0; k < kBatch; ++k) column.push_back(wants[k][r]);
    int axis = layout.outAxis < 0 ? column[0].aval.rank() : layout.outAxis;
    std::string diff = compare(toHost((*got)[r]), stackAt(column, axis));
    if (!diff.empty()) return fmt::format("result {}: {}", r, diff);
  }
  return "";
}

}  // namespace tsr::test
