// Conformance cases for cholesky, triangular_solve and lu. The references are the textbook loops in double,
// written here: Cholesky-Banachiewicz, forward and back substitution on the triangle as op(a) reads it, and
// Doolittle elimination with partial pivoting (the first largest |pivot|, as LAPACK's i?amax); they share no
// code with the kernels' LAPACK calls. Inputs are built to be well conditioned: symmetric positive definite
// for cholesky, a dominant diagonal for the solves.
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

using ir::OpCode;

int64_t lastDim(const HostTensor& t) { return t.aval.shape[t.aval.rank() - 1]; }
int64_t rowsDim(const HostTensor& t) { return t.aval.shape[t.aval.rank() - 2]; }
int64_t matrices(const HostTensor& t) {
  const int64_t size = lastDim(t) * rowsDim(t);
  return size == 0 ? 0 : t.numel() / size;
}

// Batches of m m^T / n + n I: symmetric positive definite, eigenvalues at least n.
HostTensor spdTensor(const Shape& s, DType t, std::mt19937& rng) {
  const HostTensor m = randomTensor(Aval{s, t}, rng, -1.0, 1.0);
  HostTensor a = HostTensor::zeros(Aval{s, t});
  const int64_t n = s[s.rank() - 1];
  for (int64_t b = 0; b < matrices(a); ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double v = i == j ? static_cast<double>(n) : 0.0;
        for (int64_t k = 0; k < n; ++k) v += m.get(b * n * n + i * n + k) * m.get(b * n * n + j * n + k) / static_cast<double>(n);
        a.set(b * n * n + i * n + j, v);
      }
  // The kernel reads the lower triangle only: make the upper one differ, so that reading it would show.
  for (int64_t b = 0; b < matrices(a); ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) a.set(b * n * n + i * n + j, 7.0);
  return a;
}

std::vector<HostTensor> choleskyRef(const HostTensor& a) {
  const int64_t n = lastDim(a);
  HostTensor l = HostTensor::zeros(a.aval);
  for (int64_t b = 0; b < matrices(a); ++b) {
    const int64_t o = b * n * n;
    std::vector<double> L(static_cast<size_t>(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double s = a.get(o + i * n + j);  // the lower triangle: a_ij with j <= i
        for (int64_t k = 0; k < j; ++k) s -= L[static_cast<size_t>(i * n + k)] * L[static_cast<size_t>(j * n + k)];
        L[static_cast<size_t>(i * n + j)] = i == j ? std::sqrt(s) : s / L[static_cast<size_t>(j * n + j)];
      }
    for (int64_t k = 0; k < n * n; ++k) l.set(o + k, L[static_cast<size_t>(k)]);
  }
  return {l};
}

// op(a) as the kernel reads it: the chosen triangle, ones on the diagonal when unit, transposed when asked.
std::vector<double> opMatrix(const HostTensor& a, int64_t offset, int64_t m, const ir::TriangularSolveAttrs& at) {
  std::vector<double> t(static_cast<size_t>(m * m), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j) {
      const bool inTriangle = at.lower ? j <= i : j >= i;
      double v = inTriangle ? a.get(offset + i * m + j) : 0.0;
      if (i == j && at.unitDiagonal) v = 1.0;
      t[static_cast<size_t>(at.transposeA ? j * m + i : i * m + j)] = v;
    }
  return t;
}

// Solves t y = c for one column c (t triangular, lower or upper) by substitution.
std::vector<double> substitute(const std::vector<double>& t, int64_t m, std::vector<double> c) {
  bool lower = true;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = i + 1; j < m; ++j) lower = lower && t[static_cast<size_t>(i * m + j)] == 0.0;
  std::vector<double> y(static_cast<size_t>(m));
  for (int64_t s = 0; s < m; ++s) {
    const int64_t i = lower ? s : m - 1 - s;
    double v = c[static_cast<size_t>(i)];
    for (int64_t j = 0; j < m; ++j)
      if (j != i && (lower ? j < i : j > i)) v -= t[static_cast<size_t>(i * m + j)] * y[static_cast<size_t>(j)];
    y[static_cast<size_t>(i)] = v / t[static_cast<size_t>(i * m + i)];
  }
  return y;
}

std::vector<HostTensor> triangularSolveRef(const HostTensor& a, const HostTensor& b, const ir::TriangularSolveAttrs& at) {
  const int64_t m = lastDim(a), rows = rowsDim(b), cols = lastDim(b);
  HostTensor x = HostTensor::zeros(b.aval);
  for (int64_t k = 0; k < matrices(a); ++k) {
    std::vector<double> t = opMatrix(a, k * m * m, m, at);
    const int64_t o = k * rows * cols;
    if (at.leftSide) {  // t x = b, column by column
      for (int64_t j = 0; j < cols; ++j) {
        std::vector<double> c(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) c[static_cast<size_t>(i)] = b.get(o + i * cols + j);
        const auto y = substitute(t, m, c);
        for (int64_t i = 0; i < m; ++i) x.set(o + i * cols + j, y[static_cast<size_t>(i)]);
      }
    } else {  // x t = b: t^T x^T = b^T, row by row of b
      std::vector<double> tt(t.size());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < m; ++j) tt[static_cast<size_t>(j * m + i)] = t[static_cast<size_t>(i * m + j)];
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> c(static_cast<size_t>(m));
        for (int64_t j = 0; j < m; ++j) c[static_cast<size_t>(j)] = b.get(o + r * cols + j);
        const auto y = substitute(tt, m, c);
        for (int64_t j = 0; j < m; ++j) x.set(o + r * cols + j, y[static_cast<size_t>(j)]);
      }
    }
  }
  return {x};
}

std::vector<HostTensor> luRef(const HostTensor& a) {
  const int64_t n = lastDim(a);
  Shape vec = a.aval.shape;
  vec.dims().pop_back();
  HostTensor lu = HostTensor::zeros(a.aval), pivots = HostTensor::zeros(Aval{vec, DType::I32}),
             perm = HostTensor::zeros(Aval{vec, DType::I32});
  for (int64_t b = 0; b < matrices(a); ++b) {
    const int64_t o = b * n * n;
    std::vector<double> w(static_cast<size_t>(n * n));
    std::vector<int64_t> p(static_cast<size_t>(n));
    for (int64_t k = 0; k < n * n; ++k) w[static_cast<size_t>(k)] = a.get(o + k);
    for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
    auto at = [&](int64_t i, int64_t j) -> double& { return w[static_cast<size_t>(i * n + j)]; };
    for (int64_t k = 0; k < n; ++k) {
      int64_t best = k;
      for (int64_t i = k + 1; i < n; ++i)
        if (std::abs(at(i, k)) > std::abs(at(best, k))) best = i;
      pivots.set(b * n + k, static_cast<double>(best));
      for (int64_t j = 0; j < n; ++j) std::swap(at(k, j), at(best, j));
      std::swap(p[static_cast<size_t>(k)], p[static_cast<size_t>(best)]);
      if (at(k, k) == 0.0) continue;
      for (int64_t i = k + 1; i < n; ++i) {
        at(i, k) /= at(k, k);
        for (int64_t j = k + 1; j < n; ++j) at(i, j) -= at(i, k) * at(k, j);
      }
    }
    for (int64_t k = 0; k < n * n; ++k) lu.set(o + k, w[static_cast<size_t>(k)]);
    for (int64_t i = 0; i < n; ++i) perm.set(b * n + i, static_cast<double>(p[static_cast<size_t>(i)]));
  }
  return {lu, pivots, perm};
}

bool accepted(OpCode op, const std::vector<HostTensor>& in, const ir::Attrs& attrs) {
  std::vector<Aval> avals;
  for (const auto& t : in) avals.push_back(t.aval);
  return ops::registry().get(op).infer(avals, attrs).ok();
}

void addCase(std::vector<OpCase>& cases, OpCode op, std::vector<HostTensor> in, ir::Attrs attrs, Reference ref,
             const std::string& note = "") {
  if (!accepted(op, in, attrs)) return;
  OpCase c;
  c.label = fmt::format("{} {} {}{}", ir::coreOpName(op), dtypeName(in[0].aval.dtype), in[0].aval.shape.toString(), note);
  c.op = op;
  c.attrs = std::move(attrs);
  c.inputs = std::move(in);
  c.reference = std::move(ref);
  if (c.inputs[0].aval.dtype == DType::F32) c.rtol = c.atol = 2e-4;
  cases.push_back(std::move(c));
}

// A triangular a [..., m, m] with a diagonal of magnitude 2 to 3 and off-diagonal values in [-1, 1] (the other
// triangle too: the kernel must not read it).
HostTensor triangularTensor(const Shape& s, DType t, std::mt19937& rng) {
  HostTensor a = randomTensor(Aval{s, t}, rng, -1.0, 1.0);
  const int64_t m = s[s.rank() - 1];
  for (int64_t b = 0; b < matrices(a); ++b)
    for (int64_t i = 0; i < m; ++i) {
      const double d = a.get(b * m * m + i * m + i);
      a.set(b * m * m + i * m + i, (d < 0 ? -2.0 : 2.0) + d);
    }
  return a;
}

}  // namespace

void addLinalgCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::vector<Shape> squares = {Shape{1, 1}, Shape{3, 3}, Shape{5, 5}, Shape{2, 4, 4}, Shape{2, 3, 3, 3}};
  for (DType t : {DType::F32, DType::F64}) {
    for (const Shape& s : squares) {
      addCase(cases, OpCode::Cholesky, {spdTensor(s, t, rng)}, ir::NoAttrs{},
              [](const std::vector<HostTensor>& in) { return choleskyRef(in[0]); });
      addCase(cases, OpCode::Lu, {randomTensor(Aval{s, t}, rng)}, ir::NoAttrs{},
              [](const std::vector<HostTensor>& in) { return luRef(in[0]); });
    }
    // triangular_solve: every combination of its four flags on one batched shape, and a few shapes.
    for (int flags = 0; flags < 16; ++flags) {
      const ir::TriangularSolveAttrs at{(flags & 1) != 0, (flags & 2) != 0, (flags & 4) != 0, (flags & 8) != 0};
      const Shape as{2, 4, 4}, bs = at.leftSide ? Shape{2, 4, 3} : Shape{2, 3, 4};
      addCase(cases, OpCode::TriangularSolve, {triangularTensor(as, t, rng), randomTensor(Aval{bs, t}, rng)}, at,
              [at](const std::vector<HostTensor>& in) { return triangularSolveRef(in[0], in[1], at); },
              fmt::format(" left {} lower {} transpose {} unit {}", at.leftSide, at.lower, at.transposeA, at.unitDiagonal));
    }
    for (const auto& [as, bs] : std::vector<std::pair<Shape, Shape>>{{Shape{1, 1}, Shape{1, 5}}, {Shape{5, 5}, Shape{5, 1}},
                                                                      {Shape{5, 5}, Shape{5, 7}}}) {
      const ir::TriangularSolveAttrs at{true, true, false, false};
      addCase(cases, OpCode::TriangularSolve, {triangularTensor(as, t, rng), randomTensor(Aval{bs, t}, rng)}, at,
              [at](const std::vector<HostTensor>& in) { return triangularSolveRef(in[0], in[1], at); }, " left lower");
    }
  }
}

}  // namespace tsr::test
