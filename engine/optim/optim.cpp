#include "engine/optim/optim.h"

#include <cmath>
#include <numbers>

namespace tsr::optim {

namespace {

Array f32(double v) { return Array::scalar(v, DType::F32); }

// The step counter lives in the state as an i32 scalar; schedules read it as f32.
Array asFloat(const Array& step) { return astype(step, DType::F32); }

Array castLike(const Array& v, const Array& like) { return astype(v, like.dtype()); }

Tree counterState() { return Tree(Array::scalar(0, DType::I32)); }

}  // namespace

Schedule constantSchedule(double value) {
  return [value](const Array&) { return f32(value); };
}

Schedule linearSchedule(double init, double end, int64_t steps) {
  return [=](const Array& step) {
    Array frac = minimum(asFloat(step) / static_cast<double>(std::max<int64_t>(steps, 1)), f32(1.0));
    return f32(init) + frac * (end - init);
  };
}

Schedule warmupCosineSchedule(double peak, int64_t warmupSteps, int64_t decaySteps, double endValue) {
  return [=](const Array& step) {
    Array s = asFloat(step);
    Array warm = s * (peak / static_cast<double>(std::max<int64_t>(warmupSteps, 1)));
    double span = static_cast<double>(std::max<int64_t>(decaySteps - warmupSteps, 1));
    Array progress = clamp((s - static_cast<double>(warmupSteps)) / span, f32(0.0), f32(1.0));
    Array cosine = f32(endValue) + (1.0 + cos(progress * std::numbers::pi)) * (0.5 * (peak - endValue));
    return where(s < f32(static_cast<double>(warmupSteps)), warm, cosine);
  };
}

Schedule cosineSchedule(double init, int64_t steps, double end) {
  return [=](const Array& step) {
    Array progress = minimum(asFloat(step) / static_cast<double>(std::max<int64_t>(steps, 1)), f32(1.0));
    return f32(end) + (1.0 + cos(progress * std::numbers::pi)) * (0.5 * (init - end));
  };
}

Schedule stepSchedule(double init, int64_t every, double gamma) {
  return [=](const Array& step) {
    Array drops = floor(asFloat(step) / static_cast<double>(std::max<int64_t>(every, 1)));
    return exp(drops * std::log(gamma)) * init;
  };
}

Schedule wsdSchedule(double peak, int64_t warmupSteps, int64_t totalSteps, double decayFraction, double endValue) {
  return [=](const Array& step) {
    Array s = asFloat(step);
    const auto decaySteps = static_cast<int64_t>(std::llround(decayFraction * static_cast<double>(totalSteps)));
    const double decayStart = static_cast<double>(std::max(totalSteps - decaySteps, warmupSteps));
    Array warm = s * (peak / static_cast<double>(std::max<int64_t>(warmupSteps, 1)));
    Array frac = clamp((s - decayStart) / static_cast<double>(std::max<int64_t>(decaySteps, 1)), f32(0.0), f32(1.0));
    Array decayed = f32(peak) + frac * (endValue - peak);
    return where(s < f32(static_cast<double>(warmupSteps)), warm, decayed);
  };
}

Schedule joinSchedules(Schedule first, Schedule then, int64_t boundary) {
  return [=](const Array& step) {
    const double b = static_cast<double>(boundary);
    Array shifted = astype(maximum(asFloat(step) - b, f32(0.0)), step.dtype());
    return where(asFloat(step) < f32(b), first(step), then(shifted));
  };
}

bool decayMatricesOnly(const std::string&, const Aval& aval) { return aval.rank() >= 2; }

Tree treeMap(const Tree& a, const std::function<Array(const Array&)>& f) { return a.map(f); }

Tree treeMapWithPath(const Tree& a, const std::function<Array(const std::string&, const Array&)>& f) {
  return a.mapWithPath(f);
}

Tree treeMap2(const Tree& a, const Tree& b, const std::function<Array(const Array&, const Array&)>& f) {
  if (!(a.def() == b.def()))
    raise(makeError("tree structures differ: {} vs {}", a.def().toString(), b.def().toString()));
  std::vector<Array> la = a.leaves(), lb = b.leaves(), out;
  out.reserve(la.size());
  for (size_t i = 0; i < la.size(); ++i) out.push_back(f(la[i], lb[i]));
  auto t = Tree::unflatten(a.def(), std::move(out));
  if (!t.ok()) raise(t.takeError());
  return std::move(t).value();
}

Tree treeZerosLike(const Tree& a) {
  return a.map([](const Array& x) { return zerosLike(x); });
}

Array globalNorm(const Tree& t) {
  Array total = f32(0.0);
  for (const Array& x : t.leaves()) total = total + sum(square(astype(x, DType::F32)));
  return sqrt(total);
}

Tree applyUpdates(const Tree& params, const Tree& updates) {
  return treeMap2(params, updates, [](const Array& p, const Array& u) { return p + castLike(u, p); });
}

namespace {

// grads + weightDecay * params on the masked parameters (L2's gradient).
Tree addDecayedWeights(const Tree& grads, const Tree& params, double weightDecay, const ParamMask& mask) {
  if (weightDecay == 0.0) return grads;
  std::vector<Array> ps = params.leaves(), gs = grads.leaves();
  std::vector<std::string> paths = params.paths();
  for (size_t i = 0; i < gs.size(); ++i)
    if (mask(paths[i], ps[i].aval())) gs[i] = gs[i] + castLike(ps[i], gs[i]) * weightDecay;
  return std::move(Tree::unflatten(grads.def(), std::move(gs))).value();
}

}  // namespace

GradientTransformation sgd(Schedule lr, double momentum, bool nesterov, double weightDecay, ParamMask mask) {
  GradientTransformation t;
  t.init = [momentum](const Tree& params) {
    Tree s = Tree::dict({{"count", counterState()}});
    if (momentum != 0.0) s.set("trace", treeZerosLike(params));
    return s;
  };
  t.update = [lr, momentum, nesterov, weightDecay, mask](const Tree& rawGrads, const Tree& state, const Tree& params) {
    Array count = state.find("count")->leaf();
    Array rate = lr(count);
    Tree next = Tree::dict({{"count", Tree(count + Array::scalar(1, DType::I32))}});
    const Tree grads = addDecayedWeights(rawGrads, params, weightDecay, mask);
    Tree direction = grads;
    if (momentum != 0.0) {
      Tree trace = treeMap2(*state.find("trace"), grads, [&](const Array& m, const Array& g) { return m * momentum + g; });
      direction = nesterov ? treeMap2(trace, grads, [&](const Array& m, const Array& g) { return m * momentum + g; })
                           : trace;
      next.set("trace", trace);
    }
    Tree updates = treeMap(direction, [&](const Array& d) { return d * castLike(-rate, d); });
    return std::make_pair(updates, next);
  };
  return t;
}

namespace {

// Adam's moments with bias correction; weight decay on the masked parameters: L2 (Adam: into the gradient) and
// decoupled (AdamW: into the step).
GradientTransformation adamLike(Schedule lr, double b1, double b2, double eps, double l2, double weightDecay,
                                ParamMask mask) {
  GradientTransformation t;
  t.init = [](const Tree& params) {
    return Tree::dict({{"count", counterState()}, {"mu", treeZerosLike(params)}, {"nu", treeZerosLike(params)}});
  };
  t.update = [=](const Tree& rawGrads, const Tree& state, const Tree& params) {
    const Tree grads = addDecayedWeights(rawGrads, params, l2, mask);
    Array count = state.find("count")->leaf() + Array::scalar(1, DType::I32);
    Array c = asFloat(count);
    Array rate = lr(count - Array::scalar(1, DType::I32));
    Tree mu = treeMap2(*state.find("mu"), grads, [&](const Array& m, const Array& g) { return m * b1 + g * (1.0 - b1); });
    Tree nu = treeMap2(*state.find("nu"), grads,
                       [&](const Array& v, const Array& g) { return v * b2 + square(g) * (1.0 - b2); });
    Array corr1 = 1.0 - pow(f32(b1), c);
    Array corr2 = 1.0 - pow(f32(b2), c);
    Tree steps = treeMap2(mu, nu, [&](const Array& m, const Array& v) {
      return (m / castLike(corr1, m)) / (sqrt(v / castLike(corr2, v)) + eps);
    });
    if (weightDecay != 0.0) {
      std::vector<Array> ps = params.leaves(), ss = steps.leaves();
      std::vector<std::string> paths = params.paths();
      for (size_t i = 0; i < ss.size(); ++i)
        if (mask(paths[i], ps[i].aval())) ss[i] = ss[i] + ps[i] * weightDecay;
      steps = std::move(Tree::unflatten(steps.def(), std::move(ss))).value();
    }
    Tree updates = treeMap(steps, [&](const Array& s) { return s * castLike(-rate, s); });
    return std::make_pair(updates, Tree::dict({{"count", Tree(count)}, {"mu", mu}, {"nu", nu}}));
  };
  return t;
}

}  // namespace

GradientTransformation adam(Schedule lr, double b1, double b2, double eps, double weightDecay, ParamMask mask) {
  return adamLike(std::move(lr), b1, b2, eps, weightDecay, 0.0, std::move(mask));
}

GradientTransformation adamw(Schedule lr, double b1, double b2, double eps, double weightDecay, ParamMask mask) {
  return adamLike(std::move(lr), b1, b2, eps, 0.0, weightDecay, std::move(mask));
}

GradientTransformation clipByGlobalNorm(double maxNorm) {
  GradientTransformation t;
  t.init = [](const Tree&) { return Tree::dict(); };
  t.update = [maxNorm](const Tree& grads, const Tree& state, const Tree&) {
    Array norm = globalNorm(grads);
    // Scale by maxNorm / norm only when the norm exceeds maxNorm.
    Array scale = where(norm > f32(maxNorm), f32(maxNorm) / norm, f32(1.0));
    return std::make_pair(treeMap(grads, [&](const Array& g) { return g * castLike(scale, g); }), state);
  };
  return t;
}

GradientTransformation chain(std::vector<GradientTransformation> parts) {
  auto shared = std::make_shared<std::vector<GradientTransformation>>(std::move(parts));
  GradientTransformation t;
  t.init = [shared](const Tree& params) {
    Tree s = Tree::list();
    for (const auto& p : *shared) s.push(p.init(params));
    return s;
  };
  t.update = [shared](const Tree& grads, const Tree& state, const Tree& params) {
    Tree updates = grads;
    Tree next = Tree::list();
    for (size_t i = 0; i < shared->size(); ++i) {
      auto [u, s] = (*shared)[i].update(updates, state.child(i), params);
      updates = std::move(u);
      next.push(std::move(s));
    }
    return std::make_pair(updates, next);
  };
  return t;
}

Array softmaxCrossEntropy(const Array& logits, const Array& labels) {
  // bf16 logits (a head under autocast) go to the op as they are: it computes in f32 without a widened copy.
  return mean(softmaxCrossEntropyWithIntegerLabels(logits, labels));
}

Array softmaxCrossEntropyProbs(const Array& logits, const Array& labelProbs) {
  Array lp = logSoftmax(astype(logits, DType::F32), -1);
  return mean(-sum(lp * astype(labelProbs, DType::F32), {-1}));
}

Array meanSquaredError(const Array& predictions, const Array& targets) { return mean(square(predictions - targets)); }

}  // namespace tsr::optim
