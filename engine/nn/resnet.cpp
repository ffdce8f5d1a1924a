#include "engine/nn/resnet.h"

#include <cmath>
#include <numeric>

#include "engine/nn/conv_layers.h"
#include "engine/random/random.h"

namespace tsr::nn {

namespace {

// A k x k convolution without bias at stride s, padded by k / 2 on every side (torchvision's padding).
Conv convLayer(int64_t in, int64_t out, int64_t k, int64_t s, DType dtype) {
  const int64_t pad = k / 2;
  return Conv{in, out, {k, k}, {s, s}, ConvPadding(std::vector<std::pair<int64_t, int64_t>>{{pad, pad}, {pad, pad}}),
              {}, 1, false, dtype};
}

// Output size of a side of n pixels after a window k at stride s padded by k / 2.
int64_t outSize(int64_t n, int64_t k, int64_t s) { return (n + 2 * (k / 2) - k) / s + 1; }

int64_t groupsFor(int64_t channels) { return std::gcd<int64_t>(32, channels); }

Dense head(int64_t features, int64_t classes, DType dtype) {
  return Dense{features, classes, true, WeightLayout::OutIn, 1.0 / std::sqrt(static_cast<double>(features)), dtype};
}

}  // namespace

const std::vector<int64_t>& resnetDepths() {
  static const std::vector<int64_t> depths = {18, 34, 50};
  return depths;
}

ResNet::ResNet(ResNetConfig config) : m_cfg(std::move(config)) {
  std::vector<int64_t> counts;
  if (m_cfg.depth == 18) counts = {2, 2, 2, 2};
  else if (m_cfg.depth == 34 || m_cfg.depth == 50) counts = {3, 4, 6, 3};
  else raise(makeError("ResNet: depth must be 18, 34 or 50, got {}", m_cfg.depth));
  if (m_cfg.stem != "imagenet" && m_cfg.stem != "cifar")
    raise(makeError("ResNet: stem must be imagenet or cifar, got '{}'", m_cfg.stem));
  if (m_cfg.norm != "batch" && m_cfg.norm != "group")
    raise(makeError("ResNet: norm must be batch or group, got '{}'", m_cfg.norm));
  if (m_cfg.width < 1) raise(makeError("ResNet: width must be positive, got {}", m_cfg.width));
  const int64_t expansion = bottleneck() ? 4 : 1;
  int64_t in = m_cfg.width;
  for (size_t s = 0; s < counts.size(); ++s) {
    const int64_t planes = m_cfg.width << s;
    Stage stage;
    for (int64_t b = 0; b < counts[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      const int64_t out = planes * expansion;
      stage.blocks.push_back(Block{in, planes, out, stride, stride != 1 || in != out});
      in = out;
    }
    m_stages.push_back(std::move(stage));
  }
}

int64_t ResNet::features() const { return m_stages.back().blocks.back().out; }

// One apply: the parameters, the statistics read and the statistics written, tree by tree alongside the layers.
class ResNet::Pass {
 public:
  Pass(const ResNet& net, Context& ctx) : m_net(net), m_ctx(ctx) {}

  // The norm `name` of the layer group p (whose statistics are `stats`, and whose updated ones go to `updated`).
  Array norm(const Tree& p, const Tree& stats, Tree& updated, const std::string& name, const Array& x) const {
    const Tree& np = *p.find(name);
    const int64_t c = x.dim(-1);
    if (m_net.m_cfg.norm == "group") return GroupNorm{groupsFor(c), c, m_net.m_cfg.eps, m_net.m_cfg.dtype}.apply(np, x);
    const Tree* s = stats.find(name);
    if (!s) raise(makeError("ResNet: no running statistics for {} (the model's state is {})", name, stats.def().toString()));
    const BatchNorm bn{c, m_net.m_cfg.bnMomentum, m_net.m_cfg.eps, m_net.m_cfg.dtype, m_ctx.fusedBatchNorm()};
    BatchNorm::Output o = bn.apply(np, *s, x, m_ctx.training());
    updated.set(name, std::move(o.stats));
    return o.y;
  }

  // x: [B, H, W, in] -> [B, H / stride, W / stride, out]
  Array block(const Block& b, const Tree& p, const Tree& stats, Tree& updated, const Array& x) const {
    const DType dt = m_net.m_cfg.dtype;
    auto conv = [&](const char* name, int64_t in, int64_t out, int64_t k, int64_t s, const Array& v) {
      return convLayer(in, out, k, s, dt).apply(*p.find(name), v);
    };
    Array y;
    if (m_net.bottleneck()) {
      y = relu(norm(p, stats, updated, "bn1", conv("conv1", b.in, b.planes, 1, 1, x)));
      y = relu(norm(p, stats, updated, "bn2", conv("conv2", b.planes, b.planes, 3, b.stride, y)));
      y = norm(p, stats, updated, "bn3", conv("conv3", b.planes, b.out, 1, 1, y));
    } else {
      y = relu(norm(p, stats, updated, "bn1", conv("conv1", b.in, b.planes, 3, b.stride, x)));
      y = norm(p, stats, updated, "bn2", conv("conv2", b.planes, b.out, 3, 1, y));
    }
    Array shortcut = x;
    if (b.project) {
      // torchvision's downsample: Sequential(conv1x1, norm), so "downsample.0" and "downsample.1".
      const Tree& dp = *p.find("downsample");
      const Tree* ds = stats.find("downsample");
      Tree dsUpdated = Tree::dict();
      shortcut = convLayer(b.in, b.out, 1, b.stride, dt).apply(*dp.find("0"), x);
      shortcut = norm(dp, ds ? *ds : Tree(), dsUpdated, "1", shortcut);
      if (m_net.m_cfg.norm == "batch") updated.set("downsample", std::move(dsUpdated));
    }
    return relu(y + shortcut);
  }

 private:
  const ResNet& m_net;
  Context& m_ctx;
};

Tree ResNet::init(const Array& key) const {
  const DType dt = m_cfg.dtype;
  uint32_t counter = 0;
  auto next = [&] { return random::foldIn(key, counter++); };
  auto normParams = [&](int64_t c) { return BatchNorm{c, m_cfg.bnMomentum, m_cfg.eps, dt}.init(); };
  const int64_t stemKernel = m_cfg.stem == "imagenet" ? 7 : 3;
  Tree p = Tree::dict({{"conv1", convLayer(m_cfg.channels, m_cfg.width, stemKernel, 1, dt).init(next())},
                       {"bn1", normParams(m_cfg.width)}});
  for (size_t s = 0; s < m_stages.size(); ++s) {
    Tree stage = Tree::list();
    for (const Block& b : m_stages[s].blocks) {
      Tree bp = Tree::dict();
      if (bottleneck()) {
        bp.set("conv1", convLayer(b.in, b.planes, 1, 1, dt).init(next()));
        bp.set("bn1", normParams(b.planes));
        bp.set("conv2", convLayer(b.planes, b.planes, 3, 1, dt).init(next()));
        bp.set("bn2", normParams(b.planes));
        bp.set("conv3", convLayer(b.planes, b.out, 1, 1, dt).init(next()));
        bp.set("bn3", normParams(b.out));
      } else {
        bp.set("conv1", convLayer(b.in, b.planes, 3, 1, dt).init(next()));
        bp.set("bn1", normParams(b.planes));
        bp.set("conv2", convLayer(b.planes, b.out, 3, 1, dt).init(next()));
        bp.set("bn2", normParams(b.out));
      }
      if (b.project)
        bp.set("downsample", Tree::dict({{"0", convLayer(b.in, b.out, 1, 1, dt).init(next())}, {"1", normParams(b.out)}}));
      stage.push(std::move(bp));
    }
    p.set("layer" + std::to_string(s + 1), std::move(stage));
  }
  p.set("fc", head(features(), m_cfg.numClasses, dt).init(next()));
  return p;
}

Tree ResNet::initState() const {
  if (m_cfg.norm != "batch") return Tree::dict();
  auto stats = [&](int64_t c) { return BatchNorm{c, m_cfg.bnMomentum, m_cfg.eps, m_cfg.dtype}.initStats(); };
  Tree state = Tree::dict({{"bn1", stats(m_cfg.width)}});
  for (size_t s = 0; s < m_stages.size(); ++s) {
    Tree stage = Tree::list();
    for (const Block& b : m_stages[s].blocks) {
      Tree bs = Tree::dict({{"bn1", stats(b.planes)}, {"bn2", stats(bottleneck() ? b.planes : b.out)}});
      if (bottleneck()) bs.set("bn3", stats(b.out));
      if (b.project) bs.set("downsample", Tree::dict({{"1", stats(b.out)}}));
      stage.push(std::move(bs));
    }
    state.set("layer" + std::to_string(s + 1), std::move(stage));
  }
  return state;
}

Array ResNet::apply(const Tree& params, const Array& pixels, Context& ctx) const {
  if (pixels.rank() != 4 || pixels.dim(1) != m_cfg.channels)
    raise(makeError("ResNet: images [B, {}, H, W] (NCHW), got {}", m_cfg.channels, pixels.aval().toString()));
  Pass pass(*this, ctx);
  const Tree& stats = ctx.state();
  Tree updated = Tree::dict();
  Array x = transpose(astype(pixels, m_cfg.dtype), {0, 2, 3, 1});  // [B, H, W, C]
  const bool imagenet = m_cfg.stem == "imagenet";
  {
    ModuleScope scope("stem");
    x = convLayer(m_cfg.channels, m_cfg.width, imagenet ? 7 : 3, imagenet ? 2 : 1, m_cfg.dtype).apply(*params.find("conv1"), x);
    x = relu(pass.norm(params, stats, updated, "bn1", x));
    if (imagenet) x = MaxPool{{3, 3}, {2, 2}, ConvPadding(std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 1}})}.apply(x);
  }
  for (size_t s = 0; s < m_stages.size(); ++s) {
    const std::string name = "layer" + std::to_string(s + 1);
    const Tree& sp = *params.find(name);
    const Tree* ss = stats.find(name);
    Tree stageUpdated = Tree::list();
    for (size_t i = 0; i < m_stages[s].blocks.size(); ++i) {
      ModuleScope scope(name + "." + std::to_string(i));
      const Tree* bs = ss && ss->kind() == TreeKind::List && i < ss->size() ? &ss->child(i) : nullptr;
      Tree blockUpdated = Tree::dict();
      x = pass.block(m_stages[s].blocks[i], sp.child(i), bs ? *bs : Tree(), blockUpdated, x);
      stageUpdated.push(std::move(blockUpdated));
    }
    if (m_cfg.norm == "batch") updated.set(name, std::move(stageUpdated));
  }
  ModuleScope scope("head");
  Array logits = head(features(), m_cfg.numClasses, m_cfg.dtype).apply(*params.find("fc"), globalAvgPool(x));
  if (ctx.training() && m_cfg.norm == "batch") ctx.setUpdatedState(std::move(updated));
  return logits;
}

int64_t ResNet::numParams() const {
  auto conv = [](int64_t in, int64_t out, int64_t k) { return k * k * in * out; };
  const int64_t stemKernel = m_cfg.stem == "imagenet" ? 7 : 3;
  int64_t n = conv(m_cfg.channels, m_cfg.width, stemKernel) + 2 * m_cfg.width;
  for (const Stage& stage : m_stages)
    for (const Block& b : stage.blocks) {
      if (bottleneck())
        n += conv(b.in, b.planes, 1) + conv(b.planes, b.planes, 3) + conv(b.planes, b.out, 1) + 2 * (2 * b.planes + b.out);
      else
        n += conv(b.in, b.planes, 3) + conv(b.planes, b.out, 3) + 2 * (b.planes + b.out);
      if (b.project) n += conv(b.in, b.out, 1) + 2 * b.out;
    }
  return n + head(features(), m_cfg.numClasses, m_cfg.dtype).numParams();
}

double ResNet::forwardMacsPerSample() const {
  const bool imagenet = m_cfg.stem == "imagenet";
  int64_t side = outSize(m_cfg.imageSize, imagenet ? 7 : 3, imagenet ? 2 : 1);
  double macs = static_cast<double>(side * side) * static_cast<double>((imagenet ? 49 : 9) * m_cfg.channels * m_cfg.width);
  if (imagenet) side = outSize(side, 3, 2);
  for (const Stage& stage : m_stages)
    for (const Block& b : stage.blocks) {
      const int64_t out = outSize(side, 3, b.stride);
      const double pin = static_cast<double>(side * side), pout = static_cast<double>(out * out);
      if (bottleneck())
        macs += pin * static_cast<double>(b.in * b.planes) + pout * static_cast<double>(9 * b.planes * b.planes) +
                pout * static_cast<double>(b.planes * b.out);
      else
        macs += pout * static_cast<double>(9 * b.in * b.planes) + pout * static_cast<double>(9 * b.planes * b.out);
      if (b.project) macs += pout * static_cast<double>(b.in * b.out);
      side = out;
    }
  return macs + static_cast<double>(features() * m_cfg.numClasses);
}

}  // namespace tsr::nn
