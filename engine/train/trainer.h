#pragma once
// The training step and its state: valueAndGrad of the loss, the optimiser update and the parameter update,
// jitted as one function (compiled once, then a cache hit every step). A model with state (BatchNorm's running
// statistics) gets it through nn::Context and gives its update back beside the loss: one more argument and
// output of the step, "batch_stats", donated as the parameters are.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "engine/nn/layers.h"
#include "engine/optim/optim.h"
#include "engine/sharding/sharding.h"
#include "engine/compile/jit.h"
#include "engine/train/placement.h"

namespace tsr::train {

struct Batch {
  Array inputs;   // [B, T] tokens, or [B, ...] images
  Array targets;  // [B, T] next tokens, or [B] labels
};

struct TrainState {
  Tree params;
  Tree optState;
  int64_t step = 0;
  // The model's state beside its parameters (BatchNorm's running statistics, Flax's "batch_stats"): no gradient
  // and no optimizer; each step reads it and returns its update. Empty for a model without state.
  Tree batchStats;
};

// A metric pooled over batches (nn::Context::sowPooled): its sums on the batches so far, and how they finish.
struct PooledMetric {
  std::string name;
  std::vector<double> sums;
  nn::MetricFinish finish;
};

struct StepMetrics {
  double loss = 0;
  double gradNorm = 0;
  double lr = 0;
  double seconds = 0;  // wall time of the step
  // What the model reported beside its loss (Context::sow), by name; a pooled metric finished on this batch.
  std::vector<std::pair<std::string, double>> extra;
  std::vector<PooledMetric> pooled;  // the sums behind extra's pooled metrics
};

// One evaluation over several batches: the loss and each metric the mean of the batches', except that a pooled
// metric is finished from its sums over all of them (a mean IoU over every pixel evaluated). Empty: zeros.
StepMetrics poolEvaluations(const std::vector<StepMetrics>& batches);

// Where the training state and batches live on a mesh: parameter-path rules (a regex searched in the path, the
// first that matches wins; optimizer state follows its parameter's rule) and the batch split over the mesh's
// first axis, as PlacementPolicy (placement.h) decides. The step is then one SPMD program: the collectives come
// from propagation, not from the trainer.
struct TrainSharding {
  sharding::Mesh mesh;
  std::vector<std::pair<std::string, std::string>> rules;  // (regex, PartitionSpec)
};

// loss(params, batch, ctx) -> scalar; ctx carries the dropout switch and key.
using TrainLossFn = std::function<Array(const Tree& params, const Batch& batch, nn::Context& ctx)>;

class Trainer {
 public:
  Trainer(TrainLossFn loss, optim::GradientTransformation optimizer, optim::Schedule lr, uint64_t seed);
  // The jitted functions refer to this object: it stays where it was made.
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // `batchStats`: the model's state at its start (ProjectModel::initState), empty for a model without.
  TrainState init(Tree params, Tree batchStats = Tree()) const;
  // Places the state (at init) and every batch on the mesh. Errors name a bad regex or spec.
  Status setSharding(TrainSharding sharding);
  const std::optional<TrainSharding>& sharding() const { return m_sharding; }
  // Places a state read back from a checkpoint (one-device arrays) on the mesh, as init does. No mesh: as is.
  Status placeState(TrainState& state) const;
  // The step as an SPMD program for this state and batch, compiled but not run (tessera shard plan).
  Result<std::shared_ptr<spmd::SpmdExecutable>> compileStepSpmd(const TrainState& state, const Batch& batch);
  // The step's partitioned program, once a sharded step has run.
  const spmd::SpmdExecutable* spmdStep() const { return m_step->lastSpmd(); }
  // One optimisation step: updates `state` in place (params, optimizer state, step count).
  Result<StepMetrics> step(TrainState& state, const Batch& batch);
  // One optimisation step over several micro-batches (gradient accumulation, [train] accumulate): the gradient
  // is the mean of theirs, as one batch holding them all would give for a mean loss, while only one
  // micro-batch's activations are alive at a time. The loss is their mean; one batch is step(state, batch).
  Result<StepMetrics> step(TrainState& state, const std::vector<Batch>& microBatches);
  // The loss without dropout or updates.
  Result<double> evalLoss(const TrainState& state, const Batch& batch);
  // The loss without dropout, and what the model reports beside it (Context::sow), on one batch.
  Result<StepMetrics> evaluate(const TrainState& state, const Batch& batch);

  // What the training step's backward pass recomputes (nn::applyBlock; [train] remat). Set before the first step.
  void setRemat(RematPolicy policy) { m_remat = policy; }
  // Attention as one fused op in the traced steps (nn::Context::setFusedAttention): nn::fusedAttentionFor() decides.
  void setFusedAttention(bool fused) { m_fusedAttention = fused; }
  // Batch norm as one op in the traced training steps (nn::Context::setFusedBatchNorm): nn::fusedBatchNorm().
  void setFusedBatchNorm(bool fused) { m_fusedBatchNorm = fused; }
  RematPolicy remat() const { return m_remat; }

  const Jit& stepFunction() const { return *m_step; }
  // Run the step and eval graphs with the reference interpreter instead of the compiled CPU executable.
  void setUseInterpreter(bool on) {
    m_step->setUseInterpreter(on);
    m_eval->setUseInterpreter(on);
  }
  // The traced training step for these avals (for `tessera compile` and the IDE's graph view).
  Result<ClosedGraph> lowerStep(const TrainState& state, const Batch& batch);
  // The same from avals only (no weights materialised): params, opt and batch_stats are the avals of init's
  // trees (batch_stats empty for a model without state).
  Result<ClosedGraph> lowerStep(const TreeOf<Aval>& params, const TreeOf<Aval>& opt, const Aval& inputs,
                                const Aval& targets, const TreeOf<Aval>& batchStats = {});
  // The step's arguments as step() passes them, in lowerStep's order: params, opt, batch_stats (where the model
  // keeps state), inputs, targets, step (for runners of the lowered graph, such as the GPU benchmark).
  Tree stepArgs(const TrainState& state, const Batch& batch) const;

 private:
  // The ops the traced steps take fused (setFusedAttention, setFusedBatchNorm), given to the model's context.
  void setFusedOps(nn::Context& ctx) const {
    ctx.setFusedAttention(m_fusedAttention);
    ctx.setFusedBatchNorm(m_fusedBatchNorm);
  }
  Result<Tree> place(const Tree& tree, const std::function<ArgumentPath(const std::string&)>& pathOf) const;
  Result<Batch> placeBatch(const Batch& batch) const;
  std::optional<TrainSharding> m_sharding;
  std::optional<PlacementPolicy> m_placement;  // of m_sharding

  TrainLossFn m_loss;
  optim::GradientTransformation m_opt;
  optim::Schedule m_lr;
  uint64_t m_seed;
  RematPolicy m_remat = RematPolicy::None;
  bool m_fusedAttention = false;
  bool m_fusedBatchNorm = false;
  std::unique_ptr<Jit> m_step;
  std::unique_ptr<Jit> m_eval;
  std::unique_ptr<Jit> m_grad;   // accumulation: a micro-batch's loss and gradient, added to the sum so far
  std::unique_ptr<Jit> m_apply;  // accumulation: the update from the summed gradients
  // The pooled metrics' finishes by name, as the traced functions sowed them (Context::sowPooled).
  std::map<std::string, nn::MetricFinish> m_finishes;
};

}  // namespace tsr::train
