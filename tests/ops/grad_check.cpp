// The gradient check of one op case against finite differences (grad_check.h).
#include "tests/ops/grad_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "engine/runtime/buffer.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/compile/jit.h"
#include "engine/transform/trace.h"

namespace tsr::test {

using ir::OpCode;

constexpr int kElementsPerInput = 24;
constexpr size_t kFewCases = 5;

// ---- Host tensors, arrays and the op's own kernel ----------------------------------------------------------

// The op on host tensors with its CPU kernel: the numeric side never touches a vjp rule or the Array API.
Result<std::vector<HostTensor>> runKernel(const ir::OpDef& def, const std::vector<HostTensor>& inputs,
                                          const ir::Attrs& attrs) {
  std::vector<runtime::BufferPtr> bufs;
  std::vector<Aval> avals;
  for (const auto& in : inputs) {
    auto b = runtime::Buffer::allocate(in.aval.bytes());
    if (!b.ok()) return b.takeError();
    if (in.aval.bytes()) std::memcpy((*b)->data(), in.bytes.data(), in.bytes.size());
    bufs.push_back(*b);
    avals.push_back(in.aval);
  }
  std::vector<Aval> outAvals;
  auto outs = runtime::runCpuOp(def, bufs, avals, attrs, &outAvals);
  if (!outs.ok()) return outs.takeError();
  std::vector<HostTensor> r;
  for (size_t i = 0; i < outs->size(); ++i) {
    HostTensor t = HostTensor::zeros(outAvals[i]);
    if (outAvals[i].bytes()) std::memcpy(t.bytes.data(), (*outs)[i]->data(), t.bytes.size());
    r.push_back(std::move(t));
  }
  return r;
}

bool allFinite(const HostTensor& t) {
  if (!isFloating(t.aval.dtype)) return true;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.get(i))) return false;
  return true;
}

std::string indexString(int64_t flat, const Shape& s) {
  return s.rank() == 0 ? "[]" : "[" + joinInts(unravel(flat, s)) + "]";
}

// ---- Precision: step and tolerance follow the least precise float the case touches --------------------------

int precisionRank(DType t) {
  switch (t) {
    case DType::F64: return 3;
    case DType::F32: return 2;
    case DType::F16: return 1;
    default: return 0;  // bf16
  }
}

struct Precision {
  double step;  // relative to max(1, |x|)
  double rtol;  // of max(|analytic|, |numeric|)
  double atol;  // of the largest numeric gradient of the operand
};

// f64: central differences with h = 1e-6 err by ~eps64 * |f| / h ~ 1e-10 relative plus h^2 f''' / 6 ~ 1e-12.
// f32: h = 1e-3 errs by ~eps32 * |f| / h ~ 1e-4 relative, and by more where sums of ~100 terms round.
// f16 / bf16 only appear as the result of a convert from f64, which is linear: a wide step over the rounding
// grid (one ulp at |x| <= 4 is 2^-9 resp. 2^-6) leaves an error of ulp / 2h.
Precision precisionFor(DType t) {
  switch (t) {
    case DType::F64: return {1e-6, 1e-5, 1e-6};
    case DType::F32: return {1e-3, 2e-2, 2e-3};
    case DType::F16: return {5e-2, 5e-2, 5e-2};
    default: return {2.5e-1, 5e-2, 5e-2};
  }
}

// ---- Kinks and singularities ---------------------------------------------------------------------------------

// Central differences are meaningful only where the op is smooth within a few steps of x. Each rule returns a
// reason when element e (of every operand: elementwise operands share one shape) is too close to a kink, a
// discontinuity or a singular derivative.
std::string elementwiseKink(OpCode op, const std::vector<HostTensor>& in, int64_t e) {
  constexpr double kKink = 1e-4;      // kinks: the slope is constant on each side, 100 steps suffice
  constexpr double kSingular = 2e-2;  // derivatives that blow up: keep the third derivative small
  auto x = [&](size_t i) { return in[i].get(e); };
  switch (op) {
    case OpCode::Abs:
    case OpCode::Relu: return std::fabs(x(0)) < kKink ? "x near 0 (kink)" : "";
    case OpCode::Sqrt:
    case OpCode::Rsqrt:
    case OpCode::Log: return x(0) < kSingular ? "x near 0 (singular derivative)" : "";
    case OpCode::Log1p: return x(0) < -1 + kSingular ? "x near -1 (singular derivative)" : "";
    case OpCode::ErfInv: return std::fabs(x(0)) > 1 - kSingular ? "x near +-1 (singular derivative)" : "";
    case OpCode::Tan: return std::fabs(std::cos(x(0))) < 0.1 ? "x near a pole" : "";
    case OpCode::Pow: return x(0) < kSingular ? "base near 0" : "";
    case OpCode::Div: return std::fabs(x(1)) < kSingular ? "divisor near 0" : "";
    case OpCode::Atan2: return x(0) * x(0) + x(1) * x(1) < kSingular ? "(y, x) near the origin" : "";
    case OpCode::Max:
    case OpCode::Min: return std::fabs(x(0) - x(1)) < kKink ? "a tie (kink)" : "";
    case OpCode::Clamp: {  // operands (lo, x, hi)
      double lo = x(0), v = x(1), hi = x(2);
      bool near = std::fabs(v - lo) < kKink || std::fabs(v - hi) < kKink || std::fabs(lo - hi) < kKink;
      return near ? "a tie between lo, x and hi (kink)" : "";
    }
    case OpCode::Rem: {  // a jump wherever a / b crosses an integer
      double b = std::fabs(x(1)), r = std::fabs(std::fmod(x(0), x(1)));
      return (b < kSingular || r < kKink * b || b - r < kKink * b) ? "a / b near an integer (jump)" : "";
    }
    default: return "";
  }
}

bool inAxes(const ir::Ints& axes, int64_t d) { return std::find(axes.begin(), axes.end(), d) != axes.end(); }

// reduce_max / reduce_min: a kink wherever the two extreme elements of a reduced group are (nearly) tied.
std::string reductionKink(OpCode op, const HostTensor& x, const ir::Ints& axes) {
  if (op != OpCode::ReduceMax && op != OpCode::ReduceMin) return "";
  const Shape& s = x.aval.shape;
  std::vector<int64_t> keptDims;
  for (int d = 0; d < s.rank(); ++d)
    if (!inAxes(axes, d)) keptDims.push_back(s[d]);
  Shape kept(keptDims);
  std::map<int64_t, std::vector<double>> groups;
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, s), k;
    for (int d = 0; d < s.rank(); ++d)
      if (!inAxes(axes, d)) k.push_back(idx[static_cast<size_t>(d)]);
    groups[ravel(k, kept)].push_back(op == OpCode::ReduceMax ? x.get(i) : -x.get(i));
  }
  for (auto& [g, v] : groups) {
    if (v.size() < 2) continue;
    std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
    if (v[0] - v[1] < 1e-4) return "two extreme elements of a group tie (kink)";
  }
  return "";
}

// ---- Case selection --------------------------------------------------------------------------------------------

// The float dtype of a case's float operands, or nullopt when it has none or they differ.
std::optional<DType> caseFloatType(const OpCase& c) {
  std::optional<DType> t;
  for (const auto& in : c.inputs) {
    if (!isFloating(in.aval.dtype)) continue;
    if (t && *t != in.aval.dtype) return std::nullopt;
    t = in.aval.dtype;
  }
  return t;
}

// Per differentiable op: its f64 cases, plus its f32 cases where it has fewer than kFewCases f64 ones.
std::vector<const OpCase*> gradCases(const std::vector<OpCase>& cases, std::vector<std::string>& noCases) {
  std::map<OpCode, std::vector<const OpCase*>> f64, f32;
  for (const auto& c : cases) {
    const ir::OpDef* def = ops::registry().find(c.op);
    if (!def || !def->differentiable || def->vjpRefused) continue;
    auto t = caseFloatType(c);
    if (t == DType::F64) f64[c.op].push_back(&c);
    if (t == DType::F32) f32[c.op].push_back(&c);
  }
  std::vector<const OpCase*> out;
  for (const auto& def : ops::registry().all()) {
    if (static_cast<uint32_t>(def.code) >= ir::kNumCoreOps || !def.differentiable || def.vjpRefused) continue;
    // Ops with only a few f64 cases (control flow builds most of its bodies in f32) also get their f32 cases.
    std::vector<const OpCase*> chosen = f64[def.code];
    if (chosen.size() < kFewCases) chosen.insert(chosen.end(), f32[def.code].begin(), f32[def.code].end());
    if (chosen.empty()) noCases.push_back(def.name);
    out.insert(out.end(), chosen.begin(), chosen.end());
  }
  return out;
}

// Weights in {-2, ..., 2} \ {0} in steps of 1/8: exact in every float dtype, so W itself adds no rounding.
HostTensor randomWeights(const Aval& aval, std::mt19937& rng) {
  HostTensor w = HostTensor::zeros(aval);
  std::uniform_int_distribution<int> pick(-16, 16);
  for (int64_t i = 0; i < w.numel(); ++i) {
    int v = pick(rng);
    w.set(i, (v == 0 ? 3 : v) / 8.0);
  }
  return w;
}

// Up to n distinct random flat indices of [0, numel).
std::vector<int64_t> sampleElements(int64_t numel, int n, std::mt19937& rng) {
  std::vector<int64_t> all(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) all[static_cast<size_t>(i)] = i;
  if (numel > n) {
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(static_cast<size_t>(n));
    std::sort(all.begin(), all.end());
  }
  return all;
}

// ---- One case ------------------------------------------------------------------------------------------------


struct CaseRun {
  const OpCase& c;
  const ir::OpDef& def;
  std::vector<HostTensor> outputs;  // from the kernel
  std::vector<Array> weights;       // per result; invalid for integer results
  std::vector<HostTensor> hostWeights;
};

std::string joined(const std::set<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}


// The analytic gradient of L: vjp of the op with cotangents W.
std::vector<Array> analyticGrads(const CaseRun& run, const std::vector<Array>& inputs) {
  const OpCase& c = run.c;
  VjpOutput v = vjp([&c](const std::vector<Array>& xs) { return applyOp(c, xs); }, inputs);
  return v.pullback(run.weights);
}

// sum_r sum_j W_rj * (op(x + h)_rj - op(x - h)_rj): the differences first, so unchanged outputs add nothing.
double weightedDifference(const CaseRun& run, const std::vector<HostTensor>& plus, const std::vector<HostTensor>& minus) {
  double s = 0;
  for (size_t r = 0; r < plus.size(); ++r) {
    if (!run.weights[r].valid()) continue;
    for (int64_t j = 0; j < plus[r].numel(); ++j) s += run.hostWeights[r].get(j) * (plus[r].get(j) - minus[r].get(j));
  }
  return s;
}

void checkGradCase(const OpCase& c, GradReport& report, std::mt19937& rng) {
  const ir::OpDef& def = *ops::registry().find(c.op);
  const std::string op = def.name;
  report.dtypes[op].insert(std::string(dtypeName(*caseFloatType(c))));
  auto fail = [&](const std::string& what) { report.failures.push_back({op, c.label, what}); };
  auto skipCase = [&](const std::string& why) {
    report.skippedCases[op]++;
    report.skipReasons[op].insert(why);
  };

  for (const auto& in : c.inputs)
    if (!allFinite(in)) return skipCase("non-finite inputs");
  auto outs = runKernel(def, c.inputs, c.attrs);
  if (!outs.ok()) return fail("kernel: " + outs.error().message);
  CaseRun run{c, def, *outs, {}, {}};
  DType precision = *caseFloatType(c);
  bool anyFloatResult = false;
  for (const auto& o : run.outputs) {
    if (!allFinite(o)) return skipCase("non-finite results");
    if (isFloating(o.aval.dtype)) {
      anyFloatResult = true;
      if (precisionRank(o.aval.dtype) < precisionRank(precision)) precision = o.aval.dtype;
      run.hostWeights.push_back(randomWeights(o.aval, rng));
      run.weights.push_back(toArray(run.hostWeights.back()));
    } else {
      run.hostWeights.push_back(HostTensor{});
      run.weights.push_back(Array());
    }
  }
  if (!anyFloatResult) return skipCase("no float result (the gradient is zero by definition)");
  if (def.family == "reduction" && std::holds_alternative<ir::ReduceAttrs>(c.attrs)) {
    std::string why = reductionKink(c.op, c.inputs[0], std::get<ir::ReduceAttrs>(c.attrs).axes);
    if (!why.empty()) return skipCase(why);
  }
  const Precision prec = precisionFor(precision);

  std::vector<Array> inputs;
  for (const auto& in : c.inputs) inputs.push_back(toArray(in));
  auto grads = capture([&] { return analyticGrads(run, inputs); });
  if (c.gradientRefused) {
    if (grads.ok()) return fail("vjp gave a gradient where it must refuse one");
    return skipCase("gradient refused, as JAX");
  }
  if (!grads.ok()) return fail("vjp: " + grads.error().message);
  if (grads->size() != inputs.size())
    return fail(fmt::format("vjp returned {} cotangents for {} operands", grads->size(), inputs.size()));

  bool elementwise = def.family == "elementwise";
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const HostTensor& x = c.inputs[i];
    if (!isFloating(x.aval.dtype)) continue;  // indices and starts are not perturbed
    const Array& g = (*grads)[i];
    if (!g.valid() || !(g.aval() == x.aval)) {
      fail(fmt::format("operand {}: cotangent {} for operand {}", i, g.valid() ? g.aval().toString() : "missing",
                       x.aval.toString()));
      continue;
    }
    HostTensor analytic = toHost(g);
    struct Check { int64_t e; double a, n, x; };
    std::vector<Check> checks;
    for (int64_t e : sampleElements(x.numel(), kElementsPerInput, rng)) {
      if (elementwise) {
        std::string why = elementwiseKink(c.op, c.inputs, e);
        if (!why.empty()) {
          report.skippedElements[op]++;
          report.skipReasons[op].insert(why);
          continue;
        }
      }
      std::vector<HostTensor> plus = c.inputs, minus = c.inputs;
      double x0 = x.get(e), h = prec.step * std::max(1.0, std::fabs(x0));
      plus[i].set(e, x0 + h);
      minus[i].set(e, x0 - h);
      double width = plus[i].get(e) - minus[i].get(e);  // the step as stored in the dtype
      auto fp = runKernel(def, plus, c.attrs), fm = runKernel(def, minus, c.attrs);
      if (!fp.ok() || !fm.ok()) return fail("kernel failed on a perturbed input");
      checks.push_back({e, analytic.get(e), weightedDifference(run, *fp, *fm) / width, x0});
    }
    double scale = 0;
    for (const auto& k : checks) scale = std::max(scale, std::fabs(k.n));
    for (const auto& k : checks) {
      report.checkedElements[op]++;
      double tol = prec.rtol * std::max(std::fabs(k.a), std::fabs(k.n)) + prec.atol * std::max(scale, 1e-3);
      if (!(std::fabs(k.a - k.n) <= tol))
        fail(fmt::format("operand {} element {} {} (x = {:.9g}): analytic {:.9g}, numeric {:.9g}, |diff| {:.3g} > tol {:.3g}",
                         i, k.e, indexString(k.e, x.aval.shape), k.x, k.a, k.n, std::fabs(k.a - k.n), tol));
    }
  }
  report.checkedCases[op]++;

  // Composition: the same pullback traced and compiled by jit equals the eager one.
  Jit jitted = jit([&run](const std::vector<Array>& xs) { return analyticGrads(run, xs); }, "grad_" + op);
  auto viaJit = jitted(inputs);
  if (!viaJit.ok()) return fail("jit(vjp): " + viaJit.error().message);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!isFloating(c.inputs[i].aval.dtype)) continue;
    auto want = (*grads)[i].toDoubles(), got = (*viaJit)[i].toDoubles();
    if ((*viaJit)[i].aval() != (*grads)[i].aval()) {
      fail(fmt::format("jit(vjp) operand {}: cotangent {} but eager gave {}", i, (*viaJit)[i].aval().toString(),
                       (*grads)[i].aval().toString()));
      continue;
    }
    // bf16 / f16: the compiled kernels keep f32 between the ops they fuse (excess precision) where eager rounds
    // after each, so the two may differ by a few units in the last place: 2^-6 of the element (2 ulps of bf16)
    // plus 2^-8 of the largest (what cancellation leaves).
    const bool half = precision == DType::BF16 || precision == DType::F16;
    double largest = 0;
    for (double w : want) largest = std::max(largest, std::fabs(w));
    const double rtol = precision == DType::F64 ? 1e-12 : half ? 1.0 / 64 : 1e-5;
    const double atol = half ? largest / 256 : rtol;
    for (size_t e = 0; e < want.size(); ++e)
      if (!(std::fabs(got[e] - want[e]) <= rtol * std::fabs(want[e]) + atol)) {
        fail(fmt::format("jit(vjp) operand {} element {}: jit {:.9g}, eager {:.9g}", i, e, got[e], want[e]));
        break;
      }
  }
}

}  // namespace tsr::test
