// Models: parameter counts and names of the published configs, and the GPT-2 forward pass against a naive
// loop implementation written here (llm.c style, in double).
#include "tests/check.h"

#include <cmath>
#include <numbers>

#include "engine/nn/gpt2.h"
#include "engine/nn/mlp.h"
#include "engine/nn/vit.h"
#include "engine/random/random.h"
#include "engine/transform/trace.h"

using namespace tsr;
using namespace tsr::nn;

namespace {

int64_t countParams(const Tree& t) {
  int64_t n = 0;
  for (const auto& a : t.leaves()) n += a.numel();
  return n;
}

std::vector<double> leaf(const Tree& t, const std::string& path) {
  const Tree* n = t.findPath(path);
  if (!n) TSR_FATAL("missing " << path);
  return n->leaf().toDoubles();
}

// GPT-2 forward in double with explicit loops. w: [in, out] row-major.
std::vector<double> refLinear(const std::vector<double>& x, int64_t rows, int64_t in, const std::vector<double>& w,
                              const std::vector<double>& b, int64_t out) {
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i) s += x[static_cast<size_t>(r * in + i)] * w[static_cast<size_t>(i * out + o)];
      y[static_cast<size_t>(r * out + o)] = s;
    }
  return y;
}

std::vector<double> refLayerNorm(const std::vector<double>& x, int64_t rows, int64_t c, const std::vector<double>& g,
                                 const std::vector<double>& b) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < c; ++i) mu += x[static_cast<size_t>(r * c + i)];
    mu /= static_cast<double>(c);
    for (int64_t i = 0; i < c; ++i) var += std::pow(x[static_cast<size_t>(r * c + i)] - mu, 2);
    var /= static_cast<double>(c);
    for (int64_t i = 0; i < c; ++i)
      y[static_cast<size_t>(r * c + i)] =
          (x[static_cast<size_t>(r * c + i)] - mu) / std::sqrt(var + 1e-5) * g[static_cast<size_t>(i)] + b[static_cast<size_t>(i)];
  }
  return y;
}

std::vector<double> refGpt2(const Gpt2Config& cfg, const Tree& p, const std::vector<int>& tokens, int64_t batch) {
  int64_t t = static_cast<int64_t>(tokens.size()) / batch, c = cfg.nEmbd, h = cfg.nHead, d = c / h, rows = batch * t;
  auto wte = leaf(p, "wte.weight"), wpe = leaf(p, "wpe.weight");
  std::vector<double> x(static_cast<size_t>(rows * c));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < c; ++i)
      x[static_cast<size_t>(r * c + i)] = wte[static_cast<size_t>(tokens[static_cast<size_t>(r)] * c + i)] +
                                          wpe[static_cast<size_t>((r % t) * c + i)];
  for (int64_t l = 0; l < cfg.nLayer; ++l) {
    std::string pre = "h." + std::to_string(l) + ".";
    auto ln1 = refLayerNorm(x, rows, c, leaf(p, pre + "ln_1.weight"), leaf(p, pre + "ln_1.bias"));
    auto qkv = refLinear(ln1, rows, c, leaf(p, pre + "attn.c_attn.weight"), leaf(p, pre + "attn.c_attn.bias"), 3 * c);
    std::vector<double> att(static_cast<size_t>(rows * c), 0.0);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t i = 0; i < t; ++i) {
          std::vector<double> s(static_cast<size_t>(i + 1));
          double mx = -1e300;
          for (int64_t j = 0; j <= i; ++j) {
            double acc = 0;
            for (int64_t e = 0; e < d; ++e)
              acc += qkv[static_cast<size_t>((b * t + i) * 3 * c + hh * d + e)] *
                     qkv[static_cast<size_t>((b * t + j) * 3 * c + c + hh * d + e)];
            s[static_cast<size_t>(j)] = acc / std::sqrt(static_cast<double>(d));
            mx = std::max(mx, s[static_cast<size_t>(j)]);
          }
          double z = 0;
          for (auto& v : s) z += (v = std::exp(v - mx));
          for (int64_t e = 0; e < d; ++e) {
            double acc = 0;
            for (int64_t j = 0; j <= i; ++j)
              acc += s[static_cast<size_t>(j)] / z * qkv[static_cast<size_t>((b * t + j) * 3 * c + 2 * c + hh * d + e)];
            att[static_cast<size_t>((b * t + i) * c + hh * d + e)] = acc;
          }
        }
    auto proj = refLinear(att, rows, c, leaf(p, pre + "attn.c_proj.weight"), leaf(p, pre + "attn.c_proj.bias"), c);
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    auto ln2 = refLayerNorm(x, rows, c, leaf(p, pre + "ln_2.weight"), leaf(p, pre + "ln_2.bias"));
    auto fc = refLinear(ln2, rows, c, leaf(p, pre + "mlp.c_fc.weight"), leaf(p, pre + "mlp.c_fc.bias"), 4 * c);
    for (auto& v : fc) v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    auto out = refLinear(fc, rows, 4 * c, leaf(p, pre + "mlp.c_proj.weight"), leaf(p, pre + "mlp.c_proj.bias"), c);
    for (size_t i = 0; i < x.size(); ++i) x[i] += out[i];
  }
  auto lnf = refLayerNorm(x, rows, c, leaf(p, "ln_f.weight"), leaf(p, "ln_f.bias"));
  std::vector<double> logits(static_cast<size_t>(rows * cfg.vocabSize));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < cfg.vocabSize; ++v) {
      double acc = 0;
      for (int64_t i = 0; i < c; ++i) acc += lnf[static_cast<size_t>(r * c + i)] * wte[static_cast<size_t>(v * c + i)];
      logits[static_cast<size_t>(r * cfg.vocabSize + v)] = acc;
    }
  return logits;
}

}  // namespace

TEST_CASE("gpt2SmallHasThePublishedParameterCountAndNames") {
  Gpt2 model(Gpt2Config::small());
  TSR_COMPARE(model.numParams(), int64_t(124439808));
  // The names and shapes without materialising 124M parameters: trace init abstractly.
  auto g = makeGraph([&](const std::vector<Array>& k) { return model.init(k[0]).leaves(); },
                     {Aval{Shape{2}, DType::U32}});
  REQUIRE(g.ok());
  int64_t n = 0;
  for (ir::ValueId v : g->graph.outputs()) n += g->graph.aval(v).numel();
  TSR_COMPARE(n, int64_t(124439808));
}

TEST_CASE("gpt2TreePaths") {
  Gpt2Config cfg{11, 8, 2, 2, 8};
  Tree p = Gpt2(cfg).init(random::key(0));
  auto paths = p.paths();
  TSR_COMPARE(paths.front(), std::string("wte.weight"));
  REQUIRE(p.findPath("h.1.attn.c_attn.weight"));
  TSR_COMPARE(p.findPath("h.1.attn.c_attn.weight")->leaf().shape(), (Shape{8, 24}));  // [in, out] as in HF
  TSR_COMPARE(p.findPath("h.0.mlp.c_fc.weight")->leaf().shape(), (Shape{8, 32}));
  REQUIRE(p.findPath("ln_f.bias"));
  TSR_COMPARE(countParams(p), Gpt2(cfg).numParams());
}

TEST_CASE("vitBase16HasThePublishedParameterCount") {
  Vit model(VitConfig::base16());
  TSR_COMPARE(model.numParams(), int64_t(86567656));
  auto g = makeGraph([&](const std::vector<Array>& k) { return model.init(k[0]).leaves(); },
                     {Aval{Shape{2}, DType::U32}});
  REQUIRE(g.ok());
  int64_t n = 0;
  for (ir::ValueId v : g->graph.outputs()) n += g->graph.aval(v).numel();
  TSR_COMPARE(n, int64_t(86567656));
}

TEST_CASE("mlpOfTheTutorial") {
  Mlp mlp(MlpConfig{});
  TSR_COMPARE(mlp.numParams(), int64_t(784 * 1024 + 1024 + 2 * (1024 * 1024 + 1024) + 1024 * 10 + 10));
  Tree p = mlp.init(random::key(1));
  Context ctx;
  Array y = mlp.apply(p, Array::ones({8, 784}), ctx);
  TSR_COMPARE(y.shape(), (Shape{8, 10}));
}

// The activation after each hidden layer, against the same layers written as loops over host floats; dropout
// only in training (a Context with a key), where it zeroes some hidden units and scales the rest.
TEST_CASE("mlpActivationsAndDropout") {
  auto hostForward = [](const Tree& p, const std::vector<double>& x, const std::string& act) {
    std::vector<double> h = x;
    const Tree& layers = *p.find("layers");
    for (size_t l = 0; l < layers.size(); ++l) {
      std::vector<double> w = layers.child(l).find("weight")->leaf().toDoubles();
      std::vector<double> b = layers.child(l).find("bias")->leaf().toDoubles();
      const size_t in = h.size(), out = b.size();
      std::vector<double> y(out);
      for (size_t j = 0; j < out; ++j) {
        double acc = b[j];
        for (size_t i = 0; i < in; ++i) acc += h[i] * w[i * out + j];
        if (l + 1 < layers.size()) {
          const double c = std::sqrt(2.0 / std::numbers::pi);
          acc = act == "relu"    ? std::max(acc, 0.0)
                : act == "gelu"  ? 0.5 * acc * (1 + std::tanh(c * (acc + 0.044715 * acc * acc * acc)))
                : act == "silu"  ? acc / (1 + std::exp(-acc))
                : act == "tanh"  ? std::tanh(acc)
                                 : 1 / (1 + std::exp(-acc));
        }
        y[j] = acc;
      }
      h = y;
    }
    return h;
  };
  const std::vector<double> x = {0.5, -1.0, 0.25, 2.0};
  for (const std::string& act : mlpActivations()) {
    CAPTURE(act);
    MlpConfig cfg;
    cfg.sizes = {4, 6, 5, 3};
    cfg.activation = act;
    Mlp mlp(cfg);
    Tree p = mlp.init(random::key(3));
    Context ctx;
    std::vector<double> got = mlp.apply(p, Array::fromVector(std::vector<float>(x.begin(), x.end()), Shape{1, 4}), ctx).toDoubles();
    std::vector<double> want = hostForward(p, x, act);
    for (size_t i = 0; i < want.size(); ++i) REQUIRE(std::fabs(got[i] - want[i]) < 1e-5 * (1 + std::fabs(want[i])));
  }
  MlpConfig cfg;
  cfg.sizes = {4, 64, 3};
  cfg.dropout = 0.5;
  Mlp mlp(cfg);
  Tree p = mlp.init(random::key(3));
  Array in = Array::fromVector(std::vector<float>(x.begin(), x.end()), Shape{1, 4});
  Context eval;
  Context train(true, random::key(9));
  std::vector<double> plain = hostForward(p, x, "relu"), evaluated = mlp.apply(p, in, eval).toDoubles(),
                      trained = mlp.apply(p, in, train).toDoubles();
  double evalDiff = 0, trainDiff = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    evalDiff = std::max(evalDiff, std::fabs(evaluated[i] - plain[i]));
    trainDiff = std::max(trainDiff, std::fabs(trained[i] - plain[i]));
  }
  REQUIRE(evalDiff < 1e-5);
  REQUIRE(trainDiff > 1e-3);
}

TEST_CASE("gpt2ForwardMatchesNaiveLoops") {
  Gpt2Config cfg{13, 8, 2, 2, 8};
  cfg.dtype = DType::F64;
  Gpt2 model(cfg);
  Tree p = model.init(random::key(42));
  std::vector<int> toks = {1, 5, 12, 0, 3, 7, 7, 2, 9, 11};  // B=2, T=5
  Context ctx;
  Array logits = model.apply(p, Array::fromVector(std::vector<int32_t>(toks.begin(), toks.end()), Shape{2, 5}), ctx);
  TSR_COMPARE(logits.shape(), (Shape{2, 5, 13}));
  auto got = logits.toDoubles();
  auto want = refGpt2(cfg, p, toks, 2);
  for (size_t i = 0; i < want.size(); ++i)
    REQUIRE_MESSAGE(std::fabs(got[i] - want[i]) < 1e-10 * (1 + std::fabs(want[i])),
                    "logit " << i << ": " << got[i] << " vs " << want[i]);
}

TEST_CASE("vitForwardShapes") {
  VitConfig cfg{32, 8, 3, 16, 2, 2, 32, 5};
  Vit model(cfg);
  TSR_COMPARE(model.numParams(), [&] {
    Tree p = model.init(random::key(0));
    return countParams(p);
  }());
  Tree p = model.init(random::key(0));
  Context ctx;
  Array y = model.apply(p, Array::ones({2, 3, 32, 32}), ctx);
  TSR_COMPARE(y.shape(), (Shape{2, 5}));
  REQUIRE(p.findPath("vit.encoder.layer.1.attention.attention.query.weight"));
  REQUIRE(p.findPath("classifier.weight"));
  auto bad = capture([&] { return model.apply(p, Array::ones({2, 3, 16, 16}), ctx); });
  REQUIRE(!bad.ok());
}
