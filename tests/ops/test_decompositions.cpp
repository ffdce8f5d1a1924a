// eigh, svd and qr beyond the conformance suite (values against Jacobi and Gram-Schmidt loops, finite-difference
// gradients and vmap run there over every case): values worked out by hand, the defining identities on batches
// in f32 and f64 (v diag(w) v^T = a, u diag(s) vt = a, q r = a, orthonormal columns, order, triangles), full
// matrices' completions, empty matrices, NaN inputs (NaNs, never an abort), the gradients of sign-invariant
// functions (|v|, u s vt, q r) against finite differences, the refused gradients with their message, jit, errors
// and the shard rule.
#include "tests/check.h"
#include "tests/ops/raised.h"

#include <cblas.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "engine/compile/jit.h"
#include "engine/ops/registry.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"

using namespace tsr;
using tsr::test::mentions;
using tsr::test::raised;

namespace {

Array f64(std::vector<double> v, Shape s) { return Array::fromVector(v, std::move(s), DType::F64); }

std::vector<double> randomValues(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(count));
  for (double& x : v) x = u(rng);
  return v;
}

Array mT(const Array& x) { return swapAxes(x, x.rank() - 2, x.rank() - 1); }

void requireClose(const Array& a, const std::vector<double>& want, double tol, const char* what) {
  std::vector<double> got = a.toDoubles();
  REQUIRE_MESSAGE(got.size() == want.size(), what, " ", a.aval().toString());
  for (size_t i = 0; i < got.size(); ++i)
    REQUIRE_MESSAGE(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i])), what, " element ", i, ": ", got[i],
                    " vs ", want[i]);
}

// Identity matrices [batch..., p, p] as doubles.
std::vector<double> identities(int64_t batch, int64_t p) {
  std::vector<double> v(static_cast<size_t>(batch * p * p), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < p; ++i) v[static_cast<size_t>(b * p * p + i * p + i)] = 1.0;
  return v;
}

// x [..., p, q] times diag(d) [..., q] on the right, by loops.
std::vector<double> scaleColumns(const Array& x, const Array& d) {
  std::vector<double> xv = x.toDoubles(), dv = d.toDoubles();
  const int64_t q = x.shape()[x.rank() - 1];
  for (size_t i = 0; i < xv.size(); ++i) xv[i] *= dv[(i / static_cast<size_t>(q * (x.shape()[x.rank() - 2]))) * static_cast<size_t>(q) + i % static_cast<size_t>(q)];
  return xv;
}

// Central differences of a scalar function of one f64 array against its gradient, element by element.
void requireGradientMatches(const std::function<Array(const Array&)>& f, const std::vector<double>& x0, const Shape& s,
                            double tol) {
  const std::vector<double> g = grad([&](const Tree& t) { return f(t.leaves()[0]); })(Tree(f64(x0, s))).leaves()[0].toDoubles();
  const double h = 1e-6;
  for (size_t i = 0; i < x0.size(); ++i) {
    std::vector<double> up = x0, down = x0;
    up[i] += h;
    down[i] -= h;
    const double fd = (f(f64(up, s)).item() - f(f64(down, s)).item()) / (2 * h);
    REQUIRE_MESSAGE(std::abs(fd - g[i]) <= tol * (1.0 + std::abs(fd)), s.toString(), " element ", i, ": ", g[i], " vs ", fd);
  }
}

}  // namespace

TEST_CASE("eighByHand") {
  // [[2, 1], [1, 2]]: eigenvalues 1 and 3, eigenvectors (1, -1) / sqrt 2 and (1, 1) / sqrt 2 (up to sign).
  auto r = eigh(f64({2, 1, 1, 2}, Shape{2, 2}));
  requireClose(r[1], {1, 3}, 1e-14, "w");
  std::vector<double> v = r[0].toDoubles();
  const double h = 1 / std::sqrt(2.0);
  REQUIRE(std::abs(std::abs(v[0]) - h) < 1e-14);
  REQUIRE(std::abs(v[0] + v[2]) < 1e-14);  // column 0 is (c, -c)
  REQUIRE(std::abs(v[1] - v[3]) < 1e-14);  // column 1 is (c, c)
  // Without symmetrizing only the lower triangle is read: the 99 above the diagonal changes nothing.
  requireClose(eigh(f64({2, 99, 1, 2}, Shape{2, 2}), false)[1], {1, 3}, 1e-14, "w of the lower triangle");
}

TEST_CASE("eighReconstructsBatches") {
  std::mt19937 rng(5);
  for (DType t : {DType::F64, DType::F32}) {
    const int64_t batch = 6, n = 7;
    const double tol = t == DType::F64 ? 1e-12 : 3e-5;
    Array x = astype(f64(randomValues(batch * n * n, rng), Shape{2, 3, n, n}), t);
    Array sym = mul(add(x, mT(x)), fullLike(x, 0.5));
    auto r = eigh(x);  // symmetrizes
    REQUIRE(r[1].aval() == Aval(Shape{2, 3, n}, t));
    // v diag(w) v^T = (x + x^T) / 2; v^T v = I; w ascending.
    Array vw = Array::fromVector(scaleColumns(r[0], r[1]), r[0].shape(), DType::F64);
    requireClose(matmul(vw, astype(mT(r[0]), DType::F64)), astype(sym, DType::F64).toDoubles(), tol, "v diag(w) v^T");
    requireClose(matmul(mT(r[0]), r[0]), identities(batch, n), tol, "v^T v");
    std::vector<double> w = r[1].toDoubles();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i + 1 < n; ++i) REQUIRE(w[static_cast<size_t>(b * n + i)] <= w[static_cast<size_t>(b * n + i + 1)]);
  }
}

TEST_CASE("svdReconstructsTallWideAndBatchedMatrices") {
  std::mt19937 rng(11);
  for (DType t : {DType::F64, DType::F32})
    for (const Shape& s : {Shape{6, 4}, Shape{4, 6}, Shape{2, 3, 5, 5}, Shape{1, 1}}) {
      const double tol = t == DType::F64 ? 1e-12 : 3e-5;
      const int64_t m = s[s.rank() - 2], n = s[s.rank() - 1], k = std::min(m, n);
      const int64_t batch = s.numel() / (m * n);
      Array x = astype(f64(randomValues(s.numel(), rng), s), t);
      for (bool full : {false, true}) {
        auto r = svd(x, full);
        REQUIRE(r.size() == 3);
        const int64_t uc = full ? m : k, vr = full ? n : k;
        TSR_COMPARE(r[0].shape()[r[0].rank() - 1], uc);
        TSR_COMPARE(r[2].shape()[r[2].rank() - 2], vr);
        // u [:, :k] diag(s) vt[:k] = x; u^T u = I and vt vt^T = I (square ones when full).
        Array uk = full ? sliceAxis(r[0], s.rank() - 1, 0, k) : r[0];
        Array vtk = full ? sliceAxis(r[2], s.rank() - 2, 0, k) : r[2];
        Array us = Array::fromVector(scaleColumns(uk, r[1]), uk.shape(), DType::F64);
        requireClose(matmul(us, astype(vtk, DType::F64)), astype(x, DType::F64).toDoubles(), tol, "u diag(s) vt");
        requireClose(matmul(mT(r[0]), r[0]), identities(batch, uc), tol, "u^T u");
        requireClose(matmul(r[2], mT(r[2])), identities(batch, vr), tol, "vt vt^T");
        std::vector<double> sv = r[1].toDoubles();
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t i = 0; i < k; ++i) {
            REQUIRE(sv[static_cast<size_t>(b * k + i)] >= 0.0);
            if (i + 1 < k) REQUIRE(sv[static_cast<size_t>(b * k + i)] >= sv[static_cast<size_t>(b * k + i + 1)]);
          }
        // The singular values alone are the same ones.
        auto only = svd(x, full, false);
        REQUIRE(only.size() == 1);
        requireClose(only[0], sv, tol, "s alone");
      }
    }
}

TEST_CASE("svdAndQrByHand") {
  // diag(3, -2) in a 3 x 2: singular values 3 and 2.
  requireClose(svd(f64({3, 0, 0, -2, 0, 0}, Shape{3, 2}), false, false)[0], {3, 2}, 1e-14, "s");
  // [[3, 1], [4, 2]] = q r with r = [[5, 11/5], [0, 2/5]] up to the signs of r's rows.
  auto r = qr(f64({3, 1, 4, 2}, Shape{2, 2}));
  std::vector<double> rv = r[1].toDoubles();
  const double s0 = rv[0] < 0 ? -1 : 1, s1 = rv[3] < 0 ? -1 : 1;
  requireClose(r[1], {5 * s0, 2.2 * s0, 0, 0.4 * s1}, 1e-14, "r");
  requireClose(r[0], {0.6 * s0, -0.8 * s1, 0.8 * s0, 0.6 * s1}, 1e-14, "q");
}

TEST_CASE("qrReconstructsTallWideAndBatchedMatrices") {
  std::mt19937 rng(13);
  for (DType t : {DType::F64, DType::F32})
    for (const Shape& s : {Shape{6, 4}, Shape{4, 6}, Shape{2, 3, 5, 5}}) {
      const double tol = t == DType::F64 ? 1e-12 : 3e-5;
      const int64_t m = s[s.rank() - 2], n = s[s.rank() - 1], k = std::min(m, n);
      const int64_t batch = s.numel() / (m * n);
      Array x = astype(f64(randomValues(s.numel(), rng), s), t);
      for (bool full : {false, true}) {
        auto r = qr(x, full);
        const int64_t p = full ? m : k;
        TSR_COMPARE(r[0].shape()[r[0].rank() - 1], p);
        TSR_COMPARE(r[1].shape()[r[1].rank() - 2], p);
        requireClose(matmul(r[0], r[1]), x.toDoubles(), tol, "q r");
        requireClose(matmul(mT(r[0]), r[0]), identities(batch, p), tol, "q^T q");
        std::vector<double> rv = r[1].toDoubles();
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t i = 0; i < p; ++i)
            for (int64_t j = 0; j < std::min(i, n); ++j) TSR_COMPARE(rv[static_cast<size_t>(b * p * n + i * n + j)], 0.0);
      }
    }
}

TEST_CASE("emptyMatricesGiveEmptyOrIdentityFactors") {
  // A 0 x 3 matrix: no singular values; full vt is the 3 x 3 identity, full u is 0 x 0.
  auto r = svd(Array::zeros({0, 3}, DType::F64), true);
  REQUIRE(r[1].aval() == Aval(Shape{0}, DType::F64));
  requireClose(r[2], identities(1, 3), 0.0, "vt");
  // A 3 x 0 matrix: full q is the 3 x 3 identity and r is 3 x 0.
  auto q = qr(Array::zeros({3, 0}, DType::F64), true);
  requireClose(q[0], identities(1, 3), 0.0, "q");
  REQUIRE(q[1].aval() == Aval(Shape{3, 0}, DType::F64));
  // Batches of 0 x 0 matrices.
  REQUIRE(eigh(Array::zeros({2, 0, 0}))[1].aval() == Aval(Shape{2, 0}, DType::F32));
}

TEST_CASE("nanInputsGiveNaNsNotAnAbort") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double v : eigh(f64({1, nan, nan, 1}, Shape{2, 2}))[1].toDoubles()) REQUIRE(std::isnan(v));
  for (double v : svd(f64({1, nan, 2, 3}, Shape{2, 2}))[1].toDoubles()) REQUIRE(std::isnan(v));
}

TEST_CASE("gradientsOfSignInvariantFunctionsMatchFiniteDifferences") {
  std::mt19937 rng(17);
  const std::vector<double> w4 = randomValues(16, rng), w53 = randomValues(15, rng), w35 = randomValues(15, rng);
  // eigh: sum(w^2 c) + sum((v*v) W) (squares make the signs drop out); the symmetrizing form.
  requireGradientMatches(
      [&](const Array& a) {
        auto r = eigh(a);
        return add(sum(mul(mul(r[1], r[1]), f64({1, -2, 3, 0.5}, Shape{4}))), sum(mul(mul(r[0], r[0]), f64(w4, Shape{4, 4}))));
      },
      randomValues(16, rng), Shape{4, 4}, 1e-6);
  // svd, tall and wide: u diag(s) vt weighted, and u u^T (which uses the projections past k).
  for (const auto& [s, w] : {std::pair{Shape{5, 3}, w53}, std::pair{Shape{3, 5}, w35}}) {
    const int64_t m = s[0], n = s[1];
    requireGradientMatches(
        [&, s = s, w = w](const Array& a) {
          auto r = svd(a);
          Array us = mul(r[0], broadcastInDim(r[1], Shape{m, std::min(m, n)}, {1}));
          Array uut = matmul(r[0], mT(r[0]));
          Array vvt = matmul(mT(r[2]), r[2]);
          return add(add(sum(mul(matmul(us, r[2]), f64(w, s))), sum(mul(uut, uut))), sum(mul(vvt, mul(vvt, vvt))));
        },
        randomValues(15, rng), s, 1e-6);
    requireGradientMatches([&](const Array& a) { return sum(mul(svd(a, true, false)[0], f64({1, 2, -1}, Shape{3}))); },
                           randomValues(15, rng), s, 1e-6);
    // qr: the sign-invariant products q r and (q q^T) with r's diagonal squared.
    requireGradientMatches(
        [&, s = s, w = w](const Array& a) {
          auto r = qr(a);
          Array qqt = matmul(r[0], mT(r[0]));
          Array rrt = matmul(mT(r[1]), r[1]);
          return add(sum(mul(matmul(r[0], r[1]), f64(w, s))), add(sum(mul(qqt, qqt)), sum(mul(rrt, rrt))));
        },
        randomValues(15, rng), s, 1e-6);
  }
}

TEST_CASE("gradientsOfFullCompletionsAreRefusedWithAReason") {
  std::string e = raised([] { grad([](const Tree& t) { return sum(svd(t.leaves()[0], true)[0]); })(Tree(Array::ones({4, 2}))); });
  REQUIRE_MESSAGE(mentions(e, {"svd", "full_matrices", "4 x 2", "not defined"}), e);
  e = raised([] { grad([](const Tree& t) { return sum(qr(t.leaves()[0], true)[0]); })(Tree(Array::ones({4, 2}))); });
  REQUIRE_MESSAGE(mentions(e, {"qr", "full_matrices", "4 x 2", "not defined"}), e);
  // Square ones have no completion: their gradients are the reduced ones.
  std::mt19937 rng(19);
  const std::vector<double> x = randomValues(9, rng);
  auto full = grad([](const Tree& t) { return sum(mul(qr(t.leaves()[0], true)[1], qr(t.leaves()[0], true)[1])); })(Tree(f64(x, Shape{3, 3})));
  auto reduced = grad([](const Tree& t) { return sum(mul(qr(t.leaves()[0])[1], qr(t.leaves()[0])[1])); })(Tree(f64(x, Shape{3, 3})));
  requireClose(full.leaves()[0], reduced.leaves()[0].toDoubles(), 1e-14, "square full qr gradient");
}

TEST_CASE("jitGivesTheEagerDecompositions") {
  std::mt19937 rng(23);
  Array a = f64(randomValues(2 * 4 * 3, rng), Shape{2, 4, 3});
  auto f = [](const std::vector<Array>& x) {
    auto s = svd(x[0]);
    auto q = qr(x[0]);
    auto e = eigh(matmul(mT(x[0]), x[0]));
    return std::vector<Array>{s[0], s[1], s[2], q[0], q[1], e[0], e[1]};
  };
  const auto eager = f({a});
  Jit jitted = jit(f);
  auto y = jitted({a});
  REQUIRE_MESSAGE(y.ok(), y.error().message);
  for (size_t i = 0; i < eager.size(); ++i) requireClose((*y)[i], eager[i].toDoubles(), 1e-12, "jit");
}

// One matrix large enough runs its LAPACK call on OpenBLAS's threads (fewer matrices than the pool's threads):
// the same identities hold, and OpenBLAS is single-threaded again afterwards (the engine's GEMMs run on the pool).
TEST_CASE("oneLargeMatrixUnderJitOnOpenBlasThreads") {
  std::mt19937 rng(29);
  const int64_t n = 320;
  Array x = f64(randomValues(n * n, rng), Shape{n, n});
  Array spd = add(matmul(x, mT(x)), mul(f64(identities(1, n), Shape{n, n}), fullLike(x, static_cast<double>(n))));
  Jit jitted = jit([](const std::vector<Array>& a) {
    auto l = lu(a[0]);
    auto e = eigh(a[1]);
    auto s = svd(a[0]);
    auto q = qr(a[0]);
    Array c = cholesky(a[1]);
    return std::vector<Array>{l[0], l[2], e[0], e[1], s[0], s[1], s[2], q[0], q[1], c,
                              triangularSolve(c, a[0], true, true, false, false)};
  });
  REQUIRE_MESSAGE(jitted({x, spd}).ok(), "first call");
  const int before = openblas_get_num_threads();  // as the CPU backend set it for its pool's GEMMs
  auto y = jitted({x, spd});
  REQUIRE_MESSAGE(y.ok(), y.error().message);
  TSR_COMPARE(openblas_get_num_threads(), before);
  const auto& r = *y;
  const double tol = 1e-9;
  // lu: x[permutation] = L U.
  Array lower = add(mul(r[0], astype(less(iota(Shape{n, n}, 1, DType::I32), iota(Shape{n, n}, 0, DType::I32)), DType::F64)),
                    f64(identities(1, n), Shape{n, n}));
  Array upper = mul(r[0], astype(greaterEqual(iota(Shape{n, n}, 1, DType::I32), iota(Shape{n, n}, 0, DType::I32)), DType::F64));
  requireClose(matmul(lower, upper), take(x, r[1], 0).toDoubles(), tol, "lu");
  Array vw = Array::fromVector(scaleColumns(r[2], r[3]), r[2].shape(), DType::F64);
  requireClose(matmul(vw, mT(r[2])), spd.toDoubles(), tol * n, "eigh");
  Array us = Array::fromVector(scaleColumns(r[4], r[5]), r[4].shape(), DType::F64);
  requireClose(matmul(us, r[6]), x.toDoubles(), tol, "svd");
  requireClose(matmul(r[7], r[8]), x.toDoubles(), tol, "qr");
  requireClose(matmul(r[9], mT(r[9])), spd.toDoubles(), tol * n, "cholesky");
  requireClose(matmul(r[9], r[10]), x.toDoubles(), tol, "triangular_solve");
}

TEST_CASE("decompositionErrorsNameTheOpAndShapes") {
  std::string e = raised([] { eigh(Array::zeros({2, 3})); });
  REQUIRE_MESSAGE(mentions(e, {"eigh", "f32[2,3]", "square"}), e);
  e = raised([] { svd(Array::fromVector(std::vector<int32_t>{1, 2, 3, 4}, Shape{2, 2})); });
  REQUIRE_MESSAGE(mentions(e, {"svd", "i32[2,2]", "f32, f64"}), e);
  e = raised([] { qr(Array::zeros({3})); });
  REQUIRE_MESSAGE(mentions(e, {"qr", "rank 2"}), e);
  e = raised([] { bind(ir::OpCode::Qr, {Array::zeros({3, 3})}, ir::DecompositionAttrs{false, false}, std::source_location::current()); });
  REQUIRE_MESSAGE(mentions(e, {"qr", "compute_uv"}), e);
}

TEST_CASE("decompositionShardRulesSplitLeadingDimsOnly") {
  const Aval a{Shape{4, 2, 5, 3}, DType::F32}, u{Shape{4, 2, 5, 3}, DType::F32}, s{Shape{4, 2, 3}, DType::F32},
      vt{Shape{4, 2, 3, 3}, DType::F32};
  auto r = ops::registry().get(ir::OpCode::Svd).shard(std::vector<Aval>{a}, std::vector<Aval>{u, s, vt},
                                                       ir::DecompositionAttrs{false, true});
  REQUIRE(r.ok());
  TSR_COMPARE(r->operandDims[0], (std::vector<int>{0, 1, -1, -1}));
  TSR_COMPARE(r->resultDims[0], (std::vector<int>{0, 1, -1, -1}));
  TSR_COMPARE(r->resultDims[1], (std::vector<int>{0, 1, -1}));
  TSR_COMPARE(r->resultDims[2], (std::vector<int>{0, 1, -1, -1}));
  for (ir::FactorKind k : r->factors) REQUIRE(k == ir::FactorKind::PassThrough);
}
