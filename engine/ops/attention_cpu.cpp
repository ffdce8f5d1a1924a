#include "engine/ops/attention_cpu.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/runtime/blas_workspace.h"

namespace tsr::ops {
namespace {

#include "engine/ops/vmath_avx2.inc"

constexpr int64_t kCausalBlock = 64;    // query rows a causal block: the smaller, the more masked keys it skips
constexpr int64_t kScoreBytes = 256 << 10;  // an unmasked block's scores (and the gradient's dS) stay in L2
constexpr float kInf = std::numeric_limits<float>::infinity();

// A row-major f32 matrix: where it starts and how far apart its rows are.
struct Rows {
  float* data;
  int64_t ld;
  float* row(int64_t i) const { return data + i * ld; }
};

// C = alpha op(A) op(B) + beta C on this thread (the kernel's tasks are what run in parallel).
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, Rows a, Rows b, float beta, Rows c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a.data, static_cast<int>(a.ld), b.data,
              static_cast<int>(b.ld), beta, c.data, static_cast<int>(c.ld));
}

// Rows [first, first + count) of head (b, h) of a [B, seq, H, D] tensor whose rows of H*D lie `ld` elements
// apart (H*D where it is contiguous; more for a row view, TensorView::rowStride). As f32 where it is f32: in
// place; a bf16 tensor's are widened into `scratch` (read) or computed there and rounded into place by store()
// (written).
template <class T>
class HeadRows {
 public:
  HeadRows(T* x, int64_t ld, const AttentionDims& m, int64_t seq, int64_t b, int64_t h, int64_t first,
           int64_t count, std::vector<float>& scratch)
      : m_x(x + (b * seq + first) * ld + h * m.d), m_ld(ld), m_d(m.d), m_count(count) {
    if constexpr (std::is_same_v<T, float>) {
      m_rows = {m_x, m_ld};
    } else {
      scratch.resize(static_cast<size_t>(count * m.d));
      m_rows = {scratch.data(), m.d};
    }
  }
  // The rows as f32, read from the tensor.
  Rows load() const {
    if constexpr (std::is_same_v<T, bf16>)
      for (int64_t i = 0; i < m_count; ++i) widenBf16(m_x + i * m_ld, m_rows.row(i), m_d);
    return m_rows;
  }
  // Where the f32 results go.
  Rows rows() const { return m_rows; }
  void zero() const {
    for (int64_t i = 0; i < m_count; ++i) std::fill(m_rows.row(i), m_rows.row(i) + m_d, 0.0f);
  }
  // The results into the tensor (a bf16 tensor's rounded once).
  void store() const {
    if constexpr (std::is_same_v<T, bf16>)
      for (int64_t i = 0; i < m_count; ++i) narrowToBf16(m_rows.row(i), m_x + i * m_ld, m_d);
  }

 private:
  T* m_x;
  int64_t m_ld, m_d, m_count;
  Rows m_rows{};
};

// Rows of a kernel operand (read: load()) or result (written: store()), as its view lays them out.
template <class T, class View>
HeadRows<T> headRows(const View& x, const AttentionDims& m, int64_t seq, int64_t b, int64_t h, int64_t first,
                     int64_t count, std::vector<float>& scratch) {
  return HeadRows<T>(const_cast<T*>(static_cast<const T*>(x.data)), attentionRowsApart(x.rowStride, m), m, seq, b,
                     h, first, count, scratch);
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// The sum of x[j] y[j] for j < n.
float dot(const float* x, const float* y, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(y + j), acc);
  float sum = hsum(acc);
  for (; j < n; ++j) sum += x[j] * y[j];
  return sum;
}

// x[j] = e^(x[j] - shift) for j < n; returns their sum.
float expShifted(float* x, int64_t n, float shift) {
  const __m256 sv = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = tsr_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), sv));
    _mm256_storeu_ps(x + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = hsum(acc);
  for (; j < n; ++j) sum += x[j] = std::exp(x[j] - shift);
  return sum;
}

// The largest of x[0..n): -inf for none. A NaN among them makes the row's softmax NaN either way (it passes
// through exp), so its place in the comparisons does not matter.
float rowMax(const float* x, int64_t n) {
  __m256 acc = _mm256_set1_ps(-kInf);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) acc = _mm256_max_ps(acc, _mm256_loadu_ps(x + j));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  float mx = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  for (; j < n; ++j) mx = std::max(mx, x[j]);
  return mx;
}

// What softmaxTerms leaves to do for a row: the log-sum-exp and the factor that normalizes it.
struct RowSum {
  float lse, inv;
};

// One row of scores, of which the first `visible` are unmasked, becomes e^(s - max) (0 where masked): its
// softmax times the sum, which the caller divides out of the row's output (D values, not S).
RowSum softmaxTerms(float* s, int64_t visible, int64_t n) {
  const float mx = rowMax(s, visible);
  std::fill(s + visible, s + n, 0.0f);
  if (mx == -kInf) {  // nothing visible, or every score -inf: no weight anywhere
    std::fill(s, s + visible, 0.0f);
    return {-kInf, 0.0f};
  }
  const float sum = expShifted(s, visible, mx);
  return {mx + std::log(sum), 1.0f / sum};
}

// Query rows a block. A causal block skips the keys after its last row, so small blocks skip more; without the
// mask every block sees every key and the largest that keeps its scores in L2 wins (fewer, larger SGEMMs: for
// ViT-B/16's 197 tokens one block of 197, not three of 64 and one of 5), cut into blocks of equal size, and
// into enough of them that every thread has work.
int64_t queryBlock(const AttentionDims& m, bool causal, int threads) {
  if (causal) return kCausalBlock;
  if (m.t == 0) return 1;  // no queries, no blocks (and no division by zero)
  const int64_t rowBytes = static_cast<int64_t>(sizeof(float)) * std::max<int64_t>(m.s, 1);
  const int64_t fit = std::max<int64_t>(8, kScoreBytes / rowBytes);
  int64_t blocks = (m.t + fit - 1) / fit;
  while (m.b * m.h * blocks < 2 * static_cast<int64_t>(threads) && blocks * 8 < m.t) ++blocks;
  return (m.t + blocks - 1) / blocks;
}

// The keys row i of a block starting at query `first` sees.
int64_t visibleKeys(bool causal, int64_t first, int64_t i, int64_t keys) {
  return causal ? std::min(keys, first + i + 1) : keys;
}

template <class T>
void forwardBlock(const ir::CpuKernelArgs& a, const AttentionDims& m, bool causal, int64_t block, int64_t task) {
  const int64_t blocks = (m.t + block - 1) / block;
  const int64_t b = task / blocks / m.h, h = task / blocks % m.h, first = task % blocks * block;
  const int64_t rows = std::min(block, m.t - first);
  const int64_t keys = causal ? std::min(m.s, first + rows) : m.s;
  thread_local std::vector<float> qs, ks, vs, os, scores;
  HeadRows<T> out = headRows<T>(a.outputs[0], m, m.t, b, h, first, rows, os);
  float* lse = a.outputs[1].as<float>() + (b * m.h + h) * m.t + first;
  if (keys == 0) {
    out.zero();
    out.store();
    std::fill(lse, lse + rows, -kInf);
    return;
  }
  const Rows q = headRows<T>(a.inputs[0], m, m.t, b, h, first, rows, qs).load();
  const Rows k = headRows<T>(a.inputs[1], m, m.s, b, h, 0, keys, ks).load();
  const Rows v = headRows<T>(a.inputs[2], m, m.s, b, h, 0, keys, vs).load();
  scores.resize(static_cast<size_t>(rows * keys));
  const Rows s{scores.data(), keys};
  gemm(false, true, rows, keys, m.d, 1.0f / std::sqrt(static_cast<float>(m.d)), q, k, 0.0f, s);
  thread_local std::vector<float> invs;
  invs.resize(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    const RowSum r = softmaxTerms(s.row(i), visibleKeys(causal, first, i, keys), keys);
    lse[i] = r.lse;
    invs[static_cast<size_t>(i)] = r.inv;
  }
  const Rows o = out.rows();
  gemm(false, false, rows, m.d, keys, 1.0f, s, v, 0.0f, o);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t d = 0; d < m.d; ++d) o.row(i)[d] *= invs[static_cast<size_t>(i)];
  out.store();
}

template <class T>
void backwardHead(const ir::CpuKernelArgs& a, const AttentionDims& m, bool causal, int64_t block, int64_t task) {
  const int64_t b = task / m.h, h = task % m.h;
  const float scale = 1.0f / std::sqrt(static_cast<float>(m.d));
  thread_local std::vector<float> qs, ks, vs, os, dos, dqs, dks, dvs, ps, dps;
  const Rows k = headRows<T>(a.inputs[1], m, m.s, b, h, 0, m.s, ks).load();
  const Rows v = headRows<T>(a.inputs[2], m, m.s, b, h, 0, m.s, vs).load();
  const float* lse = a.inputs[4].as<float>() + (b * m.h + h) * m.t;
  const float* dlse = a.inputs[6].as<float>() + (b * m.h + h) * m.t;
  HeadRows<T> dk = headRows<T>(a.outputs[1], m, m.s, b, h, 0, m.s, dks);
  HeadRows<T> dv = headRows<T>(a.outputs[2], m, m.s, b, h, 0, m.s, dvs);
  // Without the mask every block sees every key, so the first one writes dk and dv whole; a causal block adds
  // to the keys it sees (and with no queries at all there is no block).
  if (causal || m.t == 0) {
    dk.zero();
    dv.zero();
  }
  for (int64_t first = 0; first < m.t; first += block) {
    const int64_t rows = std::min(block, m.t - first);
    const int64_t keys = causal ? std::min(m.s, first + rows) : m.s;
    HeadRows<T> dq = headRows<T>(a.outputs[0], m, m.t, b, h, first, rows, dqs);
    if (keys == 0) {
      dq.zero();
      dq.store();
      continue;
    }
    const Rows q = headRows<T>(a.inputs[0], m, m.t, b, h, first, rows, qs).load();
    const Rows o = headRows<T>(a.inputs[3], m, m.t, b, h, first, rows, os).load();
    const Rows dout = headRows<T>(a.inputs[5], m, m.t, b, h, first, rows, dos).load();
    ps.resize(static_cast<size_t>(rows * keys));
    dps.resize(static_cast<size_t>(rows * keys));
    const Rows p{ps.data(), keys}, ds{dps.data(), keys};
    // P = exp(scale q k^T - lse), rebuilt as the forward pass had it; dP = dout v^T.
    gemm(false, true, rows, keys, m.d, scale, q, k, 0.0f, p);
    gemm(false, true, rows, keys, m.d, 1.0f, dout, v, 0.0f, ds);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t visible = visibleKeys(causal, first, i, keys);
      float* pi = p.row(i);
      float* di = ds.row(i);
      if (lse[first + i] == -kInf) std::fill(pi, pi + visible, 0.0f);  // a row with no weight anywhere
      else expShifted(pi, visible, lse[first + i]);
      std::fill(pi + visible, pi + keys, 0.0f);
      const float delta = dot(dout.row(i), o.row(i), m.d) - dlse[first + i];
      for (int64_t j = 0; j < keys; ++j) di[j] = pi[j] * (di[j] - delta);  // dS = P (dP - delta)
    }
    gemm(false, false, rows, m.d, keys, scale, ds, k, 0.0f, dq.rows());  // dq = scale dS k
    dq.store();
    const float beta = causal || first > 0 ? 1.0f : 0.0f;
    gemm(true, false, keys, m.d, rows, scale, ds, q, beta, dk.rows());  // dk += scale dS^T q
    gemm(true, false, keys, m.d, rows, 1.0f, p, dout, beta, dv.rows());  // dv += P^T dout
  }
  dk.store();
  dv.store();
}

// Runs fn(task) for task in [0, tasks) on the kernel's threads, after making sure each can take OpenBLAS's
// workspace (blas_workspace.h: it would hang otherwise).
template <class Fn>
void forTasks(const ir::CpuKernelArgs& a, int64_t tasks, const Fn& fn) {
  if (auto st = runtime::reserveBlasWorkspace(std::max(a.threads, 1)); !st.ok())
    throw std::runtime_error(st.error().message);
  a.forChunks(tasks, 1, [&](int64_t lo, int64_t hi, int) {
    for (int64_t t = lo; t < hi; ++t) fn(t);
  });
}

}  // namespace

void blockedAttention(const ir::CpuKernelArgs& a, const AttentionDims& m, bool causal) {
  const int64_t block = queryBlock(m, causal, a.threads);
  const int64_t tasks = m.b * m.h * ((m.t + block - 1) / block);
  if (a.inputs[0].aval.dtype == DType::BF16)
    forTasks(a, tasks, [&](int64_t t) { forwardBlock<bf16>(a, m, causal, block, t); });
  else
    forTasks(a, tasks, [&](int64_t t) { forwardBlock<float>(a, m, causal, block, t); });
}

void blockedAttentionGrad(const ir::CpuKernelArgs& a, const AttentionDims& m, bool causal) {
  // Each task walks one head's blocks (dk and dv are summed over them), so the blocks need not feed the threads.
  const int64_t block = queryBlock(m, causal, 1);
  if (a.inputs[0].aval.dtype == DType::BF16)
    forTasks(a, m.b * m.h, [&](int64_t t) { backwardHead<bf16>(a, m, causal, block, t); });
  else
    forTasks(a, m.b * m.h, [&](int64_t t) { backwardHead<float>(a, m, causal, block, t); });
}

}  // namespace tsr::ops
