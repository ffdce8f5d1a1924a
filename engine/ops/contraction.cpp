// dot_general: XLA's general contraction. The CPU kernel lowers every contraction to a batched GEMM: for each
// batch, an [M, K] x [K, N] product. f32/f64 go to OpenBLAS, bf16 to oneDNN's matmul where the CPU has bf16
// instructions (else, as f16, through f32 on OpenBLAS), integers to a plain loop.
//
// An operand is used in place whenever its dims form a batch of matrices BLAS can read: its free dims collapse
// to one index, its contracting dims (in attribute order) collapse to another, and one of the two has unit
// stride; batch dims may sit anywhere, since each batch is a separate GEMM call at its own offset. That covers
// x @ W, x @ W.T, W.T @ x, [B,M,K] x [B,K,N], [M,B,K]-style batch-in-the-middle layouts, attention's
// [B,H,T,D] x [B,H,S,D] over D and [B,T,C] x [C,D]. Anything else is first permuted into [batch, free, contract]
// (lhs) or [batch, contract, free] (rhs) in a scratch buffer.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "engine/core/thread_scratch.h"
#include "engine/ops/matmul_onednn.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/shard_rules.h"
#include "engine/ops/rule_helpers.h"
#include "engine/runtime/blas_workspace.h"
#include "engine/transform/trace.h"

namespace tsr::ops {
namespace {

using ir::DotGeneralAttrs;
constexpr const char* kDotGeneral = "dot_general";

// The dims of one operand by role. Batch and contracting dims keep attribute order (which pairs them with the
// other operand's); free dims are ascending, the order they take in the result.
struct DimGroups {
  std::vector<int> batch, free, contract;
};

DimGroups groupDims(int rank, const ir::Ints& batch, const ir::Ints& contract) {
  DimGroups g;
  std::vector<bool> used(static_cast<size_t>(rank), false);
  for (int64_t d : batch) {
    g.batch.push_back(static_cast<int>(d));
    used[static_cast<size_t>(d)] = true;
  }
  for (int64_t d : contract) {
    g.contract.push_back(static_cast<int>(d));
    used[static_cast<size_t>(d)] = true;
  }
  for (int d = 0; d < rank; ++d)
    if (!used[static_cast<size_t>(d)]) g.free.push_back(d);
  return g;
}

int64_t extent(const Shape& s, const std::vector<int>& dims) {
  int64_t n = 1;
  for (int d : dims) n *= s[d];
  return n;
}

// ---- shape rule ----

// Range and uniqueness of one operand's batch and contracting dims.
Status checkRoles(std::span<const Aval> ops, const char* side, const Aval& a, const ir::Ints& batch,
                  const ir::Ints& contract) {
  std::vector<const char*> role(static_cast<size_t>(a.rank()), nullptr);
  auto mark = [&](const ir::Ints& dims, const char* list) -> Status {
    for (int64_t d : dims) {
      if (d < 0 || d >= a.rank())
        return opError(kDotGeneral, ops,
                       fmt::format("{}_{} dim {} is out of range for {} rank {}", side, list, d, side, a.rank()));
      auto& r = role[static_cast<size_t>(d)];
      if (r)
        return opError(kDotGeneral, ops,
                       fmt::format("{} dim {} is listed twice (in {}_{} and {}_{})", side, d, side, r, side, list));
      r = list;
    }
    return {};
  };
  TSR_TRY(mark(batch, "batch"));
  TSR_TRY(mark(contract, "contracting"));
  return {};
}

// Contracting (or batch) dims pair up by position and must have equal sizes.
Status checkPairedSizes(std::span<const Aval> ops, const char* what, const ir::Ints& lhsDims,
                        const ir::Ints& rhsDims) {
  for (size_t i = 0; i < lhsDims.size(); ++i) {
    int64_t ls = ops[0].shape[static_cast<int>(lhsDims[i])], rs = ops[1].shape[static_cast<int>(rhsDims[i])];
    if (ls != rs)
      return opError(kDotGeneral, ops,
                     fmt::format("{} dims have sizes {} (lhs dim {}) and {} (rhs dim {})", what, ls, lhsDims[i], rs,
                                 rhsDims[i]));
  }
  return {};
}

Result<std::vector<Aval>> inferDotGeneral(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity(kDotGeneral, ops, 2));
  const auto& at = attrsAs<DotGeneralAttrs>(attrs);
  const Aval& lhs = ops[0];
  const Aval& rhs = ops[1];
  if (lhs.dtype != rhs.dtype) return opError(kDotGeneral, ops, "operands must have equal dtypes");
  if (lhs.dtype == DType::Bool) return opError(kDotGeneral, ops, "bool operands are not supported (numeric dtypes only)");
  if (at.lhsContracting.size() != at.rhsContracting.size())
    return opError(kDotGeneral, ops,
                   fmt::format("lhs_contracting [{}] and rhs_contracting [{}] must have the same length",
                               joinInts(at.lhsContracting), joinInts(at.rhsContracting)));
  if (at.lhsBatch.size() != at.rhsBatch.size())
    return opError(kDotGeneral, ops,
                   fmt::format("lhs_batch [{}] and rhs_batch [{}] must have the same length", joinInts(at.lhsBatch),
                               joinInts(at.rhsBatch)));
  TSR_TRY(checkRoles(ops, "lhs", lhs, at.lhsBatch, at.lhsContracting));
  TSR_TRY(checkRoles(ops, "rhs", rhs, at.rhsBatch, at.rhsContracting));
  TSR_TRY(checkPairedSizes(ops, "contracting", at.lhsContracting, at.rhsContracting));
  TSR_TRY(checkPairedSizes(ops, "batch", at.lhsBatch, at.rhsBatch));

  DimGroups l = groupDims(lhs.rank(), at.lhsBatch, at.lhsContracting);
  DimGroups r = groupDims(rhs.rank(), at.rhsBatch, at.rhsContracting);
  std::vector<int64_t> dims;
  for (int d : l.batch) dims.push_back(lhs.shape[d]);
  for (int d : l.free) dims.push_back(lhs.shape[d]);
  for (int d : r.free) dims.push_back(rhs.shape[d]);
  return std::vector<Aval>{Aval{Shape(std::move(dims)), lhs.dtype}};
}

ir::Cost costDotGeneral(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) {
  const auto& at = attrsAs<DotGeneralAttrs>(attrs);
  int64_t k = 1;
  for (int64_t d : at.lhsContracting) k *= in[0].shape[static_cast<int>(d)];
  // One multiply and one add per (output element, contracted index): 2 * batch * M * N * K.
  ir::Cost c = movementCost(in, out);
  c.flops = 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(k);
  return c;
}

// ---- operand layouts ----

// One operand as a batch of matrices: element (b, row, col) lives at offsets[b] + row * rowStride + col * colStride.
// A stride is 0 where its extent is 0 or 1 (any value would do).
struct MatrixBatch {
  std::vector<int64_t> offsets;  // [B]
  int64_t rows = 1, cols = 1;
  int64_t rowStride = 0, colStride = 0;
};

// The single stride of `dims` linearised in the given order, or nullopt when memory does not allow it.
std::optional<int64_t> collapsedStride(const Shape& shape, const std::vector<int64_t>& strides,
                                       const std::vector<int>& dims) {
  std::optional<int64_t> inner;
  int64_t expect = 0;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    int d = *it;
    if (shape[d] == 1) continue;  // size-1 dims never move the index
    if (!inner) inner = strides[static_cast<size_t>(d)];
    else if (strides[static_cast<size_t>(d)] != expect) return std::nullopt;
    expect = strides[static_cast<size_t>(d)] * shape[d];
  }
  return inner.value_or(0);
}

// Element offset of each batch (batch dims in attribute order, linearised row-major).
std::vector<int64_t> batchOffsets(const Shape& shape, const std::vector<int64_t>& strides,
                                  const std::vector<int>& batch) {
  std::vector<int64_t> offsets{0};
  for (int d : batch) {
    std::vector<int64_t> next;
    next.reserve(offsets.size() * static_cast<size_t>(shape[d]));
    for (int64_t base : offsets)
      for (int64_t i = 0; i < shape[d]; ++i) next.push_back(base + i * strides[static_cast<size_t>(d)]);
    offsets = std::move(next);
  }
  return offsets;
}

std::optional<MatrixBatch> viewAsMatrices(const Shape& shape, const std::vector<int>& batch,
                                          const std::vector<int>& rows, const std::vector<int>& cols) {
  auto strides = shape.strides();
  auto rs = collapsedStride(shape, strides, rows);
  auto cs = collapsedStride(shape, strides, cols);
  if (!rs || !cs) return std::nullopt;
  MatrixBatch m;
  m.offsets = batchOffsets(shape, strides, batch);
  m.rows = extent(shape, rows);
  m.cols = extent(shape, cols);
  m.rowStride = m.rows > 1 ? *rs : 0;
  m.colStride = m.cols > 1 ? *cs : 0;
  return m;
}

// How BLAS reads a matrix: row-major, possibly transposed, with leading dimension ld.
struct BlasMatrix {
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  int64_t ld = 1;
};

std::optional<BlasMatrix> blasLayout(const MatrixBatch& m) {
  // NoTrans: columns contiguous, rows ld apart (ld >= cols).
  if (m.cols <= 1 || m.colStride == 1) {
    int64_t ld = m.rows <= 1 ? std::max<int64_t>(1, m.cols) : m.rowStride;
    if (ld >= std::max<int64_t>(1, m.cols)) return BlasMatrix{CblasNoTrans, ld};
  }
  // Trans: the matrix is stored as [cols, rows] with rows contiguous.
  if (m.rows <= 1 || m.rowStride == 1) {
    int64_t ld = m.cols <= 1 ? std::max<int64_t>(1, m.rows) : m.colStride;
    if (ld >= std::max<int64_t>(1, m.rows)) return BlasMatrix{CblasTrans, ld};
  }
  return std::nullopt;
}

// Copies `src` (row-major `shape`) into `dst` contiguous with its dims reordered to `order`.
template <class T>
void permuteCopy(const T* src, const Shape& shape, const std::vector<int>& order, T* dst) {
  int r = static_cast<int>(order.size());
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  auto srcStrides = shape.strides();
  std::vector<int64_t> size(static_cast<size_t>(r)), stride(static_cast<size_t>(r)), idx(static_cast<size_t>(r), 0);
  int64_t total = 1;
  for (int i = 0; i < r; ++i) {
    size[i] = shape[order[i]];
    stride[i] = srcStrides[static_cast<size_t>(order[i])];
    total *= size[i];
  }
  if (total == 0) return;
  const int64_t inner = size[r - 1], innerStride = stride[r - 1];
  int64_t off = 0;
  for (int64_t done = 0; done < total; done += inner) {
    for (int64_t j = 0; j < inner; ++j) *dst++ = src[off + j * innerStride];
    for (int d = r - 2; d >= 0; --d) {  // odometer over the outer dims
      off += stride[d];
      if (++idx[d] < size[d]) break;
      off -= stride[d] * size[d];
      idx[d] = 0;
    }
  }
}

template <class T>
struct Operand {
  const T* data = nullptr;
  MatrixBatch m;
};

// The operand as [batch, rows, cols] matrices: in place when its layout allows (and BLAS can read it, if
// `forBlas`), else packed contiguously into `scratch`.
template <class T>
Operand<T> prepareOperand(const T* data, const Shape& shape, const std::vector<int>& batch,
                          const std::vector<int>& rows, const std::vector<int>& cols, bool forBlas,
                          std::vector<T>& scratch) {
  auto view = viewAsMatrices(shape, batch, rows, cols);
  if (view && (!forBlas || blasLayout(*view))) return {data, std::move(*view)};
  std::vector<int> order = batch;
  order.insert(order.end(), rows.begin(), rows.end());
  order.insert(order.end(), cols.begin(), cols.end());
  scratch.resize(static_cast<size_t>(shape.numel()));
  permuteCopy(data, shape, order, scratch.data());
  MatrixBatch m;
  m.rows = extent(shape, rows);
  m.cols = extent(shape, cols);
  m.rowStride = m.cols;
  m.colStride = 1;
  int64_t b = extent(shape, batch);
  for (int64_t i = 0; i < b; ++i) m.offsets.push_back(i * m.rows * m.cols);
  return {scratch.data(), std::move(m)};
}

// The GEMM problem: result [B, M, N] = lhs [B, M, K] x rhs [B, K, N].
struct DotProblem {
  DimGroups lhs, rhs;
  int64_t batch = 1, m = 1, n = 1, k = 1;
};

DotProblem dotProblem(const Aval& lhs, const Aval& rhs, const DotGeneralAttrs& at) {
  DotProblem p;
  p.lhs = groupDims(lhs.rank(), at.lhsBatch, at.lhsContracting);
  p.rhs = groupDims(rhs.rank(), at.rhsBatch, at.rhsContracting);
  p.batch = extent(lhs.shape, p.lhs.batch);
  p.m = extent(lhs.shape, p.lhs.free);
  p.n = extent(rhs.shape, p.rhs.free);
  p.k = extent(lhs.shape, p.lhs.contract);
  return p;
}

// ---- kernels ----

// Reference loop, for integer types and for problems too large for BLAS's int dims. Integers accumulate in
// uint64, so sums wrap modulo 2^bits exactly as the result type would (signed overflow is not UB this way).
template <class T>
void loopDot(const T* lhs, const Shape& ls, const T* rhs, const Shape& rs, const DotProblem& p, T* out) {
  using Acc = std::conditional_t<std::is_integral_v<T>, uint64_t, double>;
  auto widen = [](T v) -> Acc {
    if constexpr (std::is_integral_v<T>) return static_cast<Acc>(static_cast<int64_t>(v));
    else return static_cast<Acc>(v);
  };
  std::vector<T> lhsScratch, rhsScratch;
  Operand<T> a = prepareOperand(lhs, ls, p.lhs.batch, p.lhs.free, p.lhs.contract, false, lhsScratch);
  Operand<T> b = prepareOperand(rhs, rs, p.rhs.batch, p.rhs.contract, p.rhs.free, false, rhsScratch);
  std::vector<Acc> acc(static_cast<size_t>(p.n));
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    const T* A = a.data + a.m.offsets[static_cast<size_t>(bi)];
    const T* B = b.data + b.m.offsets[static_cast<size_t>(bi)];
    for (int64_t i = 0; i < p.m; ++i) {
      std::fill(acc.begin(), acc.end(), Acc{0});
      for (int64_t kk = 0; kk < p.k; ++kk) {
        Acc x = widen(A[i * a.m.rowStride + kk * a.m.colStride]);
        const T* row = B + kk * b.m.rowStride;
        for (int64_t j = 0; j < p.n; ++j) acc[static_cast<size_t>(j)] += x * widen(row[j * b.m.colStride]);
      }
      T* o = out + (bi * p.m + i) * p.n;
      for (int64_t j = 0; j < p.n; ++j) o[j] = static_cast<T>(acc[static_cast<size_t>(j)]);
    }
  }
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float* a, int lda, const float* b,
          int ldb, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const double* a, int lda, const double* b,
          int ldb, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}

// f32 / f64: one BLAS GEMM per batch. lhs is read as [M, K] (or [K, M] transposed), rhs as [K, N] (or [N, K]).
template <class T>
void blasDot(const T* lhs, const Shape& ls, const T* rhs, const Shape& rs, const DotProblem& p, T* out) {
  // OpenBLAS would spin forever on a workspace it cannot map (blas_workspace.h): fail here instead.
  if (auto st = runtime::reserveBlasWorkspace(); !st.ok()) throw std::runtime_error(st.error().message);
  std::vector<T> lhsScratch, rhsScratch;
  Operand<T> a = prepareOperand(lhs, ls, p.lhs.batch, p.lhs.free, p.lhs.contract, true, lhsScratch);
  Operand<T> b = prepareOperand(rhs, rs, p.rhs.batch, p.rhs.contract, p.rhs.free, true, rhsScratch);
  BlasMatrix la = *blasLayout(a.m), lb = *blasLayout(b.m);
  auto fits = [](int64_t v) { return v <= INT_MAX; };
  if (!fits(p.m) || !fits(p.n) || !fits(p.k) || !fits(la.ld) || !fits(lb.ld)) {
    loopDot(lhs, ls, rhs, rs, p, out);
    return;
  }
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    gemm(la.trans, lb.trans, static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k),
         a.data + a.m.offsets[static_cast<size_t>(bi)], static_cast<int>(la.ld),
         b.data + b.m.offsets[static_cast<size_t>(bi)], static_cast<int>(lb.ld), out + bi * p.m * p.n,
         static_cast<int>(p.n));
  }
}

// bf16 on oneDNN's matmul (matmul_onednn.h), the operands as they lie where BLAS could read them, else packed;
// the batch dims as they lie too (heads split off a projection: [B, T, H, D] read as [B, H] batches), one
// primitive for all. False where oneDNN declines (no bf16 instructions on this CPU).
bool oneDnnDot(const bf16* lhs, const Shape& ls, const bf16* rhs, const Shape& rs, const DotProblem& p, bf16* out) {
  std::vector<bf16> lhsScratch, rhsScratch;
  const Operand<bf16> a = prepareOperand(lhs, ls, p.lhs.batch, p.lhs.free, p.lhs.contract, true, lhsScratch);
  const Operand<bf16> b = prepareOperand(rhs, rs, p.rhs.batch, p.rhs.contract, p.rhs.free, true, rhsScratch);
  auto matrices = [&](const Operand<bf16>& o, const bf16* data, const Shape& shape, const std::vector<int>& batch) {
    StridedMatrices m{o.data, {}, {}, o.m.rows, o.m.cols, o.m.rowStride, o.m.colStride};
    const std::vector<int64_t> strides = shape.strides();
    int64_t packed = o.m.rows * o.m.cols;  // a packed operand's batches: row-major over the batch dims
    for (auto d = batch.rbegin(); d != batch.rend(); ++d) {
      m.batch.insert(m.batch.begin(), shape[*d]);
      m.batchStrides.insert(m.batchStrides.begin(), o.data == data ? strides[static_cast<size_t>(*d)] : packed);
      packed *= shape[*d];
    }
    return m;
  };
  return oneDnnBf16Matmul(matrices(a, lhs, ls, p.lhs.batch), matrices(b, rhs, rs, p.rhs.batch), out);
}

// bf16 / f16: both operands widened to f32 (exact), one f32 GEMM, each result rounded once: the products and their
// f32 sums are those oneDNN's bf16 kernels compute, in another order. The conversions run on the lent threads.
template <class H>
void widenedDot(const H* lhs, const Shape& ls, const H* rhs, const Shape& rs, const DotProblem& p, H* out,
                const ir::CpuKernelArgs& args) {
  constexpr int64_t kGrain = int64_t{1} << 16;
  ThreadScratch<FloatBuffers<3>> wide;  // lhs, rhs, out
  const auto widen = [&](const H* x, int64_t n, size_t buffer) {
    float* to = wide->get(buffer, static_cast<size_t>(n));
    args.forChunks(n, kGrain, [&](int64_t lo, int64_t hi, int) {
      if constexpr (std::is_same_v<H, bf16>) widenBf16(x + lo, to + lo, hi - lo);
      else for (int64_t i = lo; i < hi; ++i) to[i] = static_cast<float>(x[i]);
    });
    return to;
  };
  const float* l = widen(lhs, ls.numel(), 0);
  const float* r = widen(rhs, rs.numel(), 1);
  const int64_t n = p.batch * p.m * p.n;
  float* o = wide->get(2, static_cast<size_t>(n));
  blasDot(l, ls, r, rs, p, o);
  args.forChunks(n, kGrain, [&](int64_t lo, int64_t hi, int) {
    if constexpr (std::is_same_v<H, bf16>) narrowToBf16(o + lo, out + lo, hi - lo);
    else for (int64_t i = lo; i < hi; ++i) out[i] = H(o[i]);
  });
}

void dotGeneralKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<DotGeneralAttrs>(args.attrs);
  const ir::TensorView& lhs = args.inputs[0];
  const ir::TensorView& rhs = args.inputs[1];
  const ir::MutableTensorView& out = args.outputs[0];
  DotProblem p = dotProblem(lhs.aval, rhs.aval, at);
  dispatchDType(out.aval.dtype, [&]<class T>() {
    T* o = out.as<T>();
    if (p.batch * p.m * p.n == 0) return;
    if (p.k == 0) {  // an empty sum
      std::fill(o, o + p.batch * p.m * p.n, T{});
      return;
    }
    const T* l = lhs.as<T>();
    const T* r = rhs.as<T>();
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) blasDot(l, lhs.aval.shape, r, rhs.aval.shape, p, o);
    else if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
      if constexpr (std::is_same_v<T, bf16>)
        if (bf16ProductsOnOneDnn() && oneDnnDot(l, lhs.aval.shape, r, rhs.aval.shape, p, o)) return;
      widenedDot(l, lhs.aval.shape, r, rhs.aval.shape, p, o, args);
    }
    else if constexpr (std::is_same_v<T, bool>) TSR_CHECK_MSG(false, "dot_general: bool is rejected by infer");
    else loopDot(l, lhs.aval.shape, r, rhs.aval.shape, p, o);
  });
}

// ---- vjp: JAX's _dot_general_transpose_lhs / _rhs ----

// The cotangent of operand x (y is the other operand) from the result's cotangent g: [batch, lhs free, rhs free].
// Contracting g's dims that came from y with y's free dims, and batch with batch, gives
//   [batch, x free, x contracting]
// where the contracting dims follow y's (now free) contracting dims in ascending order; a transpose puts x's
// dims back in place.
Array dotCotangent(const Array& g, const Array& y, int xRank, const ir::Ints& xBatch, const ir::Ints& xContract,
                   const ir::Ints& yBatch, const ir::Ints& yContract, bool xIsLhs) {
  DimGroups xg = groupDims(xRank, xBatch, xContract);
  DimGroups yg = groupDims(y.rank(), yBatch, yContract);
  const auto nb = static_cast<int64_t>(xBatch.size());
  const int64_t yFreeInG = xIsLhs ? nb + static_cast<int64_t>(xg.free.size()) : nb;  // g's first dim from y
  DotDims dims;
  for (size_t i = 0; i < yg.free.size(); ++i) {
    dims.lhsContracting.push_back(yFreeInG + static_cast<int64_t>(i));
    dims.rhsContracting.push_back(yg.free[i]);
  }
  for (int64_t i = 0; i < nb; ++i) dims.lhsBatch.push_back(i);
  dims.rhsBatch = yBatch;
  Array r = dotGeneral(g, y, dims);
  // xOf[j]: the dim of x that r's dim j holds.
  std::vector<int64_t> xOf(xBatch.begin(), xBatch.end());
  xOf.insert(xOf.end(), xg.free.begin(), xg.free.end());
  std::vector<size_t> byY(yContract.size());
  std::iota(byY.begin(), byY.end(), size_t{0});
  std::sort(byY.begin(), byY.end(), [&](size_t i, size_t j) { return yContract[i] < yContract[j]; });
  for (size_t k : byY) xOf.push_back(xContract[k]);
  Axes perm(xOf.size());
  for (size_t j = 0; j < xOf.size(); ++j) perm[static_cast<size_t>(xOf[j])] = static_cast<int64_t>(j);
  return transpose(r, perm);
}

std::vector<Array> vjpDotGeneral(const ir::VjpArgs& a) {
  const auto& at = attrsAs<DotGeneralAttrs>(a.attrs);
  const Array& g = a.cotangents[0];
  const Array& lhs = a.operands[0];
  const Array& rhs = a.operands[1];
  return {dotCotangent(g, rhs, lhs.rank(), at.lhsBatch, at.lhsContracting, at.rhsBatch, at.rhsContracting, true),
          dotCotangent(g, lhs, rhs.rank(), at.rhsBatch, at.rhsContracting, at.lhsBatch, at.lhsContracting, false)};
}

// ---- batching ----

// Both operands batched: the two batch dims pair up as a new first batch dimension, result dim 0. One operand
// batched: its batch dim is one more free dim of that operand, so it lands among that operand's free dims in
// the result (free dims keep ascending order) and no transpose is needed.
ir::BatchResult batchDotGeneral(const ir::BatchArgs& a) {
  DotGeneralAttrs at = attrsAs<DotGeneralAttrs>(a.attrs);
  const Array& lhs = a.operands[0];
  const Array& rhs = a.operands[1];
  const int lb = a.batchDims[0], rb = a.batchDims[1];
  auto shiftPast = [](ir::Ints& dims, int b) {
    for (int64_t& d : dims)
      if (b >= 0 && d >= b) ++d;
  };
  shiftPast(at.lhsBatch, lb);
  shiftPast(at.lhsContracting, lb);
  shiftPast(at.rhsBatch, rb);
  shiftPast(at.rhsContracting, rb);
  int resultDim = 0;
  if (lb >= 0 && rb >= 0) {
    at.lhsBatch.insert(at.lhsBatch.begin(), lb);
    at.rhsBatch.insert(at.rhsBatch.begin(), rb);
  } else {
    const bool onLhs = lb >= 0;
    const int b = onLhs ? lb : rb;
    DimGroups g = onLhs ? groupDims(lhs.rank(), at.lhsBatch, at.lhsContracting)
                        : groupDims(rhs.rank(), at.rhsBatch, at.rhsContracting);
    auto before = static_cast<int>(std::count_if(g.free.begin(), g.free.end(), [&](int d) { return d < b; }));
    int lhsFree = lhs.rank() - static_cast<int>(at.lhsBatch.size() + at.lhsContracting.size());
    resultDim = static_cast<int>(at.lhsBatch.size()) + (onLhs ? 0 : lhsFree) + before;
  }
  return {{bind1(ir::OpCode::DotGeneral, {lhs, rhs}, at, std::source_location::current())}, {resultDim}};
}

}  // namespace

void registerContractionOps(ir::OpRegistry& reg) {
  ir::OpDef d = coreOp(ir::OpCode::DotGeneral, "contraction", ir::FusionKind::Opaque, 2);
  d.cpuWritesWholeResult = true;  // BLAS writes C in full
  d.infer = inferDotGeneral;
  d.cost = costDotGeneral;
  d.cpu = dotGeneralKernel;
  d.vjp = vjpDotGeneral;
  d.batch = batchDotGeneral;
  d.shard = dotGeneralShardRule();
  addCoreOp(reg, std::move(d));
}

}  // namespace tsr::ops
