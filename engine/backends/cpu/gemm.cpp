#include "engine/backends/cpu/gemm.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <cblas.h>

#include "engine/backends/cpu/thread_pool.h"
#include "engine/core/env_options.h"
#include "engine/core/thread_scratch.h"
#include "engine/runtime/blas_workspace.h"

namespace tsr::cpu {

namespace {

bool ascendingRun(const ir::Ints& dims, int64_t start) {
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != start + static_cast<int64_t>(i)) return false;
  return true;
}

struct Side {
  int64_t rows = 1, cols = 1;  // free extent, contracting extent
  bool freeFirst = true;       // [free..., contract...] in memory, else [contract..., free...]
};

// One operand: batch dims [0, nb), then its free and contracting dims as two contiguous ascending runs.
std::optional<Side> side(const Shape& s, const ir::Ints& batch, const ir::Ints& contract) {
  const int64_t nb = static_cast<int64_t>(batch.size());
  if (!ascendingRun(batch, 0)) return std::nullopt;
  const int64_t rank = s.rank();
  const int64_t nc = static_cast<int64_t>(contract.size());
  Side out;
  if (nc == 0 || ascendingRun(contract, rank - nc)) out.freeFirst = true;
  else if (ascendingRun(contract, nb)) out.freeFirst = false;
  else return std::nullopt;
  for (int64_t d = nb; d < rank; ++d) {
    bool isC = std::find(contract.begin(), contract.end(), d) != contract.end();
    (isC ? out.cols : out.rows) *= s[static_cast<int>(d)];
  }
  return out;
}

}  // namespace

bool blasThreaded() {
  return envOptions().blasGemmThreads;
}

std::optional<GemmPlan> planGemm(const Shape& lhs, const Shape& rhs, const ir::DotGeneralAttrs& at) {
  if (at.lhsBatch.size() != at.rhsBatch.size() || at.lhsContracting.size() != at.rhsContracting.size())
    return std::nullopt;
  auto l = side(lhs, at.lhsBatch, at.lhsContracting);
  auto r = side(rhs, at.rhsBatch, at.rhsContracting);
  if (!l || !r) return std::nullopt;
  GemmPlan p;
  for (size_t i = 0; i < at.lhsBatch.size(); ++i) p.batch *= lhs[static_cast<int>(i)];
  p.m = l->rows;
  p.k = l->cols;
  p.n = r->rows;
  if (r->cols != p.k) return std::nullopt;
  // A is M x K: in memory [M, K] (no transpose) or [K, M] (transposed).
  p.transA = !l->freeFirst;
  p.lda = p.transA ? p.m : p.k;
  // B is K x N: in memory [K, N] (contracting first, no transpose) or [N, K] (transposed).
  p.transB = r->freeFirst;
  p.ldb = p.transB ? p.k : p.n;
  p.strideA = p.m * p.k;
  p.strideB = p.k * p.n;
  for (int64_t v : {p.m, p.n, p.k, p.lda, p.ldb})
    if (v > INT_MAX) return std::nullopt;
  return p;
}

void runGemm(const GemmPlan& p, const float* a, const float* b, float* c, bool accumulate) {
  if (p.batch * p.m * p.n == 0) return;
  if (p.k == 0) {
    if (!accumulate) std::fill(c, c + p.batch * p.m * p.n, 0.0f);
    return;
  }
  const float beta = accumulate ? 1.0f : 0.0f;
  auto gemm = [&](int64_t bi, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    const float* A = a + bi * p.strideA + (p.transA ? m0 : m0 * p.lda);
    const float* B = b + bi * p.strideB + (p.transB ? n0 * p.ldb : n0);
    float* C = c + bi * p.m * p.n + m0 * p.n + n0;
    cblas_sgemm(CblasRowMajor, p.transA ? CblasTrans : CblasNoTrans, p.transB ? CblasTrans : CblasNoTrans,
                static_cast<int>(m1 - m0), static_cast<int>(n1 - n0), static_cast<int>(p.k), 1.0f, A,
                static_cast<int>(p.lda), B, static_cast<int>(p.ldb), beta, C, static_cast<int>(p.n));
  };
  ThreadPool& pool = ThreadPool::instance();
  const int t = pool.numThreads();
  // OpenBLAS would spin forever on a workspace it cannot map (blas_workspace.h): fail here instead.
  if (auto st = runtime::reserveBlasWorkspace(t); !st.ok()) throw std::runtime_error(st.error().message);
  if (blasThreaded()) {  // OpenBLAS's own threads (TESSERA_GEMM_THREADS=blas)
    for (int64_t bi = 0; bi < p.batch; ++bi) gemm(bi, 0, p.m, 0, p.n);
    return;
  }
  const double flops = 2.0 * static_cast<double>(p.batch * p.m) * static_cast<double>(p.n * p.k);
  if (t == 1 || flops < 2e6) {
    for (int64_t bi = 0; bi < p.batch; ++bi) gemm(bi, 0, p.m, 0, p.n);
    return;
  }
  if (p.batch >= t) {
    pool.parallelFor(p.batch, 1, [&](int64_t b0, int64_t b1, int) {
      for (int64_t bi = b0; bi < b1; ++bi) gemm(bi, 0, p.m, 0, p.n);
    });
    return;
  }
  // Few batches: split the larger of M and N into one block per thread (multiples of 16 rows/columns).
  // Rows when there are many (each block then packs the same B), else columns.
  const bool splitM = p.m >= 1024 || p.m >= p.n;
  const int64_t extent = splitM ? p.m : p.n;
  const int64_t parts = std::min<int64_t>(t, std::max<int64_t>(1, extent / 16));
  const int64_t block = ((extent + parts - 1) / parts + 15) / 16 * 16;
  const int64_t blocks = (extent + block - 1) / block;
  pool.parallelFor(p.batch * blocks, 1, [&](int64_t u0, int64_t u1, int) {
    for (int64_t u = u0; u < u1; ++u) {
      int64_t bi = u / blocks, s0 = (u % blocks) * block, s1 = std::min(extent, s0 + block);
      if (splitM) gemm(bi, s0, s1, 0, p.n);
      else gemm(bi, 0, p.m, s0, s1);
    }
  });
}

void runGemmWidened(const GemmPlan& p, const bf16* a, const bf16* b, bf16* c,
                    const std::function<void(const float*)>& epilogue, int64_t panelFloats) {
  ThreadScratch<FloatBuffers<3>> wide;  // a's panel, b's panel, c
  ThreadPool& pool = ThreadPool::instance();
  constexpr int64_t kGrain = int64_t{1} << 16;
  // Rows of `rows` runs of `len` elements each, `stride` apart, widened into consecutive runs.
  const auto widenRuns = [&](const bf16* x, int64_t rows, int64_t len, int64_t stride, float* to) {
    if (len == stride) {
      pool.parallelFor(rows * len, kGrain, [&](int64_t lo, int64_t hi, int) { widenBf16(x + lo, to + lo, hi - lo); });
      return;
    }
    pool.parallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(len, 1)), [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) widenBf16(x + r * stride, to + r * len, len);
    });
  };
  const int64_t n = p.batch * p.m * p.n;
  if (n > panelFloats && c && !epilogue && p.k > 0) {
    // The f32 result would exceed the panels' budget (GPT-2's logits: [16384, 50257], 3.3 GB): blocks of A's rows
    // instead, each block's whole product (all of K) rounded into c before the next, so only a block's f32 result
    // is held. B is widened whole, once per batch.
    const int64_t rows = std::min(p.m, std::max<int64_t>(16, panelFloats / std::max(p.n, p.k) / 16 * 16));
    float* pb = nullptr;
    for (int64_t bi = 0; bi < p.batch; ++bi) {
      const bf16* ab = a + bi * p.strideA;
      const bf16* bb = b + bi * p.strideB;
      if (!pb || p.strideB != 0) {
        pb = wide->get(1, static_cast<size_t>(p.k * p.n));
        if (p.transB) widenRuns(bb, p.n, p.k, p.ldb, pb);  // [N, K]
        else widenRuns(bb, p.k, p.n, p.ldb, pb);           // [K, N]
      }
      for (int64_t m0 = 0; m0 < p.m; m0 += rows) {
        GemmPlan q = p;
        q.batch = 1;
        q.m = std::min(rows, p.m - m0);
        q.lda = p.transA ? q.m : p.k;
        q.ldb = p.transB ? p.k : p.n;
        q.strideA = q.strideB = 0;
        float* pa = wide->get(0, static_cast<size_t>(q.m * p.k));
        if (p.transA) widenRuns(ab + m0, p.k, q.m, p.lda, pa);  // columns m0.. of [K, M]
        else widenRuns(ab + m0 * p.lda, q.m, p.k, p.lda, pa);   // rows m0.. of [M, K]
        const int64_t len = q.m * p.n;
        float* wc = wide->get(2, static_cast<size_t>(len));
        runGemm(q, pa, pb, wc);
        bf16* to = c + (bi * p.m + m0) * p.n;
        pool.parallelFor(len, kGrain, [&](int64_t lo, int64_t hi, int) { narrowToBf16(wc + lo, to + lo, hi - lo); });
      }
    }
    return;
  }
  float* wc = wide->get(2, static_cast<size_t>(n));
  if (p.k == 0) runGemm(p, nullptr, nullptr, wc);  // zeros
  // Panels of kc contracted elements: A's [M, kc] (or [kc, M] transposed) and B's [kc, N] (or [N, kc]) per batch.
  const int64_t perK = std::max<int64_t>(1, p.batch * (p.m + p.n));
  int64_t kc = p.k;
  if (perK * p.k > panelFloats) kc = std::min(p.k, std::max<int64_t>(64, panelFloats / perK / 64 * 64));
  for (int64_t k0 = 0; k0 < p.k; k0 += kc) {
    GemmPlan q = p;
    q.k = std::min(kc, p.k - k0);
    q.lda = p.transA ? p.m : q.k;
    q.ldb = p.transB ? q.k : p.n;
    q.strideA = p.m * q.k;
    q.strideB = q.k * p.n;
    float* pa = wide->get(0, static_cast<size_t>(p.batch * q.strideA));
    float* pb = wide->get(1, static_cast<size_t>(p.batch * q.strideB));
    if (q.k == p.k) {  // one panel: the operands whole, contiguous over the batches
      widenRuns(a, 1, p.batch * p.strideA, p.batch * p.strideA, pa);
      widenRuns(b, 1, p.batch * p.strideB, p.batch * p.strideB, pb);
    }
    for (int64_t bi = 0; bi < p.batch && q.k < p.k; ++bi) {
      const bf16* ab = a + bi * p.strideA;
      const bf16* bb = b + bi * p.strideB;
      float* to = pa + bi * q.strideA;
      if (p.transA) widenRuns(ab + k0 * p.lda, 1, q.k * p.m, q.k * p.m, to);  // rows k0.. of [K, M]
      else widenRuns(ab + k0, p.m, q.k, p.lda, to);                           // columns k0.. of [M, K]
      to = pb + bi * q.strideB;
      if (p.transB) widenRuns(bb + k0, p.n, q.k, p.ldb, to);                  // columns k0.. of [N, K]
      else widenRuns(bb + k0 * p.ldb, 1, q.k * p.n, q.k * p.n, to);           // rows k0.. of [K, N]
    }
    runGemm(q, pa, pb, wc, k0 > 0);
  }
  if (c) pool.parallelFor(n, kGrain, [&](int64_t lo, int64_t hi, int) { narrowToBf16(wc + lo, c + lo, hi - lo); });
  if (epilogue) epilogue(wc);
}

}  // namespace tsr::cpu
