// Conformance cases for cholesky, triangular_solve, lu, eigh, svd and qr. The references are the textbook loops
// in double, written here: Cholesky-Banachiewicz, forward and back substitution on the triangle as op(a) reads
// it, Doolittle elimination with partial pivoting (the first largest |pivot|, as LAPACK's i?amax), cyclic Jacobi
// rotations for eigh (and for svd, on a^T a or a a^T), modified Gram-Schmidt for qr; they share no code with the
// kernels' LAPACK calls. Inputs are built to be well conditioned: symmetric positive definite for cholesky, a
// dominant diagonal for the solves. Eigenvectors and singular vectors are defined up to their signs, and a full
// decomposition's completion columns are any orthonormal ones: both sides are put in a canonical form first.
#include <algorithm>
#include <cmath>
#include <functional>
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
  const int64_t m = rowsDim(a), n = lastDim(a), steps = std::min(m, n);
  Shape rows = a.aval.shape;
  rows.dims().pop_back();
  Shape vec = rows;
  vec.dims().back() = steps;
  HostTensor lu = HostTensor::zeros(a.aval), pivots = HostTensor::zeros(Aval{vec, DType::I32}),
             perm = HostTensor::zeros(Aval{rows, DType::I32});
  for (int64_t b = 0; b < matrices(a); ++b) {
    const int64_t o = b * m * n;
    std::vector<double> w(static_cast<size_t>(m * n));
    std::vector<int64_t> p(static_cast<size_t>(m));
    for (int64_t k = 0; k < m * n; ++k) w[static_cast<size_t>(k)] = a.get(o + k);
    for (int64_t i = 0; i < m; ++i) p[static_cast<size_t>(i)] = i;
    auto at = [&](int64_t i, int64_t j) -> double& { return w[static_cast<size_t>(i * n + j)]; };
    for (int64_t k = 0; k < steps; ++k) {
      int64_t best = k;
      for (int64_t i = k + 1; i < m; ++i)
        if (std::abs(at(i, k)) > std::abs(at(best, k))) best = i;
      pivots.set(b * steps + k, static_cast<double>(best));
      for (int64_t j = 0; j < n; ++j) std::swap(at(k, j), at(best, j));
      std::swap(p[static_cast<size_t>(k)], p[static_cast<size_t>(best)]);
      if (at(k, k) == 0.0) continue;
      for (int64_t i = k + 1; i < m; ++i) {
        at(i, k) /= at(k, k);
        for (int64_t j = k + 1; j < n; ++j) at(i, j) -= at(i, k) * at(k, j);
      }
    }
    for (int64_t k = 0; k < m * n; ++k) lu.set(o + k, w[static_cast<size_t>(k)]);
    for (int64_t i = 0; i < m; ++i) perm.set(b * m + i, static_cast<double>(p[static_cast<size_t>(i)]));
  }
  return {lu, pivots, perm};
}

bool accepted(OpCode op, const std::vector<HostTensor>& in, const ir::Attrs& attrs) {
  std::vector<Aval> avals;
  for (const auto& t : in) avals.push_back(t.aval);
  return ops::registry().get(op).infer(avals, attrs).ok();
}

void addCase(std::vector<OpCase>& cases, OpCode op, std::vector<HostTensor> in, ir::Attrs attrs, Reference ref,
             const std::string& note = "", std::function<void(std::vector<HostTensor>&)> canonical = {}) {
  if (!accepted(op, in, attrs)) return;
  OpCase c;
  c.canonical = std::move(canonical);
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

// A dense p x q matrix of doubles, row-major, for the references below.
struct Mat {
  int64_t p = 0, q = 0;
  std::vector<double> v;
  Mat(int64_t rows, int64_t cols) : p(rows), q(cols), v(static_cast<size_t>(rows * cols), 0.0) {}
  double& operator()(int64_t i, int64_t j) { return v[static_cast<size_t>(i * q + j)]; }
  double operator()(int64_t i, int64_t j) const { return v[static_cast<size_t>(i * q + j)]; }
};

Mat product(const Mat& a, const Mat& b, bool transposeA = false) {
  const int64_t rows = transposeA ? a.q : a.p, inner = transposeA ? a.p : a.q;
  Mat c(rows, b.q);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < b.q; ++j)
      for (int64_t k = 0; k < inner; ++k) c(i, j) += (transposeA ? a(k, i) : a(i, k)) * b(k, j);
  return c;
}

// Matrix b of t (rows x cols, row-major).
Mat matrixOf(const HostTensor& t, int64_t b, int64_t rows, int64_t cols) {
  Mat x(rows, cols);
  for (int64_t k = 0; k < rows * cols; ++k) x.v[static_cast<size_t>(k)] = t.get(b * rows * cols + k);
  return x;
}
void store(HostTensor& t, int64_t b, const Mat& x) {
  for (int64_t k = 0; k < x.p * x.q; ++k) t.set(b * x.p * x.q + k, x.v[static_cast<size_t>(k)]);
}

// Cyclic Jacobi: a symmetric s = v diag(w) v^T, w ascending, v's columns the eigenvectors.
std::pair<Mat, std::vector<double>> jacobiEigen(Mat s) {
  const int64_t n = s.p;
  Mat v(n, n);
  for (int64_t i = 0; i < n; ++i) v(i, i) = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0, all = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) (i == j ? all : off) += s(i, j) * s(i, j);
    if (off <= 1e-30 * (all + off)) break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        if (s(p, q) == 0.0) continue;
        const double theta = (s(q, q) - s(p, p)) / (2.0 * s(p, q));
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), sn = t * c;
        Mat r(n, n);  // the rotation in the (p, q) plane; s <- r^T s r zeroes s(p, q)
        for (int64_t i = 0; i < n; ++i) r(i, i) = 1.0;
        r(p, p) = c, r(q, q) = c, r(p, q) = sn, r(q, p) = -sn;
        s = product(product(r, s, true), r);
        v = product(v, r);
      }
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return s(x, x) < s(y, y); });
  Mat sorted(n, n);
  std::vector<double> w(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t from = order[static_cast<size_t>(j)];
    w[static_cast<size_t>(j)] = s(from, from);
    for (int64_t i = 0; i < n; ++i) sorted(i, j) = v(i, from);
  }
  return {sorted, w};
}

Shape withLast(const Shape& s, std::initializer_list<int64_t> last) {
  Shape r = s;
  r.dims().resize(static_cast<size_t>(s.rank() - 2));
  for (int64_t d : last) r.dims().push_back(d);
  return r;
}

// The symmetric matrix of a's lower triangle.
std::vector<HostTensor> eighRef(const HostTensor& a) {
  const int64_t n = lastDim(a);
  HostTensor v = HostTensor::zeros(a.aval), w = HostTensor::zeros(Aval{withLast(a.aval.shape, {n}), a.aval.dtype});
  for (int64_t b = 0; b < matrices(a); ++b) {
    Mat s = matrixOf(a, b, n, n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) s(i, j) = s(j, i);
    const auto [vecs, vals] = jacobiEigen(s);
    store(v, b, vecs);
    for (int64_t i = 0; i < n; ++i) w.set(b * n + i, vals[static_cast<size_t>(i)]);
  }
  return {v, w};
}

// svd from the eigendecomposition of a^T a (m >= n) or a a^T: singular values descending, the other side's
// vectors a v / s or a^T u / s; a full decomposition's completion columns are left zero (canonical form).
std::vector<HostTensor> svdRef(const HostTensor& a, const ir::DecompositionAttrs& at) {
  const int64_t m = rowsDim(a), n = lastDim(a), k = std::min(m, n);
  const int64_t uc = at.fullMatrices ? m : k, vr = at.fullMatrices ? n : k;
  HostTensor u = HostTensor::zeros(Aval{withLast(a.aval.shape, {m, uc}), a.aval.dtype});
  HostTensor s = HostTensor::zeros(Aval{withLast(a.aval.shape, {k}), a.aval.dtype});
  HostTensor vt = HostTensor::zeros(Aval{withLast(a.aval.shape, {vr, n}), a.aval.dtype});
  for (int64_t b = 0; b < matrices(a); ++b) {
    const Mat x = matrixOf(a, b, m, n);
    Mat xt(n, m);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) xt(j, i) = x(i, j);
    const bool tall = m >= n;
    auto [vecs, vals] = jacobiEigen(tall ? product(x, x, true) : product(xt, xt, true));  // k x k
    Mat ub(m, uc), vtb(vr, n);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t from = k - 1 - j;  // descending
      const double sv = std::sqrt(std::max(0.0, vals[static_cast<size_t>(from)]));
      s.set(b * k + j, sv);
      for (int64_t i = 0; i < k; ++i) (tall ? vtb(j, i) : ub(i, j)) = vecs(i, from);
      // the other side: a v / s (tall) or a^T u / s
      for (int64_t i = 0; i < (tall ? m : n); ++i) {
        double acc = 0.0;
        for (int64_t l = 0; l < k; ++l) acc += (tall ? x(i, l) : xt(i, l)) * vecs(l, from);
        (tall ? ub(i, j) : vtb(j, i)) = acc / sv;
      }
    }
    store(u, b, ub);
    store(vt, b, vtb);
  }
  if (!at.computeUv) return {s};
  return {u, s, vt};
}

// Modified Gram-Schmidt on a's first k columns; r's columns past k are q^T a. Full q's completion columns are
// left zero (canonical form), full r's rows past k are zeros.
std::vector<HostTensor> qrRef(const HostTensor& a, const ir::DecompositionAttrs& at) {
  const int64_t m = rowsDim(a), n = lastDim(a), k = std::min(m, n), p = at.fullMatrices ? m : k;
  HostTensor q = HostTensor::zeros(Aval{withLast(a.aval.shape, {m, p}), a.aval.dtype});
  HostTensor r = HostTensor::zeros(Aval{withLast(a.aval.shape, {p, n}), a.aval.dtype});
  for (int64_t b = 0; b < matrices(a); ++b) {
    Mat x = matrixOf(a, b, m, n), qb(m, p), rb(p, n);
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t i = 0; i < j; ++i) {  // take out the earlier directions
        double d = 0.0;
        for (int64_t l = 0; l < m; ++l) d += qb(l, i) * x(l, j);
        rb(i, j) = d;
        for (int64_t l = 0; l < m; ++l) x(l, j) -= d * qb(l, i);
      }
      double norm = 0.0;
      for (int64_t l = 0; l < m; ++l) norm += x(l, j) * x(l, j);
      rb(j, j) = std::sqrt(norm);
      for (int64_t l = 0; l < m; ++l) qb(l, j) = x(l, j) / rb(j, j);
    }
    for (int64_t j = k; j < n; ++j)
      for (int64_t i = 0; i < k; ++i)
        for (int64_t l = 0; l < m; ++l) rb(i, j) += qb(l, i) * x(l, j);
    store(q, b, qb);
    store(r, b, rb);
  }
  return {q, r};
}

// Flips column j of x (matrix b, rows x cols) and, when y is given, row j of y (matrix b, cols2 wide).
void flip(HostTensor& x, int64_t b, int64_t rows, int64_t cols, int64_t j, HostTensor* y = nullptr, int64_t yCols = 0) {
  for (int64_t i = 0; i < rows; ++i) x.set(b * rows * cols + i * cols + j, -x.get(b * rows * cols + i * cols + j));
  if (!y) return;
  const int64_t yRows = y->numel() / std::max<int64_t>(1, yCols * matrices(x));
  for (int64_t l = 0; l < yCols; ++l) y->set(b * yRows * yCols + j * yCols + l, -y->get(b * yRows * yCols + j * yCols + l));
}

// Column j of x (matrix b) with its largest |value| made positive.
bool largestIsNegative(const HostTensor& x, int64_t b, int64_t rows, int64_t cols, int64_t j) {
  double best = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    const double v = x.get(b * rows * cols + i * cols + j);
    if (std::abs(v) > std::abs(best)) best = v;
  }
  return best < 0.0;
}

// Zeroes columns [from, cols) of x's matrices (rows x cols).
void zeroColumns(HostTensor& x, int64_t rows, int64_t cols, int64_t from) {
  for (int64_t b = 0; b < matrices(x); ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = from; j < cols; ++j) x.set(b * rows * cols + i * cols + j, 0.0);
}

void canonicalEigh(std::vector<HostTensor>& r) {
  HostTensor& v = r[0];
  const int64_t n = lastDim(v);
  for (int64_t b = 0; b < matrices(v); ++b)
    for (int64_t j = 0; j < n; ++j)
      if (largestIsNegative(v, b, n, n, j)) flip(v, b, n, n, j);
}

// u's columns (and vt's rows with them) with their largest |value| positive; the completion columns of a full
// u and rows of a full vt zeroed.
void canonicalSvd(std::vector<HostTensor>& r) {
  if (r.size() != 3) return;
  HostTensor& u = r[0];
  HostTensor& vt = r[2];
  const int64_t m = rowsDim(u), uc = lastDim(u), vr = rowsDim(vt), n = lastDim(vt), k = lastDim(r[1]);
  for (int64_t b = 0; b < matrices(u); ++b)
    for (int64_t j = 0; j < k; ++j)
      if (largestIsNegative(u, b, m, uc, j)) flip(u, b, m, uc, j, &vt, n);
  zeroColumns(u, m, uc, k);
  for (int64_t b = 0; b < matrices(vt); ++b)
    for (int64_t i = k; i < vr; ++i)
      for (int64_t j = 0; j < n; ++j) vt.set(b * vr * n + i * n + j, 0.0);
}

// r's diagonal made non-negative (q's columns flipped with r's rows); a full q's completion columns zeroed.
void canonicalQr(std::vector<HostTensor>& r) {
  HostTensor& q = r[0];
  HostTensor& rr = r[1];
  const int64_t m = rowsDim(q), p = lastDim(q), n = lastDim(rr), k = std::min(m, n);
  for (int64_t b = 0; b < matrices(q); ++b)
    for (int64_t j = 0; j < k; ++j)
      if (rr.get(b * rowsDim(rr) * n + j * n + j) < 0.0) flip(q, b, m, p, j, &rr, n);
  zeroColumns(q, m, p, k);
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
    // eigh: symmetric lower triangles (the upper one differs: the kernel must not read it).
    for (const Shape& s : squares) {
      HostTensor a = randomTensor(Aval{s, t}, rng);
      const int64_t n = s[s.rank() - 1];
      for (int64_t b = 0; b < matrices(a); ++b)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = i + 1; j < n; ++j) a.set(b * n * n + i * n + j, 5.0);
      addCase(cases, OpCode::Eigh, {a}, ir::NoAttrs{}, [](const std::vector<HostTensor>& in) { return eighRef(in[0]); },
              "", canonicalEigh);
    }
    // svd and qr: tall, wide and square, batched; reduced, full, and singular values alone; lu of the non-square.
    const std::vector<Shape> rects = {Shape{1, 1}, Shape{4, 4}, Shape{5, 3}, Shape{3, 5}, Shape{2, 4, 2}, Shape{2, 2, 3}};
    for (const Shape& s : rects)
      if (s[s.rank() - 1] != s[s.rank() - 2])
        addCase(cases, OpCode::Lu, {randomTensor(Aval{s, t}, rng)}, ir::NoAttrs{},
                [](const std::vector<HostTensor>& in) { return luRef(in[0]); });
    for (const Shape& s : rects)
      for (const ir::DecompositionAttrs at : {ir::DecompositionAttrs{false, true}, ir::DecompositionAttrs{true, true},
                                              ir::DecompositionAttrs{false, false}}) {
        const std::string note = fmt::format(" full_matrices {} compute_uv {}", at.fullMatrices, at.computeUv);
        const int64_t m = s[s.rank() - 2], n = s[s.rank() - 1];
        const size_t before = cases.size();
        addCase(cases, OpCode::Svd, {randomTensor(Aval{s, t}, rng)}, at,
                [at](const std::vector<HostTensor>& in) { return svdRef(in[0], at); }, note, canonicalSvd);
        if (cases.size() > before) cases.back().gradientRefused = at.fullMatrices && at.computeUv && m != n;
        if (!at.computeUv) continue;
        const size_t beforeQr = cases.size();
        addCase(cases, OpCode::Qr, {randomTensor(Aval{s, t}, rng)}, at,
                [at](const std::vector<HostTensor>& in) { return qrRef(in[0], at); }, note, canonicalQr);
        if (cases.size() > beforeQr) cases.back().gradientRefused = at.fullMatrices && m > n;
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
