// U-Net (engine/nn/unet.h): its parameter count worked out by hand, its parameter names, and the forward pass of
// tiny U-Nets (each norm and each upsampling; training and inference) against the same network written here as
// loops over host doubles.
#include "tests/check.h"

#include <cmath>
#include <map>
#include <numeric>

#include "engine/nn/unet.h"
#include "engine/random/random.h"
#include "engine/transform/trace.h"
#include "tests/transform/compare.h"

using namespace tsr;
using namespace tsr::nn;

namespace {

using Vec = std::vector<double>;

// An NHWC activation on the host.
struct Act {
  int64_t n = 0, h = 0, w = 0, c = 0;
  Vec v;
  static Act zeros(int64_t n, int64_t h, int64_t w, int64_t c) {
    return Act{n, h, w, c, Vec(static_cast<size_t>(n * h * w * c), 0.0)};
  }
  double& at(int64_t b, int64_t i, int64_t j, int64_t k) { return v[static_cast<size_t>(((b * h + i) * w + j) * c + k)]; }
  double at(int64_t b, int64_t i, int64_t j, int64_t k) const {
    return v[static_cast<size_t>(((b * h + i) * w + j) * c + k)];
  }
};

// The reference network: parameters read by name from the model's tree, the running statistics written to
// `stats` (path -> values) in training.
struct Reference {
  const Tree& params;
  const Tree& running;
  const UNetConfig& cfg;
  bool training;
  std::map<std::string, Vec> stats;

  Vec leaf(const std::string& path) const {
    const Tree* t = params.findPath(path);
    if (!t) TSR_FATAL("no parameter " << path);
    return t->leaf().toDoubles();
  }

  // A k x k convolution (HWIO weight at path.weight) padded by k / 2 at stride 1, plus path.bias when present.
  Act conv(const Act& x, const std::string& path) const {
    const Shape s = params.findPath(path + ".weight")->leaf().shape();
    const int64_t k = s[0], o = s[3], pad = k / 2;
    const Vec wt = leaf(path + ".weight");
    const bool bias = params.findPath(path + ".bias") != nullptr;
    const Vec b = bias ? leaf(path + ".bias") : Vec(static_cast<size_t>(o), 0.0);
    Act y = Act::zeros(x.n, x.h, x.w, o);
    for (int64_t n = 0; n < y.n; ++n)
      for (int64_t i = 0; i < y.h; ++i)
        for (int64_t j = 0; j < y.w; ++j)
          for (int64_t oc = 0; oc < o; ++oc) {
            double acc = b[static_cast<size_t>(oc)];
            for (int64_t u = 0; u < k; ++u)
              for (int64_t v = 0; v < k; ++v) {
                const int64_t r = i + u - pad, q = j + v - pad;
                if (r < 0 || r >= x.h || q < 0 || q >= x.w) continue;
                for (int64_t ic = 0; ic < x.c; ++ic)
                  acc += x.at(n, r, q, ic) * wt[static_cast<size_t>(((u * k + v) * x.c + ic) * o + oc)];
              }
            y.at(n, i, j, oc) = acc;
          }
    return y;
  }

  // Batch norm: the batch's mean and biased variance per channel in training (the running ones moved towards
  // them by momentum 0.99), the running ones in inference.
  Act batchNorm(const Act& x, const std::string& path) {
    const Vec g = leaf(path + ".weight"), beta = leaf(path + ".bias");
    const auto c = static_cast<size_t>(x.c);
    Vec m(c, 0.0), var(c, 0.0);
    const double count = static_cast<double>(x.n * x.h * x.w);
    const Vec rm = running.findPath(path + ".running_mean")->leaf().toDoubles();
    const Vec rv = running.findPath(path + ".running_var")->leaf().toDoubles();
    if (training) {
      for (size_t i = 0; i < x.v.size(); ++i) m[i % c] += x.v[i] / count;
      for (size_t i = 0; i < x.v.size(); ++i) var[i % c] += std::pow(x.v[i] - m[i % c], 2) / count;
      Vec nm(c), nv(c);
      for (size_t k = 0; k < c; ++k) nm[k] = 0.99 * rm[k] + 0.01 * m[k], nv[k] = 0.99 * rv[k] + 0.01 * var[k];
      stats[path + ".running_mean"] = nm;
      stats[path + ".running_var"] = nv;
    } else {
      m = rm;
      var = rv;
    }
    Act y = x;
    for (size_t i = 0; i < y.v.size(); ++i) y.v[i] = (x.v[i] - m[i % c]) / std::sqrt(var[i % c] + 1e-5) * g[i % c] + beta[i % c];
    return y;
  }

  // Group norm with gcd(32, channels) groups: per example, over the pixels and the group's channels.
  Act groupNorm(const Act& x, const std::string& path) const {
    const Vec g = leaf(path + ".weight"), beta = leaf(path + ".bias");
    const int64_t groups = std::gcd<int64_t>(32, x.c), per = x.c / groups;
    Act y = x;
    for (int64_t n = 0; n < x.n; ++n)
      for (int64_t grp = 0; grp < groups; ++grp) {
        double m = 0, var = 0;
        const double count = static_cast<double>(x.h * x.w * per);
        for (int64_t i = 0; i < x.h; ++i)
          for (int64_t j = 0; j < x.w; ++j)
            for (int64_t k = grp * per; k < (grp + 1) * per; ++k) m += x.at(n, i, j, k) / count;
        for (int64_t i = 0; i < x.h; ++i)
          for (int64_t j = 0; j < x.w; ++j)
            for (int64_t k = grp * per; k < (grp + 1) * per; ++k) var += std::pow(x.at(n, i, j, k) - m, 2) / count;
        for (int64_t i = 0; i < x.h; ++i)
          for (int64_t j = 0; j < x.w; ++j)
            for (int64_t k = grp * per; k < (grp + 1) * per; ++k)
              y.at(n, i, j, k) = (x.at(n, i, j, k) - m) / std::sqrt(var + 1e-5) * g[static_cast<size_t>(k)] + beta[static_cast<size_t>(k)];
      }
    return y;
  }

  static Act relu(Act x) {
    for (double& e : x.v) e = std::max(e, 0.0);
    return x;
  }

  // (3x3 convolution, norm, ReLU) twice.
  Act block(Act x, const std::string& name) {
    for (const char* k : {"0", "1"}) {
      x = conv(x, name + ".conv_" + k);
      if (cfg.norm == "batch") x = batchNorm(x, name + ".norm_" + k);
      if (cfg.norm == "group") x = groupNorm(x, name + ".norm_" + k);
      x = relu(x);
    }
    return x;
  }

  static Act maxPool(const Act& x) {
    Act y = Act::zeros(x.n, x.h / 2, x.w / 2, x.c);
    for (int64_t n = 0; n < y.n; ++n)
      for (int64_t i = 0; i < y.h; ++i)
        for (int64_t j = 0; j < y.w; ++j)
          for (int64_t k = 0; k < y.c; ++k)
            y.at(n, i, j, k) = std::max({x.at(n, 2 * i, 2 * j, k), x.at(n, 2 * i + 1, 2 * j, k), x.at(n, 2 * i, 2 * j + 1, k),
                                         x.at(n, 2 * i + 1, 2 * j + 1, k)});
    return y;
  }

  // lax.conv_transpose with a 2x2 kernel, stride 2 and SAME padding: the input dilated by 2 and padded by (1, 1)
  // on each side, then a 2x2 window, so output pixel (2i + a, 2j + b) is input pixel (i, j) times kernel tap
  // (1 - a, 1 - b) (the kernel is not flipped).
  Act upTranspose(const Act& x, const std::string& path) const {
    const Vec wt = leaf(path + ".weight"), bias = leaf(path + ".bias");  // [2, 2, in, out]
    const auto o = static_cast<int64_t>(bias.size());
    Act y = Act::zeros(x.n, 2 * x.h, 2 * x.w, o);
    for (int64_t n = 0; n < y.n; ++n)
      for (int64_t i = 0; i < y.h; ++i)
        for (int64_t j = 0; j < y.w; ++j)
          for (int64_t oc = 0; oc < o; ++oc) {
            const int64_t u = 1 - i % 2, v = 1 - j % 2;
            double acc = bias[static_cast<size_t>(oc)];
            for (int64_t ic = 0; ic < x.c; ++ic)
              acc += x.at(n, i / 2, j / 2, ic) * wt[static_cast<size_t>(((u * 2 + v) * x.c + ic) * o + oc)];
            y.at(n, i, j, oc) = acc;
          }
    return y;
  }

  // Doubling each side: nearest repeats each pixel; bilinear with half-pixel centres takes 3/4 of the nearer input
  // pixel and 1/4 of the next one on the output pixel's side (the edge pixel itself past the border).
  static Act upsample(const Act& x, bool bilinear) {
    Act y = Act::zeros(x.n, 2 * x.h, 2 * x.w, x.c);
    auto taps = [&](int64_t o, int64_t size) {
      const int64_t i = o / 2;
      if (!bilinear) return std::vector<std::pair<int64_t, double>>{{i, 1.0}};
      const int64_t other = std::clamp<int64_t>(o % 2 == 0 ? i - 1 : i + 1, 0, size - 1);
      return std::vector<std::pair<int64_t, double>>{{i, 0.75}, {other, 0.25}};
    };
    for (int64_t n = 0; n < y.n; ++n)
      for (int64_t i = 0; i < y.h; ++i)
        for (int64_t j = 0; j < y.w; ++j)
          for (int64_t k = 0; k < y.c; ++k) {
            double acc = 0;
            for (const auto& [r, wr] : taps(i, x.h))
              for (const auto& [q, wq] : taps(j, x.w)) acc += wr * wq * x.at(n, r, q, k);
            y.at(n, i, j, k) = acc;
          }
    return y;
  }

  static Act concat(const Act& a, const Act& b) {
    Act y = Act::zeros(a.n, a.h, a.w, a.c + b.c);
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t i = 0; i < a.h; ++i)
        for (int64_t j = 0; j < a.w; ++j) {
          for (int64_t k = 0; k < a.c; ++k) y.at(n, i, j, k) = a.at(n, i, j, k);
          for (int64_t k = 0; k < b.c; ++k) y.at(n, i, j, a.c + k) = b.at(n, i, j, k);
        }
    return y;
  }

  Vec forward(Act x) {
    std::vector<Act> skips;
    for (int64_t i = 0; i < cfg.depth; ++i) {
      x = block(x, "down_" + std::to_string(i));
      skips.push_back(x);
      x = maxPool(x);
    }
    x = block(x, "bottom");
    for (int64_t i = cfg.depth - 1; i >= 0; --i) {
      const std::string name = "up_" + std::to_string(i);
      Act up = cfg.upsample == "transpose" ? upTranspose(x, name + ".upsample")
                                           : conv(upsample(x, cfg.upsample == "bilinear"), name + ".upsample");
      x = block(concat(skips[static_cast<size_t>(i)], up), name);
    }
    return conv(x, "head").v;  // [B, H, W, classes]
  }
};

void expectNear(const Vec& got, const Vec& want, double tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i)
    REQUIRE_MESSAGE(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])),
                    what << "[" << i << "]: " << got[i] << " vs " << want[i]);
}

int64_t tracedCount(const UNet& model) {
  auto g = makeGraph([&](const std::vector<Array>& k) { return model.init(k[0]).leaves(); }, {Aval{Shape{2}, DType::U32}});
  REQUIRE(g.ok());
  int64_t n = 0;
  for (ir::ValueId v : g->graph.outputs()) n += g->graph.aval(v).numel();
  return n;
}

}  // namespace

// The unet_toy sample's U-Net (3 input channels, 4 classes, base width 16, depth 3, batch norm, transposed
// convolutions), counted by hand. A block (3x3 conv, norm, 3x3 conv, norm) from `in` to `out` channels holds
// 9*in*out + 9*out*out kernel weights and 2*out + 2*out norm weights and biases:
//   down_0  3 -> 16:   432 +   2,304 +  64 =   2,800
//   down_1 16 -> 32: 4,608 +   9,216 + 128 =  13,952
//   down_2 32 -> 64: 18,432 + 36,864 + 256 =  55,552
//   bottom 64 -> 128: 73,728 + 147,456 + 512 = 221,696
// each decoder level: a 2x2 transposed convolution (4*in*out + out bias) and a block from 2*out to out:
//   up_2 128 -> 64: 32,768 + 64 = 32,832;  block 128 -> 64: 73,728 + 36,864 + 256 = 110,848
//   up_1  64 -> 32:  8,192 + 32 =  8,224;  block  64 -> 32: 18,432 +  9,216 + 128 =  27,776
//   up_0  32 -> 16:  2,048 + 16 =  2,064;  block  32 -> 16:  4,608 +  2,304 +  64 =   6,976
//   head 1x1 16 -> 4: 64 + 4 = 68
// total 294,000 + 143,680 + 36,000 + 9,040 + 68 = 482,788.
TEST_CASE("unetParameterCountByHand") {
  UNetConfig cfg;
  cfg.inChannels = 3;
  cfg.numClasses = 4;
  cfg.baseWidth = 16;
  cfg.depth = 3;
  UNet model(cfg);
  TSR_COMPARE(model.numParams(), int64_t(482788));
  TSR_COMPARE(tracedCount(model), int64_t(482788));
  // Without a norm each 3x3 convolution has a bias instead (out, not 2*out, per convolution: 2*out fewer per
  // block, 2*(16+32+64+128) + 2*(64+32+16) = 704 fewer); upsampling by a 1x1 convolution holds in*out + out
  // instead of 4*in*out + out (3*(128*64 + 64*32 + 32*16) = 32,256 fewer).
  cfg.norm = "none";
  cfg.upsample = "bilinear";
  TSR_COMPARE(UNet(cfg).numParams(), int64_t(482788 - 704 - 32256));
  TSR_COMPARE(tracedCount(UNet(cfg)), int64_t(482788 - 704 - 32256));

  Tree p = model.init(random::key(0));
  TSR_COMPARE(p.findPath("down_0.conv_0.weight")->leaf().shape(), (Shape{3, 3, 3, 16}));
  REQUIRE(!p.findPath("down_0.conv_0.bias"));
  TSR_COMPARE(p.findPath("down_2.norm_1.bias")->leaf().shape(), (Shape{64}));
  TSR_COMPARE(p.findPath("bottom.conv_1.weight")->leaf().shape(), (Shape{3, 3, 128, 128}));
  TSR_COMPARE(p.findPath("up_2.upsample.weight")->leaf().shape(), (Shape{2, 2, 128, 64}));
  TSR_COMPARE(p.findPath("up_0.conv_0.weight")->leaf().shape(), (Shape{3, 3, 32, 16}));
  TSR_COMPARE(p.findPath("head.weight")->leaf().shape(), (Shape{1, 1, 16, 4}));
  // A mean and a variance per norm: two norms in each of 3 + 1 + 3 blocks.
  const Tree state = model.initState();
  TSR_COMPARE(state.leaves().size(), size_t(28));
  REQUIRE(state.findPath("up_1.norm_0.running_var"));
  TSR_COMPARE(UNet(cfg).initState().leaves().size(), size_t(0));
}

// Tiny U-Nets (2 input channels, 3 classes, base width 2, depth 2, 8x8 images, every parameter perturbed so that
// the norms' scales and shifts matter), for each norm and upsampling, against the loops above.
TEST_CASE("unetForwardAgainstLoops") {
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"batch", "transpose"}, {"group", "nearest"}, {"none", "bilinear"}, {"batch", "bilinear"}};
  for (const auto& variant : variants) {
    const std::string& norm = variant.first;  // clang 14 captures no structured binding (CAPTURE)
    const std::string& up = variant.second;
    CAPTURE(norm);
    CAPTURE(up);
    UNetConfig cfg;
    cfg.inChannels = 2;
    cfg.numClasses = 3;
    cfg.baseWidth = 2;
    cfg.depth = 2;
    cfg.norm = norm;
    cfg.upsample = up;
    cfg.imageSize = 8;
    cfg.dtype = DType::F64;
    UNet model(cfg);
    uint32_t salt = 0;
    Tree params = model.init(random::key(5)).map([&](const Array& a) {
      return a + random::normal(random::key(100 + salt++), a.shape(), DType::F64) * 0.1;
    });
    Tree state = model.initState().map([&](const Array& a) {
      return a + random::uniform(random::key(900 + salt++), a.shape(), DType::F32, 0.0, 0.5);
    });
    Array images = random::normal(random::key(7), Shape{2, 2, 8, 8}, DType::F64);
    Act act = Act::zeros(2, 8, 8, 2);
    const Vec px = images.toDoubles();  // NCHW
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 2; ++c)
        for (int64_t i = 0; i < 8; ++i)
          for (int64_t j = 0; j < 8; ++j) act.at(b, i, j, c) = px[static_cast<size_t>(((b * 2 + c) * 8 + i) * 8 + j)];

    Context train(true, random::key(1));
    train.setState(state);
    Array logits = model.apply(params, images, train);
    TSR_COMPARE(logits.shape(), (Shape{2, 8, 8, 3}));
    Reference ref{params, state, cfg, true, {}};
    expectNear(logits.toDoubles(), ref.forward(act), 1e-9, "training logits");
    if (norm == "batch") {
      const Tree& updated = train.updatedState();
      TSR_COMPARE(updated.def(), state.def());
      updated.visit([&](const std::string& path, const Array& a) { expectNear(a.toDoubles(), ref.stats.at(path), 1e-6, path); });
    }

    Context infer;
    infer.setState(state);
    Reference iref{params, state, cfg, false, {}};
    expectNear(model.apply(params, images, infer).toDoubles(), iref.forward(act), 1e-9, "inference logits");
    REQUIRE(infer.updatedState().leaves().empty());
  }
}

TEST_CASE("unetRefusesBadConfigsAndInputs") {
  UNetConfig badNorm;
  badNorm.norm = "layer";
  REQUIRE(test::errorOf([&] { UNet{badNorm}; }).find("batch, group or none") != std::string::npos);
  UNetConfig badUp;
  badUp.upsample = "pixelshuffle";
  REQUIRE(test::errorOf([&] { UNet{badUp}; }).find("transpose, bilinear or nearest") != std::string::npos);
  UNetConfig cfg;
  cfg.baseWidth = 2;
  cfg.depth = 2;
  UNet model(cfg);
  Tree p = model.init(random::key(0));
  Context ctx;
  ctx.setState(model.initState());
  // Channels last, and a side that two poolings cannot halve evenly.
  REQUIRE(test::errorOf([&] { model.apply(p, Array::ones({2, 8, 8, 3}), ctx); }).find("NCHW") != std::string::npos);
  REQUIRE(test::errorOf([&] { model.apply(p, Array::ones({2, 3, 10, 8}), ctx); }).find("divisible by 2^depth = 4") !=
          std::string::npos);
}
