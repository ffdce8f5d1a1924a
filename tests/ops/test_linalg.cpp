// cholesky, triangular_solve and lu beyond the conformance suite (values against naive loops, finite-difference
// gradients and vmap run there over every case): factors worked out by hand, reconstructions (L L^T = a,
// a[perm] = L U, op(a) x = b) on batches in f32 and f64, inputs that are not positive definite or are singular
// (NaNs or infinities, never an abort), gradients of the symmetrizing cholesky, jit against eager, errors and
// the shard rule.
#include "tests/check.h"
#include "tests/ops/raised.h"

#include <cmath>
#include <functional>
#include <random>

#include "engine/compile/jit.h"
#include "engine/ops/registry.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"

using namespace tsr;
using tsr::test::mentions;
using tsr::test::raised;

namespace {

Array f64(std::vector<double> v, Shape s) { return Array::fromVector(v, std::move(s), DType::F64); }

void requireClose(const Array& a, const std::vector<double>& want, double tol) {
  std::vector<double> got = a.toDoubles();
  REQUIRE_MESSAGE(got.size() == want.size(), a.aval().toString());
  for (size_t i = 0; i < got.size(); ++i)
    REQUIRE_MESSAGE(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i])), "element ", i, ": ", got[i], " vs ", want[i]);
}

Array mT(const Array& x) { return swapAxes(x, x.rank() - 2, x.rank() - 1); }

// Random [batch..., n, n] f64 values in [-1, 1].
std::vector<double> randomValues(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(count));
  for (double& x : v) x = u(rng);
  return v;
}

// m m^T + n I, computed by loops: symmetric positive definite.
std::vector<double> spd(const std::vector<double>& m, int64_t batch, int64_t n) {
  std::vector<double> a(m.size(), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = i == j ? static_cast<double>(n) : 0.0;
        for (int64_t k = 0; k < n; ++k) s += m[static_cast<size_t>(b * n * n + i * n + k)] * m[static_cast<size_t>(b * n * n + j * n + k)];
        a[static_cast<size_t>(b * n * n + i * n + j)] = s;
      }
  return a;
}

}  // namespace

TEST_CASE("choleskyByHand") {
  // [[4, 2], [2, 3]] = L L^T with L = [[2, 0], [1, sqrt 2]]; the upper triangle of the operand is not read.
  requireClose(cholesky(f64({4, 99, 2, 3}, Shape{2, 2}), false), {2, 0, 1, std::sqrt(2.0)}, 1e-14);
  requireClose(cholesky(f64({4, 2, 2, 3}, Shape{2, 2})), {2, 0, 1, std::sqrt(2.0)}, 1e-14);
  requireClose(cholesky(Array::fromVector(std::vector<float>{9}, Shape{1, 1})), {3}, 1e-7);
}

TEST_CASE("choleskyReconstructsBatches") {
  std::mt19937 rng(7);
  for (DType t : {DType::F64, DType::F32}) {
    const int64_t batch = 6, n = 7;
    const std::vector<double> a = spd(randomValues(batch * n * n, rng), batch, n);
    Array x = astype(f64(a, Shape{2, 3, n, n}), t);
    Array l = cholesky(x);
    requireClose(matmul(l, mT(l)), a, t == DType::F64 ? 1e-12 : 2e-5);
    // Lower triangular: nothing above the diagonal.
    std::vector<double> lv = l.toDoubles();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j < n; ++j) TSR_COMPARE(lv[static_cast<size_t>(b * n * n + i * n + j)], 0.0);
  }
}

TEST_CASE("choleskyOfAnIndefiniteMatrixIsNaNs") {
  // Eigenvalues 3 and -1: not positive definite, NaNs on and below the diagonal. The other matrix of the batch
  // is factored as usual.
  Array l = cholesky(f64({1, 2, 2, 1, 4, 2, 2, 3}, Shape{2, 2, 2}));
  std::vector<double> v = l.toDoubles();
  REQUIRE((std::isnan(v[0]) && std::isnan(v[2]) && std::isnan(v[3])));
  TSR_COMPARE(v[1], 0.0);  // zeros above the diagonal, as JAX
  requireClose(f64({v[4], v[5], v[6], v[7]}, Shape{4}), {2, 0, 1, std::sqrt(2.0)}, 1e-14);
}

TEST_CASE("triangularSolveByHand") {
  // a = [[2, 0], [1, 1]] (lower): a x = [2, 3] gives x = [1, 2]; a^T x = [2, 3] gives x = [-0.5, 3].
  Array a = f64({2, 77, 1, 1}, Shape{2, 2});
  requireClose(triangularSolve(a, f64({2, 3}, Shape{2, 1}), true, true, false, false), {1, 2}, 1e-15);
  requireClose(triangularSolve(a, f64({2, 3}, Shape{2, 1}), true, true, true, false), {-0.5, 3}, 1e-15);
  // x a = [2, 3] (a row): x = [-0.5, 3]; with a unit diagonal, x1 = 3 and x0 = 2 - 3 = -1.
  requireClose(triangularSolve(a, f64({2, 3}, Shape{1, 2}), false, true, false, false), {-0.5, 3}, 1e-15);
  requireClose(triangularSolve(a, f64({2, 3}, Shape{1, 2}), false, true, false, true), {-1, 3}, 1e-15);
}

TEST_CASE("triangularSolveSolvesBatches") {
  std::mt19937 rng(11);
  const int64_t n = 6, k = 4;
  std::vector<double> av = randomValues(3 * n * n, rng);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < n; ++i) av[static_cast<size_t>(b * n * n + i * n + i)] += 3.0;
  Array a = f64(av, Shape{3, n, n});
  Array rhs = f64(randomValues(3 * n * k, rng), Shape{3, n, k});
  for (bool lower : {true, false}) {
    for (bool transposeA : {false, true}) {
      Array x = triangularSolve(a, rhs, true, lower, transposeA, false);
      Array t = lower ? where(greaterEqual(iota(a.shape(), 1), iota(a.shape(), 2)), a, zerosLike(a))
                      : where(lessEqual(iota(a.shape(), 1), iota(a.shape(), 2)), a, zerosLike(a));
      requireClose(matmul(transposeA ? mT(t) : t, x), rhs.toDoubles(), 1e-12);
      Array y = triangularSolve(a, mT(rhs), false, lower, transposeA, false);
      requireClose(matmul(y, transposeA ? mT(t) : t), mT(rhs).toDoubles(), 1e-12);
    }
  }
}

TEST_CASE("luByHand") {
  // [[0, 1], [2, 3]]: row 1 is the pivot; L = [[1, 0], [0, 1]], U = [[2, 3], [0, 1]].
  auto r = lu(f64({0, 1, 2, 3}, Shape{2, 2}));
  REQUIRE(r.size() == 3);
  requireClose(r[0], {2, 3, 0, 1}, 1e-15);
  TSR_COMPARE(r[1].dtype(), DType::I32);
  requireClose(r[1], {1, 1}, 0);
  requireClose(r[2], {1, 0}, 0);
  // [[1, 2], [3, 4]]: pivot row 1, l = 1/3, u = [[3, 4], [0, 2 - 4/3]].
  r = lu(f64({1, 2, 3, 4}, Shape{2, 2}));
  requireClose(r[0], {3, 4, 1.0 / 3.0, 2.0 - 4.0 / 3.0}, 1e-15);
  requireClose(r[2], {1, 0}, 0);
}

TEST_CASE("luReconstructsBatches") {
  std::mt19937 rng(5);
  for (DType t : {DType::F64, DType::F32}) {
    const int64_t batch = 4, n = 6;
    const std::vector<double> av = randomValues(batch * n * n, rng);
    auto r = lu(astype(f64(av, Shape{batch, n, n}), t));
    const std::vector<double> luv = r[0].toDoubles(), perm = r[2].toDoubles(), piv = r[1].toDoubles();
    for (int64_t b = 0; b < batch; ++b) {
      // The permutation is the pivots' swaps applied in order, and a permutation.
      std::vector<int> p(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
      for (int i = 0; i < n; ++i) std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(piv[static_cast<size_t>(b * n + i)])]);
      for (int i = 0; i < n; ++i) TSR_COMPARE(p[static_cast<size_t>(i)], static_cast<int>(perm[static_cast<size_t>(b * n + i)]));
      // a[perm] = L U, |L| <= 1 below the diagonal (partial pivoting).
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t k = 0; k <= std::min(i, j); ++k) {
            const double l = k == i ? 1.0 : luv[static_cast<size_t>(b * n * n + i * n + k)];
            s += l * luv[static_cast<size_t>(b * n * n + k * n + j)];
          }
          const double want = av[static_cast<size_t>(b * n * n + static_cast<int64_t>(perm[static_cast<size_t>(b * n + i)]) * n + j)];
          REQUIRE(std::abs(s - want) <= (t == DType::F64 ? 1e-12 : 1e-5));
          if (j < i) REQUIRE(std::abs(luv[static_cast<size_t>(b * n * n + i * n + j)]) <= 1.0);
        }
    }
  }
}

TEST_CASE("luOfASingularMatrixDoesNotFail") {
  // Rank 1: U has a zero on its diagonal; solving with it gives infinities or NaNs, never an abort.
  auto r = lu(f64({1, 2, 2, 4}, Shape{2, 2}));
  requireClose(r[0], {2, 4, 0.5, 0}, 1e-15);
  Array x = triangularSolve(r[0], f64({1, 1}, Shape{2, 1}), true, false, false, false);
  REQUIRE(!std::isfinite(x.toDoubles()[0]));
}

TEST_CASE("gradientOfTheSymmetrizingCholeskyIsSymmetricAndMatchesFiniteDifferences") {
  std::mt19937 rng(3);
  const int64_t n = 4;
  const std::vector<double> a0 = spd(randomValues(n * n, rng), 1, n);
  const std::vector<double> w = randomValues(n * n, rng);
  auto loss = [&](const Tree& t) { return sum(mul(cholesky(t.leaves()[0]), f64(w, Shape{n, n}))); };
  const std::vector<double> g = grad(loss)(Tree(f64(a0, Shape{n, n}))).leaves()[0].toDoubles();
  const double h = 1e-6;
  for (int64_t i = 0; i < n * n; ++i) {
    std::vector<double> up = a0, down = a0;
    up[static_cast<size_t>(i)] += h;
    down[static_cast<size_t>(i)] -= h;
    const double fd = (loss(Tree(f64(up, Shape{n, n}))).item() - loss(Tree(f64(down, Shape{n, n}))).item()) / (2 * h);
    REQUIRE_MESSAGE(std::abs(fd - g[static_cast<size_t>(i)]) <= 1e-6, "element ", i, ": ", g[static_cast<size_t>(i)], " vs ", fd);
    const int64_t r = i / n, c = i % n;
    REQUIRE(std::abs(g[static_cast<size_t>(i)] - g[static_cast<size_t>(c * n + r)]) <= 1e-12);
  }
}

TEST_CASE("jitGivesTheEagerValuesAndGradients") {
  std::mt19937 rng(9);
  const int64_t n = 5;
  Array a = f64(spd(randomValues(2 * n * n, rng), 2, n), Shape{2, n, n});
  Array b = f64(randomValues(2 * n * 3, rng), Shape{2, n, 3});
  auto f = [](const std::vector<Array>& x) {
    Array l = cholesky(x[0]);
    Array y = triangularSolve(l, x[1], true, true, false, false);
    return std::vector<Array>{y, lu(x[0])[0]};
  };
  auto loss = [&](const Tree& t) {
    auto y = f(t.leaves());
    return add(sum(mul(y[0], y[0])), sum(mul(y[1], y[1])));
  };
  const auto eager = f({a, b});
  const Tree eagerGrad = grad(loss)(Tree::list({Tree(a), Tree(b)}));
  Jit jitted = jit(f);
  auto y = jitted({a, b});
  REQUIRE_MESSAGE(y.ok(), y.error().message);
  for (size_t i = 0; i < 2; ++i) requireClose((*y)[i], eager[i].toDoubles(), 1e-12);
  Jit jittedGrad = jit([loss](const std::vector<Array>& x) { return grad(loss)(Tree::list({Tree(x[0]), Tree(x[1])})).leaves(); });
  auto g = jittedGrad({a, b});
  REQUIRE_MESSAGE(g.ok(), g.error().message);
  for (size_t i = 0; i < 2; ++i) requireClose((*g)[i], eagerGrad.leaves()[i].toDoubles(), 1e-10);
}

TEST_CASE("errorsNameTheOpAndShapes") {
  std::string e = raised([] { cholesky(Array::zeros({2, 3}), false); });
  REQUIRE_MESSAGE(mentions(e, {"cholesky", "f32[2,3]", "square"}), e);
  e = raised([] { lu(Array::fromVector(std::vector<int32_t>{1, 2, 3, 4}, Shape{2, 2})); });
  REQUIRE_MESSAGE(mentions(e, {"lu", "i32[2,2]", "f32, f64"}), e);
  e = raised([] { triangularSolve(Array::zeros({3, 3}), Array::zeros({2, 3}), true); });
  REQUIRE_MESSAGE(mentions(e, {"triangular_solve", "f32[3,3]", "f32[2,3]", "left_side"}), e);
  e = raised([] { triangularSolve(Array::zeros({2, 3, 3}), Array::zeros({4, 3, 3}), true); });
  REQUIRE_MESSAGE(mentions(e, {"triangular_solve", "batch"}), e);
  e = raised([] { cholesky(Array::zeros({3})); });
  REQUIRE_MESSAGE(mentions(e, {"cholesky", "rank 2"}), e);
}

TEST_CASE("shardRuleSplitsLeadingDimsOnly") {
  // a [B=4, C=2, 5, 5], b [4, 2, 5, 3]: B and C pass through; the matrix dims are whole.
  const Aval a{Shape{4, 2, 5, 5}, DType::F32}, b{Shape{4, 2, 5, 3}, DType::F32}, v{Shape{4, 2, 5}, DType::I32};
  auto r = ops::registry().get(ir::OpCode::TriangularSolve).shard(std::vector<Aval>{a, b}, std::vector<Aval>{b},
                                                                   ir::TriangularSolveAttrs{true, true, false, false});
  REQUIRE(r.ok());
  TSR_COMPARE(r->operandDims[0], (std::vector<int>{0, 1, -1, -1}));
  TSR_COMPARE(r->operandDims[1], (std::vector<int>{0, 1, -1, -1}));
  TSR_COMPARE(r->resultDims[0], (std::vector<int>{0, 1, -1, -1}));
  auto l = ops::registry().get(ir::OpCode::Lu).shard(std::vector<Aval>{a}, std::vector<Aval>{a, v, v}, ir::NoAttrs{});
  REQUIRE(l.ok());
  TSR_COMPARE(l->resultDims[0], (std::vector<int>{0, 1, -1, -1}));
  TSR_COMPARE(l->resultDims[1], (std::vector<int>{0, 1, -1}));
  TSR_COMPARE(l->resultDims[2], (std::vector<int>{0, 1, -1}));
  for (ir::FactorKind k : l->factors) REQUIRE(k == ir::FactorKind::PassThrough);
}
