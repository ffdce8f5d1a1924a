#pragma once
// Layers as small config structs with init(key) -> Tree and apply(params, x, ctx), Flax-style: parameters live
// in Trees, never in the modules, so grad, jit and sharding see plain data. Parameter names follow the Hugging
// Face checkpoints ("weight", "bias") so their safetensors load directly.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/transform/api.h"
#include "engine/transform/remat.h"
#include "engine/transform/trace.h"

namespace tsr::nn {

// Turns a pooled metric's sums over an evaluation's batches into its value (Context::sowPooled).
using MetricFinish = std::function<double(const std::vector<double>& totals)>;

// The i-th key of random::split's u32[n, 2] result, as a key (u32[2]).
Array keyAt(const Array& keys, int64_t i);

// Per-call state of an apply: whether dropout is on, and the key it draws from.
class Context {
 public:
  Context() = default;
  Context(bool training, Array rngKey) : m_training(training), m_key(std::move(rngKey)) {}
  bool training() const { return m_training; }
  // A fresh key per call: foldIn(key, counter), so the same Context replays the same masks.
  Array nextKey();
  // A scalar the model reports beside its loss (Flax's sow): a training step returns it, and a run logs it
  // under this name every step (a Python model's (loss, {"acc": ...})).
  void sow(std::string name, Array value) { m_sown.emplace_back(std::move(name), std::move(value)); }
  // A metric pooled over an evaluation's batches (torchmetrics' and Keras's stateful metrics): `sums` is a vector
  // of this batch's sums, which an evaluation adds over all of its batches before `finish` turns the totals into
  // the metric (mean IoU: each class's intersection and union, then their ratios averaged over the classes
  // present in the whole evaluation, not the mean of each batch's). It is sown as `name` with the others.
  void sowPooled(std::string name, Array sums, MetricFinish finish) {
    m_pooled.emplace_back(name, std::move(finish));
    m_sown.emplace_back(std::move(name), std::move(sums));
  }
  const std::vector<std::pair<std::string, Array>>& sown() const { return m_sown; }
  const std::vector<std::pair<std::string, MetricFinish>>& pooled() const { return m_pooled; }
  // What a model's blocks recompute in the backward pass instead of keeping ([train] remat; None: nothing).
  void setRemat(RematPolicy policy) { m_remat = policy; }
  RematPolicy remat() const { return m_remat; }
  // Attention as one dot_product_attention op (jax.nn.dot_product_attention's implementation="cudnn"), which the
  // CUDA backend runs as flash attention, instead of dot_general + softmax + dot_general ("xla"). Off by default:
  // the unfused form is what the CPU backend fuses best. Attention dropout always takes the unfused form.
  void setFusedAttention(bool fused) { m_fusedAttention = fused; }
  bool fusedAttention() const { return m_fusedAttention; }
  // Batch norm in training as the batch_norm_training op (oneDNN's primitive on the CPU) instead of reductions
  // and elementwise ops (nn::fusedBatchNorm decides; off by default).
  void setFusedBatchNorm(bool fused) { m_fusedBatchNorm = fused; }
  bool fusedBatchNorm() const { return m_fusedBatchNorm; }
  // The model's mutable state (Flax's "batch_stats" collection: BatchNorm's running statistics), which apply
  // reads, and the values a training apply updates it to (the step's further output, Trainer's batch_stats).
  void setState(Tree state) { m_state = std::move(state); }
  const Tree& state() const { return m_state; }
  void setUpdatedState(Tree state) { m_updated = std::move(state); }
  const Tree& updatedState() const { return m_updated; }

 private:
  bool m_training = false;
  RematPolicy m_remat = RematPolicy::None;
  bool m_fusedAttention = false;
  bool m_fusedBatchNorm = false;
  Array m_key;
  uint32_t m_counter = 0;
  std::vector<std::pair<std::string, Array>> m_sown;
  std::vector<std::pair<std::string, MetricFinish>> m_pooled;
  Tree m_state, m_updated;
};

// block(x) under the context's remat policy: as it is, or as one remat_call whose intermediates the backward
// pass recomputes (a transformer layer's attention scores, MLP activations and norms are then not kept alive
// from the forward pass; the block's input is). What the block closes over (its parameters) is read as it is.
Array applyBlock(Context& ctx, const Array& x, const std::function<Array(const Array&)>& block);

// Weight layout: GPT-2's Conv1D stores [in, out]; torch.nn.Linear (ViT) stores [out, in]. dot_general reads
// either without a transpose.
enum class WeightLayout { InOut, OutIn };

struct Dense {
  int64_t in = 0, out = 0;
  bool useBias = true;
  WeightLayout layout = WeightLayout::InOut;
  double initStd = 0.02;
  DType dtype = DType::F32;

  Tree init(const Array& key) const;
  Array apply(const Tree& p, const Array& x) const;  // x: [..., in] -> [..., out]
  int64_t numParams() const { return in * out + (useBias ? out : 0); }
};

struct Embed {
  int64_t num = 0, dim = 0;
  double initStd = 0.02;
  DType dtype = DType::F32;

  Tree init(const Array& key) const;                      // {weight: [num, dim]}
  Array apply(const Tree& p, const Array& ids) const;     // ids: [...] int -> [..., dim]
  Array attend(const Tree& p, const Array& x) const;      // x: [..., dim] -> [..., num] (tied output head)
  int64_t numParams() const { return num * dim; }
};

struct LayerNorm {
  int64_t dim = 0;
  double eps = 1e-5;
  DType dtype = DType::F32;

  Tree init() const;                                      // {weight: ones, bias: zeros}
  Array apply(const Tree& p, const Array& x) const;      // normalises the last axis
  int64_t numParams() const { return 2 * dim; }
};

struct Dropout {
  double rate = 0.0;
  // Identity when rate == 0 or !ctx.training(); otherwise keeps each element with probability 1 - rate,
  // scaled by 1 / (1 - rate).
  Array apply(const Array& x, Context& ctx) const;
};

enum class Activation { Relu, GeluTanh, GeluErf };
Array activate(Activation a, const Array& x);

// A boolean [T, T] mask, true where key position <= query position.
Array causalMask(int64_t t);

}  // namespace tsr::nn
