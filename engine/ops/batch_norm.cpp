// Batch norm in training as two ops, XLA's BatchNormTraining and BatchNormGrad, for the backends with a kernel made
// for it (the CPU's: oneDNN's batch_normalization primitives, one pass for the statistics and one for the output,
// cache-blocked per feature):
//   batch_norm_training (x, scale, offset){epsilon, feature_index} -> (y, mean, var)
//     mean and var (biased) per feature over every other dim; y = (x - mean) / sqrt(var + epsilon) * scale + offset;
//   batch_norm_grad (x, scale, mean, var, dy, dmean, dvar){epsilon, feature_index} -> (dx, dscale, doffset)
//     the pullback of all three results: with r = 1 / sqrt(var + epsilon), xh = (x - mean) r, g = dy scale and n the
//     elements per feature, dscale = sum(dy xh), doffset = sum(dy),
//     dx = r (g - mean(g) - xh mean(g xh)) + dmean / n + dvar 2 (x - mean) / n.
// Models trace batch norm in training as these ops with TESSERA_FUSED_BATCH_NORM=on (nn::fusedBatchNorm); by
// default as reductions and elementwise ops, which the fusion pass fuses with the relu and residual add around them
// (as fast on ResNet-18 as these ops, whose neighbours run as passes of their own) and the partitioner splits.
// Batching folds the vmapped dim into the features; sharding splits the features only (the statistics need
// every example). The gradient op's vjp differentiates the composite it stands for (second derivatives work).
#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "engine/ops/batch_norm_onednn.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"

namespace tsr::ops {

namespace {

using ir::OpCode;
using ir::ShardingRule;

constexpr const char* kFwd = "batch_norm_training";
constexpr const char* kGrad = "batch_norm_grad";

double epsilonOf(const ir::Attrs& attrs) { return attrsAs<ir::BatchNormAttrs>(attrs).epsilon.elementAsDouble(0); }
int64_t featureOf(const ir::Attrs& attrs) { return attrsAs<ir::BatchNormAttrs>(attrs).featureIndex; }

// x as [outer, C, inner] around its feature dim.
struct Geometry {
  int64_t outer = 1, c = 1, inner = 1;
  int64_t perFeature() const { return outer * inner; }
  int64_t at(int64_t o, int64_t f, int64_t i) const { return (o * c + f) * inner + i; }
};

Geometry geometryOf(const Shape& s, int64_t feature) {
  Geometry g;
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (d < feature) g.outer *= s[static_cast<int>(d)];
    if (d > feature) g.inner *= s[static_cast<int>(d)];
  }
  g.c = s[static_cast<int>(feature)];
  return g;
}

// x must be a real float array with the feature dim; the per-feature operands [C] of its dtype. Returns [C].
Result<Aval> checkOperands(std::string_view op, std::span<const Aval> ops, const ir::Attrs& attrs,
                           std::span<const size_t> likeX, std::span<const size_t> perFeature) {
  const Aval& x = ops[0];
  if (x.dtype != DType::F32 && x.dtype != DType::F64) return opError(op, ops, "x must be f32 or f64");
  const double eps = epsilonOf(attrs);
  if (!(eps >= 0) || !std::isfinite(eps)) return opError(op, ops, fmt::format("epsilon must be finite and >= 0, got {}", eps));
  const int64_t f = featureOf(attrs);
  if (f < 0 || f >= x.rank())
    return opError(op, ops, fmt::format("feature_index {} is not a dim of x (rank {})", f, x.rank()));
  const Aval channel{Shape{x.shape[static_cast<int>(f)]}, x.dtype};
  for (size_t i : likeX)
    if (!(ops[i] == x)) return opError(op, ops, fmt::format("operand {} must be like x ({})", i, x.toString()));
  for (size_t i : perFeature)
    if (!(ops[i] == channel))
      return opError(op, ops, fmt::format("operand {} must be {}, one per feature", i, channel.toString()));
  return channel;
}

Result<std::vector<Aval>> inferTraining(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity(kFwd, ops, 3));
  const size_t perFeature[] = {1, 2};
  TSR_ASSIGN(Aval channel, checkOperands(kFwd, ops, attrs, {}, perFeature));
  return std::vector<Aval>{ops[0], channel, channel};
}

Result<std::vector<Aval>> inferGrad(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity(kGrad, ops, 7));
  const size_t likeX[] = {4};
  const size_t perFeature[] = {1, 2, 3, 5, 6};
  TSR_ASSIGN(Aval channel, checkOperands(kGrad, ops, attrs, likeX, perFeature));
  return std::vector<Aval>{ops[0], channel, channel};
}

ir::Cost trainingCost(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  ir::Cost c = movementCost(in, out);
  c.flops = 7.0 * static_cast<double>(in[0].numel());  // sum, centred square, normalise, scale, shift
  return c;
}

ir::Cost gradCost(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  ir::Cost c = movementCost(in, out);
  c.flops = 11.0 * static_cast<double>(in[0].numel());  // the two sums, then dx
  return c;
}

// ---- CPU kernels ---------------------------------------------------------------------------------------------------

// Statistics and sums in double, two passes over x for the variance (as numpy's var).
template <class T>
void trainingLoop(const ir::CpuKernelArgs& a, const Geometry& g, double eps) {
  const T *x = a.inputs[0].as<T>(), *scale = a.inputs[1].as<T>(), *offset = a.inputs[2].as<T>();
  T *y = a.outputs[0].as<T>(), *mean = a.outputs[1].as<T>(), *var = a.outputs[2].as<T>();
  const double n = static_cast<double>(g.perFeature());
  std::vector<double> m(static_cast<size_t>(g.c), 0.0), v(static_cast<size_t>(g.c), 0.0);
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t f = 0; f < g.c; ++f)
      for (int64_t i = 0; i < g.inner; ++i) m[static_cast<size_t>(f)] += static_cast<double>(x[g.at(o, f, i)]);
  for (double& s : m) s = n > 0 ? s / n : 0.0;
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t f = 0; f < g.c; ++f)
      for (int64_t i = 0; i < g.inner; ++i) {
        const double d = static_cast<double>(x[g.at(o, f, i)]) - m[static_cast<size_t>(f)];
        v[static_cast<size_t>(f)] += d * d;
      }
  for (double& s : v) s = n > 0 ? s / n : 0.0;
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t f = 0; f < g.c; ++f) {
      const size_t k = static_cast<size_t>(f);
      const double r = 1.0 / std::sqrt(v[k] + eps), s = static_cast<double>(scale[k]) * r;
      for (int64_t i = 0; i < g.inner; ++i)
        y[g.at(o, f, i)] = static_cast<T>((static_cast<double>(x[g.at(o, f, i)]) - m[k]) * s + static_cast<double>(offset[k]));
    }
  for (int64_t f = 0; f < g.c; ++f) {
    mean[f] = static_cast<T>(m[static_cast<size_t>(f)]);
    var[f] = static_cast<T>(v[static_cast<size_t>(f)]);
  }
}

// dx's terms from the statistics' cotangents, dmean / n + dvar 2 (x - mean) / n, added to dx; nothing where both
// are zero (their usual value: the statistics only move the running averages, under stop_gradient).
template <class T>
void addStatisticsTerms(const ir::CpuKernelArgs& a, const Geometry& g) {
  const T *x = a.inputs[0].as<T>(), *mean = a.inputs[2].as<T>(), *dm = a.inputs[5].as<T>(), *dv = a.inputs[6].as<T>();
  T* dx = a.outputs[0].as<T>();
  bool any = false;
  for (int64_t f = 0; f < g.c; ++f) any |= dm[f] != T(0) || dv[f] != T(0);
  if (!any || g.perFeature() == 0) return;
  const double n = static_cast<double>(g.perFeature());
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t f = 0; f < g.c; ++f) {
      const double m = static_cast<double>(mean[f]), a0 = static_cast<double>(dm[f]) / n,
                   a1 = 2.0 * static_cast<double>(dv[f]) / n;
      for (int64_t i = 0; i < g.inner; ++i) {
        const int64_t j = g.at(o, f, i);
        dx[j] = static_cast<T>(static_cast<double>(dx[j]) + a0 + a1 * (static_cast<double>(x[j]) - m));
      }
    }
}

template <class T>
void gradLoop(const ir::CpuKernelArgs& a, const Geometry& g, double eps) {
  const T *x = a.inputs[0].as<T>(), *scale = a.inputs[1].as<T>(), *mean = a.inputs[2].as<T>(),
          *var = a.inputs[3].as<T>(), *dy = a.inputs[4].as<T>();
  T *dx = a.outputs[0].as<T>(), *dscale = a.outputs[1].as<T>(), *doffset = a.outputs[2].as<T>();
  const double n = static_cast<double>(g.perFeature());
  std::vector<double> sdy(static_cast<size_t>(g.c), 0.0), sdyxh(static_cast<size_t>(g.c), 0.0),
      r(static_cast<size_t>(g.c));
  for (int64_t f = 0; f < g.c; ++f) r[static_cast<size_t>(f)] = 1.0 / std::sqrt(static_cast<double>(var[f]) + eps);
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t f = 0; f < g.c; ++f) {
      const size_t k = static_cast<size_t>(f);
      for (int64_t i = 0; i < g.inner; ++i) {
        const int64_t j = g.at(o, f, i);
        const double d = static_cast<double>(dy[j]);
        sdy[k] += d;
        sdyxh[k] += d * (static_cast<double>(x[j]) - static_cast<double>(mean[f])) * r[k];
      }
    }
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t f = 0; f < g.c; ++f) {
      const size_t k = static_cast<size_t>(f);
      const double w = static_cast<double>(scale[f]), meanG = n > 0 ? w * sdy[k] / n : 0.0,
                   meanGxh = n > 0 ? w * sdyxh[k] / n : 0.0;
      for (int64_t i = 0; i < g.inner; ++i) {
        const int64_t j = g.at(o, f, i);
        const double xh = (static_cast<double>(x[j]) - static_cast<double>(mean[f])) * r[k];
        dx[j] = static_cast<T>(r[k] * (static_cast<double>(dy[j]) * w - meanG - xh * meanGxh));
      }
    }
  for (int64_t f = 0; f < g.c; ++f) {
    dscale[f] = static_cast<T>(sdyxh[static_cast<size_t>(f)]);
    doffset[f] = static_cast<T>(sdy[static_cast<size_t>(f)]);
  }
}

// f32 with the features last: oneDNN; anything else (or where oneDNN declines): the loops above.
void trainingKernel(const ir::CpuKernelArgs& a) {
  const Geometry g = geometryOf(a.inputs[0].aval.shape, featureOf(a.attrs));
  const double eps = epsilonOf(a.attrs);
  if (a.inputs[0].aval.dtype == DType::F64) return trainingLoop<double>(a, g, eps);
  if (g.inner == 1 &&
      oneDnnBatchNormForward(a.inputs[0].as<float>(), a.inputs[1].as<float>(), a.inputs[2].as<float>(),
                             a.outputs[0].as<float>(), a.outputs[1].as<float>(), a.outputs[2].as<float>(), g.outer, g.c,
                             eps))
    return;
  trainingLoop<float>(a, g, eps);
}

void gradKernel(const ir::CpuKernelArgs& a) {
  const Geometry g = geometryOf(a.inputs[0].aval.shape, featureOf(a.attrs));
  const double eps = epsilonOf(a.attrs);
  if (a.inputs[0].aval.dtype == DType::F64) {
    gradLoop<double>(a, g, eps);
    addStatisticsTerms<double>(a, g);
    return;
  }
  if (g.inner != 1 ||
      !oneDnnBatchNormBackward(a.inputs[0].as<float>(), a.inputs[4].as<float>(), a.inputs[1].as<float>(),
                               a.inputs[2].as<float>(), a.inputs[3].as<float>(), a.outputs[0].as<float>(),
                               a.outputs[1].as<float>(), a.outputs[2].as<float>(), g.outer, g.c, eps))
    gradLoop<float>(a, g, eps);
  addStatisticsTerms<float>(a, g);
}

// ---- Transformation rules ------------------------------------------------------------------------------------------

std::vector<Array> trainingVjp(const ir::VjpArgs& a) {
  if (!a.cotangents[0].valid() && !a.cotangents[1].valid() && !a.cotangents[2].valid())
    return {Array(), Array(), Array()};
  std::vector<Array> in = {a.operands[0],           a.operands[1],           a.results[1],          a.results[2],
                           cotangentOrZeros(a, 0), cotangentOrZeros(a, 1), cotangentOrZeros(a, 2)};
  return bind(OpCode::BatchNormGrad, in, a.attrs, std::source_location::current());
}

// Second derivatives: the gradient op as the composite it stands for (the formula at the top), differentiated by
// autodiff; mean and var are inputs of their own, so their cotangents go back through the forward op's rule.
std::vector<Array> gradVjp(const ir::VjpArgs& a) {
  if (std::none_of(a.cotangents.begin(), a.cotangents.end(), [](const Array& c) { return c.valid(); }))
    return std::vector<Array>(a.operands.size());
  const double eps = epsilonOf(a.attrs);
  const int64_t feature = featureOf(a.attrs);
  auto composite = [eps, feature](const std::vector<Array>& in) {
    const Array &x = in[0], &dy = in[4];
    Axes others;
    for (int64_t d = 0; d < x.rank(); ++d)
      if (d != feature) others.push_back(d);
    // a per-feature [C] value against x's shape, and the sum over every other dim (none for x of rank 1)
    auto spread = [&](const Array& c) { return broadcastInDim(c, x.shape(), {feature}); };
    auto perFeature = [&](const Array& y) { return others.empty() ? y : sum(y, others); };
    const double n = static_cast<double>(x.numel() / x.dim(static_cast<int>(feature)));
    Array r = 1.0 / sqrt(in[3] + eps);
    Array centred = x - spread(in[2]);
    Array xh = centred * spread(r);
    Array g = dy * spread(in[1]);
    Array dx = spread(r) * (g - spread(perFeature(g) / n) - xh * spread(perFeature(g * xh) / n)) +
               spread(in[5] / n) + centred * spread(in[6] * (2.0 / n));
    return std::vector<Array>{dx, perFeature(dy * xh), perFeature(dy)};
  };
  VjpOutput v = vjp(composite, a.operands);
  return v.pullback(a.cotangents);
}

// vmap: the batched dim folded into the features. Operands like x get it just before their feature dim (then
// [..., B * C, ...]), the per-feature ones in front ([B * C]); the results unfolded again.
ir::BatchResult foldIntoFeatures(OpCode op, const ir::BatchArgs& a) {
  const int64_t f = featureOf(a.attrs);
  const int64_t b = a.batchSize;
  auto likeX = [&](size_t i) { return i == 0 || (op == OpCode::BatchNormGrad && i == 4); };
  std::vector<Array> in;
  for (size_t i = 0; i < a.operands.size(); ++i) {
    if (likeX(i)) {
      Array x = moveBatchDim(a.operands[i], a.batchDims[i], static_cast<int>(f), b);
      std::vector<int64_t> dims = x.shape().dims();
      dims[static_cast<size_t>(f)] *= dims[static_cast<size_t>(f) + 1];
      dims.erase(dims.begin() + f + 1);
      in.push_back(reshape(x, dims));
    } else {
      in.push_back(reshape(moveBatchDim(a.operands[i], a.batchDims[i], 0, b), {-1}));
    }
  }
  std::vector<Array> r = bind(op, in, a.attrs, std::source_location::current());
  std::vector<int64_t> dims = r[0].shape().dims();
  dims[static_cast<size_t>(f)] /= b;
  dims.insert(dims.begin() + f, b);
  r[0] = reshape(r[0], dims);
  for (size_t i = 1; i < r.size(); ++i) r[i] = reshape(r[i], {b, -1});
  return {r, {static_cast<int>(f), 0, 0}};
}

// The features split alike on every operand and result; every other dim whole.
Result<ShardingRule> featuresOnly(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) {
  ShardingRule r;
  const int fc = r.addFactor(ir::FactorKind::PassThrough);
  const int64_t f = featureOf(attrs);
  auto dims = [&](const Aval& v) {
    std::vector<int> d(static_cast<size_t>(v.rank()), -1);
    d[v.rank() == 1 ? 0 : static_cast<size_t>(f)] = fc;
    return d;
  };
  for (const Aval& v : in) r.operandDims.push_back(dims(v));
  for (const Aval& v : out) r.resultDims.push_back(dims(v));
  return r;
}

}  // namespace

void registerBatchNormOps(ir::OpRegistry& reg) {
  ir::OpDef fwd = coreOp(OpCode::BatchNormTraining, "normalization", ir::FusionKind::Opaque, 3, 3);
  fwd.infer = inferTraining;
  fwd.cost = trainingCost;
  fwd.cpu = trainingKernel;
  fwd.cpuWritesWholeResult = true;
  fwd.vjp = trainingVjp;
  fwd.batch = [](const ir::BatchArgs& a) { return foldIntoFeatures(OpCode::BatchNormTraining, a); };
  fwd.shard = featuresOnly;
  addCoreOp(reg, std::move(fwd));

  ir::OpDef grad = coreOp(OpCode::BatchNormGrad, "normalization", ir::FusionKind::Opaque, 7, 3);
  grad.infer = inferGrad;
  grad.cost = gradCost;
  grad.cpu = gradKernel;
  grad.cpuWritesWholeResult = true;
  grad.vjp = gradVjp;
  grad.batch = [](const ir::BatchArgs& a) { return foldIntoFeatures(OpCode::BatchNormGrad, a); };
  grad.shard = featuresOnly;
  addCoreOp(reg, std::move(grad));
}

}  // namespace tsr::ops
