// scatter, scatter_mul, scatter_min and scatter_max beyond the conformance suite (values, finite-difference
// gradients and vmap run there over every case): values and gradients worked out by hand where indices repeat
// or fall out of range, ties and zeros, integer and bool dtypes, jit against eager, and the shard rule.
#include "tests/check.h"
#include "tests/ops/raised.h"

#include <cmath>
#include <functional>

#include "engine/compile/jit.h"
#include "engine/ops/registry.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"

using namespace tsr;
using tsr::test::mentions;
using tsr::test::raised;

namespace {

Array f64(std::vector<double> v, Shape s) { return Array::fromVector(v, std::move(s), DType::F64); }
Array i32(std::vector<int32_t> v) {
  Shape s{static_cast<int64_t>(v.size())};
  return Array::fromVector(v, s);
}

void requireValues(const Array& a, const std::vector<double>& want) {
  std::vector<double> got = a.toDoubles();
  REQUIRE_MESSAGE(got.size() == want.size(), a.aval().toString());
  for (size_t i = 0; i < got.size(); ++i) TSR_COMPARE(got[i], want[i]);
}

using ScatterFn = Array (*)(const Array&, const Array&, const Array&, int64_t, int64_t, std::source_location);

// The cotangents of x and the updates of `op(x, idx, u)` for the output cotangent ct.
std::pair<Array, Array> pullback(ScatterFn op, const Array& x, const Array& idx, const Array& u, const Array& ct) {
  auto f = [&](const std::vector<Array>& a) {
    return std::vector<Array>{op(a[0], idx, a[1], 0, 0, std::source_location::current())};
  };
  std::vector<Array> g = vjp(f, {x, u}).pullback({ct});
  return {g[0], g[1]};
}

}  // namespace

TEST_CASE("setKeepsTheLastUpdateAndDropsOutOfRange") {
  // x [5, 2]; indices 1 and 3 repeat, 9 and -1 are dropped.
  Array x = f64({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{5, 2});
  Array idx = i32({1, 3, 1, 9, -1, 3});
  Array u = f64({10, 11, 20, 21, 30, 31, 40, 41, 50, 51, 60, 61}, Shape{6, 2});
  requireValues(scatter(x, idx, u, 0), {0, 1, 30, 31, 4, 5, 60, 61, 8, 9});
  // The same along axis 1 with a batch dim: each row's own indices.
  Array y = f64({0, 1, 2, 3, 4, 5}, Shape{2, 3});
  Array bidx = Array::fromVector(std::vector<int32_t>{2, 2, 0, 1, 5, 1}, Shape{2, 3});
  Array bu = f64({10, 20, 30, 40, 50, 60}, Shape{2, 3});
  requireValues(scatter(y, bidx, bu, 1, 1), {30, 1, 20, 3, 60, 5});
}

TEST_CASE("setGradientGoesToTheUpdateThatStayed") {
  Array x = f64({0, 1, 2, 3, 4}, Shape{5});
  Array idx = i32({1, 3, 1, 9, -1, 3});
  Array u = f64({10, 20, 30, 40, 50, 60}, Shape{6});
  Array ct = f64({1, 2, 3, 4, 5}, Shape{5});
  auto [gx, gu] = pullback(&scatter, x, idx, u, ct);
  requireValues(gx, {1, 0, 3, 0, 5});           // written positions get nothing
  requireValues(gu, {0, 0, 2, 0, 0, 4});        // the last update at 1 and at 3; dropped ones get nothing
}

TEST_CASE("mulMultipliesRepeatsAndItsGradientLeavesOneFactorOut") {
  // Position 0: 2 * 3 * 0 * 5 (one zero update); position 1: 4 * 0 * 0 (two); position 2: 0 * 7 (x is zero);
  // position 3: untouched.
  Array x = f64({2, 4, 0, 9}, Shape{4});
  Array idx = i32({0, 0, 0, 1, 1, 2, 7});
  Array u = f64({3, 0, 5, 0, 0, 7, 11}, Shape{7});
  requireValues(scatterMul(x, idx, u, 0), {0, 0, 0, 9});
  Array ct = f64({1, 1, 1, 1}, Shape{4});
  auto [gx, gu] = pullback(&scatterMul, x, idx, u, ct);
  requireValues(gx, {0, 0, 7, 1});
  // d/du: x times the other factors at that position; zero for the out-of-range update.
  requireValues(gu, {0, 2 * 3 * 5, 0, 0, 0, 0, 0});
  // No zeros: the products of the others, with a cotangent that differs per position.
  Array x2 = f64({2, -1}, Shape{2});
  Array idx2 = i32({0, 1, 0});
  Array u2 = f64({3, 4, 0.5}, Shape{3});
  auto [gx2, gu2] = pullback(&scatterMul, x2, idx2, u2, f64({10, 100}, Shape{2}));
  requireValues(gx2, {10 * 1.5, 100 * 4});
  requireValues(gu2, {10 * 2 * 0.5, 100 * -1, 10 * 2 * 3});
}

TEST_CASE("minAndMaxSplitTheGradientBetweenTies") {
  // max: position 0 ties x and two updates at 1 (a third each); position 1 keeps x (5 > 3);
  // position 2 takes its update (7 > 2).
  Array x = f64({1, 5, 2}, Shape{3});
  Array idx = i32({0, 0, 1, 2, 0, 4});
  Array u = f64({1, 1, 3, 7, -2, 100}, Shape{6});
  requireValues(scatterMax(x, idx, u, 0), {1, 5, 7});
  Array ct = f64({3, 6, 9}, Shape{3});
  auto [gx, gu] = pullback(&scatterMax, x, idx, u, ct);
  requireValues(gx, {1, 6, 0});
  requireValues(gu, {1, 1, 0, 9, 0, 0});
  // min: position 0's update -2 wins alone; position 1's update 3 beats x = 5; position 2 keeps x = 2.
  requireValues(scatterMin(x, idx, u, 0), {-2, 3, 2});
  auto [hx, hu] = pullback(&scatterMin, x, idx, u, ct);
  requireValues(hx, {0, 0, 9});
  requireValues(hu, {0, 0, 6, 0, 3, 0});
  // NaN wins, as in the elementwise max, and takes no gradient.
  Array n = scatterMax(x, i32({1}), f64({std::nan("")}, Shape{1}), 0);
  REQUIRE(std::isnan(n.toDoubles()[1]));
}

// Second order: the gradient of (the gradient of f) . v, where f = sum(w * sin(op(x, idx, u))), against central
// differences of the first gradient, for every scatter. x and u are packed in one vector z (x = z[0:4], u =
// z[4:9]); the indices repeat and one is out of range; the values have no ties, so min and max are smooth there.
TEST_CASE("secondOrderGradientsMatchFiniteDifferences") {
  const Array idx = i32({2, 0, 2, 5, 1});
  const Array w = f64({0.7, -1.3, 0.4, 1.9}, Shape{4});
  const Array v = f64({0.3, -0.8, 1.1, 0.5, -0.6, 0.9, 0.2, -1.4, 0.7}, Shape{9});
  const std::vector<double> z0 = {0.9, -0.4, 1.3, 0.25, 1.7, -0.35, 0.6, 2.2, -1.1};
  const std::pair<const char*, ScatterFn> ops[] = {
      {"scatter", &scatter}, {"scatter_add", &scatterAdd}, {"scatter_mul", &scatterMul},
      {"scatter_min", &scatterMin}, {"scatter_max", &scatterMax}};
  for (const auto& entry : ops) {
    const char* name = entry.first;  // not a structured binding: clang 14 captures none (CAPTURE is a lambda)
    const ScatterFn op = entry.second;
    CAPTURE(name);
    ScalarFn f = [&](const Array& z) {
      Array y = op(sliceAxis(z, 0, 0, 4), idx, sliceAxis(z, 0, 4, 9), 0, 0, std::source_location::current());
      return sum(w * sin(y));
    };
    ScalarFn g = gradOf(f);
    ScalarFn gv = [&](const Array& z) { return sum(g(z) * v); };
    auto second = capture([&] { return gradOf(gv)(f64(z0, Shape{9})).toDoubles(); });
    REQUIRE_MESSAGE(second.ok(), second.error().message);
    const double eps = 1e-6;
    for (size_t i = 0; i < z0.size(); ++i) {
      std::vector<double> up = z0, down = z0;
      up[i] += eps;
      down[i] -= eps;
      auto fd = capture([&] { return (gv(f64(up, Shape{9})).item() - gv(f64(down, Shape{9})).item()) / (2 * eps); });
      REQUIRE_MESSAGE(fd.ok(), fd.error().message);
      CAPTURE(i);
      REQUIRE_MESSAGE(std::fabs((*second)[i] - *fd) < 1e-6 * (1 + std::fabs(*fd)), (*second)[i] << " vs " << *fd);
    }
  }
}

TEST_CASE("integerAndBoolDtypes") {
  // i32 products wrap modulo 2^32: 65536 * 65536 = 0, -3 * 65536 * 3 = -589824.
  Array xi = Array::fromVector(std::vector<int32_t>{1, -3}, Shape{2});
  Array ui = Array::fromVector(std::vector<int32_t>{65536, 65536, 65536, 3}, Shape{4});
  requireValues(scatterMul(xi, i32({0, 0, 1, 1}), ui, 0), {0, -589824});
  // u8 max and min; i32 set.
  Array xu = astype(Array::fromVector(std::vector<int32_t>{5, 200, 7}, Shape{3}), DType::U8);
  Array uu = astype(Array::fromVector(std::vector<int32_t>{9, 100, 255, 1}, Shape{4}), DType::U8);
  requireValues(scatterMax(xu, i32({0, 1, 0, 2}), uu, 0), {255, 200, 7});
  requireValues(scatterMin(xu, i32({0, 1, 0, 2}), uu, 0), {5, 100, 1});
  requireValues(scatter(xi, i32({1, 1}), Array::fromVector(std::vector<int32_t>{7, 8}, Shape{2}), 0), {1, 8});
  // bool set: the last of True, False at 0 stays.
  Array xb = astype(Array::fromVector(std::vector<int32_t>{1, 0, 1}, Shape{3}), DType::Bool);
  Array ub = astype(Array::fromVector(std::vector<int32_t>{1, 0, 1}, Shape{3}), DType::Bool);
  Array sb = scatter(xb, i32({0, 0, 1}), ub, 0);
  REQUIRE(sb.dtype() == DType::Bool);
  requireValues(sb, {0, 1, 1});
}

TEST_CASE("jitGivesTheEagerValuesAndGradients") {
  Array x = f64({1, 5, 2, -1}, Shape{4});
  Array idx = i32({2, 0, 2, 3, 0});
  Array u = f64({4, -2, 0.5, 3, 6}, Shape{5});
  for (ScatterFn op : {ScatterFn{&scatter}, ScatterFn{&scatterMul}, ScatterFn{&scatterMin}, ScatterFn{&scatterMax}}) {
    Array eager = op(x, idx, u, 0, 0, std::source_location::current());
    auto loss = [op, idx](const Tree& t) {
      Array y = op(t.leaves()[0], idx, t.leaves()[1], 0, 0, std::source_location::current());
      return sum(y * y);
    };
    Tree eagerGrad = grad(loss)(Tree::list({Tree(x), Tree(u)}));
    Jit jitted = jit([op, idx](const std::vector<Array>& a) {
      return std::vector<Array>{op(a[0], idx, a[1], 0, 0, std::source_location::current())};
    });
    auto y = jitted({x, u});
    REQUIRE_MESSAGE(y.ok(), y.error().message);
    requireValues((*y)[0], eager.toDoubles());
    Jit jittedGrad = jit([loss](const std::vector<Array>& a) { return grad(loss)(Tree::list({Tree(a[0]), Tree(a[1])})).leaves(); });
    auto g = jittedGrad({x, u});
    REQUIRE_MESSAGE(g.ok(), g.error().message);
    for (size_t i = 0; i < 2; ++i) requireValues((*g)[i], eagerGrad.leaves()[i].toDoubles());
  }
}

TEST_CASE("errorsNameTheOpAndShapes") {
  Array x = Array::zeros({4, 3});
  std::string e = raised([&] { scatterMin(x, i32({1, 2}), Array::zeros({2, 4}), 0); });
  REQUIRE_MESSAGE(mentions(e, {"scatter_min", "f32[2,4]", "gathered shape [2,3]"}), e);
  e = raised([&] { scatter(x, Array::zeros({2}), Array::zeros({2, 3}), 0); });
  REQUIRE_MESSAGE(mentions(e, {"scatter", "indices must be"}), e);
  e = raised([&] { scatterMul(x, i32({1}), Array::zeros({1, 3}), 5); });
  REQUIRE_MESSAGE(mentions(e, {"scatterMul", "axis 5"}), e);
  requireValues(x, std::vector<double>(12, 0.0));  // the operand is left as it was
}

TEST_CASE("shardRuleKeepsIndexDimsWhole") {
  // x [B=4, A=6, C=8] scattered on axis 1 with batch dim 0; idx [4, 5]; updates [4, 5, 8]: B and C pass
  // through, A and the updates' index dim stay whole (no reduction factor, unlike scatter_add).
  std::vector<Aval> in{Aval{Shape{4, 6, 8}, DType::F32}, Aval{Shape{4, 5}, DType::I32}, Aval{Shape{4, 5, 8}, DType::F32}};
  std::vector<Aval> out{in[0]};
  for (ir::OpCode op : {ir::OpCode::Scatter, ir::OpCode::ScatterMul, ir::OpCode::ScatterMin, ir::OpCode::ScatterMax}) {
    auto r = ops::registry().get(op).shard(in, out, ir::GatherAttrs{1, 1});
    REQUIRE(r.ok());
    TSR_COMPARE(r->operandDims[0], (std::vector<int>{0, -1, 1}));
    TSR_COMPARE(r->operandDims[1], (std::vector<int>{0, -1}));
    TSR_COMPARE(r->operandDims[2], (std::vector<int>{0, -1, 1}));
    TSR_COMPARE(r->resultDims[0], (std::vector<int>{0, -1, 1}));
    for (ir::FactorKind k : r->factors) REQUIRE(k == ir::FactorKind::PassThrough);
  }
}
