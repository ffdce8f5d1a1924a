// Linear algebra on LAPACK (OpenBLAS's): cholesky (a) -> the lower factor L, triangular_solve (a, b){left_side,
// lower, transpose_a, unit_diagonal} and lu (a) -> {lu, pivots, permutation}, as jax.lax.linalg. f32 and f64,
// over the last two dims, batched over the leading ones (a loop of one LAPACK call per matrix).
//
// Layout: our matrices are row-major; LAPACK's are column-major, where a row-major buffer reads as the
// transpose. cholesky factors the transpose's upper triangle (potrf 'U'), which is the row-major lower
// triangle, and the factor U (col-major) reads back as L = U^T; lu transposes into column-major scratch, since
// row pivoting of a^T is not row pivoting of a. triangular_solve is cblas_?trsm, which takes row-major.
//
// User input never aborts: a matrix that is not positive definite gives a cholesky whose lower triangle is NaNs
// (as JAX); a singular
// one an lu with a zero on U's diagonal and solves with infinities or NaNs.
//
// Gradients: JAX's rules (jax/_src/lax/linalg.py), written as pullbacks with dot products and triangular
// solves. cholesky reads only the lower triangle of a, so its pullback is the gradient with respect to that
// triangle (JAX's symmetric one folded onto it); through the symmetrizing Array API cholesky ((a + a^T) / 2)
// it is JAX's. Batching moves the batch dim in front; sharding splits the leading dims, the matrices stay whole.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"

// LAPACK's Fortran entry points (the trailing size_t is the hidden length of a character argument).
extern "C" {
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, size_t uploLen);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t uploLen);
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
}

namespace tsr::ops {

namespace {

using ir::OpCode;
using ir::ShardingRule;

// ---- Kernels -----------------------------------------------------------------------------------------------

int lapackInt(int64_t n) { return static_cast<int>(n); }  // infer keeps matrix dims below INT_MAX

void potrf(float* a, int n, int* info) { spotrf_("U", &n, a, &n, info, 1); }
void potrf(double* a, int n, int* info) { dpotrf_("U", &n, a, &n, info, 1); }
void getrf(float* a, int n, int* ipiv, int* info) { sgetrf_(&n, &n, a, &n, ipiv, info); }
void getrf(double* a, int n, int* ipiv, int* info) { dgetrf_(&n, &n, a, &n, ipiv, info); }

void trsm(CBLAS_SIDE side, CBLAS_UPLO uplo, CBLAS_TRANSPOSE trans, CBLAS_DIAG diag, int m, int n, const float* a,
          int lda, float* b, int ldb) {
  cblas_strsm(CblasRowMajor, side, uplo, trans, diag, m, n, 1.0f, a, lda, b, ldb);
}
void trsm(CBLAS_SIDE side, CBLAS_UPLO uplo, CBLAS_TRANSPOSE trans, CBLAS_DIAG diag, int m, int n, const double* a,
          int lda, double* b, int ldb) {
  cblas_dtrsm(CblasRowMajor, side, uplo, trans, diag, m, n, 1.0, a, lda, b, ldb);
}

// a: [..., n, n] -> L [..., n, n], zeros above the diagonal; NaNs on and below it for a matrix that is not
// positive definite (as JAX).
void choleskyKernel(const ir::CpuKernelArgs& args) {
  const Aval& xa = args.inputs[0].aval;
  const int64_t n = xa.shape[xa.rank() - 1];
  if (n == 0) return;
  const int64_t count = xa.numel() / (n * n);
  auto run = [&]<class T>() {
    const T* x = args.inputs[0].as<T>();
    T* l = args.outputs[0].as<T>();
    std::memcpy(l, x, static_cast<size_t>(xa.numel()) * sizeof(T));
    for (int64_t b = 0; b < count; ++b) {
      T* m = l + b * n * n;
      int info = 0;
      potrf(m, lapackInt(n), &info);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
          if (j > i) m[i * n + j] = T(0);
          else if (info != 0) m[i * n + j] = std::numeric_limits<T>::quiet_NaN();
    }
  };
  if (xa.dtype == DType::F32) run.template operator()<float>();
  else run.template operator()<double>();
}

// a: [..., m, m], b: [..., m, k] (left side) or [..., k, m] -> x of b's shape.
void triangularSolveKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<ir::TriangularSolveAttrs>(args.attrs);
  const Aval& aa = args.inputs[0].aval;
  const Aval& ba = args.inputs[1].aval;
  const int64_t m = aa.shape[aa.rank() - 1];
  const int64_t rows = ba.shape[ba.rank() - 2], cols = ba.shape[ba.rank() - 1];
  if (m == 0 || rows == 0 || cols == 0) {
    if (ba.numel() > 0) std::memcpy(args.outputs[0].data, args.inputs[1].data, static_cast<size_t>(ba.numel()) * dtypeSize(ba.dtype));
    return;
  }
  const int64_t count = aa.numel() / (m * m);
  const CBLAS_SIDE side = at.leftSide ? CblasLeft : CblasRight;
  const CBLAS_UPLO uplo = at.lower ? CblasLower : CblasUpper;
  const CBLAS_TRANSPOSE trans = at.transposeA ? CblasTrans : CblasNoTrans;
  const CBLAS_DIAG diag = at.unitDiagonal ? CblasUnit : CblasNonUnit;
  auto run = [&]<class T>() {
    const T* a = args.inputs[0].as<T>();
    T* x = args.outputs[0].as<T>();
    std::memcpy(x, args.inputs[1].as<T>(), static_cast<size_t>(ba.numel()) * sizeof(T));
    for (int64_t b = 0; b < count; ++b)
      trsm(side, uplo, trans, diag, lapackInt(rows), lapackInt(cols), a + b * m * m, lapackInt(m),
           x + b * rows * cols, lapackInt(cols));
  };
  if (aa.dtype == DType::F32) run.template operator()<float>();
  else run.template operator()<double>();
}

// a: [..., n, n] -> lu [..., n, n] (L below the unit diagonal, U on and above), pivots i32 [..., n] (row i was
// swapped with row pivots[i], in order) and permutation i32 [..., n] (a[permutation] = L U).
void luKernel(const ir::CpuKernelArgs& args) {
  const Aval& xa = args.inputs[0].aval;
  const int64_t n = xa.shape[xa.rank() - 1];
  if (n == 0) return;
  const int64_t count = xa.numel() / (n * n);
  std::vector<int> ipiv(static_cast<size_t>(n));
  std::vector<int32_t> perm(static_cast<size_t>(n));
  auto run = [&]<class T>() {
    const T* x = args.inputs[0].as<T>();
    T* lu = args.outputs[0].as<T>();
    int32_t* pivots = args.outputs[1].as<int32_t>();
    int32_t* permutation = args.outputs[2].as<int32_t>();
    std::vector<T> colMajor(static_cast<size_t>(n * n));
    for (int64_t b = 0; b < count; ++b) {
      const T* src = x + b * n * n;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) colMajor[static_cast<size_t>(j * n + i)] = src[i * n + j];
      int info = 0;  // > 0: U has an exact zero on its diagonal, which is a result, not an error
      getrf(colMajor.data(), lapackInt(n), ipiv.data(), &info);
      T* dst = lu + b * n * n;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) dst[i * n + j] = colMajor[static_cast<size_t>(j * n + i)];
      std::iota(perm.begin(), perm.end(), int32_t{0});
      for (int64_t i = 0; i < n; ++i) {
        const int32_t p = ipiv[static_cast<size_t>(i)] - 1;  // LAPACK counts from 1
        pivots[b * n + i] = p;
        std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(p)]);
      }
      std::copy(perm.begin(), perm.end(), permutation + b * n);
    }
  };
  if (xa.dtype == DType::F32) run.template operator()<float>();
  else run.template operator()<double>();
}

// ---- Shape rules -------------------------------------------------------------------------------------------

// The checks every op makes of its matrix operand: f32 or f64, rank 2 or more, square, dims LAPACK can index.
Status checkSquare(std::string_view op, std::span<const Aval> ops, const Aval& a, const char* what) {
  if (a.dtype != DType::F32 && a.dtype != DType::F64)
    return opError(op, ops, fmt::format("dtype {} is not supported (accepts f32, f64)", dtypeName(a.dtype)));
  if (a.rank() < 2) return opError(op, ops, fmt::format("{} must have rank 2 or more ([..., n, n])", what));
  const int64_t n = a.shape[a.rank() - 1];
  if (a.shape[a.rank() - 2] != n) return opError(op, ops, fmt::format("{} must be square in its last two dims", what));
  if (n > 46340) return opError(op, ops, fmt::format("{} has {} rows, more than LAPACK's 32-bit indices take", what, n));
  return {};
}

Result<std::vector<Aval>> inferCholesky(std::span<const Aval> ops, const ir::Attrs&) {
  TSR_TRY(checkArity("cholesky", ops, 1));
  TSR_TRY(checkSquare("cholesky", ops, ops[0], "a"));
  return std::vector<Aval>{ops[0]};
}

Result<std::vector<Aval>> inferTriangularSolve(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("triangular_solve", ops, 2));
  const auto* at = std::get_if<ir::TriangularSolveAttrs>(&attrs);
  if (!at)
    return opError("triangular_solve", ops,
                   fmt::format("expects TriangularSolveAttrs but was given {}", ir::attrsTypeName(attrs)));
  const Aval& a = ops[0];
  const Aval& b = ops[1];
  TSR_TRY(checkSquare("triangular_solve", ops, a, "a"));
  if (b.dtype != a.dtype) return opError("triangular_solve", ops, "a and b must have one dtype");
  if (b.rank() != a.rank()) return opError("triangular_solve", ops, "a and b must have equal ranks");
  for (int d = 0; d + 2 < a.rank(); ++d)
    if (a.shape[d] != b.shape[d]) return opError("triangular_solve", ops, "a and b must have equal leading (batch) dims");
  const int64_t m = a.shape[a.rank() - 1];
  const int64_t along = at->leftSide ? b.shape[b.rank() - 2] : b.shape[b.rank() - 1];
  if (along != m)
    return opError("triangular_solve", ops,
                   fmt::format("b's {} dim ({}) must match a's {} (left_side = {})", at->leftSide ? "second-to-last" : "last",
                               along, m, at->leftSide));
  if (b.shape[b.rank() - 1] > INT32_MAX || b.shape[b.rank() - 2] > INT32_MAX)
    return opError("triangular_solve", ops, "b's matrix dims exceed LAPACK's 32-bit indices");
  return std::vector<Aval>{b};
}

Result<std::vector<Aval>> inferLu(std::span<const Aval> ops, const ir::Attrs&) {
  TSR_TRY(checkArity("lu", ops, 1));
  TSR_TRY(checkSquare("lu", ops, ops[0], "a"));
  Shape vec = ops[0].shape;
  vec.dims().pop_back();
  return std::vector<Aval>{ops[0], Aval{vec, DType::I32}, Aval{vec, DType::I32}};
}

// Flops per matrix: n^3/3 (cholesky), m^2 k (triangular_solve), 2n^3/3 (lu).
ir::Cost linalgCost(std::span<const Aval> in, std::span<const Aval> out, double flopsPerMatrix) {
  const Aval& a = in[0];
  const int64_t n = a.shape[a.rank() - 1];
  const double count = n == 0 ? 0.0 : static_cast<double>(a.numel()) / static_cast<double>(n * n);
  ir::Cost c = movementCost(in, out);
  c.flops = count * flopsPerMatrix;
  return c;
}

double cube(const Aval& a) { return std::pow(static_cast<double>(a.shape[a.rank() - 1]), 3); }

// ---- Transformation rules -----------------------------------------------------------------------------------

// x [..., p, q] -> [..., q, p].
Array mT(const Array& x) { return swapAxes(x, x.rank() - 2, x.rank() - 1); }

// Keeps the elements with j - i <= k (tril) or j - i >= k (triu) of each matrix [..., p, q], zeros elsewhere.
Array band(const Array& x, int64_t k, bool lower) {
  const int r = x.rank();
  const Array diff = sub(iota(x.shape(), r - 1, DType::I32), iota(x.shape(), r - 2, DType::I32));
  const Array bound = fullLike(diff, static_cast<double>(k));
  return where(lower ? lessEqual(diff, bound) : greaterEqual(diff, bound), x, zerosLike(x));
}
Array tril(const Array& x, int64_t k = 0) { return band(x, k, true); }
Array triu(const Array& x, int64_t k = 0) { return band(x, k, false); }

Array solveTri(const Array& a, const Array& b, bool leftSide, bool lower, bool transposeA, bool unitDiagonal) {
  return bind1(OpCode::TriangularSolve, {a, b}, ir::TriangularSolveAttrs{leftSide, lower, transposeA, unitDiagonal},
               std::source_location::current());
}

// L = cholesky(a), L-bar given: with phi(X) = tril(X) with its diagonal halved, the symmetric gradient is
// S = L^-T phi(L^T L-bar) L^-1 (JAX's cholesky_jvp transposed); a's lower triangle feeds both S_ij and S_ji.
std::vector<Array> choleskyVjp(const ir::VjpArgs& a) {
  const Array& g = a.cotangents[0];
  if (!g.valid()) return {Array()};
  const Array& l = a.results[0];
  const Array p = tril(matmul(mT(l), g));
  const Array phi = mul(add(p, tril(p, -1)), fullLike(p, 0.5));
  const Array y = solveTri(l, phi, true, true, true, false);  // L^T y = phi
  const Array s = solveTri(l, y, false, true, false, false);  // s L = y
  return {add(tril(s), tril(mT(s), -1))};
}

// x = op(a)^-1 b or b op(a)^-1: b-bar solves with op(a)^T; a-bar = -(b-bar x^T) for op(a) x = b, and its
// transposed or right-side forms, kept to the triangle the kernel reads.
std::vector<Array> triangularSolveVjp(const ir::VjpArgs& a) {
  const Array& g = a.cotangents[0];
  if (!g.valid()) return {Array(), Array()};
  const auto& at = attrsAs<ir::TriangularSolveAttrs>(a.attrs);
  const Array& x = a.results[0];
  const Array bBar = solveTri(a.operands[0], g, at.leftSide, at.lower, !at.transposeA, at.unitDiagonal);
  Array aBar;
  if (at.leftSide) aBar = at.transposeA ? matmul(x, mT(bBar)) : matmul(bBar, mT(x));
  else aBar = at.transposeA ? matmul(mT(bBar), x) : matmul(mT(x), bBar);
  aBar = neg(aBar);
  const int64_t k = at.unitDiagonal ? 1 : 0;
  aBar = at.lower ? tril(aBar, -k) : triu(aBar, k);
  return {aBar, bBar};
}

// lu = L + U - I with P a = L U: JAX's lu_jvp is lu-dot = L tril(X, -1) + triu(X) U with X = L^-1 P a-dot U^-1.
// Its transpose: X-bar = tril(L^T G, -1) + triu(G U^T), a-bar = P^T L^-T X-bar U^-T.
std::vector<Array> luVjp(const ir::VjpArgs& a) {
  const Array& g = a.cotangents[0];
  if (!g.valid()) return {Array()};
  const Array& lu = a.results[0];
  const Array& perm = a.results[2];
  const Array ltg = add(matmul(mT(tril(lu, -1)), g), g);  // L^T G, L's unit diagonal added back
  const Array xBar = add(tril(ltg, -1), triu(matmul(g, mT(triu(lu)))));
  const Array m1 = solveTri(lu, xBar, true, true, true, true);   // L^T m1 = X-bar
  const Array m2 = solveTri(lu, m1, false, false, true, false);  // m2 U^T = m1
  // P as a matrix: P[i, j] = 1 where j = perm[i]; a-bar = P^T m2.
  const int r = lu.rank();
  Axes dims;
  for (int d = 0; d < r - 1; ++d) dims.push_back(d);
  const Array rowsPerm = broadcastInDim(perm, lu.shape(), dims);
  const Array p = astype(equal(rowsPerm, iota(lu.shape(), r - 1, DType::I32)), lu.dtype());
  return {matmul(mT(p), m2)};
}

// Every operand and result gets its batch dim in front; the op runs as it is over one more leading dim.
ir::BatchResult batchLeading(OpCode op, const ir::BatchArgs& a) {
  std::vector<Array> xs;
  for (size_t i = 0; i < a.operands.size(); ++i) xs.push_back(moveBatchDim(a.operands[i], a.batchDims[i], 0, a.batchSize));
  auto r = bind(op, xs, a.attrs, std::source_location::current());
  return {r, std::vector<int>(r.size(), 0)};
}

// The leading dims (a's all but two, which every operand and result shares) are one factor each; the matrix
// dims (and lu's pivot dims) are whole.
ShardingRule leadingDims(std::span<const Aval> in, std::span<const Aval> out) {
  ShardingRule r;
  for (const Aval& x : in) r.operandDims.emplace_back(static_cast<size_t>(x.rank()), -1);
  for (const Aval& y : out) r.resultDims.emplace_back(static_cast<size_t>(y.rank()), -1);
  const int leading = in[0].rank() - 2;
  for (int d = 0; d < leading; ++d) {
    const int f = r.addFactor(ir::FactorKind::PassThrough);
    for (auto& dims : r.operandDims) dims[static_cast<size_t>(d)] = f;
    for (auto& dims : r.resultDims) dims[static_cast<size_t>(d)] = f;
  }
  return r;
}

}  // namespace

void registerLinalgOps(ir::OpRegistry& reg) {
  ir::OpDef cholesky = coreOp(OpCode::Cholesky, "linalg", ir::FusionKind::Opaque, 1, 1);
  cholesky.infer = inferCholesky;
  cholesky.cost = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
    return linalgCost(in, out, cube(in[0]) / 3.0);
  };
  cholesky.cpu = choleskyKernel;
  cholesky.vjp = choleskyVjp;
  cholesky.batch = [](const ir::BatchArgs& a) { return batchLeading(OpCode::Cholesky, a); };
  cholesky.shard = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) -> Result<ShardingRule> {
    return leadingDims(in, out);
  };
  addCoreOp(reg, std::move(cholesky));

  ir::OpDef solve = coreOp(OpCode::TriangularSolve, "linalg", ir::FusionKind::Opaque, 2, 1);
  solve.infer = inferTriangularSolve;
  solve.cost = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
    const Aval& b = in[1];
    const double m = static_cast<double>(in[0].shape[in[0].rank() - 1]);
    return linalgCost(in, out, m == 0 ? 0.0 : m * static_cast<double>(b.shape[b.rank() - 1]) * static_cast<double>(b.shape[b.rank() - 2]));
  };
  solve.cpu = triangularSolveKernel;
  solve.vjp = triangularSolveVjp;
  solve.batch = [](const ir::BatchArgs& a) { return batchLeading(OpCode::TriangularSolve, a); };
  solve.shard = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) -> Result<ShardingRule> {
    return leadingDims(in, out);
  };
  addCoreOp(reg, std::move(solve));

  ir::OpDef lu = coreOp(OpCode::Lu, "linalg", ir::FusionKind::Opaque, 1, 3);
  lu.infer = inferLu;
  lu.cost = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
    return linalgCost(in, out, 2.0 * cube(in[0]) / 3.0);
  };
  lu.cpu = luKernel;
  lu.vjp = luVjp;
  lu.batch = [](const ir::BatchArgs& a) { return batchLeading(OpCode::Lu, a); };
  lu.shard = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) -> Result<ShardingRule> {
    return leadingDims(in, out);
  };
  addCoreOp(reg, std::move(lu));
}

}  // namespace tsr::ops
