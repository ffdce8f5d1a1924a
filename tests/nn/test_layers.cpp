// Layers against references written here with plain loops (Dense in both layouts, Embed and its tied head,
// LayerNorm, Dropout's masks, attention with and without the causal mask), and GPT-2 overfitting one batch.
#include "tests/check.h"

#include <cmath>
#include <iomanip>

#include "engine/nn/attention.h"
#include "engine/nn/gpt2.h"
#include "engine/nn/vit.h"
#include "engine/random/random.h"
#include "engine/train/trainer.h"

using namespace tsr;
using namespace tsr::nn;

namespace {

using Vec = std::vector<double>;

Vec leafOf(const Tree& t, const std::string& path) { return t.findPath(path)->leaf().toDoubles(); }

void expectNear(const Vec& got, const Vec& want, double tol, const char* what) {
  TSR_COMPARE(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    REQUIRE_MESSAGE(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])),
                    what << "[" << i << "]: " << std::setprecision(12) << got[i] << " vs " << want[i]);
}

Array randomF64(uint64_t seed, const Shape& s) { return random::normal(random::key(seed), s, DType::F64); }

size_t at(int64_t i) { return static_cast<size_t>(i); }

// y[r, o] = b[o] + sum_i x[r, i] w[o, i]  (torch.nn.Linear's [out, in] layout)
Vec refLinearOutIn(const Vec& x, int64_t rows, int64_t in, const Vec& w, const Vec& b, int64_t out) {
  Vec y(at(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[at(o)];
      for (int64_t i = 0; i < in; ++i) s += x[at(r * in + i)] * w[at(o * in + i)];
      y[at(r * out + o)] = s;
    }
  return y;
}

Vec refLayerNorm(const Vec& x, int64_t rows, int64_t c, const Vec& g, const Vec& b, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < c; ++i) mu += x[at(r * c + i)] / static_cast<double>(c);
    for (int64_t i = 0; i < c; ++i) var += (x[at(r * c + i)] - mu) * (x[at(r * c + i)] - mu) / static_cast<double>(c);
    for (int64_t i = 0; i < c; ++i) y[at(r * c + i)] = (x[at(r * c + i)] - mu) / std::sqrt(var + eps) * g[at(i)] + b[at(i)];
  }
  return y;
}

// ViT-for-classification in double with explicit loops: the patch projection as a strided convolution.
Vec refVit(const VitConfig& c, const Tree& p, const Vec& px, int64_t batch) {
  const int64_t g = c.imageSize / c.patchSize, n = g * g + 1, hd = c.hidden, heads = c.heads, d = hd / heads;
  auto L = [&](const std::string& path) { return leafOf(p, path); };
  Vec convW = L("vit.embeddings.patch_embeddings.projection.weight"), convB = L("vit.embeddings.patch_embeddings.projection.bias");
  Vec cls = L("vit.embeddings.cls_token"), pos = L("vit.embeddings.position_embeddings");
  Vec x(at(batch * n * hd));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t tok = 0; tok < n; ++tok)
      for (int64_t o = 0; o < hd; ++o) {
        double v = 0;
        if (tok == 0) {
          v = cls[at(o)];
        } else {
          int64_t py = (tok - 1) / g, pxx = (tok - 1) % g;
          v = convB[at(o)];
          for (int64_t ch = 0; ch < c.channels; ++ch)
            for (int64_t i = 0; i < c.patchSize; ++i)
              for (int64_t j = 0; j < c.patchSize; ++j)
                v += convW[at(((o * c.channels + ch) * c.patchSize + i) * c.patchSize + j)] *
                     px[at(((b * c.channels + ch) * c.imageSize + py * c.patchSize + i) * c.imageSize + pxx * c.patchSize + j)];
        }
        x[at((b * n + tok) * hd + o)] = v + pos[at(tok * hd + o)];
      }
  const int64_t rows = batch * n;
  for (int64_t l = 0; l < c.layers; ++l) {
    std::string pre = "vit.encoder.layer." + std::to_string(l) + ".";
    Vec h = refLayerNorm(x, rows, hd, L(pre + "layernorm_before.weight"), L(pre + "layernorm_before.bias"), c.layerNormEps);
    auto lin = [&](const Vec& in, int64_t inDim, const std::string& name, int64_t out) {
      return refLinearOutIn(in, rows, inDim, L(pre + name + ".weight"), L(pre + name + ".bias"), out);
    };
    Vec q = lin(h, hd, "attention.attention.query", hd), k = lin(h, hd, "attention.attention.key", hd),
        v = lin(h, hd, "attention.attention.value", hd), att(at(rows * hd));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t hh = 0; hh < heads; ++hh)
        for (int64_t i = 0; i < n; ++i) {
          Vec s(at(n));
          double mx = -1e300, z = 0;
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t e = 0; e < d; ++e) s[at(j)] += q[at((b * n + i) * hd + hh * d + e)] * k[at((b * n + j) * hd + hh * d + e)];
            s[at(j)] /= std::sqrt(static_cast<double>(d));
            mx = std::max(mx, s[at(j)]);
          }
          for (auto& sv : s) z += (sv = std::exp(sv - mx));
          for (int64_t e = 0; e < d; ++e)
            for (int64_t j = 0; j < n; ++j) att[at((b * n + i) * hd + hh * d + e)] += s[at(j)] / z * v[at((b * n + j) * hd + hh * d + e)];
        }
    Vec o = lin(att, hd, "attention.output.dense", hd);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    h = refLayerNorm(x, rows, hd, L(pre + "layernorm_after.weight"), L(pre + "layernorm_after.bias"), c.layerNormEps);
    Vec u = lin(h, hd, "intermediate.dense", c.mlp);
    for (auto& uv : u) uv = 0.5 * uv * (1 + std::erf(uv / std::sqrt(2.0)));  // exact GELU, as HF ViT
    Vec m = lin(u, c.mlp, "output.dense", hd);
    for (size_t i = 0; i < x.size(); ++i) x[i] += m[i];
  }
  x = refLayerNorm(x, rows, hd, L("vit.layernorm.weight"), L("vit.layernorm.bias"), c.layerNormEps);
  Vec clsRows;
  for (int64_t b = 0; b < batch; ++b) clsRows.insert(clsRows.end(), x.begin() + (b * n) * hd, x.begin() + (b * n + 1) * hd);
  return refLinearOutIn(clsRows, batch, hd, L("classifier.weight"), L("classifier.bias"), c.numClasses);
}

}  // namespace

TEST_CASE("denseInBothLayouts") {
  const int64_t rows = 3, in = 4, out = 5;
  Array x = randomF64(1, {rows, in});
  Vec xv = x.toDoubles();
  for (WeightLayout layout : {WeightLayout::InOut, WeightLayout::OutIn}) {
    Dense d{in, out, true, layout, 0.5, DType::F64};
    Tree p = d.init(random::key(2));
    p.set("bias", Tree(randomF64(3, {out})));  // non-zero bias
    TSR_COMPARE(p.findPath("weight")->leaf().shape(),
                layout == WeightLayout::InOut ? (Shape{in, out}) : (Shape{out, in}));
    Vec w = leafOf(p, "weight"), b = leafOf(p, "bias"), want(at(rows * out));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double s = b[at(o)];
        for (int64_t i = 0; i < in; ++i)
          s += xv[at(r * in + i)] * (layout == WeightLayout::InOut ? w[at(i * out + o)] : w[at(o * in + i)]);
        want[at(r * out + o)] = s;
      }
    Array y = d.apply(p, x);
    TSR_COMPARE(y.shape(), (Shape{rows, out}));
    expectNear(y.toDoubles(), want, 1e-12, layout == WeightLayout::InOut ? "dense in-out" : "dense out-in");
  }
  Dense noBias{in, out, false};
  Tree p = noBias.init(random::key(4));
  REQUIRE(!p.find("bias"));
  TSR_COMPARE(noBias.apply(p, Array::ones({2, 7, in})).shape(), (Shape{2, 7, out}));
}

TEST_CASE("embedLooksUpRowsAndAttendsWithTheTransposedTable") {
  const int64_t num = 6, dim = 3;
  Embed e{num, dim, 1.0, DType::F64};
  Tree p = e.init(random::key(5));
  Vec w = leafOf(p, "weight");
  std::vector<int32_t> ids = {4, 0, 5, 4};
  Array y = e.apply(p, Array::fromVector(ids, Shape{2, 2}));
  TSR_COMPARE(y.shape(), (Shape{2, 2, dim}));
  Vec want;
  for (int32_t id : ids)
    for (int64_t j = 0; j < dim; ++j) want.push_back(w[at(id * dim + j)]);
  expectNear(y.toDoubles(), want, 0, "embed");

  Array x = randomF64(6, {2, dim});
  Vec xv = x.toDoubles(), logits(at(2 * num));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t n = 0; n < num; ++n)
      for (int64_t j = 0; j < dim; ++j) logits[at(r * num + n)] += xv[at(r * dim + j)] * w[at(n * dim + j)];
  expectNear(e.attend(p, x).toDoubles(), logits, 1e-12, "attend");
}

TEST_CASE("layerNormMatchesLoops") {
  const int64_t rows = 4, c = 5;
  LayerNorm ln{c, 1e-5, DType::F64};
  Tree p = ln.init();
  expectNear(leafOf(p, "weight"), Vec(at(c), 1.0), 0, "ln init weight");
  p.set("weight", Tree(randomF64(7, {c})));
  p.set("bias", Tree(randomF64(8, {c})));
  Array x = randomF64(9, {rows, c}) * 3.0 + 1.0;
  Vec xv = x.toDoubles(), g = leafOf(p, "weight"), b = leafOf(p, "bias"), want(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < c; ++i) mu += xv[at(r * c + i)] / c;
    for (int64_t i = 0; i < c; ++i) var += (xv[at(r * c + i)] - mu) * (xv[at(r * c + i)] - mu) / c;
    for (int64_t i = 0; i < c; ++i)
      want[at(r * c + i)] = (xv[at(r * c + i)] - mu) / std::sqrt(var + 1e-5) * g[at(i)] + b[at(i)];
  }
  expectNear(ln.apply(p, x).toDoubles(), want, 1e-12, "layernorm");
}

TEST_CASE("dropoutIsIdentityWhenOffAndAScaledMaskWhenOn") {
  Array x = randomF64(10, {100, 100}) + 5.0;  // no zeros in x
  Vec xv = x.toDoubles();
  Dropout d{0.25};
  Context eval(false, random::key(11));
  TSR_COMPARE(d.apply(x, eval).toDoubles(), xv);
  Context noKey;
  TSR_COMPARE(d.apply(x, noKey).toDoubles(), xv);  // eval mode needs no key
  Context zeroRate(true, random::key(11));
  TSR_COMPARE(Dropout{0.0}.apply(x, zeroRate).toDoubles(), xv);

  Context train(true, random::key(11));
  Vec y = d.apply(x, train).toDoubles();
  int64_t kept = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0.0) continue;
    ++kept;
    REQUIRE_MESSAGE(std::fabs(y[i] - xv[i] / 0.75) < 1e-12, "element " << i << " not scaled by 1/keep");
  }
  double keepRate = static_cast<double>(kept) / static_cast<double>(y.size());
  REQUIRE_MESSAGE(std::fabs(keepRate - 0.75) < 0.02, "keep rate " << keepRate);

  // The same key replays the same mask; the next call of one Context draws a new one.
  Context again(true, random::key(11));
  TSR_COMPARE(d.apply(x, again).toDoubles(), y);
  REQUIRE(d.apply(x, again).toDoubles() != y);
  Context other(true, random::key(12));
  REQUIRE(d.apply(x, other).toDoubles() != y);
  Context missing(true, Array());
  REQUIRE(!capture([&] { return d.apply(x, missing); }).ok());
}

TEST_CASE("attentionMatchesNaiveLoops") {
  const int64_t b = 2, h = 2, t = 4, dd = 3;
  Array q = randomF64(20, {b, h, t, dd}), k = randomF64(21, {b, h, t, dd}), v = randomF64(22, {b, h, t, dd});
  Vec qv = q.toDoubles(), kv = k.toDoubles(), vv = v.toDoubles();
  for (bool causal : {false, true}) {
    Vec want(qv.size());
    for (int64_t bh = 0; bh < b * h; ++bh)
      for (int64_t i = 0; i < t; ++i) {
        int64_t last = causal ? i : t - 1;
        Vec s(at(last + 1));
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j <= last; ++j) {
          for (int64_t e = 0; e < dd; ++e) s[at(j)] += qv[at((bh * t + i) * dd + e)] * kv[at((bh * t + j) * dd + e)];
          s[at(j)] /= std::sqrt(static_cast<double>(dd));
          mx = std::max(mx, s[at(j)]);
        }
        for (auto& x : s) z += (x = std::exp(x - mx));
        for (int64_t e = 0; e < dd; ++e)
          for (int64_t j = 0; j <= last; ++j) want[at((bh * t + i) * dd + e)] += s[at(j)] / z * vv[at((bh * t + j) * dd + e)];
      }
    Context ctx;
    Array y = dotProductAttention(q, k, v, causal, Dropout{0.1}, ctx);  // eval: no dropout
    TSR_COMPARE(y.shape(), (Shape{b, h, t, dd}));
    expectNear(y.toDoubles(), want, 1e-12, causal ? "causal attention" : "attention");
  }
  // splitHeads and mergeHeads are inverse: [B, T, H*D] -> [B, H, T, D] -> back.
  Array x = randomF64(23, {b, t, h * dd});
  Array heads = splitHeads(x, h);
  TSR_COMPARE(heads.shape(), (Shape{b, h, t, dd}));
  TSR_COMPARE(mergeHeads(heads).toDoubles(), x.toDoubles());
  // Head hh of position tt holds columns hh*D .. hh*D+D-1.
  Vec xv = x.toDoubles(), hv = heads.toDoubles();
  TSR_COMPARE(hv[at(((1 * h + 1) * t + 2) * dd + 0)], xv[at((1 * t + 2) * h * dd + 1 * dd + 0)]);
}

TEST_CASE("causalMaskIsLowerTriangular") {
  Vec m = causalMask(3).toDoubles();
  TSR_COMPARE(m, (Vec{1, 0, 0, 1, 1, 0, 1, 1, 1}));
}

TEST_CASE("gpt2OverfitsOneBatch") {
  Gpt2Config cfg{32, 8, 2, 2, 32};
  Gpt2 model(cfg);
  const int64_t b = 4, t = 8;
  std::vector<int32_t> toks(at(b * (t + 1)));
  uint32_t lcg = 12345;
  for (auto& x : toks) x = static_cast<int32_t>(((lcg = lcg * 1664525u + 1013904223u) >> 16) % cfg.vocabSize);
  Array data = Array::fromVector(toks, Shape{b, t + 1});
  train::Batch batch{sliceAxis(data, 1, 0, t), sliceAxis(data, 1, 1, t + 1)};
  train::TrainLossFn loss = [&](const Tree& p, const train::Batch& bt, Context& ctx) {
    return optim::softmaxCrossEntropy(model.apply(p, bt.inputs, ctx), bt.targets);
  };
  optim::Schedule lr = optim::constantSchedule(3e-3);
  train::Trainer trainer(loss, optim::adamw(lr, 0.9, 0.99, 1e-8, 0.0), lr, 0);
  train::TrainState state = trainer.init(model.init(random::key(31)));
  double first = 0, last = 0;
  for (int i = 0; i < 150; ++i) {
    auto m = trainer.step(state, batch);
    REQUIRE_MESSAGE(m.ok(), m.error().message);
    if (i == 0) first = m->loss;
    last = m->loss;
  }
  REQUIRE_MESSAGE(std::fabs(first - std::log(32.0)) < 0.3, "first loss " << first);
  auto eval = trainer.evalLoss(state, batch);
  REQUIRE(eval.ok());
  REQUIRE_MESSAGE(*eval < 0.1, "loss " << first << " -> " << last << " (eval " << *eval << ")");
  TSR_COMPARE(trainer.stepFunction().stats().misses, 1);
}

TEST_CASE("vitForwardMatchesNaiveLoops") {
  VitConfig cfg{8, 4, 2, 8, 2, 2, 16, 3};
  cfg.dtype = DType::F64;
  Vit model(cfg);
  // Perturb every leaf so zero biases and unit LayerNorm scales do not hide a wrong read.
  uint64_t seed = 100;
  Tree p = model.init(random::key(40)).map([&](const Array& a) { return a + randomF64(seed++, a.shape()) * 0.3; });
  Array px = randomF64(41, {2, 2, 8, 8});
  Context ctx;
  Array y = model.apply(p, px, ctx);
  TSR_COMPARE(y.shape(), (Shape{2, 3}));
  expectNear(y.toDoubles(), refVit(cfg, p, px.toDoubles(), 2), 1e-10, "vit logits");
}
