// Fused attention, as jax.nn.dot_product_attention and XLA's fused multi-head attention: one op where a model
// would otherwise write dot_general, a mask, softmax and dot_general, so that a backend can run it without
// materialising the [seq, seq] scores (the CUDA backend: FlashAttention-2's kernels on tensor cores).
//
//   dot_product_attention (q, k, v){causal} -> (out, lse)
//     q [B, T, H, D], k and v [B, S, H, D] (f32, f64 or bf16; causal needs S == T); out [B, T, H, D] =
//     softmax(q k^T / sqrt(D), over the keys) v per batch and head, lse [B, H, T] each row's log-sum-exp of the
//     scaled scores (what the gradient needs to rebuild the softmax without storing it). bf16 operands (autocast's
//     activations) are computed in f32 or better and give bf16 out (and dq, dk, dv) with f32 rows (lse, dlse), as
//     torch's SDPA and cuDNN's attention keep their inputs' dtype.
//   dot_product_attention_grad (q, k, v, out, lse, dout, dlse){causal} -> (dq, dk, dv)
//     the pullback of both results: with P = exp(s - lse) and dP = dout v^T, ds = P (dP - delta) where
//     delta = rowsum(dout * out) - dlse, dq = ds k / sqrt(D), dk = ds^T q / sqrt(D), dv = P^T dout.
//
// The layout is JAX's ([batch, seq, heads, head_dim]): a projection's output reshaped, no transposes. The CPU
// kernels also take row views (OpDef::cpuRowViewDims): q, k and v read as column blocks of one qkv projection,
// and dq, dk and dv written into the columns of the concatenate that joins them (row_views.h). Batching
// folds the vmapped dim into B; sharding splits B and H (data and tensor parallelism) and keeps T, S and D
// whole. The gradient op's own vjp differentiates the composite it stands for, so second derivatives (hessians,
// forward mode through the pullback) work, with the [T, S] scores materialised.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/ops/attention_cpu.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"

namespace tsr::ops {

namespace {

using ir::OpCode;
using ir::ShardingRule;

constexpr const char* kFwd = "dot_product_attention";
constexpr const char* kGrad = "dot_product_attention_grad";

using Dims = AttentionDims;

// lse [B, H, T] element (b, h, t).
inline int64_t atRow(const Dims& m, int64_t b, int64_t h, int64_t t) { return (b * m.h + h) * m.t + t; }

// A [B, seq, H, D] operand or result of a kernel: element (b, t, h, d), its rows of H*D lying `ld` apart (a row
// view's stride, or H*D).
template <class P>
struct SeqHeads {
  P* p;
  int64_t ld, seq, d;
  template <class View>
  SeqHeads(const View& x, const Dims& m, int64_t seqLen)
      : p(static_cast<P*>(x.data)), ld(attentionRowsApart(x.rowStride, m)), seq(seqLen), d(m.d) {}
  P& operator()(int64_t b, int64_t t, int64_t h, int64_t e) const { return p[(b * seq + t) * ld + h * d + e]; }
};

bool attentionDType(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16; }
// The dtype of lse and dlse: f32 for bf16 operands, else theirs.
DType rowDType(DType t) { return t == DType::BF16 ? DType::F32 : t; }

Result<Dims> checkQkv(std::string_view op, std::span<const Aval> ops, bool causal) {
  const Aval &q = ops[0], &k = ops[1], &v = ops[2];
  if (!attentionDType(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype)
    return opError(op, ops, "q, k and v must have one dtype, f32, f64 or bf16");
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    return opError(op, ops, "q, k and v must be [batch, seq, heads, head_dim]");
  if (k.shape != v.shape) return opError(op, ops, "k and v must have equal shapes");
  if (k.shape[0] != q.shape[0] || k.shape[2] != q.shape[2] || k.shape[3] != q.shape[3])
    return opError(op, ops, "k and v must have q's batch, heads and head_dim");
  if (causal && k.shape[1] != q.shape[1])
    return opError(op, ops, fmt::format("causal attention needs as many keys as queries, got {} and {}", k.shape[1],
                                        q.shape[1]));
  if (q.shape[3] == 0) return opError(op, ops, "head_dim must be at least 1");
  return Dims{q.shape[0], q.shape[1], k.shape[1], q.shape[2], q.shape[3]};
}

Aval rowAval(const Dims& m, DType t) { return Aval{Shape{m.b, m.h, m.t}, rowDType(t)}; }

Result<std::vector<Aval>> inferAttention(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity(kFwd, ops, 3));
  const bool causal = attrsAs<ir::AttentionAttrs>(attrs).causal;
  TSR_ASSIGN(Dims m, checkQkv(kFwd, ops, causal));
  return std::vector<Aval>{ops[0], rowAval(m, ops[0].dtype)};
}

Result<std::vector<Aval>> inferAttentionGrad(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity(kGrad, ops, 7));
  const bool causal = attrsAs<ir::AttentionAttrs>(attrs).causal;
  TSR_ASSIGN(Dims m, checkQkv(kGrad, ops, causal));
  if (!(ops[3] == ops[0]) || !(ops[5] == ops[0])) return opError(kGrad, ops, "out and dout must be like q");
  const Aval row = rowAval(m, ops[0].dtype);
  if (!(ops[4] == row) || !(ops[6] == row))
    return opError(kGrad, ops, fmt::format("lse and dlse must be {}", row.toString()));
  return std::vector<Aval>{ops[0], ops[1], ops[2]};
}

// The products' FLOPs: 2 per multiply-add over the (query, key) pairs a row sees, per head dim element.
double pairFlops(std::span<const Aval> in, bool causal) {
  const Aval &q = in[0], &k = in[1];
  const double pairs = static_cast<double>(q.shape[0]) * static_cast<double>(q.shape[2]) *
                       static_cast<double>(q.shape[1]) * static_cast<double>(k.shape[1]) * (causal ? 0.5 : 1.0);
  return 2.0 * pairs * static_cast<double>(q.shape[3]);
}

ir::Cost attentionCost(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) {
  ir::Cost c = movementCost(in, out);
  c.flops = 2 * pairFlops(in, attrsAs<ir::AttentionAttrs>(attrs).causal);  // q k^T and P v
  return c;
}

ir::Cost attentionGradCost(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) {
  ir::Cost c = movementCost(in, out);
  c.flops = 5 * pairFlops(in, attrsAs<ir::AttentionAttrs>(attrs).causal);  // s, dP, dv, dq, dk
  return c;
}

// ---- CPU kernels --------------------------------------------------------------------------------------------
// f32 and bf16 in blocks of query rows (attention_cpu.h: AVX-512 register tiles, else SGEMM). f64, and shapes past
// BLAS's int sizes: a row of scores at a time, accumulated in double. T: q, k, v, out and the gradients; L: lse and dlse (f32 where T is
// bf16).

template <class T, class L>
void attentionRows(const ir::CpuKernelArgs& a, const Dims& m, bool causal) {
  const SeqHeads<const T> q(a.inputs[0], m, m.t), k(a.inputs[1], m, m.s), v(a.inputs[2], m, m.s);
  const SeqHeads<T> out(a.outputs[0], m, m.t);
  L* lse = a.outputs[1].as<L>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(m.d));
  std::vector<double> s(static_cast<size_t>(m.s)), acc(static_cast<size_t>(m.d));
  for (int64_t b = 0; b < m.b; ++b)
    for (int64_t h = 0; h < m.h; ++h)
      for (int64_t i = 0; i < m.t; ++i) {
        const int64_t keys = causal ? i + 1 : m.s;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < m.d; ++d)
            dot += static_cast<double>(q(b, i, h, d)) * static_cast<double>(k(b, j, h, d));
          s[static_cast<size_t>(j)] = dot * scale;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < keys; ++j) {
          const double p = std::exp(s[static_cast<size_t>(j)] - mx);
          l += p;
          for (int64_t d = 0; d < m.d; ++d) acc[static_cast<size_t>(d)] += p * static_cast<double>(v(b, j, h, d));
        }
        for (int64_t d = 0; d < m.d; ++d)
          out(b, i, h, d) = static_cast<T>(keys > 0 ? acc[static_cast<size_t>(d)] / l : 0.0);
        lse[atRow(m, b, h, i)] = static_cast<L>(keys > 0 ? mx + std::log(l) : -std::numeric_limits<double>::infinity());
      }
}

template <class T, class L>
void attentionGradRows(const ir::CpuKernelArgs& a, const Dims& m, bool causal) {
  const SeqHeads<const T> q(a.inputs[0], m, m.t), k(a.inputs[1], m, m.s), v(a.inputs[2], m, m.s),
      out(a.inputs[3], m, m.t), dout(a.inputs[5], m, m.t);
  const L *lse = a.inputs[4].as<L>(), *dlse = a.inputs[6].as<L>();
  const SeqHeads<T> dq(a.outputs[0], m, m.t), dk(a.outputs[1], m, m.s), dv(a.outputs[2], m, m.s);
  const double scale = 1.0 / std::sqrt(static_cast<double>(m.d));
  std::vector<double> gk(static_cast<size_t>(m.s * m.d)), gv(static_cast<size_t>(m.s * m.d));
  std::vector<double> gq(static_cast<size_t>(m.d));
  for (int64_t b = 0; b < m.b; ++b)
    for (int64_t h = 0; h < m.h; ++h) {
      std::fill(gk.begin(), gk.end(), 0.0);
      std::fill(gv.begin(), gv.end(), 0.0);
      for (int64_t i = 0; i < m.t; ++i) {
        const int64_t keys = causal ? i + 1 : m.s;
        double delta = -static_cast<double>(dlse[atRow(m, b, h, i)]);
        for (int64_t d = 0; d < m.d; ++d)
          delta += static_cast<double>(dout(b, i, h, d)) * static_cast<double>(out(b, i, h, d));
        std::fill(gq.begin(), gq.end(), 0.0);
        for (int64_t j = 0; j < keys; ++j) {
          double dot = 0, dp = 0;
          for (int64_t d = 0; d < m.d; ++d) {
            dot += static_cast<double>(q(b, i, h, d)) * static_cast<double>(k(b, j, h, d));
            dp += static_cast<double>(dout(b, i, h, d)) * static_cast<double>(v(b, j, h, d));
          }
          const double p = std::exp(dot * scale - static_cast<double>(lse[atRow(m, b, h, i)]));
          const double ds = p * (dp - delta);
          for (int64_t d = 0; d < m.d; ++d) {
            gq[static_cast<size_t>(d)] += ds * static_cast<double>(k(b, j, h, d));
            gk[static_cast<size_t>(j * m.d + d)] += ds * static_cast<double>(q(b, i, h, d));
            gv[static_cast<size_t>(j * m.d + d)] += p * static_cast<double>(dout(b, i, h, d));
          }
        }
        for (int64_t d = 0; d < m.d; ++d) dq(b, i, h, d) = static_cast<T>(gq[static_cast<size_t>(d)] * scale);
      }
      for (int64_t j = 0; j < m.s; ++j)
        for (int64_t d = 0; d < m.d; ++d) {
          dk(b, j, h, d) = static_cast<T>(gk[static_cast<size_t>(j * m.d + d)] * scale);
          dv(b, j, h, d) = static_cast<T>(gv[static_cast<size_t>(j * m.d + d)]);
        }
    }
}

Dims dimsOf(const ir::CpuKernelArgs& a) {
  const Shape &q = a.inputs[0].aval.shape, &k = a.inputs[1].aval.shape;
  return Dims{q[0], q[1], k[1], q[2], q[3]};
}

// BLAS takes the blocks' sizes and row strides as int.
bool blasSized(const ir::CpuKernelArgs& a, const Dims& m) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  bool rows = m.t <= kMax && m.s <= kMax && m.h * m.d <= kMax;
  for (const ir::TensorView& x : a.inputs) rows &= x.rowStride <= kMax;
  for (const ir::MutableTensorView& x : a.outputs) rows &= x.rowStride <= kMax;
  return rows;
}

void attentionKernel(const ir::CpuKernelArgs& a) {
  const bool causal = attrsAs<ir::AttentionAttrs>(a.attrs).causal;
  const Dims m = dimsOf(a);
  const DType t = a.inputs[0].aval.dtype;
  if (t != DType::F64 && blasSized(a, m)) return blockedAttention(a, m, causal);
  switch (t) {
    case DType::F64: return attentionRows<double, double>(a, m, causal);
    case DType::BF16: return attentionRows<bf16, float>(a, m, causal);
    default: return attentionRows<float, float>(a, m, causal);
  }
}

void attentionGradKernel(const ir::CpuKernelArgs& a) {
  const bool causal = attrsAs<ir::AttentionAttrs>(a.attrs).causal;
  const Dims m = dimsOf(a);
  const DType t = a.inputs[0].aval.dtype;
  if (t != DType::F64 && blasSized(a, m)) return blockedAttentionGrad(a, m, causal);
  switch (t) {
    case DType::F64: return attentionGradRows<double, double>(a, m, causal);
    case DType::BF16: return attentionGradRows<bf16, float>(a, m, causal);
    default: return attentionGradRows<float, float>(a, m, causal);
  }
}

// ---- Transformation rules ---------------------------------------------------------------------------------------

std::vector<Array> attentionVjp(const ir::VjpArgs& a) {
  if (!a.cotangents[0].valid() && !a.cotangents[1].valid()) return {Array(), Array(), Array()};
  std::vector<Array> in = {a.operands[0], a.operands[1],       a.operands[2],      a.results[0],
                           a.results[1],  cotangentOrZeros(a, 0), cotangentOrZeros(a, 1)};
  return bind(OpCode::DotProductAttentionGrad, in, a.attrs, std::source_location::current());
}

// Second derivatives: the gradient op as the composite it fuses (the formula at the top), differentiated by
// autodiff, as the cross-entropy gradient's are. out and lse are inputs of their own here, so their cotangents go
// back through the forward op's rule. The [T, S] scores are materialised, as an unfused attention's second
// derivative would; bf16 operands compute in f32, the rows' dtype.
std::vector<Array> attentionGradVjp(const ir::VjpArgs& a) {
  if (std::none_of(a.cotangents.begin(), a.cotangents.end(), [](const Array& c) { return c.valid(); }))
    return std::vector<Array>(a.operands.size());
  const bool causal = attrsAs<ir::AttentionAttrs>(a.attrs).causal;
  auto composite = [causal](const std::vector<Array>& in) {
    const Array &lse = in[4], &dlse = in[6];
    const DType t = in[0].dtype(), f = lse.dtype();
    const Array q = astype(in[0], f), k = astype(in[1], f), v = astype(in[2], f), out = astype(in[3], f),
                dout = astype(in[5], f);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.dim(3)));
    // [B, H, T, S]: q [B, T, H, D] against k [B, S, H, D] over D, batched over B and H
    const DotDims scores{{3}, {3}, {0, 2}, {0, 2}};
    Array s = dotGeneral(q, k, scores) * scale;
    if (causal) {
      const Shape ts{q.dim(1), k.dim(1)};
      Array visible = broadcastInDim(greaterEqual(iota(ts, 0), iota(ts, 1)), s.shape(), {2, 3});
      s = where(visible, s, fullLike(s, -std::numeric_limits<double>::infinity()));
    }
    Array p = exp(s - expandDims(lse, 3));
    Array delta = transpose(sum(dout * out, {3}), {0, 2, 1}) - dlse;  // [B, T, H] -> [B, H, T]
    Array ds = p * (dotGeneral(dout, v, scores) - expandDims(delta, 3));
    // [B, H, T|S, D] products back to [B, T|S, H, D]
    auto heads = [](const Array& x) { return transpose(x, {0, 2, 1, 3}); };
    Array dq = heads(dotGeneral(ds, k, {{3}, {1}, {0, 1}, {0, 2}}) * scale);
    Array dk = heads(dotGeneral(ds, q, {{2}, {1}, {0, 1}, {0, 2}}) * scale);
    Array dv = heads(dotGeneral(p, dout, {{2}, {1}, {0, 1}, {0, 2}}));
    return std::vector<Array>{astype(dq, t), astype(dk, t), astype(dv, t)};
  };
  VjpOutput g = vjp(composite, a.operands);
  return g.pullback(a.cotangents);
}

// vmap: the batched dim of every operand moved in front and folded into B (rank 4: [N*B, ...]; the row operands
// [N*B, H, T]); the results unfolded again.
ir::BatchResult foldBatch(OpCode op, const ir::BatchArgs& a) {
  std::vector<Array> in;
  for (size_t i = 0; i < a.operands.size(); ++i) {
    Array x = moveBatchDim(a.operands[i], a.batchDims[i], 0, a.batchSize);
    std::vector<int64_t> dims = x.shape().dims();
    dims[1] *= dims[0];
    dims.erase(dims.begin());
    in.push_back(reshape(x, dims));
  }
  std::vector<Array> r = bind(op, in, a.attrs, std::source_location::current());
  for (Array& y : r) {
    std::vector<int64_t> dims = y.shape().dims();
    dims[0] /= a.batchSize;
    dims.insert(dims.begin(), a.batchSize);
    y = reshape(y, dims);
  }
  return {r, std::vector<int>(r.size(), 0)};
}

// B and H split alike on every operand and result; T, S and D whole. Rank-4 values are [B, seq, H, D], rank-3
// ones [B, H, T].
Result<ShardingRule> batchAndHeads(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  ShardingRule r;
  const int fb = r.addFactor(ir::FactorKind::PassThrough), fh = r.addFactor(ir::FactorKind::PassThrough);
  auto dims = [&](const Aval& x) {
    std::vector<int> d(static_cast<size_t>(x.rank()), -1);
    d[0] = fb;
    d[x.rank() == 4 ? 2 : 1] = fh;
    return d;
  };
  for (const Aval& x : in) r.operandDims.push_back(dims(x));
  for (const Aval& y : out) r.resultDims.push_back(dims(y));
  return r;
}

}  // namespace

void registerAttentionOps(ir::OpRegistry& reg) {
  ir::OpDef fwd = coreOp(OpCode::DotProductAttention, "attention", ir::FusionKind::Opaque, 3, 2);
  fwd.infer = inferAttention;
  fwd.cost = attentionCost;
  fwd.cpu = attentionKernel;
  fwd.cpuWritesWholeResult = true;
  fwd.cpuRowViewDims = 2;  // [H, D] rows: q, k and v may be columns of one qkv projection
  fwd.vjp = attentionVjp;
  fwd.batch = [](const ir::BatchArgs& a) { return foldBatch(OpCode::DotProductAttention, a); };
  fwd.shard = batchAndHeads;
  addCoreOp(reg, std::move(fwd));

  ir::OpDef grad = coreOp(OpCode::DotProductAttentionGrad, "attention", ir::FusionKind::Opaque, 7, 3);
  grad.infer = inferAttentionGrad;
  grad.cost = attentionGradCost;
  grad.cpu = attentionGradKernel;
  grad.cpuWritesWholeResult = true;
  grad.cpuRowViewDims = 2;  // and dq, dk and dv written where their concatenate puts them
  grad.vjp = attentionGradVjp;
  grad.batch = [](const ir::BatchArgs& a) { return foldBatch(OpCode::DotProductAttentionGrad, a); };
  grad.shard = batchAndHeads;
  addCoreOp(reg, std::move(grad));
}

}  // namespace tsr::ops
