// ResNet (engine/nn/resnet.h): torchvision's parameter counts and names, FLOPs near torchvision's published
// figures, and the forward pass of small ResNet-18s and -50s (training and inference, with the running statistics
// it updates) against the same network written here as loops over host doubles.
#include "tests/check.h"

#include <cmath>
#include <map>

#include "engine/nn/resnet.h"
#include "engine/random/random.h"
#include "engine/transform/trace.h"
#include "tests/transform/compare.h"

using namespace tsr;
using namespace tsr::nn;

namespace {

using Vec = std::vector<double>;

int64_t countLeaves(const Tree& t) {
  int64_t n = 0;
  for (const auto& a : t.leaves()) n += a.numel();
  return n;
}

// An NHWC activation on the host.
struct Act {
  int64_t n = 0, h = 0, w = 0, c = 0;
  Vec v;
  double& at(int64_t b, int64_t i, int64_t j, int64_t k) { return v[static_cast<size_t>(((b * h + i) * w + j) * c + k)]; }
  double at(int64_t b, int64_t i, int64_t j, int64_t k) const {
    return v[static_cast<size_t>(((b * h + i) * w + j) * c + k)];
  }
};

// The reference network: parameters read by torchvision's names from the model's tree, and statistics written to
// `stats` (path -> values) in training.
struct Reference {
  const Tree& params;
  const Tree& running;  // the state read in inference
  bool training;
  std::map<std::string, Vec> stats;

  Vec leaf(const std::string& path) const {
    const Tree* t = params.findPath(path);
    if (!t) TSR_FATAL("no parameter " << path);
    return t->leaf().toDoubles();
  }

  // A k x k convolution (HWIO weight at `path`) at `stride`, padded by k / 2, no bias.
  Act conv(const Act& x, const std::string& path, int64_t stride) const {
    const Shape s = params.findPath(path)->leaf().shape();
    const int64_t k = s[0], o = s[3], pad = k / 2;
    const Vec wt = leaf(path);
    Act y{x.n, (x.h + 2 * pad - k) / stride + 1, (x.w + 2 * pad - k) / stride + 1, o, {}};
    y.v.assign(static_cast<size_t>(y.n * y.h * y.w * o), 0.0);
    for (int64_t b = 0; b < y.n; ++b)
      for (int64_t i = 0; i < y.h; ++i)
        for (int64_t j = 0; j < y.w; ++j)
          for (int64_t oc = 0; oc < o; ++oc) {
            double acc = 0;
            for (int64_t u = 0; u < k; ++u)
              for (int64_t v = 0; v < k; ++v) {
                const int64_t r = i * stride + u - pad, q = j * stride + v - pad;
                if (r < 0 || r >= x.h || q < 0 || q >= x.w) continue;
                for (int64_t ic = 0; ic < x.c; ++ic) acc += x.at(b, r, q, ic) * wt[static_cast<size_t>(((u * k + v) * x.c + ic) * o + oc)];
              }
            y.at(b, i, j, oc) = acc;
          }
    return y;
  }

  // Batch norm at `path`: the batch's mean and biased variance per channel in training (and the running ones
  // moved towards them by momentum 0.99), the running ones in inference.
  Act bn(const Act& x, const std::string& path) {
    const Vec g = leaf(path + ".weight"), beta = leaf(path + ".bias");
    Vec m(static_cast<size_t>(x.c), 0.0), var(static_cast<size_t>(x.c), 0.0);
    const double count = static_cast<double>(x.n * x.h * x.w);
    const Vec rm = running.findPath(path + ".running_mean")->leaf().toDoubles();
    const Vec rv = running.findPath(path + ".running_var")->leaf().toDoubles();
    if (training) {
      for (size_t i = 0; i < x.v.size(); ++i) m[i % static_cast<size_t>(x.c)] += x.v[i] / count;
      for (size_t i = 0; i < x.v.size(); ++i) var[i % static_cast<size_t>(x.c)] += std::pow(x.v[i] - m[i % static_cast<size_t>(x.c)], 2) / count;
      Vec nm(m.size()), nv(m.size());
      for (size_t k = 0; k < m.size(); ++k) nm[k] = 0.99 * rm[k] + 0.01 * m[k], nv[k] = 0.99 * rv[k] + 0.01 * var[k];
      stats[path + ".running_mean"] = nm;
      stats[path + ".running_var"] = nv;
    } else {
      m = rm;
      var = rv;
    }
    Act y = x;
    for (size_t i = 0; i < y.v.size(); ++i) {
      const size_t k = i % static_cast<size_t>(x.c);
      y.v[i] = (x.v[i] - m[k]) / std::sqrt(var[k] + 1e-5) * g[k] + beta[k];
    }
    return y;
  }

  static Act relu(Act x) {
    for (double& e : x.v) e = std::max(e, 0.0);
    return x;
  }

  static Act add(Act a, const Act& b) {
    for (size_t i = 0; i < a.v.size(); ++i) a.v[i] += b.v[i];
    return a;
  }

  // The cifar stem, four stages (stride 2 on the first block of stages 2 to 4: on conv1 of a basic block, conv2
  // of a bottleneck, and the shortcut's 1x1 convolution), global average pooling and the head.
  Vec forward(const Act& image, const std::vector<int64_t>& blocks, bool bottleneck) {
    Act x = relu(bn(conv(image, "conv1.weight", 1), "bn1"));
    for (size_t s = 0; s < 4; ++s)
      for (int64_t i = 0; i < blocks[s]; ++i) {
        const std::string b = "layer" + std::to_string(s + 1) + "." + std::to_string(i) + ".";
        const int64_t stride = (s > 0 && i == 0) ? 2 : 1;
        Act y;
        if (bottleneck) {
          y = relu(bn(conv(x, b + "conv1.weight", 1), b + "bn1"));
          y = relu(bn(conv(y, b + "conv2.weight", stride), b + "bn2"));
          y = bn(conv(y, b + "conv3.weight", 1), b + "bn3");
        } else {
          y = relu(bn(conv(x, b + "conv1.weight", stride), b + "bn1"));
          y = bn(conv(y, b + "conv2.weight", 1), b + "bn2");
        }
        const bool project = params.findPath(b + "downsample") != nullptr;
        x = relu(add(y, project ? bn(conv(x, b + "downsample.0.weight", stride), b + "downsample.1") : x));
      }
    const Vec fw = leaf("fc.weight"), fb = leaf("fc.bias");  // [classes, features]
    const auto classes = static_cast<int64_t>(fb.size());
    Vec logits(static_cast<size_t>(x.n * classes));
    for (int64_t b = 0; b < x.n; ++b)
      for (int64_t o = 0; o < classes; ++o) {
        double acc = fb[static_cast<size_t>(o)];
        for (int64_t k = 0; k < x.c; ++k) {
          double pooled = 0;
          for (int64_t i = 0; i < x.h; ++i)
            for (int64_t j = 0; j < x.w; ++j) pooled += x.at(b, i, j, k) / static_cast<double>(x.h * x.w);
          acc += pooled * fw[static_cast<size_t>(o * x.c + k)];
        }
        logits[static_cast<size_t>(b * classes + o)] = acc;
      }
    return logits;
  }
};

void expectNear(const Vec& got, const Vec& want, double tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i)
    REQUIRE_MESSAGE(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])),
                    what << "[" << i << "]: " << got[i] << " vs " << want[i]);
}

}  // namespace

// torchvision.models.resnet18/34/50(num_classes=1000): sum(p.numel() for p in model.parameters()), BatchNorm's
// weight and bias included, its running statistics not.
TEST_CASE("resnetHasTorchvisionsParameterCounts") {
  const std::vector<std::pair<int64_t, int64_t>> published = {{18, 11689512}, {34, 21797672}, {50, 25557032}};
  for (const auto& entry : published) {
    const int64_t depth = entry.first, count = entry.second;  // clang 14 captures no structured binding (CAPTURE)
    CAPTURE(depth);
    ResNetConfig cfg;
    cfg.depth = depth;
    ResNet model(cfg);
    TSR_COMPARE(model.numParams(), count);
    // The tree's own count, from an abstract trace of init (nothing materialised).
    auto g = makeGraph([&](const std::vector<Array>& k) { return model.init(k[0]).leaves(); }, {Aval{Shape{2}, DType::U32}});
    REQUIRE(g.ok());
    int64_t n = 0;
    for (ir::ValueId v : g->graph.outputs()) n += g->graph.aval(v).numel();
    TSR_COMPARE(n, count);
    // A running mean and variance per batch norm: 20 norms in ResNet-18 (the stem's, two per block, three
    // projections), 36 in ResNet-34, 53 in ResNet-50 (three per block, four projections).
    const Tree state = model.initState();
    TSR_COMPARE(static_cast<int64_t>(state.leaves().size()), depth == 18 ? 40 : depth == 34 ? 72 : 106);
  }
  // torchvision's names, kernels in HWIO, the head [classes, features]; ResNet-18's norms hold 4,800 channels.
  ResNet r18(ResNetConfig{});
  auto g = makeGraph([&](const std::vector<Array>& k) { return r18.init(k[0]).leaves(); }, {Aval{Shape{2}, DType::U32}});
  REQUIRE(g.ok());
  const Tree state = r18.initState();
  TSR_COMPARE(countLeaves(state), int64_t(2 * 4800));
  REQUIRE(state.findPath("layer2.0.downsample.1.running_var"));
  REQUIRE(!state.findPath("layer2.1.downsample"));
  Tree small = ResNet(ResNetConfig{18, 10, 4, "imagenet"}).init(random::key(0));
  TSR_COMPARE(small.findPath("conv1.weight")->leaf().shape(), (Shape{7, 7, 3, 4}));
  TSR_COMPARE(small.findPath("layer2.0.downsample.0.weight")->leaf().shape(), (Shape{1, 1, 4, 8}));
  TSR_COMPARE(small.findPath("layer4.1.bn2.bias")->leaf().shape(), (Shape{32}));
  TSR_COMPARE(small.findPath("fc.weight")->leaf().shape(), (Shape{10, 32}));
  // Group norm has the same parameters and no state.
  ResNetConfig group;
  group.norm = "group";
  TSR_COMPARE(ResNet(group).numParams(), int64_t(11689512));
  TSR_COMPARE(ResNet(group).initState().leaves().size(), size_t(0));
}

// torchvision's table of GFLOPS (multiply-adds at 224 x 224): ResNet-18 1.81, ResNet-50 4.09.
TEST_CASE("resnetMultiplyAddsNearTorchvisionsFigures") {
  for (const auto& entry : std::vector<std::pair<int64_t, double>>{{18, 1.81}, {50, 4.09}}) {
    const int64_t depth = entry.first;  // clang 14 captures no structured binding (CAPTURE)
    const double gmacs = entry.second;
    CAPTURE(depth);
    ResNetConfig cfg;
    cfg.depth = depth;
    const double got = ResNet(cfg).forwardMacsPerSample() / 1e9;
    REQUIRE_MESSAGE(std::fabs(got - gmacs) < 0.01 * gmacs, got << " GMACs vs " << gmacs);
  }
}

// Small ResNet-18s and -50s with the cifar stem (width 2, 8 x 8 images, every parameter perturbed so that the
// norms' scales and shifts matter): logits and updated statistics in training, logits in inference from the
// statistics given.
TEST_CASE("resnetForwardAgainstLoops") {
  for (int64_t depth : {int64_t(18), int64_t(50)}) {
    CAPTURE(depth);
    ResNetConfig cfg{depth, 3, 2, "cifar"};
    cfg.dtype = DType::F64;
    ResNet model(cfg);
    uint32_t salt = 0;
    Tree params = model.init(random::key(5)).map([&](const Array& a) {
      return a + random::normal(random::key(100 + salt++), a.shape(), DType::F64) * 0.1;
    });
    Tree state = model.initState().map([&](const Array& a) {
      return a + random::uniform(random::key(900 + salt++), a.shape(), DType::F32, 0.0, 0.5);
    });
    Array images = random::normal(random::key(7), Shape{2, 3, 8, 8}, DType::F64);
    Act act{2, 8, 8, 3, {}};
    const Vec px = images.toDoubles();  // NCHW
    act.v.resize(px.size());
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t i = 0; i < 8; ++i)
          for (int64_t j = 0; j < 8; ++j) act.at(b, i, j, c) = px[static_cast<size_t>(((b * 3 + c) * 8 + i) * 8 + j)];
    const std::vector<int64_t> blocks = depth == 18 ? std::vector<int64_t>{2, 2, 2, 2} : std::vector<int64_t>{3, 4, 6, 3};

    Context train(true, random::key(1));
    train.setState(state);
    Array logits = model.apply(params, images, train);
    Reference ref{params, state, true, {}};
    expectNear(logits.toDoubles(), ref.forward(act, blocks, depth == 50), 1e-9, "training logits");
    const Tree& updated = train.updatedState();
    TSR_COMPARE(updated.def(), state.def());
    updated.visit([&](const std::string& path, const Array& a) { expectNear(a.toDoubles(), ref.stats.at(path), 1e-6, path); });

    Context infer;
    infer.setState(state);
    Reference iref{params, state, false, {}};
    expectNear(model.apply(params, images, infer).toDoubles(), iref.forward(act, blocks, depth == 50), 1e-9,
               "inference logits");
    REQUIRE(infer.updatedState().leaves().empty());
  }
}

TEST_CASE("resnetRefusesBadConfigsAndInputs") {
  REQUIRE(test::errorOf([] { ResNet(ResNetConfig{20}); }).find("18, 34 or 50") != std::string::npos);
  ResNetConfig badStem;
  badStem.stem = "tiny";
  REQUIRE(test::errorOf([&] { ResNet{badStem}; }).find("imagenet or cifar") != std::string::npos);
  ResNet model(ResNetConfig{18, 10, 2, "cifar"});
  Tree p = model.init(random::key(0));
  Context ctx;
  ctx.setState(model.initState());
  REQUIRE(test::errorOf([&] { model.apply(p, Array::ones({2, 8, 8, 3}), ctx); }).find("NCHW") != std::string::npos);
}
