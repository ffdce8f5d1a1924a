// Conformance cases for batch_norm_training and batch_norm_grad. The references gather each feature's elements by
// multi-index (unravel), take the textbook statistics over them in double and write the pullback from its
// definition: with n elements per feature, xh = (x - mean) / sqrt(var + eps) and g = dy * scale,
//   dx = (n g - sum(g) - xh sum(g xh)) / (n sqrt(var + eps)) + dmean / n + 2 dvar (x - mean) / n.
// The harness's finite differences check the training op's vjp, which is the grad op, on top.
#include <cmath>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

using ir::OpCode;

// The flat indices of each feature's elements.
std::vector<std::vector<int64_t>> byFeature(const Shape& s, int64_t feature) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(s[static_cast<int>(feature)]));
  for (int64_t i = 0; i < s.numel(); ++i) out[static_cast<size_t>(unravel(i, s)[static_cast<size_t>(feature)])].push_back(i);
  return out;
}

struct Stats {
  std::vector<double> mean, var;
};

Stats statistics(const HostTensor& x, int64_t feature) {
  Stats st;
  for (const auto& idx : byFeature(x.aval.shape, feature)) {
    double m = 0, v = 0;
    for (int64_t i : idx) m += x.get(i);
    m = idx.empty() ? 0 : m / static_cast<double>(idx.size());
    for (int64_t i : idx) v += (x.get(i) - m) * (x.get(i) - m);
    st.mean.push_back(m);
    st.var.push_back(idx.empty() ? 0 : v / static_cast<double>(idx.size()));
  }
  return st;
}

std::vector<HostTensor> trainingRef(const std::vector<HostTensor>& in, double eps, int64_t feature) {
  const HostTensor &x = in[0], &scale = in[1], &offset = in[2];
  const Stats st = statistics(x, feature);
  HostTensor y = HostTensor::zeros(x.aval), mean = HostTensor::zeros(scale.aval), var = HostTensor::zeros(scale.aval);
  const auto groups = byFeature(x.aval.shape, feature);
  for (size_t f = 0; f < groups.size(); ++f) {
    for (int64_t i : groups[f])
      y.set(i, (x.get(i) - st.mean[f]) / std::sqrt(st.var[f] + eps) * scale.get(static_cast<int64_t>(f)) +
                   offset.get(static_cast<int64_t>(f)));
    mean.set(static_cast<int64_t>(f), st.mean[f]);
    var.set(static_cast<int64_t>(f), st.var[f]);
  }
  return {y, mean, var};
}

std::vector<HostTensor> gradRef(const std::vector<HostTensor>& in, double eps, int64_t feature) {
  const HostTensor &x = in[0], &scale = in[1], &mean = in[2], &var = in[3], &dy = in[4], &dm = in[5], &dv = in[6];
  HostTensor dx = HostTensor::zeros(x.aval), ds = HostTensor::zeros(scale.aval), db = HostTensor::zeros(scale.aval);
  const auto groups = byFeature(x.aval.shape, feature);
  for (size_t f = 0; f < groups.size(); ++f) {
    const int64_t k = static_cast<int64_t>(f);
    const double n = static_cast<double>(groups[f].size()), sd = std::sqrt(var.get(k) + eps), w = scale.get(k);
    double sumG = 0, sumGxh = 0, sumDy = 0, sumDyXh = 0;
    for (int64_t i : groups[f]) {
      const double xh = (x.get(i) - mean.get(k)) / sd;
      sumG += dy.get(i) * w;
      sumGxh += dy.get(i) * w * xh;
      sumDy += dy.get(i);
      sumDyXh += dy.get(i) * xh;
    }
    for (int64_t i : groups[f]) {
      const double xh = (x.get(i) - mean.get(k)) / sd;
      dx.set(i, (n * dy.get(i) * w - sumG - xh * sumGxh) / (n * sd) + dm.get(k) / n +
                    2.0 * dv.get(k) * (x.get(i) - mean.get(k)) / n);
    }
    ds.set(k, sumDyXh);
    db.set(k, sumDy);
  }
  return {dx, ds, db};
}

void addBatchNorm(std::vector<OpCase>& cases, std::mt19937& rng, DType t, const Shape& shape, int64_t feature,
                  bool statisticsCotangents) {
  const double eps = 1e-3;
  const ir::BatchNormAttrs attrs{ir::Literal::scalar(DType::F64, eps), feature};
  const Aval channel{Shape{shape[static_cast<int>(feature)]}, t};
  std::vector<HostTensor> in = {randomTensor(Aval{shape, t}, rng), randomTensor(channel, rng, 0.5, 1.5),
                                randomTensor(channel, rng)};
  OpCase c;
  c.label = fmt::format("batch_norm_training {} {} feature {}", dtypeName(t), shape.toString(), feature);
  c.op = OpCode::BatchNormTraining;
  c.attrs = attrs;
  c.inputs = in;
  c.reference = [eps, feature](const std::vector<HostTensor>& x) { return trainingRef(x, eps, feature); };
  if (t == DType::F32) c.rtol = c.atol = 2e-5;
  cases.push_back(c);

  // The gradient at the forward pass's own statistics, with random cotangents (the statistics' zero or not).
  const std::vector<HostTensor> fwd = trainingRef(in, eps, feature);
  OpCase gc;
  gc.label = fmt::format("batch_norm_grad {} {} feature {}{}", dtypeName(t), shape.toString(), feature,
                         statisticsCotangents ? " dmean dvar" : "");
  gc.op = OpCode::BatchNormGrad;
  gc.attrs = attrs;
  gc.inputs = {in[0], in[1], fwd[1], fwd[2], randomTensor(in[0].aval, rng),
               statisticsCotangents ? randomTensor(channel, rng) : HostTensor::zeros(channel),
               statisticsCotangents ? randomTensor(channel, rng) : HostTensor::zeros(channel)};
  gc.reference = [eps, feature](const std::vector<HostTensor>& x) { return gradRef(x, eps, feature); };
  if (t == DType::F32) gc.rtol = gc.atol = 5e-5;
  cases.push_back(gc);
}

}  // namespace

void addBatchNormCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (DType t : {DType::F32, DType::F64}) {
    for (bool stats : {false, true}) {
      addBatchNorm(cases, rng, t, Shape{1, 1}, 1, stats);
      addBatchNorm(cases, rng, t, Shape{6, 3}, 1, stats);          // features last: oneDNN's kernels at f32
      addBatchNorm(cases, rng, t, Shape{2, 3, 3, 8}, 3, stats);    // NHWC
      addBatchNorm(cases, rng, t, Shape{3, 4, 2, 5}, 1, stats);    // NCHW: the loops
      addBatchNorm(cases, rng, t, Shape{5}, 0, stats);             // one example per feature
    }
  }
}

}  // namespace tsr::test
