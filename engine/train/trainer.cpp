#include "engine/train/trainer.h"

#include <chrono>

#include "engine/random/random.h"
#include "engine/spmd/spmd.h"
#include "engine/transform/autodiff.h"

namespace tsr::train {

namespace {

using Finishes = std::map<std::string, nn::MetricFinish>;

// What the model reported beside its loss, as a dict (the step's "metrics" output): scalars, and the sums of its
// pooled metrics, whose finishes are kept by name for reading them back.
Tree sownTree(const nn::Context& ctx, Finishes& finishes) {
  for (const auto& [name, finish] : ctx.pooled()) finishes[name] = finish;
  std::vector<std::pair<std::string, Tree>> items;
  for (const auto& [name, value] : ctx.sown()) items.emplace_back(name, Tree(value));
  return Tree::dict(std::move(items));
}

// The values of a jitted step's "metrics" output into `m`: each by name, a pooled one finished on this batch
// with its sums kept.
void readMetrics(const Tree& out, const Finishes& finishes, StepMetrics& m) {
  const Tree* metrics = out.find("metrics");
  if (!metrics) return;
  for (size_t i = 0; i < metrics->size(); ++i) {
    const std::string& name = metrics->keys()[i];
    const Array& value = metrics->child(i).leaf();
    auto finish = finishes.find(name);
    if (finish == finishes.end()) {
      m.extra.emplace_back(name, value.item());
      continue;
    }
    PooledMetric pooled{name, value.toDoubles(), finish->second};
    m.extra.emplace_back(name, pooled.finish(pooled.sums));
    m.pooled.push_back(std::move(pooled));
  }
}

// The model's state as a training apply left it (Context::updatedState): the state it was given, updated. A
// model with state must update it in training, in the same tree.
Tree updatedStats(const nn::Context& ctx, const Tree& given) {
  const Tree& updated = ctx.updatedState();
  if (!(updated.def() == given.def()))
    raise(makeError("the model was given its state {} and left {} after a training apply (nn::Context::setUpdatedState)",
                    given.def().toString(), updated.def().toString()));
  return updated;
}

bool hasState(const TrainState& s) { return !s.batchStats.leaves().empty(); }

// The training step's arguments: {params, opt, [batch_stats,] inputs, targets, step}. Copies of the state's
// trees for lowering; the trees themselves, moved in, for a step that donates their buffers.
Tree trainStepArgs(Tree params, Tree opt, Tree batchStats, const Batch& batch, int64_t step) {
  const bool stateful = !batchStats.leaves().empty();
  Tree args = Tree::dict({{"params", std::move(params)},
                          {"opt", std::move(opt)},
                          {"inputs", Tree(batch.inputs)},
                          {"targets", Tree(batch.targets)},
                          {"step", Tree(Array::scalar(static_cast<double>(step), DType::I32))}});
  if (stateful) args.set("batch_stats", std::move(batchStats));
  return args;
}

// What a training apply gives beside its loss: the model's metrics, and its updated state when it has one.
Tree auxOf(const nn::Context& ctx, const Tree* stats, Finishes& finishes) {
  Tree aux = Tree::dict({{"metrics", sownTree(ctx, finishes)}});
  if (stats) aux.set("batch_stats", updatedStats(ctx, *stats));
  return aux;
}

}  // namespace

Trainer::Trainer(TrainLossFn loss, optim::GradientTransformation optimizer, optim::Schedule lr, uint64_t seed)
    : m_loss(std::move(loss)), m_opt(std::move(optimizer)), m_lr(std::move(lr)), m_seed(seed) {
  // args: {params, opt, [batch_stats,] inputs, targets, step}; the dropout key is derived from the seed and the
  // step, so a resumed run draws the same masks as an uninterrupted one. The model's state (batch_stats) goes in
  // through the Context and its update comes out beside the loss, as Flax's mutable=["batch_stats"].
  m_step = std::make_unique<Jit>(
      [this](const Tree& args, const StaticArgs&) {
        const Tree& params = *args.find("params");
        Array step = args.find("step")->leaf();
        Batch batch{args.find("inputs")->leaf(), args.find("targets")->leaf()};
        Array key = random::foldIn(random::key(m_seed), astype(step, DType::U32));
        const Tree* stats = args.find("batch_stats");
        auto vg = valueAndGradWithAux([&](const Tree& p) {
          nn::Context ctx(true, key);
          ctx.setRemat(m_remat);
          setFusedOps(ctx);
          if (stats) ctx.setState(*stats);
          Array loss = m_loss(p, batch, ctx);
          return std::pair{loss, auxOf(ctx, stats, m_finishes)};
        })(params);
        auto [updates, opt] = m_opt.update(vg.grads, *args.find("opt"), params);
        Tree out = Tree::dict({{"params", optim::applyUpdates(params, updates)},
                               {"opt", opt},
                               {"loss", Tree(vg.value)},
                               {"grad_norm", Tree(optim::globalNorm(vg.grads))},
                               {"lr", Tree(m_lr(step))},
                               {"metrics", *vg.aux.find("metrics")}});
        if (stats) out.set("batch_stats", *vg.aux.find("batch_stats"));
        return out;
      },
      "train_step");
  // The parameters, optimizer state and model state are updated in place (step() hands them over).
  m_step->setDonatedArgs({"params", "opt", "batch_stats"});
  m_eval = std::make_unique<Jit>(
      [this](const Tree& args, const StaticArgs&) {
        nn::Context ctx;
        setFusedOps(ctx);
        if (const Tree* stats = args.find("batch_stats")) ctx.setState(*stats);
        Batch batch{args.find("inputs")->leaf(), args.find("targets")->leaf()};
        Array loss = m_loss(*args.find("params"), batch, ctx);
        return Tree::dict({{"loss", Tree(loss)}, {"metrics", sownTree(ctx, m_finishes)}});
      },
      "eval_step");
  // Gradient accumulation. args: {params, [batch_stats,] inputs, targets, step, micro, scale[, acc]}: the
  // micro-batch's loss and gradient times `scale` (1/K), added to `acc` when given, and the model's state updated
  // by this micro-batch (each micro-batch moves the running statistics, as K forward passes would). Each
  // micro-batch draws its own dropout key.
  m_grad = std::make_unique<Jit>(
      [this](const Tree& args, const StaticArgs&) {
        Batch batch{args.find("inputs")->leaf(), args.find("targets")->leaf()};
        Array key = random::foldIn(random::foldIn(random::key(m_seed), astype(args.find("step")->leaf(), DType::U32)),
                                   astype(args.find("micro")->leaf(), DType::U32));
        const Tree* stats = args.find("batch_stats");
        auto vg = valueAndGradWithAux([&](const Tree& p) {
          nn::Context ctx(true, key);
          ctx.setRemat(m_remat);
          setFusedOps(ctx);
          if (stats) ctx.setState(*stats);
          Array loss = m_loss(p, batch, ctx);
          return std::pair{loss, auxOf(ctx, stats, m_finishes)};
        })(*args.find("params"));
        const Array scale = args.find("scale")->leaf();
        auto scaled = [&](const Array& x) { return x * astype(scale, x.dtype()); };
        Tree grads = vg.grads.map(scaled);
        if (const Tree* acc = args.find("acc"))
          grads = optim::treeMap2(grads, *acc, [](const Array& g, const Array& a) { return a + g; });
        // The loss as this micro-batch's share of the step's mean; the model's metrics as they are (the step
        // pools them over its micro-batches as an evaluation pools its batches).
        Tree out = Tree::dict({{"acc", grads}, {"loss", Tree(scaled(vg.value))}, {"metrics", *vg.aux.find("metrics")}});
        if (stats) out.set("batch_stats", *vg.aux.find("batch_stats"));
        return out;
      },
      "train_grad");
  m_grad->setDonatedArgs({"acc", "batch_stats"});
  m_apply = std::make_unique<Jit>(
      [this](const Tree& args, const StaticArgs&) {
        const Tree& params = *args.find("params");
        const Tree& grads = *args.find("grads");
        auto [updates, opt] = m_opt.update(grads, *args.find("opt"), params);
        return Tree::dict({{"params", optim::applyUpdates(params, updates)},
                           {"opt", opt},
                           {"grad_norm", Tree(optim::globalNorm(grads))},
                           {"lr", Tree(m_lr(args.find("step")->leaf()))}});
      },
      "train_apply");
  m_apply->setDonatedArgs({"params", "opt", "grads"});
}

TrainState Trainer::init(Tree params, Tree batchStats) const {
  TrainState s;
  s.optState = m_opt.init(params);
  // The state owns its own copy: steps update it in place (donation), which must not reach the caller's tree.
  auto own = [](const Array& a) {
    if (!a.isConcrete()) return a;
    Array whole = a.gathered();
    return Array::fromBytes(whole.aval(), whole.buffer()->data());
  };
  s.params = params.map(own);
  if (!batchStats.leaves().empty()) s.batchStats = batchStats.map(own);
  if (auto st = placeState(s); !st.ok()) raise(st.takeError());
  return s;
}

Status Trainer::placeState(TrainState& state) const {
  if (!m_placement) return {};
  const std::vector<std::string> params = state.params.paths();
  auto param = [](const std::string& p) { return ArgumentPath{ArgumentPath::Param{p}}; };
  TSR_ASSIGN(Tree placedParams, place(state.params, param));
  TSR_ASSIGN(Tree placedOpt, place(state.optState, [&](const std::string& p) { return optStatePath(p, params); }));
  // The model's state is replicated: every device normalises with the same (global) statistics.
  TSR_ASSIGN(Tree placedStats,
             place(state.batchStats, [](const std::string& p) { return ArgumentPath{ArgumentPath::Other{"batch_stats." + p}}; }));
  state.params = std::move(placedParams);
  state.optState = std::move(placedOpt);
  state.batchStats = std::move(placedStats);
  return {};
}

Status Trainer::setSharding(TrainSharding sharding) {
  TSR_ASSIGN(PlacementPolicy policy, PlacementPolicy::create(sharding.mesh, sharding.rules, {}, "sharding"));
  m_placement = std::move(policy);
  m_sharding = std::move(sharding);
  return {};
}

// Each leaf where the policy puts it; the first error is returned once the tree has been walked.
Result<Tree> Trainer::place(const Tree& tree, const std::function<ArgumentPath(const std::string&)>& pathOf) const {
  std::optional<Error> error;
  Tree placed = tree.mapWithPath([&](const std::string& path, const Array& a) {
    const ArgumentPath arg = pathOf(path);
    auto ns = m_placement->sharding(arg, a.shape());
    if (!ns.ok()) {
      if (!error) error = ns.error();
      return a;
    }
    auto r = spmd::devicePut(a, *ns);
    if (!r.ok()) {
      if (!error) error = Error{arg.toString() + ": " + r.error().message};
      return a;
    }
    return std::move(r).value();
  });
  if (error) return *error;
  return placed;
}

Result<Batch> Trainer::placeBatch(const Batch& batch) const {
  if (!m_placement) return batch;
  auto put = [&](const char* name, const Array& a) -> Result<Array> {
    TSR_ASSIGN(sharding::NamedSharding ns, m_placement->sharding(ArgumentPath{ArgumentPath::Batch{name}}, a.shape()));
    return spmd::devicePut(a, ns);
  };
  Batch out;
  TSR_ASSIGN(out.inputs, put("inputs", batch.inputs));
  TSR_ASSIGN(out.targets, put("targets", batch.targets));
  return out;
}

Tree Trainer::stepArgs(const TrainState& state, const Batch& batch) const {
  return trainStepArgs(state.params, state.optState, state.batchStats, batch, state.step);
}

Result<StepMetrics> Trainer::step(TrainState& state, const Batch& unplaced) {
  auto t0 = std::chrono::steady_clock::now();
  TSR_ASSIGN(Batch batch, placeBatch(unplaced));
  // The state moves into the arguments so that its buffers can be donated; on failure it moves back.
  const bool stateful = hasState(state);
  Tree args = trainStepArgs(std::move(state.params), std::move(state.optState),
                            stateful ? std::move(state.batchStats) : Tree(), batch, state.step);
  auto result = m_step->call(args);
  if (!result.ok()) {
    state.params = *args.find("params");
    state.optState = *args.find("opt");
    if (stateful) state.batchStats = *args.find("batch_stats");
    return result.error();
  }
  args = Tree();
  Tree out = std::move(*result);
  StepMetrics m;
  m.loss = out.find("loss")->leaf().item();
  m.gradNorm = out.find("grad_norm")->leaf().item();
  m.lr = out.find("lr")->leaf().item();
  readMetrics(out, m_finishes, m);
  state.params = *out.find("params");
  state.optState = *out.find("opt");
  if (stateful) state.batchStats = *out.find("batch_stats");
  ++state.step;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

Result<StepMetrics> Trainer::step(TrainState& state, const std::vector<Batch>& microBatches) {
  if (microBatches.empty()) return makeError("a training step needs at least one batch");
  if (microBatches.size() == 1) return step(state, microBatches.front());
  auto t0 = std::chrono::steady_clock::now();
  const Array stepNumber = Array::scalar(static_cast<double>(state.step), DType::I32);
  const Array scale = Array::scalar(1.0 / static_cast<double>(microBatches.size()), DType::F32);
  Tree acc;
  double loss = 0;
  std::vector<StepMetrics> shares;  // each micro-batch's metrics, pooled at the end
  for (size_t i = 0; i < microBatches.size(); ++i) {
    TSR_ASSIGN(Batch batch, placeBatch(microBatches[i]));
    std::vector<std::pair<std::string, Tree>> fields = {
        {"params", state.params},
        {"inputs", Tree(batch.inputs)},
        {"targets", Tree(batch.targets)},
        {"step", Tree(stepNumber)},
        {"micro", Tree(Array::scalar(static_cast<double>(i), DType::I32))},
        {"scale", Tree(scale)}};
    if (i > 0) fields.emplace_back("acc", std::move(acc));
    if (hasState(state)) fields.emplace_back("batch_stats", std::move(state.batchStats));
    Tree args = Tree::dict(std::move(fields));
    auto result = m_grad->call(args);
    if (!result.ok()) {
      if (const Tree* stats = args.find("batch_stats")) state.batchStats = *stats;
      return result.error();
    }
    args = Tree();
    Tree out = std::move(*result);
    if (const Tree* stats = out.find("batch_stats")) state.batchStats = *stats;
    loss += out.find("loss")->leaf().item();
    readMetrics(out, m_finishes, shares.emplace_back());
    acc = *out.find("acc");
  }
  Tree args = Tree::dict({{"params", std::move(state.params)},
                          {"opt", std::move(state.optState)},
                          {"grads", std::move(acc)},
                          {"step", Tree(stepNumber)}});
  auto result = m_apply->call(args);
  if (!result.ok()) {
    state.params = *args.find("params");
    state.optState = *args.find("opt");
    return result.error();
  }
  args = Tree();
  StepMetrics m = poolEvaluations(shares);
  m.loss = loss;
  m.gradNorm = result->find("grad_norm")->leaf().item();
  m.lr = result->find("lr")->leaf().item();
  state.params = *result->find("params");
  state.optState = *result->find("opt");
  ++state.step;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

StepMetrics poolEvaluations(const std::vector<StepMetrics>& batches) {
  StepMetrics out;
  if (batches.empty()) return out;
  const auto n = static_cast<double>(batches.size());
  out.extra = batches.front().extra;
  out.pooled = batches.front().pooled;
  for (auto& [name, value] : out.extra) value = 0;
  for (const StepMetrics& b : batches) {
    out.loss += b.loss / n;
    for (size_t k = 0; k < b.extra.size() && k < out.extra.size(); ++k) out.extra[k].second += b.extra[k].second / n;
    if (&b == &batches.front()) continue;
    for (size_t k = 0; k < b.pooled.size() && k < out.pooled.size(); ++k) {
      std::vector<double>& sums = out.pooled[k].sums;
      for (size_t j = 0; j < b.pooled[k].sums.size() && j < sums.size(); ++j) sums[j] += b.pooled[k].sums[j];
    }
  }
  // A pooled metric is its finish of the totals, not the mean of each batch's.
  for (const PooledMetric& p : out.pooled)
    for (auto& [name, value] : out.extra)
      if (name == p.name) value = p.finish(p.sums);
  return out;
}

Result<double> Trainer::evalLoss(const TrainState& state, const Batch& batch) {
  TSR_ASSIGN(StepMetrics m, evaluate(state, batch));
  return m.loss;
}

Result<StepMetrics> Trainer::evaluate(const TrainState& state, const Batch& unplaced) {
  TSR_ASSIGN(Batch batch, placeBatch(unplaced));
  Tree args = Tree::dict({{"params", state.params}, {"inputs", Tree(batch.inputs)}, {"targets", Tree(batch.targets)}});
  if (hasState(state)) args.set("batch_stats", state.batchStats);
  TSR_ASSIGN(Tree out, m_eval->call(args));
  StepMetrics m;
  m.loss = out.find("loss")->leaf().item();
  readMetrics(out, m_finishes, m);
  return m;
}

Result<std::shared_ptr<spmd::SpmdExecutable>> Trainer::compileStepSpmd(const TrainState& state, const Batch& unplaced) {
  if (!m_sharding) return makeError("the trainer has no mesh: the project's [mesh] is one device");
  TSR_ASSIGN(Batch batch, placeBatch(unplaced));
  return m_step->lowerSpmd(stepArgs(state, batch));
}

Result<ClosedGraph> Trainer::lowerStep(const TrainState& state, const Batch& batch) {
  return m_step->lower(stepArgs(state, batch).map([](const Array& a) { return a.aval(); }));
}

Result<ClosedGraph> Trainer::lowerStep(const TreeOf<Aval>& params, const TreeOf<Aval>& opt, const Aval& inputs,
                                       const Aval& targets, const TreeOf<Aval>& batchStats) {
  auto args = TreeOf<Aval>::dict({{"params", params},
                                  {"opt", opt},
                                  {"inputs", TreeOf<Aval>(inputs)},
                                  {"targets", TreeOf<Aval>(targets)},
                                  {"step", TreeOf<Aval>(Aval{Shape{}, DType::I32})}});
  if (!batchStats.leaves().empty()) args.set("batch_stats", batchStats);
  return m_step->lower(args);
}

}  // namespace tsr::train
