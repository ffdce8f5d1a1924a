// Gradients checked op by op against finite differences. Every differentiable op runs over its conformance
// cases (tests/ops/cases_*.cpp): the f64 cases where the op accepts f64, and its f32 cases (with looser
// tolerances) where it has none or only a few (control-flow bodies are mostly built in f32).
// For each case, L(inputs) = sum_r sum(op(inputs)_r * W_r) with a fixed random W_r per float result; the
// analytic gradient is the pullback of tsr::vjp with cotangents W, the numeric one central differences of the
// op's CPU kernel (independent of every rule), on up to kElementsPerInput random elements of every float operand.
// Integer operands (indices, starts) are not perturbed; elements within reach of a kink or a singularity of the
// op (abs at 0, max ties, log at 0, ...) are skipped. Every case also runs once as jit(vjp) against eager vjp,
// and every float dtype's cases run through vjp once to check the cotangents' avals.
// A few API-level checks cover broadcasting, multi-axis reductions and the compositions built on them.
#include "tests/check.h"

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
#include "tests/ops/grad_check.h"
#include "tests/ops/harness.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;

namespace {

// ---- API-level checks ---------------------------------------------------------------------------------------

Array randomF64(const Shape& s, std::mt19937& rng, double lo = -1.5, double hi = 1.5) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = d(rng);
  return Array::fromVector(v, s, DType::F64);
}

using MultiLoss = std::function<Array(const std::vector<Array>&)>;

// grad of a scalar loss of several f64 arrays (through tsr::grad on a list Tree) against central differences
// on every element. Returns "" or the first mismatch.
std::string checkApiGrad(const MultiLoss& loss, const std::vector<Array>& args) {
  std::vector<Tree> items;
  for (const auto& a : args) items.emplace_back(a);
  auto g = capture([&] {
    return grad([&](const Tree& t) { return loss(t.leaves()); })(Tree::list(items));
  });
  if (!g.ok()) return "grad: " + g.error().message;
  std::vector<Array> grads = g->leaves();
  if (grads.size() != args.size()) return "grad returned a tree with a different number of leaves";
  for (size_t i = 0; i < args.size(); ++i) {
    if (grads[i].aval() != args[i].aval())
      return fmt::format("argument {}: gradient {} for {}", i, grads[i].aval().toString(), args[i].aval().toString());
    std::vector<double> x = args[i].toDoubles(), analytic = grads[i].toDoubles();
    for (size_t e = 0; e < x.size(); ++e) {
      const double h = 1e-6;
      auto at = [&](double v) {
        std::vector<double> p = x;
        p[e] = v;
        std::vector<Array> moved = args;
        moved[i] = Array::fromVector(p, args[i].shape(), DType::F64);
        return loss(moved).item();
      };
      double numeric = (at(x[e] + h) - at(x[e] - h)) / (2 * h);
      if (!(std::fabs(analytic[e] - numeric) <= 1e-6 * (1 + std::fabs(numeric))))
        return fmt::format("argument {} {} element {} {}: analytic {:.10g}, numeric {:.10g}", i,
                           args[i].aval().toString(), e, indexString(static_cast<int64_t>(e), args[i].shape()),
                           analytic[e], numeric);
    }
  }
  return "";
}

// Every op case, built once for the program.
const std::vector<OpCase>& opCases() {
  static const std::vector<OpCase> all = allCases();
  return all;
}

}  // namespace

// Every differentiable op, every (f64) case, against finite differences; and jit(vjp) against eager vjp.
TEST_CASE("everyDifferentiableOpMatchesFiniteDifferences") {
  std::vector<std::string> missing;
  std::vector<const OpCase*> cases = gradCases(opCases(), missing);
  std::mt19937 rng(4321);
  GradReport report;
  for (const OpCase* c : cases) checkGradCase(*c, report, rng);

  std::set<std::string> ops;
  for (const auto& [op, n] : report.checkedCases) ops.insert(op);
  for (const auto& [op, n] : report.skippedCases) ops.insert(op);
  for (const auto& op : ops) {
    std::string reasons = joined(report.skipReasons[op], "; ");
    MESSAGE(fmt::format("{:<22} {:<8} {:3} cases checked ({:4} elements), {:2} cases and {:3} elements skipped{}{}", op,
                        joined(report.dtypes[op]), report.checkedCases[op], report.checkedElements[op],
                        report.skippedCases[op], report.skippedElements[op], reasons.empty() ? "" : ": ", reasons));
  }
  int failingOps = printFailures(report.failures);
  REQUIRE_MESSAGE(missing.empty(), "differentiable ops without f64 or f32 cases: " << join(missing, ", "));
  REQUIRE_MESSAGE(report.failures.empty(), report.failures.size() << " gradient mismatches or errors in " << failingOps
                                                                  << " ops over " << cases.size() << " cases");
}

// Every differentiable op's vjp runs for every float dtype it accepts (f32, bf16, f16 too, not only the f64
// cases checked numerically above) and gives each float operand a cotangent of its own aval.
TEST_CASE("vjpRunsForEveryFloatDtype") {
  std::mt19937 rng(99);
  std::vector<Failure> failures;
  std::map<std::string, std::set<std::string>> dtypesRun;
  for (const OpCase& c : opCases()) {
    const ir::OpDef& def = *ops::registry().find(c.op);
    if (!def.differentiable || def.vjpRefused || !caseFloatType(c)) continue;
    std::vector<Array> inputs;
    for (const auto& in : c.inputs) inputs.push_back(toArray(in));
    auto outs = capture([&] { return applyOp(c, inputs); });
    if (!outs.ok()) {
      failures.push_back({def.name, c.label, "the op itself: " + outs.error().message});
      continue;
    }
    std::vector<Array> weights;
    for (const auto& o : *outs)
      weights.push_back(isFloating(o.dtype()) ? toArray(randomWeights(o.aval(), rng)) : Array());
    auto grads = capture([&] {
      return vjp([&c](const std::vector<Array>& xs) { return applyOp(c, xs); }, inputs).pullback(weights);
    });
    if (c.gradientRefused) {  // the refusal itself is what the case checks
      if (grads.ok()) failures.push_back({def.name, c.label, "vjp gave a gradient where it must refuse one"});
      continue;
    }
    if (!grads.ok()) {
      failures.push_back({def.name, c.label, grads.error().message});
      continue;
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!isFloating(inputs[i].dtype())) continue;
      const Array& g = (*grads)[i];
      if (!g.valid() || g.aval() != inputs[i].aval())
        failures.push_back({def.name, c.label,
                            fmt::format("operand {} is {} but its cotangent is {}", i, inputs[i].aval().toString(),
                                        g.valid() ? g.aval().toString() : "missing")});
    }
    dtypesRun[def.name].insert(std::string(dtypeName(*caseFloatType(c))));
  }
  for (const auto& [op, ts] : dtypesRun) {
    MESSAGE(fmt::format("{:<22} vjp ran for {}", op, joined(ts)));
  }
  int failingOps = printFailures(failures);
  REQUIRE_MESSAGE(failures.empty(), failures.size() << " cases of " << failingOps << " ops whose vjp failed");
}

// Broadcasting: the gradient of a broadcast operand sums over the broadcast dims.
TEST_CASE("broadcastingBinaryOps") {
  const char* const rows[] = {
      "sum(a + b), a [2,3], b [3]",
      "sum(a + b), a [2,3], b [2,1]",
      "sum(sin(a * b) * a), b [2,1]",
      "sum((a - b) / (2 + b * b)), b [] scalar",
      "sum(maximum(a, b) * a), b [1,3]",
      "sum(where(a > 0, a * b, b)), b [3]",
  };
  for (int which = 0; which < static_cast<int>(std::size(rows)); ++which) {
    SUBCASE(rows[which]) {
      std::mt19937 rng(7 + which);
      Array a = randomF64({2, 3}, rng);
      const Shape bShapes[] = {{3}, {2, 1}, {2, 1}, {}, {1, 3}, {3}};
      Array b = randomF64(bShapes[which], rng);
      MultiLoss losses[] = {
          [](const std::vector<Array>& x) { return sum(x[0] + x[1]); },
          [](const std::vector<Array>& x) { return sum(x[0] + x[1]); },
          [](const std::vector<Array>& x) { return sum(sin(x[0] * x[1]) * x[0]); },
          [](const std::vector<Array>& x) { return sum((x[0] - x[1]) / (2.0 + x[1] * x[1])); },
          [](const std::vector<Array>& x) { return sum(maximum(x[0], x[1]) * x[0]); },
          [](const std::vector<Array>& x) { return sum(where(x[0] > 0.0, x[0] * x[1], x[1])); },
      };
      std::string diff = checkApiGrad(losses[which], {a, b});
      REQUIRE_MESSAGE(diff.empty(), diff.c_str());
    }
  }
}

// Reductions over several axes, with and without kept dims, and the compositions built on them.
TEST_CASE("reductionsAndCompositions") {
  const char* const rows[] = {
      "sum(x, {0,2}) squared",
      "sum(x, {0,2}, keepDims) * x",
      "mean(x * x, {1})",
      "mean over all axes of exp(x)",
      "max(x, {1}) weighted",
      "prod(x, {2})",
      "softmax(x, -1) weighted",
      "softmax(x, 1) weighted",
      "logSoftmax(x) weighted",
      "logsumexp(x, {-1})",
      "logsumexp(x, {0,2}, keepDims) - x",
      "gelu and sigmoid",
  };
  for (int which = 0; which < static_cast<int>(std::size(rows)); ++which) {
    SUBCASE(rows[which]) {
      std::mt19937 rng(100 + which);
      Array x = randomF64({2, 3, 4}, rng, 0.3, 1.5);
      Array w = randomF64({2, 3, 4}, rng);
      Array w1 = randomF64({2, 4}, rng);
      MultiLoss losses[] = {
          [](const std::vector<Array>& v) { return sum(square(sum(v[0], {0, 2}))); },
          [](const std::vector<Array>& v) { return sum(sum(v[0], {0, 2}, true) * v[0]); },
          [](const std::vector<Array>& v) { return sum(mean(v[0] * v[0], {1}) * v[0 + 2]); },
          [](const std::vector<Array>& v) { return mean(exp(v[0])); },
          [](const std::vector<Array>& v) { return sum(max(v[0], {1}) * v[2]); },
          [](const std::vector<Array>& v) { return sum(prod(v[0], {2})); },
          [](const std::vector<Array>& v) { return sum(softmax(v[0], -1) * v[1]); },
          [](const std::vector<Array>& v) { return sum(softmax(v[0], 1) * v[1]); },
          [](const std::vector<Array>& v) { return sum(logSoftmax(v[0]) * v[1]); },
          [](const std::vector<Array>& v) { return sum(logsumexp(v[0], {-1}) * sum(v[1], {-1})); },
          [](const std::vector<Array>& v) { return sum(square(logsumexp(v[0], {0, 2}, true) - v[0])); },
          [](const std::vector<Array>& v) { return sum(gelu(v[0]) * sigmoid(v[0] * v[1])); },
      };
      // Only x is differentiated; the weights ride along as constants.
      Array wc = w, w1c = w1;
      MultiLoss f = [&losses, which, wc, w1c](const std::vector<Array>& v) {
        return losses[which]({v[0], wc, w1c});
      };
      std::string diff = checkApiGrad(f, {x});
      REQUIRE_MESSAGE(diff.empty(), diff.c_str());
    }
  }
}

// matmul with batch broadcasting ([2,1,3,4] @ [5,4,2] -> [2,5,3,2]), vector operands and einsum.
TEST_CASE("contractions") {
  const char* const rows[] = {
      "matmul [2,1,3,4] @ [5,4,2]",
      "matmul [3,4] @ [4]",
      "matmul [4] @ [2,4,3]",
      "einsum bij,bjk->bik",
      "take and tanh",
  };
  for (int which = 0; which < static_cast<int>(std::size(rows)); ++which) {
    SUBCASE(rows[which]) {
      std::mt19937 rng(200 + which);
      const std::pair<Shape, Shape> shapes[] = {
          {{2, 1, 3, 4}, {5, 4, 2}}, {{3, 4}, {4}}, {{4}, {2, 4, 3}}, {{2, 3, 4}, {2, 4, 5}}, {{6, 3}, {2, 3}}};
      Array a = randomF64(shapes[which].first, rng), b = randomF64(shapes[which].second, rng);
      auto checkFn = [&](const MultiLoss& loss) { return checkApiGrad(loss, {a, b}); };
      std::string diff;
      switch (which) {
        case 3:
          diff = checkFn([](const std::vector<Array>& v) { return sum(sin(einsum("bij,bjk->bik", v[0], v[1]))); });
          break;
        case 4: {
          Array idx = Array::fromVector(std::vector<int32_t>{5, 0, 2, 2}, Shape{4});
          diff = checkFn([idx](const std::vector<Array>& v) {
            return sum(tanh(take(v[0], idx, 0)) * sum(v[1], {0}));
          });
          break;
        }
        default:
          diff = checkFn([](const std::vector<Array>& v) {
            Array y = matmul(v[0], v[1]);
            return sum(y * y * 0.5 + y);
          });
      }
      REQUIRE_MESSAGE(diff.empty(), diff.c_str());
    }
  }
}
