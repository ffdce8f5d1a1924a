#include "engine/nn/gpt2.h"

#include <cmath>

#include "engine/nn/attention.h"
#include "engine/random/random.h"
#include "engine/transform/autocast.h"

namespace tsr::nn {

namespace {

struct Parts {
  Dense cAttn, attnProj, cFc, mlpProj;
  LayerNorm ln;
  Dropout drop;
};

Parts partsOf(const Gpt2Config& c) {
  // GPT-2 scales the residual projections' init by 1/sqrt(2 * n_layer).
  double projStd = 0.02 / std::sqrt(2.0 * static_cast<double>(c.nLayer));
  Parts p;
  p.cAttn = Dense{c.nEmbd, 3 * c.nEmbd, true, WeightLayout::InOut, 0.02, c.dtype};
  p.attnProj = Dense{c.nEmbd, c.nEmbd, true, WeightLayout::InOut, projStd, c.dtype};
  p.cFc = Dense{c.nEmbd, 4 * c.nEmbd, true, WeightLayout::InOut, 0.02, c.dtype};
  p.mlpProj = Dense{4 * c.nEmbd, c.nEmbd, true, WeightLayout::InOut, projStd, c.dtype};
  p.ln = LayerNorm{c.nEmbd, c.layerNormEps, c.dtype};
  p.drop = Dropout{c.dropout};
  return p;
}

}  // namespace

// c_attn's parameters viewed by head: weight [C, 3C] -> [C, 3, H, D], bias [3C] -> [3, H, D].
Tree Gpt2::headsView(const Tree& cAttn) const {
  const int64_t c = m_cfg.nEmbd, h = m_cfg.nHead, d = c / h;
  return Tree::dict({{"weight", Tree(reshape(cAttn.find("weight")->leaf(), {c, 3, h, d}))},
                     {"bias", Tree(reshape(cAttn.find("bias")->leaf(), {3, h, d}))}});
}

// q, k and v: [B, H, T, D] each, from x: [B, T, C].
std::array<Array, 3> Gpt2::qkv(const Tree& cAttn, const Array& x) const {
  const int64_t c = m_cfg.nEmbd;
  if (!m_cfg.qkvHeads) {
    Array fused = partsOf(m_cfg).cAttn.apply(cAttn, x);  // [B, T, 3C]
    return {splitHeads(sliceAxis(fused, 2, 0, c), m_cfg.nHead), splitHeads(sliceAxis(fused, 2, c, 2 * c), m_cfg.nHead),
            splitHeads(sliceAxis(fused, 2, 2 * c, 3 * c), m_cfg.nHead)};
  }
  // [B, T, C] . [C, 3, H, D] -> [B, T, 3, H, D]: a split of H stays a split of H down to the scores.
  Array y = dotGeneral(x, cAttn.find("weight")->leaf(), {{2}, {0}, {}, {}}) + autocastOperand(cAttn.find("bias")->leaf());
  const int64_t b = x.dim(0), t = x.dim(1), h = m_cfg.nHead;
  auto part = [&](int64_t i) { return transpose(reshape(sliceAxis(y, 2, i, i + 1), {b, t, h, c / h}), {0, 2, 1, 3}); };
  return {part(0), part(1), part(2)};
}

Tree Gpt2::init(const Array& key) const {
  Parts parts = partsOf(m_cfg);
  Array keys = random::split(key, 2 + m_cfg.nLayer);
  Tree blocks = Tree::list();
  for (int64_t i = 0; i < m_cfg.nLayer; ++i) {
    Array k = random::split(keyAt(keys, 2 + i), 4);
    auto sub = [&](int64_t j) { return keyAt(k, j); };
    Tree cAttn = parts.cAttn.init(sub(0));
    if (m_cfg.qkvHeads) cAttn = headsView(cAttn);
    blocks.push(Tree::dict({{"ln_1", parts.ln.init()},
                           {"attn", Tree::dict({{"c_attn", std::move(cAttn)}, {"c_proj", parts.attnProj.init(sub(1))}})},
                           {"ln_2", parts.ln.init()},
                           {"mlp", Tree::dict({{"c_fc", parts.cFc.init(sub(2))}, {"c_proj", parts.mlpProj.init(sub(3))}})}}));
  }
  return Tree::dict({{"wte", Embed{m_cfg.vocabSize, m_cfg.nEmbd, 0.02, m_cfg.dtype}.init(keyAt(keys, 0))},
                     {"wpe", Embed{m_cfg.blockSize, m_cfg.nEmbd, 0.02, m_cfg.dtype}.init(keyAt(keys, 1))},
                     {"h", std::move(blocks)},
                     {"ln_f", parts.ln.init()}});
}

Array Gpt2::block(const Tree& p, const Array& x, Context& ctx) const {
  Parts parts = partsOf(m_cfg);
  // Each layer norm is a module of its own (h.N.ln_1, h.N.ln_2), as its parameters are; the residual adds
  // belong to the attention and the MLP they close.
  Array h = x;
  Array normed;
  {
    ModuleScope s("ln_1");
    normed = parts.ln.apply(*p.find("ln_1"), h);
  }
  {
    ModuleScope s("attn");
    const Tree& a = *p.find("attn");
    auto [q, k, v] = qkv(*a.find("c_attn"), normed);
    Array y = mergeHeads(dotProductAttention(q, k, v, true, parts.drop, ctx));
    h = h + parts.drop.apply(parts.attnProj.apply(*a.find("c_proj"), y), ctx);
  }
  {
    ModuleScope s("ln_2");
    normed = parts.ln.apply(*p.find("ln_2"), h);
  }
  {
    ModuleScope s("mlp");
    const Tree& m = *p.find("mlp");
    Array u = gelu(parts.cFc.apply(*m.find("c_fc"), normed), true);
    h = h + parts.drop.apply(parts.mlpProj.apply(*m.find("c_proj"), u), ctx);
  }
  return h;
}

Array Gpt2::apply(const Tree& params, const Array& tokens, Context& ctx) const {
  if (tokens.rank() != 2) raise(makeError("gpt2: tokens must be [B, T], got {}", tokens.aval().toString()));
  int64_t t = tokens.dim(1);
  if (t > m_cfg.blockSize)
    raise(makeError("gpt2: sequence length {} exceeds the block size {}", t, m_cfg.blockSize));
  Embed wte{m_cfg.vocabSize, m_cfg.nEmbd}, wpe{m_cfg.blockSize, m_cfg.nEmbd};
  Array x;
  {
    ModuleScope s("wte");
    x = wte.apply(*params.find("wte"), tokens);  // [B, T, C]
  }
  {
    ModuleScope s("wpe");
    x = x + wpe.apply(*params.find("wpe"), arange(t));
  }
  x = Dropout{m_cfg.dropout}.apply(x, ctx);
  const Tree& blocks = *params.find("h");
  for (int64_t i = 0; i < m_cfg.nLayer; ++i) {
    ModuleScope s("h." + std::to_string(i));
    const Tree& p = blocks.child(static_cast<size_t>(i));
    x = applyBlock(ctx, x, [&](const Array& in) { return block(p, in, ctx); });
  }
  {
    ModuleScope s("ln_f");
    x = LayerNorm{m_cfg.nEmbd, m_cfg.layerNormEps}.apply(*params.find("ln_f"), x);
  }
  // The tied head reads wte's weight; it is the module Hugging Face calls lm_head.
  ModuleScope s("lm_head");
  return wte.attend(*params.find("wte"), x);
}

int64_t Gpt2::numParams() const {
  Parts p = partsOf(m_cfg);
  int64_t perBlock = 2 * p.ln.numParams() + p.cAttn.numParams() + p.attnProj.numParams() + p.cFc.numParams() +
                     p.mlpProj.numParams();
  return m_cfg.vocabSize * m_cfg.nEmbd + m_cfg.blockSize * m_cfg.nEmbd + m_cfg.nLayer * perBlock + p.ln.numParams();
}

double Gpt2::trainFlopsPerToken(int64_t seqLen) const {
  // 6 N (forward and backward matmuls with the parameters) + 12 L C T (attention scores and values).
  double n = static_cast<double>(numParams() - m_cfg.blockSize * m_cfg.nEmbd);
  return 6.0 * n + 12.0 * static_cast<double>(m_cfg.nLayer * m_cfg.nEmbd * seqLen);
}

}  // namespace tsr::nn
