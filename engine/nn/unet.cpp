#include "engine/nn/unet.h"

#include <algorithm>
#include <numeric>

#include "engine/nn/conv_layers.h"
#include "engine/random/random.h"

namespace tsr::nn {

namespace {

using Pads = std::vector<std::pair<int64_t, int64_t>>;

// A k x k convolution at stride 1 padded by k / 2: the output keeps the input's size.
Conv convLayer(int64_t in, int64_t out, int64_t k, bool bias, DType dtype) {
  const int64_t pad = k / 2;
  return Conv{in, out, {k, k}, {1, 1}, ConvPadding(Pads{{pad, pad}, {pad, pad}}), {}, 1, bias, dtype};
}

// 2x2 at stride 2: [B, H, W, in] -> [B, 2H, 2W, out].
ConvTranspose upConv(int64_t in, int64_t out, DType dtype) {
  return ConvTranspose{in, out, {2, 2}, {2, 2}, "SAME", true, dtype};
}

int64_t groupsFor(int64_t channels) { return std::gcd<int64_t>(32, channels); }

std::string levelName(const char* side, int64_t level) { return std::string(side) + "_" + std::to_string(level); }

}  // namespace

const std::vector<std::string>& unetNorms() {
  static const std::vector<std::string> norms = {"batch", "group", "none"};
  return norms;
}

const std::vector<std::string>& unetUpsamplings() {
  static const std::vector<std::string> ups = {"transpose", "bilinear", "nearest"};
  return ups;
}

UNet::UNet(UNetConfig config) : m_cfg(std::move(config)) {
  auto oneOf = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  if (!oneOf(unetNorms(), m_cfg.norm)) raise(makeError("UNet: norm must be batch, group or none, got '{}'", m_cfg.norm));
  if (!oneOf(unetUpsamplings(), m_cfg.upsample))
    raise(makeError("UNet: upsample must be transpose, bilinear or nearest, got '{}'", m_cfg.upsample));
  if (m_cfg.depth < 1 || m_cfg.depth > 16) raise(makeError("UNet: depth must be in [1, 16], got {}", m_cfg.depth));
  if (m_cfg.baseWidth < 1 || m_cfg.inChannels < 1 || m_cfg.numClasses < 2)
    raise(makeError("UNet: base_width and in_channels must be positive and num_classes at least 2, got {}, {}, {}",
                    m_cfg.baseWidth, m_cfg.inChannels, m_cfg.numClasses));
}

// One apply: the parameters, the statistics read and the statistics written, block by block.
class UNet::Pass {
 public:
  Pass(const UNet& net, Context& ctx) : m_net(net), m_ctx(ctx) {}

  // Two 3x3 convolutions, each followed by the norm and a ReLU: [B, H, W, in] -> [B, H, W, out]. `stats` is the
  // block's running statistics (null without batch norm); the updated ones go to `updated`.
  Array block(const Tree& p, const Tree* stats, Tree& updated, Array x, int64_t in, int64_t out) const {
    const UNetConfig& c = m_net.m_cfg;
    const bool norm = c.norm != "none";
    for (int k = 0; k < 2; ++k) {
      const std::string n = std::to_string(k);
      x = convLayer(k == 0 ? in : out, out, 3, !norm, c.dtype).apply(*p.find("conv_" + n), x);
      if (c.norm == "group") {
        x = GroupNorm{groupsFor(out), out, c.eps, c.dtype}.apply(*p.find("norm_" + n), x);
      } else if (c.norm == "batch") {
        const Tree* s = stats ? stats->find("norm_" + n) : nullptr;
        if (!s) raise(makeError("UNet: no running statistics for norm_{} (the model's state is {})", n,
                                m_ctx.state().def().toString()));
        const BatchNorm bn{out, c.bnMomentum, c.eps, c.dtype, m_ctx.fusedBatchNorm()};
        BatchNorm::Output o = bn.apply(*p.find("norm_" + n), *s, x, m_ctx.training());
        updated.set("norm_" + n, std::move(o.stats));
        x = o.y;
      }
      x = relu(x);
    }
    return x;
  }

  // [B, H, W, in] -> [B, 2H, 2W, out]
  Array up(const Tree& p, const Array& x, int64_t in, int64_t out) const {
    const UNetConfig& c = m_net.m_cfg;
    if (c.upsample == "transpose") return upConv(in, out, c.dtype).apply(p, x);
    Array y = Upsample{{2}, c.upsample == "bilinear" ? "linear" : "nearest"}.apply(x);
    return convLayer(in, out, 1, true, c.dtype).apply(p, y);
  }

 private:
  const UNet& m_net;
  Context& m_ctx;
};

Tree UNet::init(const Array& key) const {
  const DType dt = m_cfg.dtype;
  const bool norm = m_cfg.norm != "none";
  uint32_t counter = 0;
  auto next = [&] { return random::foldIn(key, counter++); };
  auto block = [&](int64_t in, int64_t out) {
    Tree b = Tree::dict();
    for (int k = 0; k < 2; ++k) {
      const std::string n = std::to_string(k);
      b.set("conv_" + n, convLayer(k == 0 ? in : out, out, 3, !norm, dt).init(next()));
      if (m_cfg.norm == "batch") b.set("norm_" + n, BatchNorm{out, m_cfg.bnMomentum, m_cfg.eps, dt}.init());
      else if (norm) b.set("norm_" + n, GroupNorm{groupsFor(out), out, m_cfg.eps, dt}.init());
    }
    return b;
  };
  Tree p = Tree::dict();
  int64_t in = m_cfg.inChannels;
  for (int64_t i = 0; i < m_cfg.depth; ++i) {
    p.set(levelName("down", i), block(in, width(i)));
    in = width(i);
  }
  p.set("bottom", block(in, width(m_cfg.depth)));
  for (int64_t i = m_cfg.depth - 1; i >= 0; --i) {
    Tree u = m_cfg.upsample == "transpose" ? upConv(width(i + 1), width(i), dt).init(next())
                                           : convLayer(width(i + 1), width(i), 1, true, dt).init(next());
    Tree b = block(2 * width(i), width(i));
    b.set("upsample", std::move(u));
    p.set(levelName("up", i), std::move(b));
  }
  p.set("head", convLayer(width(0), m_cfg.numClasses, 1, true, dt).init(next()));
  return p;
}

Tree UNet::initState() const {
  if (m_cfg.norm != "batch") return Tree::dict();
  auto stats = [&](int64_t c) {
    const BatchNorm bn{c, m_cfg.bnMomentum, m_cfg.eps, m_cfg.dtype};
    return Tree::dict({{"norm_0", bn.initStats()}, {"norm_1", bn.initStats()}});
  };
  Tree state = Tree::dict();
  for (int64_t i = 0; i < m_cfg.depth; ++i) state.set(levelName("down", i), stats(width(i)));
  state.set("bottom", stats(width(m_cfg.depth)));
  for (int64_t i = m_cfg.depth - 1; i >= 0; --i) state.set(levelName("up", i), stats(width(i)));
  return state;
}

Array UNet::apply(const Tree& params, const Array& pixels, Context& ctx) const {
  const int64_t multiple = int64_t(1) << m_cfg.depth;
  if (pixels.rank() != 4 || pixels.dim(1) != m_cfg.inChannels || pixels.dim(2) % multiple != 0 ||
      pixels.dim(3) % multiple != 0)
    raise(makeError("UNet: images [B, {}, H, W] (NCHW) with H and W divisible by 2^depth = {}, got {}",
                    m_cfg.inChannels, multiple, pixels.aval().toString()));
  Pass pass(*this, ctx);
  const bool batchNorm = m_cfg.norm == "batch";
  const Tree& stats = ctx.state();
  Tree updated = Tree::dict();
  // The block `name`: its parameters, statistics and updated statistics.
  auto block = [&](const std::string& name, const Array& x, int64_t in, int64_t out) {
    Tree blockUpdated = Tree::dict();
    Array y = pass.block(*params.find(name), batchNorm ? stats.find(name) : nullptr, blockUpdated, x, in, out);
    if (batchNorm) updated.set(name, std::move(blockUpdated));
    return y;
  };
  Array x = transpose(astype(pixels, m_cfg.dtype), {0, 2, 3, 1});  // [B, H, W, C]
  std::vector<Array> skips;
  int64_t in = m_cfg.inChannels;
  for (int64_t i = 0; i < m_cfg.depth; ++i) {
    const std::string name = levelName("down", i);
    ModuleScope scope(name);
    x = block(name, x, in, width(i));  // [B, H / 2^i, W / 2^i, width(i)]
    skips.push_back(x);
    x = MaxPool{{2, 2}, {}}.apply(x);  // strides: the window's
    in = width(i);
  }
  {
    ModuleScope scope("bottom");
    x = block("bottom", x, in, width(m_cfg.depth));
  }
  for (int64_t i = m_cfg.depth - 1; i >= 0; --i) {
    const std::string name = levelName("up", i);
    ModuleScope scope(name);
    Array up = pass.up(*params.find(name)->find("upsample"), x, width(i + 1), width(i));
    x = block(name, concatenate({skips[static_cast<size_t>(i)], up}, -1), 2 * width(i), width(i));
  }
  ModuleScope scope("head");
  Array logits = convLayer(width(0), m_cfg.numClasses, 1, true, m_cfg.dtype).apply(*params.find("head"), x);
  if (ctx.training() && batchNorm) ctx.setUpdatedState(std::move(updated));
  return logits;  // [B, H, W, numClasses]
}

int64_t UNet::numParams() const {
  const bool norm = m_cfg.norm != "none";
  // Two 3x3 convolutions, with a norm (weight and bias per channel) or a bias after each.
  auto block = [&](int64_t in, int64_t out) { return 9 * in * out + 9 * out * out + (norm ? 4 : 2) * out; };
  auto up = [&](int64_t in, int64_t out) { return (m_cfg.upsample == "transpose" ? 4 : 1) * in * out + out; };
  int64_t n = 0, in = m_cfg.inChannels;
  for (int64_t i = 0; i < m_cfg.depth; ++i) {
    n += block(in, width(i)) + up(width(i + 1), width(i)) + block(2 * width(i), width(i));
    in = width(i);
  }
  n += block(in, width(m_cfg.depth));
  return n + width(0) * m_cfg.numClasses + m_cfg.numClasses;
}

double UNet::forwardMacsPerSample() const {
  double macs = 0;
  int64_t in = m_cfg.inChannels;
  auto block = [&](int64_t side, int64_t cin, int64_t out) {
    return static_cast<double>(side * side) * static_cast<double>(9 * cin * out + 9 * out * out);
  };
  for (int64_t i = 0; i < m_cfg.depth; ++i) {
    const int64_t side = m_cfg.imageSize >> i;
    macs += block(side, in, width(i)) + block(side, 2 * width(i), width(i));
    // The upsampling into level i: a 2x2 transposed convolution does in*out multiply-adds per output pixel
    // (one kernel tap reaches each), a 1x1 convolution the same.
    macs += static_cast<double>(side * side) * static_cast<double>(width(i + 1) * width(i));
    in = width(i);
  }
  const int64_t bottom = m_cfg.imageSize >> m_cfg.depth;
  macs += block(bottom, in, width(m_cfg.depth));
  return macs + static_cast<double>(m_cfg.imageSize * m_cfg.imageSize * width(0) * m_cfg.numClasses);
}

}  // namespace tsr::nn
