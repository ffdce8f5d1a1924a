#pragma once
// Optimisers as composable gradient transformations, as in Optax: init(params) -> state, update(grads, state,
// params) -> (updates, state), and params + updates is the step. State is a Tree, so it is checkpointed,
// sharded and jitted like the parameters. Everything is written with the Array API and works under jit.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/transform/api.h"

namespace tsr::optim {

// A learning-rate (or any hyperparameter) schedule: step (an i32 scalar Array, traced under jit) -> f32 scalar.
using Schedule = std::function<Array(const Array& step)>;
Schedule constantSchedule(double value);
// Linear from init to end over `steps`, then end.
Schedule linearSchedule(double init, double end, int64_t steps);
// Linear warmup from 0 to peak over warmupSteps, then cosine decay to endValue at decaySteps (held after).
Schedule warmupCosineSchedule(double peak, int64_t warmupSteps, int64_t decaySteps, double endValue = 0.0);
// Cosine from init at step 0 to end at `steps`, then end (optax.cosine_decay_schedule).
Schedule cosineSchedule(double init, int64_t steps, double end = 0.0);
// init * gamma^floor(step / every): a drop by gamma every `every` steps (PyTorch's StepLR).
Schedule stepSchedule(double init, int64_t every, double gamma);
// Warmup-stable-decay: linear from 0 to peak over warmupSteps, peak until the last decayFraction of totalSteps,
// then linear to endValue at totalSteps, held after.
Schedule wsdSchedule(double peak, int64_t warmupSteps, int64_t totalSteps, double decayFraction, double endValue = 0.0);
// `first` before `boundary`, then `then` with its step counted from the boundary (optax.join_schedules).
Schedule joinSchedules(Schedule first, Schedule then, int64_t boundary);

struct GradientTransformation {
  std::function<Tree(const Tree& params)> init;
  std::function<std::pair<Tree, Tree>(const Tree& grads, const Tree& state, const Tree& params)> update;
};

// Which parameters weight decay applies to, by path ("h.0.attn.c_attn.weight") and aval.
using ParamMask = std::function<bool(const std::string& path, const Aval& aval)>;
// The usual rule (nanoGPT, Optax examples): decay matrices, not biases, LayerNorm scales or other vectors.
bool decayMatricesOnly(const std::string& path, const Aval& aval);

// sgd and adam take weight decay as PyTorch's SGD and Adam do: L2, weightDecay * p added to the gradient of the
// masked parameters before momentum or the moments (Optax: chain(add_decayed_weights, sgd)). adamw's is
// decoupled: added to the step after the moments.
GradientTransformation sgd(Schedule lr, double momentum = 0.0, bool nesterov = false, double weightDecay = 0.0,
                           ParamMask mask = decayMatricesOnly);
GradientTransformation adam(Schedule lr, double b1 = 0.9, double b2 = 0.999, double eps = 1e-8,
                            double weightDecay = 0.0, ParamMask mask = decayMatricesOnly);
GradientTransformation adamw(Schedule lr, double b1 = 0.9, double b2 = 0.999, double eps = 1e-8,
                             double weightDecay = 1e-4, ParamMask mask = decayMatricesOnly);
GradientTransformation clipByGlobalNorm(double maxNorm);
GradientTransformation chain(std::vector<GradientTransformation> parts);

Tree applyUpdates(const Tree& params, const Tree& updates);
// sqrt of the sum of squares of every leaf (computed in f32).
Array globalNorm(const Tree& t);

// Tree utilities: same-structure maps (the structures must match; a mismatch raises naming both).
Tree treeMap(const Tree& a, const std::function<Array(const Array&)>& f);
Tree treeMap2(const Tree& a, const Tree& b, const std::function<Array(const Array&, const Array&)>& f);
Tree treeMapWithPath(const Tree& a, const std::function<Array(const std::string&, const Array&)>& f);
Tree treeZerosLike(const Tree& a);

// Losses, averaged over every leading position.
// logits [..., C] and integer labels [...]: mean of logsumexp(logits) - logits[label] (one softmax_cross_entropy
// op: softmaxCrossEntropyWithIntegerLabels).
Array softmaxCrossEntropy(const Array& logits, const Array& labels);
// logits [..., C] and label distributions [..., C].
Array softmaxCrossEntropyProbs(const Array& logits, const Array& labelProbs);
Array meanSquaredError(const Array& predictions, const Array& targets);

}  // namespace tsr::optim
