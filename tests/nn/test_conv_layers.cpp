// Convolutional layers (engine/nn/conv_layers.h) against references written here as loops over host values:
// Conv (strided, SAME-padded, grouped, biased), ConvTranspose (the input dilated and padded by JAX's rule, then
// correlated), max and average pooling, global average pooling, Upsample (nearest repeats, linear by hand),
// RMSNorm and GroupNorm; BatchNorm's batch statistics, running statistics and inference; parameter counts; a
// convolution's and BatchNorm's gradients by central differences.
#include "tests/check.h"

#include <cmath>

#include "engine/nn/conv_layers.h"
#include "engine/random/random.h"
#include "engine/transform/autodiff.h"
#include "tests/transform/compare.h"

using namespace tsr;
using namespace tsr::nn;

namespace {

using Vec = std::vector<double>;

Array randomF64(uint64_t seed, const Shape& s) { return random::normal(random::key(seed), s, DType::F64); }

void expectNear(const Vec& got, const Vec& want, double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i)
    REQUIRE_MESSAGE(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])),
                    what << "[" << i << "]: " << got[i] << " vs " << want[i]);
}

// NHWC x [n, h, w, c], HWIO k [kh, kw, c / groups, o]: correlation at `stride` after padding (ph0, pw0) low and
// enough high for `oh` x `ow` outputs; positions outside x read 0.
Vec convRef(const Vec& x, int64_t n, int64_t h, int64_t w, int64_t c, const Vec& k, int64_t kh, int64_t kw, int64_t o,
            int64_t groups, int64_t stride, int64_t ph0, int64_t pw0, int64_t oh, int64_t ow) {
  const int64_t cg = c / groups, og = o / groups;
  Vec y(static_cast<size_t>(n * oh * ow * o), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j)
        for (int64_t oc = 0; oc < o; ++oc) {
          const int64_t g = oc / og;
          double acc = 0;
          for (int64_t u = 0; u < kh; ++u)
            for (int64_t v = 0; v < kw; ++v) {
              const int64_t r = i * stride + u - ph0, s = j * stride + v - pw0;
              if (r < 0 || r >= h || s < 0 || s >= w) continue;
              for (int64_t ic = 0; ic < cg; ++ic)
                acc += x[static_cast<size_t>(((b * h + r) * w + s) * c + g * cg + ic)] *
                       k[static_cast<size_t>(((u * kw + v) * cg + ic) * o + oc)];
            }
          y[static_cast<size_t>(((b * oh + i) * ow + j) * o + oc)] = acc;
        }
  return y;
}

}  // namespace

TEST_CASE("convAgainstALoop") {
  // 7x6 input, 3x3 kernel, stride 2, SAME: outputs ceil(7/2) x ceil(6/2) = 4 x 3, padding (1, 1) and (0, 1).
  Conv conv{4, 6, {3, 3}, {2, 2}, "SAME", {}, 2, true, DType::F64};
  Tree p = conv.init(random::key(1));
  TSR_COMPARE(p.find("weight")->leaf().shape(), (Shape{3, 3, 2, 6}));
  TSR_COMPARE(conv.numParams(), int64_t(3 * 3 * 2 * 6 + 6));
  p.set("bias", Tree(randomF64(5, Shape{6})));
  Array x = randomF64(2, Shape{2, 7, 6, 4});
  Array y = conv.apply(p, x);
  TSR_COMPARE(y.shape(), (Shape{2, 4, 3, 6}));
  Vec want = convRef(x.toDoubles(), 2, 7, 6, 4, p.find("weight")->leaf().toDoubles(), 3, 3, 6, 2, 2, 1, 0, 4, 3);
  Vec bias = p.find("bias")->leaf().toDoubles();
  for (size_t i = 0; i < want.size(); ++i) want[i] += bias[i % 6];
  expectNear(y.toDoubles(), want, 1e-12, "conv");
  // The weight gradient of a weighted sum, against central differences.
  Array wts = randomF64(7, y.shape());
  auto lossOf = [&](const Tree& q) { return sum(conv.apply(q, x) * wts); };
  Tree g = grad(lossOf)(p);
  Vec w = p.find("weight")->leaf().toDoubles(), gw = g.find("weight")->leaf().toDoubles();
  for (size_t e : {size_t(0), size_t(17), size_t(101)}) {
    auto at = [&](double delta) {
      Vec v = w;
      v[e] += delta;
      Tree q = p;
      q.set("weight", Tree(Array::fromVector(v, Shape{3, 3, 2, 6}, DType::F64)));
      return lossOf(q).item();
    };
    const double fd = (at(1e-6) - at(-1e-6)) / 2e-6;
    REQUIRE_MESSAGE(std::fabs(gw[e] - fd) < 1e-6 * (1 + std::fabs(fd)), e << ": " << gw[e] << " vs " << fd);
  }
  // A wrong input names the layer and the shapes.
  REQUIRE(test::errorOf([&] { conv.apply(p, randomF64(3, Shape{2, 7, 6, 3})); }).find("Conv") != std::string::npos);
}

TEST_CASE("convTransposeDilatesPadsAndCorrelates") {
  for (const char* mode : {"SAME", "VALID"}) {
    CAPTURE(mode);
    ConvTranspose ct{3, 4, {3, 2}, {2, 3}, mode, false, DType::F64};
    Tree p = ct.init(random::key(2));
    Array x = randomF64(3, Shape{1, 4, 3, 3});
    Array y = ct.apply(p, x);
    // The reference: x dilated by the strides, padded by JAX's rule, correlated at stride 1.
    const auto [ph0, ph1] = convTransposePadding(3, 2, mode);
    const auto [pw0, pw1] = convTransposePadding(2, 3, mode);
    const int64_t dh = (4 - 1) * 2 + 1, dw = (3 - 1) * 3 + 1;
    Vec xs = x.toDoubles(), dil(static_cast<size_t>(dh * dw * 3), 0.0);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t c = 0; c < 3; ++c) dil[static_cast<size_t>(((i * 2) * dw + j * 3) * 3 + c)] = xs[static_cast<size_t>((i * 3 + j) * 3 + c)];
    const int64_t oh = dh + ph0 + ph1 - 3 + 1, ow = dw + pw0 + pw1 - 2 + 1;
    TSR_COMPARE(y.shape(), (Shape{1, oh, ow, 4}));
    if (std::string(mode) == "SAME") TSR_COMPARE(y.shape(), (Shape{1, 8, 9, 4}));
    Vec want = convRef(dil, 1, dh, dw, 3, p.find("weight")->leaf().toDoubles(), 3, 2, 4, 1, 1, ph0, pw0, oh, ow);
    expectNear(y.toDoubles(), want, 1e-12, "conv_transpose");
  }
}

TEST_CASE("poolsAndUpsample") {
  // 1 x 4 x 4 x 1 of 0..15: 2x2 windows.
  std::vector<double> v(16);
  for (int i = 0; i < 16; ++i) v[static_cast<size_t>(i)] = i;
  Array x = Array::fromVector(v, Shape{1, 4, 4, 1}, DType::F64);
  MaxPool maxPool2;
  maxPool2.window = {2, 2};
  AvgPool avgPool2;
  avgPool2.window = {2, 2};
  expectNear(maxPool2.apply(x).toDoubles(), {5, 7, 13, 15}, 0, "max_pool");
  expectNear(avgPool2.apply(x).toDoubles(), {2.5, 4.5, 10.5, 12.5}, 1e-12, "avg_pool");
  expectNear(globalAvgPool(x).toDoubles(), {7.5}, 1e-12, "global_avg_pool");
  // Nearest: each value twice along each dim.
  Array small = Array::fromVector(std::vector<double>{1, 2, 3, 4}, Shape{1, 2, 2, 1}, DType::F64);
  expectNear(Upsample{{2}, "nearest"}.apply(small).toDoubles(), {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, 0,
             "nearest");
  // Linear along W only (factors 1 and 2): [a, b] -> [a, 0.75a + 0.25b, 0.25a + 0.75b, b].
  expectNear(Upsample{{1, 2}, "linear"}.apply(small).toDoubles(),
             {1, 1.25, 1.75, 2, 3, 3.25, 3.75, 4}, 1e-12, "linear");
  REQUIRE(test::errorOf([&] { Upsample{{2}, "cubic"}.apply(small); }).find("nearest or linear") != std::string::npos);
}

TEST_CASE("rmsNormAndGroupNorm") {
  Array x = randomF64(4, Shape{2, 3, 4});
  Vec xs = x.toDoubles();
  RMSNorm rms{4, 1e-6, DType::F64};
  Vec got = rms.apply(rms.init(), x).toDoubles();
  for (size_t r = 0; r < 6; ++r) {
    double ms = 0;
    for (size_t i = 0; i < 4; ++i) ms += xs[r * 4 + i] * xs[r * 4 + i] / 4;
    for (size_t i = 0; i < 4; ++i) REQUIRE(std::fabs(got[r * 4 + i] - xs[r * 4 + i] / std::sqrt(ms + 1e-6)) < 1e-12);
  }
  // GroupNorm over [N=2, L=3, C=4] in 2 groups: each example's group of 2 channels over the 3 positions.
  GroupNorm gn{2, 4, 1e-5, DType::F64};
  Tree p = gn.init();
  p.set("weight", Tree(Array::fromVector(std::vector<double>{1, 2, 3, 4}, Shape{4}, DType::F64)));
  Vec y = gn.apply(p, x).toDoubles();
  for (size_t n = 0; n < 2; ++n)
    for (size_t g = 0; g < 2; ++g) {
      double m = 0, var = 0;
      for (size_t l = 0; l < 3; ++l)
        for (size_t c = 2 * g; c < 2 * g + 2; ++c) m += xs[(n * 3 + l) * 4 + c] / 6;
      for (size_t l = 0; l < 3; ++l)
        for (size_t c = 2 * g; c < 2 * g + 2; ++c) var += std::pow(xs[(n * 3 + l) * 4 + c] - m, 2) / 6;
      for (size_t l = 0; l < 3; ++l)
        for (size_t c = 2 * g; c < 2 * g + 2; ++c) {
          const size_t i = (n * 3 + l) * 4 + c;
          REQUIRE(std::fabs(y[i] - (xs[i] - m) / std::sqrt(var + 1e-5) * static_cast<double>(c + 1)) < 1e-10);
        }
    }
}

// BatchNorm over [N=3, H=2, W=2, C=4]: each channel's 12 values, against a loop; the running statistics moved by
// Flax's rule; inference with the running statistics; the input's gradient (through the batch statistics) by
// central differences.
TEST_CASE("batchNormTrainsOnTheBatchAndInfersWithRunningStatistics") {
  const int64_t n = 12, c = 4;
  Array x = randomF64(11, Shape{3, 2, 2, c}) * 2.0 + 0.5;
  Vec xs = x.toDoubles();
  BatchNorm bn{c, 0.99, 1e-5, DType::F64};
  TSR_COMPARE(bn.numParams(), int64_t(8));
  Tree p = Tree::dict({{"weight", Tree(randomF64(12, Shape{c}))}, {"bias", Tree(randomF64(13, Shape{c}))}});
  const Vec rm0 = {0.1, -0.2, 0.3, 0.0}, rv0 = {1.0, 2.0, 0.5, 1.5};
  Tree stats = Tree::dict({{"running_mean", Tree(Array::fromVector(rm0, Shape{c}, DType::F64))},
                           {"running_var", Tree(Array::fromVector(rv0, Shape{c}, DType::F64))}});
  Vec w = p.find("weight")->leaf().toDoubles(), b = p.find("bias")->leaf().toDoubles();
  Vec m(c, 0.0), v(c, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k) m[static_cast<size_t>(k)] += xs[static_cast<size_t>(i * c + k)] / n;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k) v[static_cast<size_t>(k)] += std::pow(xs[static_cast<size_t>(i * c + k)] - m[static_cast<size_t>(k)], 2) / n;
  auto normed = [&](const Vec& mean, const Vec& var) {
    Vec y(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      const size_t k = i % c;
      y[i] = (xs[i] - mean[k]) / std::sqrt(var[k] + 1e-5) * w[k] + b[k];
    }
    return y;
  };
  BatchNorm::Output train = bn.apply(p, stats, x, true);
  expectNear(train.y.toDoubles(), normed(m, v), 1e-12, "training");
  Vec rm(c), rv(c);
  for (size_t k = 0; k < 4; ++k) rm[k] = 0.99 * rm0[k] + 0.01 * m[k], rv[k] = 0.99 * rv0[k] + 0.01 * v[k];
  expectNear(train.stats.find("running_mean")->leaf().toDoubles(), rm, 1e-12, "running_mean");
  expectNear(train.stats.find("running_var")->leaf().toDoubles(), rv, 1e-12, "running_var");
  BatchNorm::Output infer = bn.apply(p, stats, x, false);
  expectNear(infer.y.toDoubles(), normed(rm0, rv0), 1e-12, "inference");
  expectNear(infer.stats.find("running_mean")->leaf().toDoubles(), rm0, 0, "unchanged");
  // The input's gradient, through the batch's mean and variance.
  Array wts = randomF64(14, x.shape());
  auto lossOf = [&](const Array& in) { return sum(bn.apply(p, stats, in, true).y * wts); };
  Vec gx = grad([&](const Tree& t) { return lossOf(t.leaf()); })(Tree(x)).leaf().toDoubles();
  for (size_t e : {size_t(0), size_t(9), size_t(46)}) {
    auto at = [&](double delta) {
      Vec d = xs;
      d[e] += delta;
      return lossOf(Array::fromVector(d, x.shape(), DType::F64)).item();
    };
    const double fd = (at(1e-6) - at(-1e-6)) / 2e-6;
    REQUIRE_MESSAGE(std::fabs(gx[e] - fd) < 1e-6 * (1 + std::fabs(fd)), e << ": " << gx[e] << " vs " << fd);
  }
  // The running statistics follow the batch's values only: no gradient reaches the input through them.
  auto statsLoss = [&](const Tree& t) {
    Tree s = bn.apply(p, stats, t.leaf(), true).stats;
    return sum(s.find("running_mean")->leaf()) + sum(s.find("running_var")->leaf());
  };
  expectNear(grad(statsLoss)(Tree(x)).leaf().toDoubles(), Vec(xs.size(), 0.0), 0, "through the statistics");
  REQUIRE(test::errorOf([&] { bn.apply(p, Tree::dict(), x, false); }).find("running statistics") != std::string::npos);
}

// batchNormTraining's own backward pass (it keeps the normalised x and 1/sqrt(var + eps) only) against central
// differences of a loss of all three of its outputs, y and the batch's mean and variance, in x, the weight and
// the bias; then its second derivative in x (the gradient of (d loss / dx) . u) against central differences of
// the first.
TEST_CASE("batchNormsBackwardPassMatchesCentralDifferences") {
  const Shape shape{2, 3, 2, 3};
  const size_t nx = 36, c = 3;
  const Array wy = randomF64(21, shape), wm = randomF64(22, Shape{3}), wv = randomF64(23, Shape{3});
  // z packs x, the weight and the bias: [36 + 3 + 3].
  auto lossOf = [&](const Array& z) {
    Array x = reshape(sliceAxis(z, 0, 0, 36), shape.dims());
    std::vector<Array> out = batchNormTraining(x, sliceAxis(z, 0, 36, 39), sliceAxis(z, 0, 39, 42), 1e-5);
    return sum(sin(out[0]) * wy) + sum(out[1] * wm) + sum(out[2] * wv);
  };
  Vec z0 = (randomF64(24, Shape{42}) * 1.5 + 0.3).toDoubles();
  const Shape zs{42};
  ScalarFn g = gradOf(lossOf);
  const Vec got = g(Array::fromVector(z0, zs, DType::F64)).toDoubles();
  const Array u = randomF64(25, zs);
  ScalarFn gu = [&](const Array& z) { return sum(g(z) * u); };
  const Vec second = gradOf(gu)(Array::fromVector(z0, zs, DType::F64)).toDoubles();
  for (size_t i = 0; i < nx + 2 * c; ++i) {
    auto at = [&](const std::function<Array(const Array&)>& f, double delta) {
      Vec d = z0;
      d[i] += delta;
      return f(Array::fromVector(d, zs, DType::F64)).item();
    };
    const double fd = (at(lossOf, 1e-6) - at(lossOf, -1e-6)) / 2e-6;
    CAPTURE(i);
    REQUIRE_MESSAGE(std::fabs(got[i] - fd) < 1e-6 * (1 + std::fabs(fd)), got[i] << " vs " << fd);
    const double fd2 = (at(gu, 1e-5) - at(gu, -1e-5)) / 2e-5;
    REQUIRE_MESSAGE(std::fabs(second[i] - fd2) < 1e-5 * (1 + std::fabs(fd2)), second[i] << " vs " << fd2);
  }
}

// BatchNorm with fused = true traces batch_norm_training (oneDNN's primitives for f32 with the features last, the
// op's loops for f64) instead of the reductions and elementwise ops of batchNormTraining: the two give the same
// output, running statistics and gradients in x, the weight and the bias. (The op's own values and vjp are
// checked against loops and finite differences by the conformance suite.)
TEST_CASE("fusedBatchNormMatchesTheTracedForm") {
  for (DType t : {DType::F32, DType::F64}) {
    CAPTURE(dtypeName(t));
    const Shape shape{4, 5, 5, 8};
    const int64_t c = 8;
    const Array x = astype(randomF64(31, shape) * 2.0 + 0.5, t);
    const Tree p = Tree::dict({{"weight", Tree(astype(randomF64(32, Shape{c}) + 1.0, t))},
                               {"bias", Tree(astype(randomF64(33, Shape{c}), t))}});
    const Tree stats = BatchNorm{c, 0.9, 1e-5, t}.initStats();
    const Array wy = astype(randomF64(34, shape), t);
    const double tol = t == DType::F32 ? 2e-5 : 1e-11;
    std::vector<Vec> outs[2];
    for (bool fused : {false, true}) {
      const BatchNorm bn{c, 0.9, 1e-5, t, fused};
      BatchNorm::Output o = bn.apply(p, stats, x, true);
      auto loss = [&](const Tree& in) {
        const Tree& q = *in.find("p");
        return sum(sin(bn.apply(q, stats, in.find("x")->leaf(), true).y) * wy);
      };
      Tree g = grad(loss)(Tree::dict({{"p", p}, {"x", Tree(x)}}));
      outs[fused] = {o.y.toDoubles(), o.stats.find("running_mean")->leaf().toDoubles(),
                     o.stats.find("running_var")->leaf().toDoubles(), g.find("x")->leaf().toDoubles(),
                     g.find("p")->find("weight")->leaf().toDoubles(), g.find("p")->find("bias")->leaf().toDoubles()};
    }
    const char* names[] = {"y", "running_mean", "running_var", "dx", "dweight", "dbias"};
    for (size_t i = 0; i < 6; ++i) {
      // Sums over the 100 elements of a feature: scale the tolerance with them.
      const double scaleTol = i >= 3 ? tol * 100 : tol;
      expectNear(outs[1][i], outs[0][i], scaleTol, names[i]);
    }
  }
}
