#include "engine/nn/conv_layers.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/core/env_options.h"
#include "engine/random/random.h"
#include "engine/transform/autocast.h"
#include "engine/transform/custom_vjp.h"
#include "engine/transform/trace.h"

namespace tsr::nn {

namespace {

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}

// The dimension numbers of a channels-last convolution with n spatial dims: ("NHWC", "HWIO", "NHWC").
ConvDimensionNumbers channelsLast(size_t n) {
  const std::string spatial = std::string("DHW").substr(3 - n);
  return {"N" + spatial + "C", spatial + "IO", "N" + spatial + "C"};
}

// x must be [N, spatial..., channels] for a window of `spatial` dims.
void checkInput(const char* layer, const Array& x, size_t spatial, int64_t channels) {
  if (spatial < 1 || spatial > 3) raise(makeError("{}: 1 to 3 spatial dims, got {}", layer, spatial));
  if (x.rank() != static_cast<int64_t>(spatial) + 2 || (channels > 0 && x.dim(-1) != channels))
    raise(makeError("{}: a {}-d window over {} channels needs inputs [N, {} spatial dims, {}], got {}", layer, spatial,
                    channels, spatial, channels, x.aval().toString()));
}

Array heNormal(const Array& key, const std::vector<int64_t>& shape, int64_t fanIn, DType dtype) {
  return random::normal(key, Shape(shape), dtype) * std::sqrt(2.0 / static_cast<double>(std::max<int64_t>(fanIn, 1)));
}

// The [in, out] weights of linear interpolation with half-pixel centres (edges repeat), as jax.image.resize.
Array linearWeights(int64_t in, int64_t out, DType dtype) {
  std::vector<double> w(static_cast<size_t>(in * out), 0.0);
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  for (int64_t o = 0; o < out; ++o) {
    const double centre = (static_cast<double>(o) + 0.5) * scale - 0.5;
    double total = 0;
    for (int64_t i = 0; i < in; ++i) total += std::max(0.0, 1.0 - std::fabs(centre - static_cast<double>(i)));
    for (int64_t i = 0; i < in; ++i)
      w[static_cast<size_t>(i * out + o)] = std::max(0.0, 1.0 - std::fabs(centre - static_cast<double>(i))) / total;
  }
  return Array::fromVector(w, Shape{in, out}, dtype);
}

}  // namespace

Tree Conv::init(const Array& key) const {
  if (groups < 1 || in % groups || out % groups)
    raise(makeError("Conv: {} in and {} out features do not split into {} groups", in, out, groups));
  std::vector<int64_t> shape = kernel;
  shape.push_back(in / groups);
  shape.push_back(out);
  Tree t = Tree::dict({{"weight", Tree(heNormal(key, shape, product(kernel) * (in / groups), dtype))}});
  if (useBias) t.set("bias", Tree(Array::zeros({out}, dtype)));
  return t;
}

Array Conv::apply(const Tree& p, const Array& x) const {
  checkInput("Conv", x, kernel.size(), in);
  Array y = convGeneralDilated(x, p.find("weight")->leaf(), strides, padding, {}, dilation, channelsLast(kernel.size()),
                               groups);
  return useBias ? y + autocastOperand(p.find("bias")->leaf()) : y;  // bf16 under autocast, as the product
}

int64_t Conv::numParams() const { return product(kernel) * (in / std::max<int64_t>(groups, 1)) * out + (useBias ? out : 0); }

std::pair<int64_t, int64_t> convTransposePadding(int64_t k, int64_t s, const std::string& mode) {
  if (mode == "SAME") {
    const int64_t len = k + s - 2;
    const int64_t low = s > k - 1 ? k - 1 : (len + 1) / 2;
    return {low, len - low};
  }
  if (mode == "VALID") return {k - 1, k + s - 2 + std::max<int64_t>(k - s, 0) - (k - 1)};
  raise(makeError("ConvTranspose: padding must be SAME, VALID or (low, high) pairs, got '{}'", mode));
}

Tree ConvTranspose::init(const Array& key) const {
  std::vector<int64_t> shape = kernel;
  shape.push_back(in);
  shape.push_back(out);
  Tree t = Tree::dict({{"weight", Tree(heNormal(key, shape, product(kernel) * in, dtype))}});
  if (useBias) t.set("bias", Tree(Array::zeros({out}, dtype)));
  return t;
}

Array ConvTranspose::apply(const Tree& p, const Array& x) const {
  checkInput("ConvTranspose", x, kernel.size(), in);
  std::vector<int64_t> s = strides.empty() ? std::vector<int64_t>(kernel.size(), 1) : strides;
  ConvPadding pads = padding;
  if (!padding.mode.empty()) {
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (size_t d = 0; d < kernel.size(); ++d) pairs.push_back(convTransposePadding(kernel[d], s[d], padding.mode));
    pads = ConvPadding(std::move(pairs));
  }
  Array y = convGeneralDilated(x, p.find("weight")->leaf(), std::vector<int64_t>(kernel.size(), 1), pads, s, {},
                               channelsLast(kernel.size()));
  return useBias ? y + autocastOperand(p.find("bias")->leaf()) : y;  // bf16 under autocast, as the product
}

int64_t ConvTranspose::numParams() const { return product(kernel) * in * out + (useBias ? out : 0); }

Array MaxPool::apply(const Array& x) const {
  checkInput("MaxPool", x, window.size(), 0);
  return maxPool(x, window, strides.empty() ? window : strides, padding);
}

Array AvgPool::apply(const Array& x) const {
  checkInput("AvgPool", x, window.size(), 0);
  return avgPool(x, window, strides.empty() ? window : strides, padding, countIncludePad);
}

Array globalAvgPool(const Array& x) {
  if (x.rank() < 3) raise(makeError("globalAvgPool: inputs [N, spatial..., C], got {}", x.aval().toString()));
  Axes spatial;
  for (int64_t d = 1; d + 1 < x.rank(); ++d) spatial.push_back(d);
  return mean(x, spatial);
}

Array Upsample::apply(const Array& x) const {
  const int64_t n = x.rank() - 2;
  checkInput("Upsample", x, static_cast<size_t>(std::max<int64_t>(n, 0)), 0);
  if (factors.size() != 1 && static_cast<int64_t>(factors.size()) != n)
    raise(makeError("Upsample: {} factors for {} spatial dims", factors.size(), n));
  if (method != "nearest" && method != "linear")
    raise(makeError("Upsample: method must be nearest or linear, got '{}'", method));
  Array y = x;
  for (int64_t d = 1; d <= n; ++d) {
    const int64_t f = factors.size() == 1 ? factors[0] : factors[static_cast<size_t>(d - 1)];
    if (f < 1) raise(makeError("Upsample: factors must be positive, got {}", f));
    if (f == 1) continue;
    std::vector<int64_t> dims = y.shape().dims();
    if (method == "nearest") {
      // [.., D, ..] -> [.., D, 1, ..] -> [.., D, f, ..] -> [.., D * f, ..]
      std::vector<int64_t> split = dims;
      split.insert(split.begin() + d + 1, 1);
      std::vector<int64_t> wide = split;
      wide[static_cast<size_t>(d + 1)] = f;
      dims[static_cast<size_t>(d)] *= f;
      y = reshape(broadcastTo(reshape(y, split), Shape(wide)), dims);
    } else {
      // The dim moved last, times the [in, out] weights, moved back.
      Axes perm;
      for (int64_t a = 0; a < y.rank(); ++a)
        if (a != d) perm.push_back(a);
      perm.push_back(d);
      Axes back(static_cast<size_t>(y.rank()));
      for (size_t i = 0; i < perm.size(); ++i) back[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
      const int64_t in = dims[static_cast<size_t>(d)];
      y = transpose(matmul(transpose(y, perm), linearWeights(in, in * f, y.dtype())), back);
    }
  }
  return y;
}

Tree RMSNorm::init() const { return Tree::dict({{"weight", Tree(Array::ones({dim}, dtype))}}); }

// The norms compute in f32 under autocast (bf16 inputs widened), as torch.autocast runs them.
Array RMSNorm::apply(const Tree& p, const Array& x0) const {
  const Array x = autocastWiden(x0);
  return x * rsqrt(mean(square(x), {-1}, true) + eps) * p.find("weight")->leaf();
}

Tree GroupNorm::init() const {
  return Tree::dict({{"weight", Tree(Array::ones({dim}, dtype))}, {"bias", Tree(Array::zeros({dim}, dtype))}});
}

Array GroupNorm::apply(const Tree& p, const Array& x0) const {
  const Array x = autocastWiden(x0);
  if (x.rank() < 2 || x.dim(-1) != dim || groups < 1 || dim % groups)
    raise(makeError("GroupNorm: {} channels in {} groups, got inputs {}", dim, groups, x.aval().toString()));
  std::vector<int64_t> grouped = x.shape().dims();
  grouped.back() = groups;
  grouped.push_back(dim / groups);
  Array g = reshape(x, grouped);  // [N, spatial..., G, C/G]
  Axes axes;
  for (int64_t a = 1; a < g.rank(); ++a)
    if (a != g.rank() - 2) axes.push_back(a);
  Array centred = g - mean(g, axes, true);
  Array normed = reshape(centred * rsqrt(mean(square(centred), axes, true) + eps), x.shape().dims());
  return normed * p.find("weight")->leaf() + p.find("bias")->leaf();
}

Tree BatchNorm::init() const {
  return Tree::dict({{"weight", Tree(Array::ones({dim}, dtype))}, {"bias", Tree(Array::zeros({dim}, dtype))}});
}

Tree BatchNorm::initStats() const {
  return Tree::dict({{"running_mean", Tree(Array::zeros({dim}, DType::F32))},
                     {"running_var", Tree(Array::ones({dim}, DType::F32))}});
}

// Its backward pass keeps only the normalised x and 1/sqrt(var + eps), as cuDNN's and PyTorch's batch-norm
// backward do; differentiated as written, it would keep x - mean beside the normalised x (a third activation
// per norm, beside relu's output). With n = the elements per feature, xh = (x - mean) * r:
//   d weight = sum(dy * xh), d bias = sum(dy), and with g = dy * weight,
//   dx = r * (g - mean(g) - xh * mean(g * xh)) + d mean / n + d var * 2 xh / (r * n)
//      = r * g - (r * mean(g) - d mean / n) - xh * (r * mean(g * xh) - 2 d var / (n * r))
// (the statistics' own cotangents are zero where they only move the running statistics, under stopGradient).
std::vector<Array> batchNormTraining(const Array& x, const Array& weight, const Array& bias, double eps) {
  Axes axes;
  for (int64_t a = 0; a + 1 < x.rank(); ++a) axes.push_back(a);
  const double n = static_cast<double>(x.numel() / std::max<int64_t>(x.dim(-1), 1));
  // (x, weight, bias) -> (y, mean, var, xh, r): the outputs, then the residuals.
  auto forward = [axes, eps](const std::vector<Array>& in) {
    const Array& x = in[0];
    Array m = mean(x, axes);
    Array centred = x - m;
    Array v = mean(square(centred), axes);
    Array r = rsqrt(v + eps);
    Array xh = centred * r;
    return std::vector<Array>{xh * in[1] + in[2], m, v, xh, r};
  };
  auto primal = [forward](const std::vector<Array>& in) {
    std::vector<Array> out = forward(in);
    out.resize(3);
    return out;
  };
  // (x, weight, bias, xh, r, dy, d mean, d var) -> (dx, d weight, d bias)
  auto backward = [axes, n](const std::vector<Array>& in) {
    const Array &weight = in[1], &xh = in[3], &r = in[4], &dy = in[5], &dm = in[6], &dv = in[7];
    Array g = dy * weight;
    // The per-feature terms first, so that the full-sized ones are one pass over dy and xh.
    Array shift = r * mean(g, axes) - dm * (1.0 / n);
    Array scale = r * mean(g * xh, axes) - dv * (2.0 / n) / r;
    return std::vector<Array>{r * g - shift - xh * scale, sum(dy * xh, axes), sum(dy, axes)};
  };
  return customVjpCall(primal, forward, backward, {x, weight, bias}, 3);
}

std::vector<Array> batchNormTrainingOp(const Array& x, const Array& scale, const Array& offset, double eps,
                                       int64_t featureIndex) {
  return bind(ir::OpCode::BatchNormTraining, {x, scale, offset},
              ir::BatchNormAttrs{ir::Literal::scalar(DType::F64, eps), featureIndex}, std::source_location::current());
}

bool fusedBatchNorm() { return envOptions().fusedBatchNorm == "on"; }

BatchNorm::Output BatchNorm::apply(const Tree& p, const Tree& stats, const Array& x0, bool training) const {
  const Array x = autocastWiden(x0);
  if (x.rank() < 2 || x.dim(-1) != dim)
    raise(makeError("BatchNorm: {} features (the last axis) over a batch, got inputs {}", dim, x.aval().toString()));
  const Tree* runningMean = stats.isLeaf() ? nullptr : stats.find("running_mean");
  const Tree* runningVar = stats.isLeaf() ? nullptr : stats.find("running_var");
  if (!runningMean || !runningVar)
    raise(makeError("BatchNorm over {} features: no running statistics (running_mean, running_var) were given", dim));
  Output out;
  const Array& weight = p.find("weight")->leaf();
  const Array& bias = p.find("bias")->leaf();
  if (training) {
    // y, mean [dim], biased variance [dim]
    std::vector<Array> normed = fused ? batchNormTrainingOp(x, weight, bias, eps, x.rank() - 1)
                                      : batchNormTraining(x, weight, bias, eps);
    out.y = normed[0];
    // The running statistics follow the batch's values; they are state, so no gradient flows through them.
    auto follow = [&](const Tree* running, const Array& batch) {
      const Array r = running->leaf();
      return Tree(r * momentum + stopGradient(astype(batch, r.dtype())) * (1.0 - momentum));
    };
    out.stats = Tree::dict({{"running_mean", follow(runningMean, normed[1])}, {"running_var", follow(runningVar, normed[2])}});
  } else {
    const Array m = astype(runningMean->leaf(), x.dtype()), v = astype(runningVar->leaf(), x.dtype());
    out.y = (x - m) * rsqrt(v + eps) * weight + bias;
    out.stats = stats;
  }
  return out;
}

}  // namespace tsr::nn
