// Conformance cases for dot_product_attention and its gradient. The references build each head's whole score
// matrix, its softmax and the products from them (what a model writes without the fused op), sharing nothing
// with the kernels (blocks of query rows on BLAS; rows in double for f64); the gradient's reference
// differentiates that matrix form by hand:
// dv = P^T dout, dP = dout v^T, ds = P * (dP - rowsum(P * dP)) + P * dlse, dq = ds k / sqrt(D), dk = ds^T q / sqrt(D).
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

using ir::OpCode;
using Matrix = std::vector<std::vector<double>>;

struct Geometry {
  int64_t b, t, s, h, d;
};

Geometry geometryOf(const std::vector<HostTensor>& in) {
  const Shape &q = in[0].aval.shape, &k = in[1].aval.shape;
  return {q[0], q[1], k[1], q[2], q[3]};
}

// Head (b, h) of a [B, seq, H, D] tensor as a seq x D matrix.
Matrix head(const HostTensor& x, int64_t b, int64_t h) {
  const Shape& s = x.aval.shape;
  Matrix m(static_cast<size_t>(s[1]), std::vector<double>(static_cast<size_t>(s[3])));
  for (int64_t i = 0; i < s[1]; ++i)
    for (int64_t d = 0; d < s[3]; ++d) m[static_cast<size_t>(i)][static_cast<size_t>(d)] = x.get(ravel({b, i, h, d}, s));
  return m;
}

void putHead(HostTensor& x, int64_t b, int64_t h, const Matrix& m) {
  const Shape& s = x.aval.shape;
  for (int64_t i = 0; i < s[1]; ++i)
    for (int64_t d = 0; d < s[3]; ++d) x.set(ravel({b, i, h, d}, s), m[static_cast<size_t>(i)][static_cast<size_t>(d)]);
}

Matrix product(const Matrix& a, const Matrix& b, bool transposeB) {  // a b or a b^T
  const size_t n = a.size(), k = b.empty() ? 0 : (transposeB ? b[0].size() : b.size());
  const size_t m = transposeB ? b.size() : (b.empty() ? 0 : b[0].size());
  Matrix c(n, std::vector<double>(m, 0.0));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < m; ++j)
      for (size_t x = 0; x < k; ++x) c[i][j] += a[i][x] * (transposeB ? b[j][x] : b[x][j]);
  return c;
}

Matrix transposed(const Matrix& a) {
  Matrix t(a.empty() ? 0 : a[0].size(), std::vector<double>(a.size()));
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) t[j][i] = a[i][j];
  return t;
}

// The softmax of the scaled, masked scores of one head, and each row's log-sum-exp.
std::pair<Matrix, std::vector<double>> probabilities(const Matrix& q, const Matrix& k, bool causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.empty() ? 1 : q[0].size()));
  Matrix s = product(q, k, true);
  std::vector<double> lse(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (size_t j = 0; j < s[i].size(); ++j) {
      s[i][j] = causal && j > i ? -std::numeric_limits<double>::infinity() : s[i][j] * scale;
      mx = std::max(mx, s[i][j]);
    }
    double sum = 0;
    for (double x : s[i]) sum += std::exp(x - mx);
    for (double& x : s[i]) x = std::exp(x - mx) / sum;
    lse[i] = mx + std::log(sum);
  }
  return {s, lse};
}

std::vector<HostTensor> attentionRef(const std::vector<HostTensor>& in, bool causal) {
  const Geometry g = geometryOf(in);
  const DType rows = in[0].aval.dtype == DType::BF16 ? DType::F32 : in[0].aval.dtype;  // bf16 q: f32 lse
  HostTensor out = HostTensor::zeros(in[0].aval), lse = HostTensor::zeros(Aval{Shape{g.b, g.h, g.t}, rows});
  for (int64_t b = 0; b < g.b; ++b)
    for (int64_t h = 0; h < g.h; ++h) {
      auto [p, rows] = probabilities(head(in[0], b, h), head(in[1], b, h), causal);
      putHead(out, b, h, product(p, head(in[2], b, h), false));
      for (int64_t i = 0; i < g.t; ++i) lse.set(ravel({b, h, i}, lse.aval.shape), rows[static_cast<size_t>(i)]);
    }
  return {out, lse};
}

// Operands: q, k, v, out, lse, dout, dlse (out and lse as given: the gradient reads them as the forward pass's).
std::vector<HostTensor> attentionGradRef(const std::vector<HostTensor>& in, bool causal) {
  const Geometry g = geometryOf(in);
  const double scale = 1.0 / std::sqrt(static_cast<double>(g.d));
  HostTensor dq = HostTensor::zeros(in[0].aval), dk = HostTensor::zeros(in[1].aval), dv = HostTensor::zeros(in[2].aval);
  if (g.t == 0) return {dq, dk, dv};  // no queries: no gradient reaches the keys and values
  for (int64_t b = 0; b < g.b; ++b)
    for (int64_t h = 0; h < g.h; ++h) {
      const Matrix q = head(in[0], b, h), k = head(in[1], b, h), v = head(in[2], b, h), dout = head(in[5], b, h);
      Matrix p = product(q, k, true);  // P rebuilt from the given lse, as the op defines it
      for (int64_t i = 0; i < g.t; ++i)
        for (int64_t j = 0; j < g.s; ++j) {
          double& x = p[static_cast<size_t>(i)][static_cast<size_t>(j)];
          x = causal && j > i ? 0.0 : std::exp(x * scale - in[4].get(ravel({b, h, i}, in[4].aval.shape)));
        }
      const Matrix dp = product(dout, v, true);
      const Matrix out = head(in[3], b, h);
      Matrix ds = p;
      for (int64_t i = 0; i < g.t; ++i) {
        double delta = -in[6].get(ravel({b, h, i}, in[6].aval.shape));
        for (int64_t d = 0; d < g.d; ++d) delta += dout[static_cast<size_t>(i)][static_cast<size_t>(d)] * out[static_cast<size_t>(i)][static_cast<size_t>(d)];
        for (int64_t j = 0; j < g.s; ++j)
          ds[static_cast<size_t>(i)][static_cast<size_t>(j)] *= dp[static_cast<size_t>(i)][static_cast<size_t>(j)] - delta;
      }
      Matrix gq = product(ds, k, false), gk = product(transposed(ds), q, false);
      for (auto& row : gq)
        for (double& x : row) x *= scale;
      for (auto& row : gk)
        for (double& x : row) x *= scale;
      putHead(dq, b, h, gq);
      putHead(dk, b, h, gk);
      putHead(dv, b, h, product(transposed(p), dout, false));
    }
  return {dq, dk, dv};
}

void addAttention(std::vector<OpCase>& cases, std::mt19937& rng, DType t, Shape q, int64_t keys, bool causal) {
  Shape kv = q;
  kv.dims()[1] = keys;
  std::vector<HostTensor> in = {randomTensor(Aval{q, t}, rng), randomTensor(Aval{kv, t}, rng),
                                randomTensor(Aval{kv, t}, rng)};
  OpCase c;
  c.label = fmt::format("dot_product_attention {} q{} k{}{}", dtypeName(t), q.toString(), kv.toString(),
                        causal ? " causal" : "");
  c.op = OpCode::DotProductAttention;
  c.attrs = ir::AttentionAttrs{causal};
  c.inputs = in;
  c.reference = [causal](const std::vector<HostTensor>& x) { return attentionRef(x, causal); };
  if (t == DType::F32) c.rtol = c.atol = 2e-5;  // f32 products and exp over up to 150 keys
  // bf16: kernel (in f32) and reference (in double) compute from the same bf16 values and round once: one bf16
  // ulp apart at most.
  if (t == DType::BF16) c.rtol = c.atol = 4e-3;
  cases.push_back(c);

  // The gradient at the forward pass's own out and lse, with random output cotangents.
  std::vector<HostTensor> fwd = attentionRef(in, causal);
  OpCase gc;
  gc.label = fmt::format("dot_product_attention_grad {} q{} k{}{}", dtypeName(t), q.toString(), kv.toString(),
                         causal ? " causal" : "");
  gc.op = OpCode::DotProductAttentionGrad;
  gc.attrs = ir::AttentionAttrs{causal};
  gc.inputs = {in[0], in[1], in[2], fwd[0], fwd[1], randomTensor(in[0].aval, rng), randomTensor(fwd[1].aval, rng)};
  gc.reference = [causal](const std::vector<HostTensor>& x) { return attentionGradRef(x, causal); };
  if (t == DType::F32) gc.rtol = gc.atol = 5e-5;
  if (t == DType::BF16) gc.rtol = gc.atol = 4e-3;
  cases.push_back(gc);
}

}  // namespace

void addAttentionCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (DType t : {DType::F32, DType::F64}) {
    for (bool causal : {false, true}) {
      addAttention(cases, rng, t, Shape{1, 1, 1, 1}, 1, causal);
      addAttention(cases, rng, t, Shape{2, 5, 3, 4}, 5, causal);
      addAttention(cases, rng, t, Shape{1, 9, 2, 8}, 9, causal);
    }
    addAttention(cases, rng, t, Shape{2, 3, 2, 4}, 6, false);  // cross attention: more keys than queries
  }
  // The f32 and bf16 kernels work in blocks of query rows (attention_cpu.h): causal ones of 64 (several blocks, a
  // ragged last one, blocks that see fewer keys than the sequence has); unmasked ones as large as their scores
  // fit in L2 and split further to feed the threads (150 rows of one head: two blocks of 75 or more), and cross
  // attention over more keys than rows: 2100 keys leave room for blocks of 31 rows, so the gradient sums dk and
  // dv over two blocks of 20.
  for (bool causal : {false, true}) addAttention(cases, rng, DType::F32, Shape{1, 150, 2, 16}, 150, causal);
  addAttention(cases, rng, DType::F32, Shape{2, 70, 1, 8}, 131, false);
  // On AVX-512 the products run on tiles of 6 rows by up to 64 columns and lay q^T and dout^T out 16 x 16: a head
  // size of 40 leaves part-filled vectors and transposes, and 100 rows make a ragged causal block (64 and 36),
  // tiles of 6 rows that straddle the diagonal, and unmasked blocks of 50 or 100 columns (as the threads have
  // it: 100 are two panels, of 3 and 4 vectors).
  for (bool causal : {false, true}) addAttention(cases, rng, DType::F32, Shape{1, 100, 2, 40}, 100, causal);
  addAttention(cases, rng, DType::BF16, Shape{1, 70, 1, 40}, 70, true);
  // With heads enough for the threads (8 a thread) a forward task takes all of a head's blocks (k and v read
  // once): 16 heads of two causal blocks each.
  addAttention(cases, rng, DType::F32, Shape{4, 70, 4, 8}, 70, true);
  addAttention(cases, rng, DType::BF16, Shape{4, 70, 4, 8}, 70, true);
  addAttention(cases, rng, DType::F32, Shape{1, 40, 1, 4}, 2100, false);
  // No queries: no blocks at all, and dk and dv zeros.
  for (bool causal : {false, true}) addAttention(cases, rng, DType::F32, Shape{2, 0, 2, 4}, causal ? 0 : 3, causal);
  addAttention(cases, rng, DType::BF16, Shape{1, 100, 2, 16}, 100, true);
  // bf16 q, k, v (autocast's activations): bf16 out and gradients, f32 lse and dlse.
  addAttention(cases, rng, DType::BF16, Shape{2, 5, 3, 4}, 5, true);
  addAttention(cases, rng, DType::BF16, Shape{1, 9, 2, 8}, 9, false);
  addAttention(cases, rng, DType::BF16, Shape{2, 3, 2, 4}, 6, false);
}

}  // namespace tsr::test
