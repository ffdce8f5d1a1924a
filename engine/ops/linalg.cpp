// Linear algebra on LAPACK (OpenBLAS's): cholesky (a) -> the lower factor L, triangular_solve (a, b){left_side,
// lower, transpose_a, unit_diagonal}, lu (a) -> {lu, pivots, permutation}, eigh (a) -> {v, w}, svd (a)
// {full_matrices, compute_uv} -> {u, s, vt} or {s}, qr (a){full_matrices} -> {q, r}, as jax.lax.linalg. f32 and f64,
// over the last two dims, batched over the leading ones: one single-threaded LAPACK call per matrix, the batch's
// matrices split over the kernel's threads; where there are fewer large matrices than threads, each call runs on
// OpenBLAS's threads instead (addLinalgOp).
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
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <limits>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/runtime/blas_workspace.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"

// LAPACK's Fortran entry points (the trailing size_t is the hidden length of a character argument).
extern "C" {
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, size_t uploLen);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t uploLen);
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void ssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda, float* w, float* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobzLen, size_t uploLen);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobzLen, size_t uploLen);
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u, const int* ldu,
             float* vt, const int* ldvt, float* work, const int* lwork, int* iwork, int* info, size_t jobzLen);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             size_t jobzLen);
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work, const int* lwork, int* info);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau, float* work,
             const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work,
             const int* lwork, int* info);
}

namespace tsr::ops {

namespace {

using ir::OpCode;
using ir::ShardingRule;

// ---- Kernels -----------------------------------------------------------------------------------------------

int lapackInt(int64_t n) { return static_cast<int>(n); }  // infer keeps matrix dims below INT_MAX

void potrf(float* a, int n, int* info) { spotrf_("U", &n, a, &n, info, 1); }
void potrf(double* a, int n, int* info) { dpotrf_("U", &n, a, &n, info, 1); }
void getrf(float* a, int m, int n, int* ipiv, int* info) { sgetrf_(&m, &n, a, &m, ipiv, info); }
void getrf(double* a, int m, int n, int* ipiv, int* info) { dgetrf_(&m, &n, a, &m, ipiv, info); }

// dst [cols, rows] (leading dim ldd) = src [rows, cols]^T (leading dim lds), both row-major: OpenBLAS's blocked
// ?omatcopy. The layout changes around LAPACK are these transposes; a loop of strided stores costs ten times as
// much (1.1 ms against 0.1 ms at 512 x 512, more than the lu itself takes).
void transposeInto(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst, int64_t ldd) {
  if (rows > 0 && cols > 0)
    cblas_somatcopy(CblasRowMajor, CblasTrans, lapackInt(rows), lapackInt(cols), 1.0f, src, lapackInt(lds), dst,
                    lapackInt(ldd));
}
void transposeInto(const double* src, int64_t rows, int64_t cols, int64_t lds, double* dst, int64_t ldd) {
  if (rows > 0 && cols > 0)
    cblas_domatcopy(CblasRowMajor, CblasTrans, lapackInt(rows), lapackInt(cols), 1.0, src, lapackInt(lds), dst,
                    lapackInt(ldd));
}

// Divide and conquer (?syevd, ?gesdd): the fastest of LAPACK's drivers when the vectors are wanted. lwork -1 (and
// liwork -1) asks for the workspace sizes, returned in work[0] (iwork[0]).
void syevd(int n, float* a, float* w, float* work, int lwork, int* iwork, int liwork, int* info) {
  ssyevd_("V", "U", &n, a, &n, w, work, &lwork, iwork, &liwork, info, 1, 1);
}
void syevd(int n, double* a, double* w, double* work, int lwork, int* iwork, int liwork, int* info) {
  dsyevd_("V", "U", &n, a, &n, w, work, &lwork, iwork, &liwork, info, 1, 1);
}
void gesdd(char jobz, int m, int n, float* a, float* s, float* u, int ldu, float* vt, int ldvt, float* work, int lwork,
           int* iwork, int* info) {
  sgesdd_(&jobz, &m, &n, a, &m, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info, 1);
}
void gesdd(char jobz, int m, int n, double* a, double* s, double* u, int ldu, double* vt, int ldvt, double* work,
           int lwork, int* iwork, int* info) {
  dgesdd_(&jobz, &m, &n, a, &m, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info, 1);
}
void geqrf(int m, int n, float* a, float* tau, float* work, int lwork, int* info) {
  sgeqrf_(&m, &n, a, &m, tau, work, &lwork, info);
}
void geqrf(int m, int n, double* a, double* tau, double* work, int lwork, int* info) {
  dgeqrf_(&m, &n, a, &m, tau, work, &lwork, info);
}
void orgqr(int m, int n, int k, float* a, const float* tau, float* work, int lwork, int* info) {
  sorgqr_(&m, &n, &k, a, &m, tau, work, &lwork, info);
}
void orgqr(int m, int n, int k, double* a, const double* tau, double* work, int lwork, int* info) {
  dorgqr_(&m, &n, &k, a, &m, tau, work, &lwork, info);
}

// Runs fn(lo, hi) over chunks of a batch's `count` matrices on the kernel's threads (each LAPACK call on one
// thread: OpenBLAS is single-threaded here, as the GEMMs are), after making sure every thread can take OpenBLAS's
// workspace (blas_workspace.h: it would hang otherwise). One matrix runs on the calling thread.
void forMatrices(const ir::CpuKernelArgs& args, int64_t count, const std::function<void(int64_t, int64_t)>& fn) {
  if (count <= 0) return;
  if (count == 1 || !args.parallelFor) return fn(0, count);
  if (auto st = runtime::reserveBlasWorkspace(std::max(args.threads, 1)); !st.ok())
    throw std::runtime_error(st.error().message);
  args.forChunks(count, 1, [&](int64_t lo, int64_t hi, int) { fn(lo, hi); });
}

// Operations per matrix from which fewer matrices than threads run each LAPACK call on OpenBLAS's threads (a
// 128 x 128 cholesky is 0.7 M, an lu of 256 x 256 11 M; below, handing work to a thread costs more than it saves).
constexpr double kThreadedLapackFlops = 8e6;

// The workspace size LAPACK answered a query with (a float holding an integer; rounded up, at least 1).
template <class T> int workSize(T answer) { return std::max(1, static_cast<int>(std::ceil(answer))); }

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
    forMatrices(args, count, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        T* m = l + b * n * n;
        int info = 0;
        potrf(m, lapackInt(n), &info);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j)
            if (j > i) m[i * n + j] = T(0);
            else if (info != 0) m[i * n + j] = std::numeric_limits<T>::quiet_NaN();
      }
    });
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
    forMatrices(args, count, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b)
        trsm(side, uplo, trans, diag, lapackInt(rows), lapackInt(cols), a + b * m * m, lapackInt(m),
             x + b * rows * cols, lapackInt(cols));
    });
  };
  if (aa.dtype == DType::F32) run.template operator()<float>();
  else run.template operator()<double>();
}

// a: [..., m, n] -> lu [..., m, n] (L below the unit diagonal, U on and above), pivots i32 [..., k] (row i was
// swapped with row pivots[i], in order; k = min(m, n)) and permutation i32 [..., m] (a[permutation] = L U).
void luKernel(const ir::CpuKernelArgs& args) {
  const Aval& xa = args.inputs[0].aval;
  const int64_t m = xa.shape[xa.rank() - 2], n = xa.shape[xa.rank() - 1], k = std::min(m, n);
  if (m == 0) return;
  int64_t count = 1;
  for (int d = 0; d + 2 < xa.rank(); ++d) count *= xa.shape[d];
  auto run = [&]<class T>() {
    const T* x = args.inputs[0].as<T>();
    T* lu = args.outputs[0].as<T>();
    int32_t* pivots = args.outputs[1].as<int32_t>();
    int32_t* permutation = args.outputs[2].as<int32_t>();
    forMatrices(args, count, [&](int64_t lo, int64_t hi) {
      std::vector<int> ipiv(static_cast<size_t>(std::max<int64_t>(k, 1)));
      std::vector<int32_t> perm(static_cast<size_t>(m));
      std::vector<T> colMajor(static_cast<size_t>(m * n));
      for (int64_t b = lo; b < hi; ++b) {
        transposeInto(x + b * m * n, m, n, n, colMajor.data(), m);
        int info = 0;  // > 0: U has an exact zero on its diagonal, which is a result, not an error
        if (k > 0) getrf(colMajor.data(), lapackInt(m), lapackInt(n), ipiv.data(), &info);
        transposeInto(colMajor.data(), n, m, m, lu + b * m * n, n);
        std::iota(perm.begin(), perm.end(), int32_t{0});
        for (int64_t i = 0; i < k; ++i) {
          const int32_t p = ipiv[static_cast<size_t>(i)] - 1;  // LAPACK counts from 1
          pivots[b * k + i] = p;
          std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(p)]);
        }
        std::copy(perm.begin(), perm.end(), permutation + b * m);
      }
    });
  };
  if (xa.dtype == DType::F32) run.template operator()<float>();
  else run.template operator()<double>();
}

// The number of matrices in a [..., m, n]: the product of its leading dims (1 for a matrix).
int64_t leadingCount(const Aval& a) {
  int64_t count = 1;
  for (int d = 0; d + 2 < a.rank(); ++d) count *= a.shape[d];
  return count;
}

// Fills `count` values with NaN: the result of a decomposition LAPACK could not complete.
template <class T> void fillNaN(T* p, int64_t count) { std::fill(p, p + count, std::numeric_limits<T>::quiet_NaN()); }

// Writes the identity into the p x p matrix at x.
template <class T> void identity(T* x, int64_t p) {
  std::fill(x, x + p * p, T(0));
  for (int64_t i = 0; i < p; ++i) x[i * p + i] = T(1);
}

// a: [..., n, n] (its lower triangle) -> v [..., n, n] (the eigenvectors, in columns), w [..., n] (the
// eigenvalues, ascending). The buffer read column-major is a^T, whose upper triangle is a's lower one; the
// eigenvectors come back in the columns of a column-major matrix, i.e. rows, and are transposed into v.
void eighKernel(const ir::CpuKernelArgs& args) {
  const Aval& xa = args.inputs[0].aval;
  const int64_t n = xa.shape[xa.rank() - 1];
  if (n == 0) return;
  const int64_t count = xa.numel() / (n * n);
  auto run = [&]<class T>() {
    const T* x = args.inputs[0].as<T>();
    T* v = args.outputs[0].as<T>();
    T* w = args.outputs[1].as<T>();
    T workQuery{}, queryDummy{};
    int iworkQuery = 0, info = 0;
    syevd(lapackInt(n), &queryDummy, w, &workQuery, -1, &iworkQuery, -1, &info);
    forMatrices(args, count, [&](int64_t lo, int64_t hi) {
      std::vector<T> work(static_cast<size_t>(workSize(workQuery)));
      std::vector<int> iwork(static_cast<size_t>(std::max(1, iworkQuery)));
      std::vector<T> scratch(static_cast<size_t>(n * n));
      for (int64_t b = lo; b < hi; ++b) {
        T* m = v + b * n * n;
        std::memcpy(scratch.data(), x + b * n * n, scratch.size() * sizeof(T));
        int status = 0;
        syevd(lapackInt(n), scratch.data(), w + b * n, work.data(), static_cast<int>(work.size()), iwork.data(),
              static_cast<int>(iwork.size()), &status);
        if (status != 0) {  // no convergence (NaNs or infinities in a): NaNs, as JAX
          fillNaN(m, n * n);
          fillNaN(w + b * n, n);
          continue;
        }
        transposeInto(scratch.data(), n, n, n, m, n);
      }
    });
  };
  if (xa.dtype == DType::F32) run.template operator()<float>();
  else run.template operator()<double>();
}

// a: [..., m, n] -> u, s, vt (or s alone). The row-major a read column-major is a^T [n, m] = V S U^T, so LAPACK's
// factors of a^T are ours swapped: its U (column-major [n, k]) read row-major is vt [k, n], its VT (column-major
// [k, m]) read row-major is u [m, k]; no transposes.
void svdKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<ir::DecompositionAttrs>(args.attrs);
  const Aval& xa = args.inputs[0].aval;
  const int64_t m = xa.shape[xa.rank() - 2], n = xa.shape[xa.rank() - 1], k = std::min(m, n);
  const int64_t count = leadingCount(xa);
  const bool vectors = at.computeUv;
  const int64_t uCols = at.fullMatrices ? m : k, vtRows = at.fullMatrices ? n : k;
  auto run = [&]<class T>() {
    T* u = vectors ? args.outputs[0].as<T>() : nullptr;
    T* s = args.outputs[vectors ? 1 : 0].as<T>();
    T* vt = vectors ? args.outputs[2].as<T>() : nullptr;
    if (k == 0) {  // no singular values; full matrices are identities
      if (vectors && at.fullMatrices)
        for (int64_t b = 0; b < count; ++b) {
          identity(u + b * m * m, m);
          identity(vt + b * n * n, n);
        }
      return;
    }
    const char jobz = !vectors ? 'N' : at.fullMatrices ? 'A' : 'S';
    // LAPACK's problem is n x m: its U is [n, n or k] with ldu n, its VT [m or k, m] with ldvt m or k.
    const int ldu = lapackInt(n), ldvt = lapackInt(at.fullMatrices ? m : k);
    T workQuery{}, queryDummy{};
    int queryInfo = 0, queryIwork = 0;
    gesdd(jobz, lapackInt(n), lapackInt(m), &queryDummy, s, vectors ? vt : &queryDummy, vectors ? ldu : 1,
          vectors ? u : &queryDummy, vectors ? ldvt : 1, &workQuery, -1, &queryIwork, &queryInfo);
    const T* x = args.inputs[0].as<T>();
    forMatrices(args, count, [&](int64_t lo, int64_t hi) {
      std::vector<T> scratch(static_cast<size_t>(m * n));
      std::vector<int> iwork(static_cast<size_t>(8 * k));
      std::vector<T> work(static_cast<size_t>(workSize(workQuery)));
      T dummy{};
      for (int64_t b = lo; b < hi; ++b) {
        std::memcpy(scratch.data(), x + b * m * n, static_cast<size_t>(m * n) * sizeof(T));
        T* ub = vectors ? u + b * m * uCols : &dummy;
        T* vtb = vectors ? vt + b * vtRows * n : &dummy;
        int info = 0;
        gesdd(jobz, lapackInt(n), lapackInt(m), scratch.data(), s + b * k, vtb, vectors ? ldu : 1, ub,
              vectors ? ldvt : 1, work.data(), static_cast<int>(work.size()), iwork.data(), &info);
        if (info != 0) {  // no convergence (NaNs or infinities in a): NaNs, as JAX
          fillNaN(s + b * k, k);
          if (vectors) {
            fillNaN(ub, m * uCols);
            fillNaN(vtb, vtRows * n);
          }
        }
      }
    });
  };
  if (xa.dtype == DType::F32) run.template operator()<float>();
  else run.template operator()<double>();
}

// a: [..., m, n] -> q [..., m, m or k], r [..., m or k, n] (Householder QR, ?geqrf, then ?orgqr forms q). Row
// pivoting is not a transpose's QR, so a is transposed into column-major scratch wide enough for the full q.
void qrKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<ir::DecompositionAttrs>(args.attrs);
  const Aval& xa = args.inputs[0].aval;
  const int64_t m = xa.shape[xa.rank() - 2], n = xa.shape[xa.rank() - 1], k = std::min(m, n);
  const int64_t qCols = at.fullMatrices ? m : k, rRows = at.fullMatrices ? m : k;
  const int64_t count = leadingCount(xa);
  auto run = [&]<class T>() {
    T* q = args.outputs[0].as<T>();
    T* r = args.outputs[1].as<T>();
    if (k == 0) {  // r is empty or zeros; a full q is the identity
      if (args.outputs[1].aval.numel() > 0) std::fill(r, r + args.outputs[1].aval.numel(), T(0));
      if (at.fullMatrices)
        for (int64_t b = 0; b < count; ++b) identity(q + b * m * m, m);
      return;
    }
    const int64_t cols = std::max(n, qCols);
    T query1{}, query2{}, queryDummy{};
    int queryInfo = 0;
    geqrf(lapackInt(m), lapackInt(n), &queryDummy, &queryDummy, &query1, -1, &queryInfo);
    orgqr(lapackInt(m), lapackInt(qCols), lapackInt(k), &queryDummy, &queryDummy, &query2, -1, &queryInfo);
    const int lwork = std::max(workSize(query1), workSize(query2));
    const T* x = args.inputs[0].as<T>();
    forMatrices(args, count, [&](int64_t lo, int64_t hi) {
      std::vector<T> scratch(static_cast<size_t>(m * cols));
      std::vector<T> tau(static_cast<size_t>(k));
      std::vector<T> work(static_cast<size_t>(lwork));
      int info = 0;
      for (int64_t b = lo; b < hi; ++b) {
        transposeInto(x + b * m * n, m, n, n, scratch.data(), m);
        geqrf(lapackInt(m), lapackInt(n), scratch.data(), tau.data(), work.data(), lwork, &info);
        T* rb = r + b * rRows * n;  // the first rRows rows of the factored a, zeros below the diagonal
        transposeInto(scratch.data(), n, rRows, m, rb, n);
        for (int64_t i = 1; i < rRows; ++i) std::fill(rb + i * n, rb + i * n + std::min(i, n), T(0));
        orgqr(lapackInt(m), lapackInt(qCols), lapackInt(k), scratch.data(), tau.data(), work.data(), lwork, &info);
        transposeInto(scratch.data(), qCols, m, m, q + b * m * qCols, qCols);
      }
    });
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


// f32 or f64, rank 2 or more, dims LAPACK can index (m n within its 32-bit indices).
Status checkMatrix(std::string_view op, std::span<const Aval> ops, const Aval& a) {
  if (a.dtype != DType::F32 && a.dtype != DType::F64)
    return opError(op, ops, fmt::format("dtype {} is not supported (accepts f32, f64)", dtypeName(a.dtype)));
  if (a.rank() < 2) return opError(op, ops, "a must have rank 2 or more ([..., m, n])");
  const int64_t m = a.shape[a.rank() - 2], n = a.shape[a.rank() - 1];
  if (m > 46340 || n > 46340 || m * std::max(m, n) > INT32_MAX)
    return opError(op, ops, fmt::format("a is {} x {}, more than LAPACK's 32-bit indices take", m, n));
  return {};
}

// a [..., p, q] with its last two dims replaced by `last` (one or two dims).
Aval withMatrixDims(const Aval& a, std::initializer_list<int64_t> last) {
  Shape s = a.shape;
  s.dims().resize(static_cast<size_t>(a.rank() - 2));
  for (int64_t d : last) s.dims().push_back(d);
  return Aval{s, a.dtype};
}

Result<std::vector<Aval>> inferEigh(std::span<const Aval> ops, const ir::Attrs&) {
  TSR_TRY(checkArity("eigh", ops, 1));
  TSR_TRY(checkSquare("eigh", ops, ops[0], "a"));
  const int64_t n = ops[0].shape[ops[0].rank() - 1];
  return std::vector<Aval>{ops[0], withMatrixDims(ops[0], {n})};
}

Error wrongAttrs(std::string_view op, std::span<const Aval> ops, const ir::Attrs& attrs) {
  return opError(op, ops, fmt::format("expects DecompositionAttrs but was given {}", ir::attrsTypeName(attrs)));
}

Result<std::vector<Aval>> inferSvd(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("svd", ops, 1));
  const auto* at = std::get_if<ir::DecompositionAttrs>(&attrs);
  if (!at) return wrongAttrs("svd", ops, attrs);
  TSR_TRY(checkMatrix("svd", ops, ops[0]));
  const Aval& a = ops[0];
  const int64_t m = a.shape[a.rank() - 2], n = a.shape[a.rank() - 1], k = std::min(m, n);
  const Aval s = withMatrixDims(a, {k});
  if (!at->computeUv) return std::vector<Aval>{s};
  return std::vector<Aval>{withMatrixDims(a, {m, at->fullMatrices ? m : k}), s,
                           withMatrixDims(a, {at->fullMatrices ? n : k, n})};
}

Result<std::vector<Aval>> inferQr(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity("qr", ops, 1));
  const auto* at = std::get_if<ir::DecompositionAttrs>(&attrs);
  if (!at) return wrongAttrs("qr", ops, attrs);
  if (!at->computeUv) return opError("qr", ops, "compute_uv must be true (it is svd's; qr always gives q and r)");
  TSR_TRY(checkMatrix("qr", ops, ops[0]));
  const Aval& a = ops[0];
  const int64_t m = a.shape[a.rank() - 2], n = a.shape[a.rank() - 1], k = std::min(m, n);
  const int64_t p = at->fullMatrices ? m : k;
  return std::vector<Aval>{withMatrixDims(a, {m, p}), withMatrixDims(a, {p, n})};
}

Result<std::vector<Aval>> inferLu(std::span<const Aval> ops, const ir::Attrs&) {
  TSR_TRY(checkArity("lu", ops, 1));
  TSR_TRY(checkMatrix("lu", ops, ops[0]));
  const Aval& a = ops[0];
  const int64_t m = a.shape[a.rank() - 2], n = a.shape[a.rank() - 1];
  return std::vector<Aval>{a, Aval{withMatrixDims(a, {std::min(m, n)}).shape, DType::I32},
                           Aval{withMatrixDims(a, {m}).shape, DType::I32}};
}

// Flops per matrix: n^3/3 (cholesky), m^2 k (triangular_solve), 2n^3/3 (lu), LAPACK's operation counts for the
// others; as many matrices as a's leading dims hold.
ir::Cost linalgCost(std::span<const Aval> in, std::span<const Aval> out, double flopsPerMatrix) {
  ir::Cost c = movementCost(in, out);
  c.flops = static_cast<double>(leadingCount(in[0])) * flopsPerMatrix;
  return c;
}

// a [..., m, n] -> {m, n, min(m, n)} as doubles, for operation counts.
std::array<double, 3> matrixDims(const Aval& a) {
  const double m = static_cast<double>(a.shape[a.rank() - 2]), n = static_cast<double>(a.shape[a.rank() - 1]);
  return {m, n, std::min(m, n)};
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

// lu = L + U - I with P a = L U (a [m, n], k = min(m, n); L [m, m] unit lower, U [n, n] upper, each completed by
// the identity past k): JAX's lu_jvp is lu-dot = L tril(X, -1) + triu(X) U with X = L^-1 P a-dot U^-1. Its
// transpose: X-bar = tril(L^T G, -1) + triu(G U^T), a-bar = P^T L^-T X-bar U^-T.
std::vector<Array> luVjp(const ir::VjpArgs& a) {
  const Array& g = a.cotangents[0];
  if (!g.valid()) return {Array()};
  const Array& lu = a.results[0];
  const Array& perm = a.results[2];
  const int r = lu.rank();
  const int64_t m = lu.shape()[r - 2], n = lu.shape()[r - 1], k = std::min(m, n);
  auto padded = [r](const Array& x, int64_t rows, int64_t cols) {
    Axes low(static_cast<size_t>(r), 0), high(static_cast<size_t>(r), 0);
    high[static_cast<size_t>(r - 2)] = rows - x.shape()[r - 2];
    high[static_cast<size_t>(r - 1)] = cols - x.shape()[r - 1];
    return pad(x, low, high);
  };
  auto eye = [&](int64_t p, int64_t from) {  // ones on the diagonal of a [..., p, p] from row `from` on
    Shape s = lu.shape();
    s.dims()[static_cast<size_t>(r - 2)] = p, s.dims()[static_cast<size_t>(r - 1)] = p;
    const Array i = iota(s, r - 2, DType::I32), j = iota(s, r - 1, DType::I32);
    return mul(astype(equal(i, j), lu.dtype()), astype(greaterEqual(i, fullLike(i, static_cast<double>(from))), lu.dtype()));
  };
  const Array l = add(padded(tril(sliceAxis(lu, r - 1, 0, k), -1), m, m), eye(m, 0));
  const Array u = add(padded(triu(sliceAxis(lu, r - 2, 0, k)), n, n), eye(n, k));
  const Array xBar = add(tril(matmul(mT(l), g), -1), triu(matmul(g, mT(u))));
  const Array m1 = solveTri(l, xBar, true, true, true, true);   // L^T m1 = X-bar
  const Array m2 = solveTri(u, m1, false, false, true, false);  // m2 U^T = m1
  // P as a matrix [m, m]: P[i, j] = 1 where j = perm[i]; a-bar = P^T m2.
  Shape ps = lu.shape();
  ps.dims()[static_cast<size_t>(r - 1)] = m;
  Axes dims;
  for (int d = 0; d < r - 1; ++d) dims.push_back(d);
  const Array rowsPerm = broadcastInDim(perm, ps, dims);
  const Array p = astype(equal(rowsPerm, iota(ps, r - 1, DType::I32)), lu.dtype());
  return {matmul(mT(p), m2)};
}

// x [..., k] -> [..., p, k] (x[j] in every row: rowWise) or [..., k, p] (x[i] in every column).
Array spread(const Array& x, int64_t p, bool rowWise) {
  const int r = x.rank();
  Shape shape = x.shape();
  Axes dims;
  for (int d = 0; d < r - 1; ++d) dims.push_back(d);
  if (rowWise) {
    shape.dims().insert(shape.dims().end() - 1, p);
    dims.push_back(r);
  } else {
    shape.dims().push_back(p);
    dims.push_back(r - 1);
  }
  return broadcastInDim(x, shape, dims);
}

Array eyeLike(const Array& x) {
  const int r = x.rank();
  return astype(equal(iota(x.shape(), r - 2, DType::I32), iota(x.shape(), r - 1, DType::I32)), x.dtype());
}

// x [..., k] -> diag(x) [..., k, k].
Array diagMatrix(const Array& x) {
  const Array rows = spread(x, x.shape()[x.rank() - 1], true);
  return mul(rows, eyeLike(rows));
}

// F [..., k, k] with F_ij = 1 / (e_j - e_i) off the diagonal and 0 on it (JAX's reciprocal(eye + diff) - eye,
// which divides by one, not zero, on the diagonal).
Array reciprocalGaps(const Array& e) {
  const int64_t k = e.shape()[e.rank() - 1];
  const Array diff = sub(spread(e, k, true), spread(e, k, false));
  const Array eye = eyeLike(diff);
  return sub(div(fullLike(diff, 1.0), add(eye, diff)), eye);
}

// v diag(w) v^T = a (its lower triangle): JAX's eigh_jvp, v-dot = v (F o (v^T a-dot v)), w-dot = diag(v^T a-dot v)
// with F the reciprocal eigenvalue gaps, transposed: G = v (diag(w-bar) + F o (v^T v-bar)) v^T, folded onto the
// lower triangle the kernel reads (as cholesky's).
std::vector<Array> eighVjp(const ir::VjpArgs& a) {
  const Array& gv = a.cotangents[0];
  const Array& gw = a.cotangents[1];
  const Array& v = a.results[0];
  const Array& w = a.results[1];
  Array inner;
  if (gw.valid()) inner = diagMatrix(gw);
  if (gv.valid()) {
    const Array term = mul(reciprocalGaps(w), matmul(mT(v), gv));
    inner = inner.valid() ? add(inner, term) : term;
  }
  if (!inner.valid()) return {Array()};
  const Array g = matmul(matmul(v, inner), mT(v));
  return {add(tril(g), tril(mT(g), -1))};
}

// a = u diag(s) v^T (u [m, k], v [n, k]): Townsend's pullback of the reduced SVD (JAX's svd_jvp transposed),
//   a-bar = u [(F o (u^T u-bar - u-bar^T u)) S + diag(s-bar) + S (F o (v^T v-bar - v-bar^T v))] v^T
//         + (I - u u^T) u-bar S^-1 v^T + u S^-1 v-bar^T (I - v v^T),   F_ij = 1 / (s_j^2 - s_i^2).
// Singular values alone: u diag(s-bar) v^T, from a second decomposition with vectors (as JAX). Full matrices:
// the columns past k are any orthonormal completion, with no derivative; as JAX, their gradient is refused.
std::vector<Array> svdVjp(const ir::VjpArgs& a) {
  const auto& at = attrsAs<ir::DecompositionAttrs>(a.attrs);
  const Array& x = a.operands[0];
  const int r = x.rank();
  const int64_t m = x.shape()[r - 2], n = x.shape()[r - 1], k = std::min(m, n);
  Array gu, gs, gvt, u, s, vt;
  if (at.computeUv) {
    gu = a.cotangents[0], gs = a.cotangents[1], gvt = a.cotangents[2];
    u = a.results[0], s = a.results[1], vt = a.results[2];
    if (at.fullMatrices && m != n) {
      if (gu.valid() || gvt.valid())
        raise(makeError("svd: the gradient of u and vt with full_matrices=True of a {} x {} matrix is not defined "
                        "(their last {} {} are any orthonormal completion); use full_matrices=False",
                        m, n, m > n ? m - k : n - k, m > n ? "columns of u" : "rows of vt"));
      u = sliceAxis(u, r - 1, 0, k), vt = sliceAxis(vt, r - 2, 0, k);
    }
  } else {
    gs = a.cotangents[0];
    auto usv = bind(OpCode::Svd, {x}, ir::DecompositionAttrs{false, true}, std::source_location::current());
    u = usv[0], s = usv[1], vt = usv[2];
  }
  if (!gu.valid() && !gs.valid() && !gvt.valid()) return {Array()};
  const Array v = mT(vt);
  const Array sRows = spread(s, k, true);  // S_ij = s_j: X * sRows = X S, sCols * X = S X
  const Array sCols = spread(s, k, false);
  Array inner = gs.valid() ? diagMatrix(gs) : Array();
  auto addTo = [](Array& acc, const Array& term) { acc = acc.valid() ? add(acc, term) : term; };
  const Array f = (gu.valid() || gvt.valid()) ? reciprocalGaps(mul(s, s)) : Array();
  if (gu.valid()) {
    const Array utgu = matmul(mT(u), gu);
    addTo(inner, mul(mul(f, sub(utgu, mT(utgu))), sRows));
  }
  Array gv;
  if (gvt.valid()) {
    gv = mT(gvt);
    const Array vtgv = matmul(vt, gv);
    addTo(inner, mul(sCols, mul(f, sub(vtgv, mT(vtgv)))));
  }
  Array xBar = matmul(matmul(u, inner), vt);
  if (gu.valid() && m > k) {  // (I - u u^T) u-bar S^-1 v^T
    const Array proj = sub(gu, matmul(u, matmul(mT(u), gu)));
    addTo(xBar, matmul(div(proj, spread(s, m, true)), vt));
  }
  if (gvt.valid() && n > k) {  // u S^-1 v-bar^T (I - v v^T)
    const Array proj = sub(gvt, matmul(matmul(gvt, v), vt));
    addTo(xBar, matmul(u, div(proj, spread(s, n, false))));
  }
  return {xBar};
}

// a = q r, m >= n: JAX's qr_jvp (X = a-dot r^-1, C = q^T X, O = tril(C, -1) - tril(C, -1)^T, q-dot = q (O - C) + X,
// r-dot = (C - O) r) transposed: with M = q^T q-bar - r-bar r^T, X-bar = q-bar + q (tril(M - M^T, -1) - M) and
// a-bar = X-bar r^-T. Wide (m < n): a = [a1 | a2] with q r1 = a1 and r2 = q^T a2, so q-bar gains a2 r2-bar^T,
// a1's pullback is the square one and a2-bar = q r2-bar. Full q of a tall a: refused, as JAX (its last columns
// are any orthonormal completion).
std::vector<Array> qrVjp(const ir::VjpArgs& a) {
  const auto& at = attrsAs<ir::DecompositionAttrs>(a.attrs);
  const Array& x = a.operands[0];
  const int r = x.rank();
  const int64_t m = x.shape()[r - 2], n = x.shape()[r - 1], k = std::min(m, n);
  Array gq = a.cotangents[0], gr = a.cotangents[1];
  if (!gq.valid() && !gr.valid()) return {Array()};
  Array q = a.results[0], rr = a.results[1];
  if (at.fullMatrices && m > n) {
    if (gq.valid())
      raise(makeError("qr: the gradient of q with full_matrices=True of a {} x {} matrix is not defined (its last {} "
                      "columns are any orthonormal completion); use full_matrices=False",
                      m, n, m - n));
    q = sliceAxis(q, r - 1, 0, k), rr = sliceAxis(rr, r - 2, 0, k), gr = sliceAxis(gr, r - 2, 0, k);
  }
  if (!gq.valid()) gq = zerosLike(q);
  if (!gr.valid()) gr = zerosLike(rr);
  Array r1 = rr, gr1 = gr, gr2, x2;
  if (m < n) {
    r1 = sliceAxis(rr, r - 1, 0, m), gr1 = sliceAxis(gr, r - 1, 0, m), gr2 = sliceAxis(gr, r - 1, m, n);
    x2 = sliceAxis(x, r - 1, m, n);
    gq = add(gq, matmul(x2, mT(gr2)));
  }
  const Array mm = sub(matmul(mT(q), gq), matmul(gr1, mT(r1)));
  const Array xBar = add(gq, matmul(q, sub(tril(sub(mm, mT(mm)), -1), mm)));
  const Array a1Bar = solveTri(r1, xBar, false, false, true, false);  // a1-bar r1^T = X-bar
  if (m >= n) return {a1Bar};
  return {concatenate({a1Bar, matmul(q, gr2)}, r - 1)};
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


// The rules every linalg op shares: opaque to fusion, batched by moving the batch dim in front, its leading dims
// split by a mesh and its matrices whole. flops: the operation count per matrix.
void addLinalgOp(ir::OpRegistry& reg, OpCode code, int numOperands, int numResults, ir::InferFn infer,
                 double (*flops)(std::span<const Aval> in), ir::CpuKernelFn kernel, ir::VjpRule vjp) {
  ir::OpDef def = coreOp(code, "linalg", ir::FusionKind::Opaque, numOperands, numResults);
  def.infer = std::move(infer);
  def.cost = [flops](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
    return linalgCost(in, out, flops(in));
  };
  def.cpu = [flops, kernel = std::move(kernel)](const ir::CpuKernelArgs& args) {
    if (args.parallelFor == nullptr || args.threads < 2 || leadingCount(args.inputs[0].aval) >= args.threads)
      return kernel(args);
    std::vector<Aval> in;  // only where the operation count decides
    for (const auto& t : args.inputs) in.push_back(t.aval);
    if (flops(in) < kThreadedLapackFlops) return kernel(args);
    // Fewer large matrices than threads: one LAPACK call at a time, on OpenBLAS's threads (its parallel getrf and
    // potrf, threaded GEMMs inside the others), the pool's threads idle meanwhile.
    ir::CpuKernelArgs alone{args.inputs, args.outputs, args.attrs};
    runtime::BlasThreads scope(args.threads);
    if (!scope.status().ok()) throw std::runtime_error(scope.status().error().message);
    kernel(alone);
  };
  def.vjp = std::move(vjp);
  def.batch = [code](const ir::BatchArgs& a) { return batchLeading(code, a); };
  def.shard = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) -> Result<ShardingRule> {
    return leadingDims(in, out);
  };
  addCoreOp(reg, std::move(def));
}

}  // namespace

void registerLinalgOps(ir::OpRegistry& reg) {
  addLinalgOp(reg, OpCode::Cholesky, 1, 1, inferCholesky, [](std::span<const Aval> in) { return cube(in[0]) / 3.0; },
              choleskyKernel, choleskyVjp);
  addLinalgOp(
      reg, OpCode::TriangularSolve, 2, 1, inferTriangularSolve,
      [](std::span<const Aval> in) {  // m^2 k
        const Aval& b = in[1];
        const double m = static_cast<double>(in[0].shape[in[0].rank() - 1]);
        return m * static_cast<double>(b.shape[b.rank() - 1]) * static_cast<double>(b.shape[b.rank() - 2]);
      },
      triangularSolveKernel, triangularSolveVjp);
  addLinalgOp(
      reg, OpCode::Lu, 1, 3, inferLu,
      [](std::span<const Aval> in) {  // m n k - k^3 / 3 (2 n^3 / 3 square)
        const auto [m, n, k] = matrixDims(in[0]);
        return m * n * k - k * k * k / 3.0;
      },
      luKernel, luVjp);
  // Tridiagonal reduction (4/3 n^3), divide and conquer, the back-transform.
  addLinalgOp(reg, OpCode::Eigh, 1, 2, inferEigh, [](std::span<const Aval> in) { return 9.0 * cube(in[0]); },
              eighKernel, eighVjp);
  addLinalgOp(
      reg, OpCode::Svd, 1, -1, inferSvd,
      [](std::span<const Aval> in) {  // bidiagonalization, then divide and conquer
        const auto [m, n, k] = matrixDims(in[0]);
        return 4.0 * m * n * k + 22.0 * k * k * k;
      },
      svdKernel, svdVjp);
  addLinalgOp(
      reg, OpCode::Qr, 1, 2, inferQr,
      [](std::span<const Aval> in) {  // geqrf, then orgqr as much again
        const auto [m, n, k] = matrixDims(in[0]);
        return 4.0 * m * n * k - 4.0 * k * k * k / 3.0;
      },
      qrKernel, qrVjp);
}

}  // namespace tsr::ops
