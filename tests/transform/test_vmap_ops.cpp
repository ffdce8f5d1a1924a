// vmap checked op by op: for every conformance case (every op, every dtype it accepts, the edge shapes), three
// examples are built from the case's inputs (example k: each operand's flat data rotated by k elements, so values
// differ but stay in the op's domain; one-element operands are varied in place: integers + k, floats scaled by
// 1 - k/4). vmap(op) on the stacked examples must equal the stack of the op run eagerly on each example: exactly
// for integers and bools, within a tight tolerance for floats (batched reductions and contractions may sum in
// another order). The layouts: batch axis 0 everywhere; the batch axis last on every operand and on the result
// (out_axes -1); axis 1 in and out; and, for each operand in turn, that operand unbatched (in_axes -1, example
// 0's value for every example). Then the compositions: nested vmap, vmap of jit, jit of vmap, vmap of grad,
// out_axes, and errors.
#include "tests/check.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/compile/jit.h"
#include "engine/transform/trace.h"
#include "engine/transform/vmap.h"
#include "tests/ops/harness.h"
#include "tests/ops/vmap_check.h"

using namespace tsr;
using namespace tsr::test;

namespace {

// ---- Small functions for the compositions ----------------------------------------------------------------------

Array randomF32(const Shape& s, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(-1.5, 1.5);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = d(rng);
  return Array::fromVector(v, s, DType::F32);
}

// Example b of a stacked array along axis 0.
Array row(const Array& x, int64_t b) { return squeeze(sliceAxis(x, 0, b, b + 1), {0}); }

std::string compareArrays(const Array& got, const Array& want, double tol = 1e-5) {
  if (got.aval() != want.aval()) return "aval " + got.aval().toString() + ", expected " + want.aval().toString();
  auto g = got.toDoubles(), w = want.toDoubles();
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - w[i]) <= tol * (1 + std::fabs(w[i]))))
      return fmt::format("element {}: got {:.9g}, expected {:.9g}", i, g[i], w[i]);
  return "";
}

// f(x: [4,5], y: [5]) -> ([4], [5, 4]): a reduction, a broadcast, a contraction and a transpose.
std::vector<Array> small(const std::vector<Array>& a) {
  Array h = tanh(a[0] * a[1]) + exp(a[0] * 0.1);
  return {sum(h, {1}) + matmul(a[0], a[1]), transpose(h) * 2.0};
}

// Every op case, built once for the program.
const std::vector<OpCase>& opCases() {
  static const std::vector<OpCase> all = allCases();
  return all;
}

}  // namespace

TEST_CASE("everyOpEveryCaseEveryLayout") {
  std::vector<Failure> failures;
  std::map<std::string, int> layoutsRun, casesRun;
  std::set<std::string> noOperands;
  for (const auto& c : opCases()) {
    const ir::OpDef* def = ops::registry().find(c.op);
    REQUIRE(def);
    if (c.inputs.empty()) {  // constant, iota: nothing to batch, so their batching rule never runs
      noOperands.insert(def->name);
      continue;
    }
    casesRun[def->name]++;
    for (const Layout& l : layoutsFor(c)) {
      layoutsRun[def->name]++;
      std::string diff = checkLayout(c, l);
      if (!diff.empty()) failures.push_back({def->name, c.label + " (" + l.name + ")", diff});
    }
  }
  for (const auto& [op, n] : casesRun) MESSAGE(fmt::format("{:<22} {:4} cases, {:4} layouts", op, n, layoutsRun[op]));
  for (const auto& op : noOperands) MESSAGE(fmt::format("{:<22} no operands: its batching rule cannot run", op));
  int failingOps = printFailures(failures);
  REQUIRE_MESSAGE(failures.empty(), failures.size() << " vmap mismatches or errors in " << failingOps << " ops");
}

// vmap(vmap(f)) over a [3, 2, ...] stack equals the double loop; the inner vmap maps x's axis 1 of the
// outer example and leaves y unbatched.
TEST_CASE("nestedVmap") {
  std::mt19937 rng(1);
  Array x = randomF32({3, 4, 2, 5}, rng), y = randomF32({3, 5}, rng);
  ArrayFn inner = vmap(small, {1, -1}, {0, 0});  // x: [4, 2, 5] -> 2 examples of [4, 5]
  ArrayFn outer = vmap(inner, {0, 0}, {0, 0});
  auto got = capture([&] { return outer({x, y}); });
  REQUIRE_MESSAGE(got.ok(), got.error().message);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      Array xij = squeeze(sliceAxis(row(x, i), 1, j, j + 1), {1});
      std::vector<Array> want = small({xij, row(y, i)});
      for (size_t o = 0; o < want.size(); ++o) {
        std::string d = compareArrays(row(row((*got)[o], i), j), want[o]);
        REQUIRE_MESSAGE(d.empty(), "output " << o << " example (" << i << ", " << j << "): " << d.c_str());
      }
    }
}

TEST_CASE("vmapOfJitAndJitOfVmap") {
  std::mt19937 rng(2);
  Array x = randomF32({6, 4, 5}, rng), y = randomF32({6, 5}, rng);
  Jit jitted = jit(small, "small");
  ArrayFn callJit = [&jitted](const std::vector<Array>& a) {
    auto r = jitted(a);
    if (!r.ok()) raise(r.takeError());
    return *r;
  };
  auto vmapOfJit = capture([&] { return vmap(callJit)({x, y}); });
  REQUIRE_MESSAGE(vmapOfJit.ok(), vmapOfJit.error().message);
  Jit jitOfVmap = jit(vmap(small), "vmap_small");
  auto viaJit = jitOfVmap({x, y});
  REQUIRE_MESSAGE(viaJit.ok(), viaJit.error().message);
  for (int64_t b = 0; b < 6; ++b) {
    std::vector<Array> want = small({row(x, b), row(y, b)});
    for (size_t o = 0; o < want.size(); ++o) {
      std::string d1 = compareArrays(row((*vmapOfJit)[o], b), want[o]);
      REQUIRE_MESSAGE(d1.empty(), "vmap(jit) output " << o << " example " << b << ": " << d1.c_str());
      std::string d2 = compareArrays(row((*viaJit)[o], b), want[o]);
      REQUIRE_MESSAGE(d2.empty(), "jit(vmap) output " << o << " example " << b << ": " << d2.c_str());
    }
  }
}

// Per-example gradients: vmap(grad(f)) equals grad(f) example by example.
TEST_CASE("vmapOfGrad") {
  std::mt19937 rng(3);
  Array xs = randomF32({5, 3, 4}, rng), w = randomF32({4, 2}, rng);
  ScalarFn loss = [w](const Array& x) { return sum(square(tanh(matmul(x, w)))) + mean(x * x); };
  ScalarFn g = gradOf(loss);
  auto batched = capture([&] {
    return vmap([&g](const std::vector<Array>& a) { return std::vector<Array>{g(a[0])}; })({xs});
  });
  REQUIRE_MESSAGE(batched.ok(), batched.error().message);
  for (int64_t b = 0; b < 5; ++b) {
    auto want = capture([&] { return g(row(xs, b)); });
    REQUIRE_MESSAGE(want.ok(), want.error().message);
    std::string d = compareArrays(row((*batched)[0], b), *want);
    REQUIRE_MESSAGE(d.empty(), "example " << b << ": " << d.c_str());
  }
}

// out_axes: each output's batch axis goes where asked; negative axes count from the end.
TEST_CASE("outAxes") {
  std::mt19937 rng(4);
  Array x = randomF32({4, 5, 3}, rng), y = randomF32({5, 3}, rng);  // x batched on axis 2, y on axis 1
  auto got = capture([&] { return vmap(small, {2, 1}, {1, -1})({x, y}); });
  REQUIRE_MESSAGE(got.ok(), got.error().message);
  TSR_COMPARE((*got)[0].shape(), Shape({4, 3}));     // [4] per example, batch axis 1
  TSR_COMPARE((*got)[1].shape(), Shape({5, 4, 3}));  // [5, 4] per example, batch axis last
  for (int64_t b = 0; b < 3; ++b) {
    std::vector<Array> want = small({squeeze(sliceAxis(x, 2, b, b + 1), {2}), squeeze(sliceAxis(y, 1, b, b + 1), {1})});
    std::string d0 = compareArrays(squeeze(sliceAxis((*got)[0], 1, b, b + 1), {1}), want[0]);
    REQUIRE_MESSAGE(d0.empty(), "output 0 example " << b << ": " << d0.c_str());
    std::string d1 = compareArrays(squeeze(sliceAxis((*got)[1], 2, b, b + 1), {2}), want[1]);
    REQUIRE_MESSAGE(d1.empty(), "output 1 example " << b << ": " << d1.c_str());
  }
}

// Errors come back as values: mismatched batch sizes, an out-of-range axis, nothing batched.
TEST_CASE("errorsAreValues") {
  std::mt19937 rng(5);
  Array x = randomF32({4, 5}, rng), y = randomF32({3, 5}, rng);
  ArrayFn f = [](const std::vector<Array>& a) { return std::vector<Array>{a[0] + a[1]}; };
  auto sizes = capture([&] { return vmap(f)({x, y}); });
  REQUIRE(!sizes.ok());
  REQUIRE_MESSAGE(sizes.error().message.find("examples") != std::string::npos, sizes.error().message.c_str());
  auto axis = capture([&] { return vmap(f, {0, 5})({x, x}); });
  REQUIRE(!axis.ok());
  auto none = capture([&] { return vmap(f, {-1, -1})({x, x}); });
  REQUIRE(!none.ok());
}
