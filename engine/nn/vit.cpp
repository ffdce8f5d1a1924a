#include "engine/nn/vit.h"

#include <cmath>

#include "engine/nn/attention.h"
#include "engine/random/random.h"
#include "engine/transform/autocast.h"

namespace tsr::nn {

namespace {

Dense linear(int64_t in, int64_t out, DType dtype) { return Dense{in, out, true, WeightLayout::OutIn, 0.02, dtype}; }

}  // namespace

Tree Vit::init(const Array& key) const {
  const VitConfig& c = m_cfg;
  Array keys = random::split(key, 4 + c.layers);
  int64_t patchDim = c.channels * c.patchSize * c.patchSize;
  // The patch projection is a stride-p convolution; its weight keeps the conv layout [hidden, C, p, p].
  Tree projection = Tree::dict(
      {{"weight", Tree(random::normal(keyAt(keys, 0), {c.hidden, c.channels, c.patchSize, c.patchSize}, c.dtype) *
                       (1.0 / std::sqrt(static_cast<double>(patchDim))))},
       {"bias", Tree(Array::zeros({c.hidden}, c.dtype))}});
  Tree embeddings = Tree::dict(
      {{"cls_token", Tree(random::normal(keyAt(keys, 1), {1, 1, c.hidden}, c.dtype) * 0.02)},
       {"position_embeddings", Tree(random::normal(keyAt(keys, 2), {1, c.numPatches() + 1, c.hidden}, c.dtype) * 0.02)},
       {"patch_embeddings", Tree::dict({{"projection", projection}})}});
  LayerNorm ln{c.hidden, c.layerNormEps, c.dtype};
  Tree layers = Tree::list();
  for (int64_t i = 0; i < c.layers; ++i) {
    Array k = random::split(keyAt(keys, 4 + i), 6);
    Tree attention = Tree::dict({{"query", linear(c.hidden, c.hidden, c.dtype).init(keyAt(k, 0))},
                                 {"key", linear(c.hidden, c.hidden, c.dtype).init(keyAt(k, 1))},
                                 {"value", linear(c.hidden, c.hidden, c.dtype).init(keyAt(k, 2))}});
    layers.push(Tree::dict(
        {{"attention", Tree::dict({{"attention", attention},
                                   {"output", Tree::dict({{"dense", linear(c.hidden, c.hidden, c.dtype).init(keyAt(k, 3))}})}})},
         {"intermediate", Tree::dict({{"dense", linear(c.hidden, c.mlp, c.dtype).init(keyAt(k, 4))}})},
         {"output", Tree::dict({{"dense", linear(c.mlp, c.hidden, c.dtype).init(keyAt(k, 5))}})},
         {"layernorm_before", ln.init()},
         {"layernorm_after", ln.init()}}));
  }
  Tree vit = Tree::dict({{"embeddings", embeddings},
                         {"encoder", Tree::dict({{"layer", layers}})},
                         {"layernorm", ln.init()}});
  return Tree::dict({{"vit", vit}, {"classifier", linear(c.hidden, c.numClasses, c.dtype).init(keyAt(keys, 3))}});
}

Array Vit::layer(const Tree& p, const Array& x, Context& ctx) const {
  const VitConfig& c = m_cfg;
  LayerNorm ln{c.hidden, c.layerNormEps};
  Dropout drop{c.dropout};
  // The layer norms are modules of their own (layernorm_before, layernorm_after), as their parameters are.
  Array h = x;
  Array normed;
  {
    ModuleScope s("layernorm_before");
    normed = ln.apply(*p.find("layernorm_before"), h);
  }
  {
    ModuleScope s("attention");
    const Tree& a = *p.find("attention")->find("attention");
    auto proj = [&](const char* name) { return splitHeads(linear(c.hidden, c.hidden, c.dtype).apply(*a.find(name), normed), c.heads); };
    Array y = mergeHeads(dotProductAttention(proj("query"), proj("key"), proj("value"), false, drop, ctx));
    const Tree& out = *p.find("attention")->find("output")->find("dense");
    h = h + drop.apply(linear(c.hidden, c.hidden, c.dtype).apply(out, y), ctx);
  }
  {
    ModuleScope s("layernorm_after");
    normed = ln.apply(*p.find("layernorm_after"), h);
  }
  {
    ModuleScope s("mlp");
    Array u = gelu(linear(c.hidden, c.mlp, c.dtype).apply(*p.find("intermediate")->find("dense"), normed), false);
    h = h + drop.apply(linear(c.mlp, c.hidden, c.dtype).apply(*p.find("output")->find("dense"), u), ctx);
  }
  return h;
}

Array Vit::apply(const Tree& params, const Array& pixels, Context& ctx) const {
  const VitConfig& c = m_cfg;
  if (pixels.rank() != 4 || pixels.dim(1) != c.channels || pixels.dim(2) != c.imageSize || pixels.dim(3) != c.imageSize)
    raise(makeError("vit: pixels must be [B, {}, {}, {}], got {}", c.channels, c.imageSize, c.imageSize,
                    pixels.aval().toString()));
  const Tree& vit = *params.find("vit");
  const Tree& emb = *vit.find("embeddings");
  int64_t b = pixels.dim(0), g = c.imageSize / c.patchSize, p = c.patchSize;
  Array x;
  {
    ModuleScope s("embeddings");
    // [B, C, g, p, g, p] -> [B, g, g, C, p, p] -> [B, g*g, C*p*p]: each row is one patch in the conv's
    // (channel, row, column) order, so the projection is one matmul with the conv weight read as [hidden, C*p*p].
    Array patches = reshape(transpose(reshape(pixels, {b, c.channels, g, p, g, p}), {0, 2, 4, 1, 3, 5}),
                            {b, g * g, c.channels * p * p});
    const Tree& proj = *emb.find("patch_embeddings")->find("projection");
    Array w = reshape(proj.find("weight")->leaf(), {c.hidden, c.channels * p * p});
    x = dotGeneral(patches, w, {{2}, {1}, {}, {}}) + autocastOperand(proj.find("bias")->leaf());  // [B, N, hidden]
    Array cls = broadcastTo(emb.find("cls_token")->leaf(), Shape{b, 1, c.hidden});
    x = concatenate({cls, x}, 1) + emb.find("position_embeddings")->leaf();
    x = Dropout{c.dropout}.apply(x, ctx);
  }
  const Tree& layers = *vit.find("encoder")->find("layer");
  for (int64_t i = 0; i < c.layers; ++i) {
    ModuleScope s("vit.encoder.layer." + std::to_string(i));
    const Tree& p = layers.child(static_cast<size_t>(i));
    x = applyBlock(ctx, x, [&](const Array& in) { return layer(p, in, ctx); });
  }
  {
    ModuleScope s("vit.layernorm");
    x = LayerNorm{c.hidden, c.layerNormEps}.apply(*vit.find("layernorm"), x);
  }
  ModuleScope s("classifier");
  Array clsOut = reshape(sliceAxis(x, 1, 0, 1), {b, c.hidden});
  return linear(c.hidden, c.numClasses, c.dtype).apply(*params.find("classifier"), clsOut);
}

int64_t Vit::numParams() const {
  const VitConfig& c = m_cfg;
  int64_t lin = c.hidden * c.hidden + c.hidden;
  int64_t perLayer = 4 * lin + (c.hidden * c.mlp + c.mlp) + (c.mlp * c.hidden + c.hidden) + 4 * c.hidden;
  int64_t embeddings = c.hidden + (c.numPatches() + 1) * c.hidden + c.hidden * c.channels * c.patchSize * c.patchSize +
                       c.hidden;
  return embeddings + c.layers * perLayer + 2 * c.hidden + c.hidden * c.numClasses + c.numClasses;
}

}  // namespace tsr::nn
