#include "engine/train/trainer.h"

#include <chrono>
#include <regex>

#include "engine/random/random.h"
#include "engine/spmd/spmd.h"
#include "engine/transform/autodiff.h"

namespace tsr::train {

Trainer::Trainer(TrainLossFn loss, optim::GradientTransformation optimizer, optim::Schedule lr, uint64_t seed)
    : m_loss(std::move(loss)), m_opt(std::move(optimizer)), m_lr(std::move(lr)), m_seed(seed) {
  // args: {params, opt, inputs, targets, step}; the dropout key is derived from the seed and the step, so a
  // resumed run draws the same masks as an uninterrupted one.
  m_step = std::make_unique<Jit>(
      [this](const Tree& args, const StaticArgs&) {
        const Tree& params = *args.find("params");
        Array step = args.find("step")->leaf();
        Batch batch{args.find("inputs")->leaf(), args.find("targets")->leaf()};
        Array key = random::foldIn(random::key(m_seed), astype(step, DType::U32));
        auto vg = valueAndGrad([&](const Tree& p) {
          nn::Context ctx(true, key);
          return m_loss(p, batch, ctx);
        })(params);
        auto [updates, opt] = m_opt.update(vg.grads, *args.find("opt"), params);
        return Tree::dict({{"params", optim::applyUpdates(params, updates)},
                           {"opt", opt},
                           {"loss", Tree(vg.value)},
                           {"grad_norm", Tree(optim::globalNorm(vg.grads))},
                           {"lr", Tree(m_lr(step))}});
      },
      "train_step");
  // The parameters and optimizer state are updated in place (step() hands them over).
  m_step->setDonatedArgs({"params", "opt"});
  m_eval = std::make_unique<Jit>(
      [this](const Tree& args, const StaticArgs&) {
        nn::Context ctx;
        Batch batch{args.find("inputs")->leaf(), args.find("targets")->leaf()};
        return Tree(m_loss(*args.find("params"), batch, ctx));
      },
      "eval_step");
}

TrainState Trainer::init(Tree params) const {
  TrainState s;
  s.optState = m_opt.init(params);
  // The state owns its own copy: steps update it in place (donation), which must not reach the caller's tree.
  s.params = params.map([](const Array& a) {
    if (!a.isConcrete()) return a;
    Array whole = a.gathered();
    return Array::fromBytes(whole.aval(), whole.buffer()->data());
  });
  if (m_sharding) {
    auto p = place(s.params);
    auto o = place(s.optState);
    if (!p.ok()) raise(p.takeError());
    if (!o.ok()) raise(o.takeError());
    s.params = std::move(*p);
    s.optState = std::move(*o);
  }
  return s;
}

Status Trainer::placeState(TrainState& state) const {
  if (!m_sharding) return {};
  TSR_ASSIGN(state.params, place(state.params));
  TSR_ASSIGN(state.optState, place(state.optState));
  return {};
}

Status Trainer::setSharding(TrainSharding sharding) {
  std::vector<std::pair<std::regex, sharding::NamedSharding>> rules;
  for (const auto& [pattern, spec] : sharding.rules) {
    std::regex re;
    try {
      re = std::regex(pattern);
    } catch (const std::regex_error& e) {
      return makeError("sharding rule '{}': not a regular expression ({})", pattern, e.what());
    }
    auto p = sharding::PartitionSpec::parse(spec);
    if (!p.ok()) return makeError("sharding rule '{}': {}", pattern, p.error().message);
    auto n = sharding::NamedSharding::create(sharding.mesh, *p);
    if (!n.ok()) return makeError("sharding rule '{}': {}", pattern, n.error().message);
    rules.emplace_back(std::move(re), std::move(*n));
  }
  m_rules = std::move(rules);
  m_sharding = std::move(sharding);
  return {};
}

// Each leaf by the first rule whose regex occurs in its path (optimizer state "mu.layers.0.weight" follows
// "layers.0.weight"); leaves no rule names, or whose shape the spec cannot split, are replicated. A spec of more
// dims than the leaf it names is an error.
Result<Tree> Trainer::place(const Tree& tree) const {
  const sharding::NamedSharding replicated = spmd::replicatedOn(m_sharding->mesh);
  std::optional<Error> error;
  Tree placed = tree.mapWithPath([&](const std::string& path, const Array& a) {
    const sharding::NamedSharding* chosen = &replicated;
    for (const auto& [re, ns] : m_rules)
      if (std::regex_search(path, re)) {
        if (ns.spec.dims.size() > static_cast<size_t>(a.rank())) {  // as the plan (sharding_plan.cpp) refuses it
          if (!error)
            error = makeError("sharding rule matching {} {}: its spec {} has {} dims", path, a.shape().toString(),
                              ns.spec.toString(), ns.spec.dims.size());
          return a;
        }
        if (ns.check(a.shape()).ok()) chosen = &ns;
        break;
      }
    auto r = spmd::devicePut(a, *chosen);
    if (!r.ok()) {
      if (!error) error = Error{path + ": " + r.error().message};
      return a;
    }
    return std::move(r).value();
  });
  if (error) return *error;
  return placed;
}

Result<Batch> Trainer::placeBatch(const Batch& batch) const {
  if (!m_sharding) return batch;
  const sharding::Mesh& mesh = m_sharding->mesh;
  auto put = [&](const Array& a) -> Result<Array> {
    sharding::NamedSharding split{mesh, sharding::PartitionSpec{{{mesh.axes[0]}}}};
    return spmd::devicePut(a, a.rank() > 0 && split.check(a.shape()).ok() ? split : spmd::replicatedOn(mesh));
  };
  Batch out;
  TSR_ASSIGN(out.inputs, put(batch.inputs));
  TSR_ASSIGN(out.targets, put(batch.targets));
  return out;
}

Tree Trainer::stepArgs(const TrainState& state, const Batch& batch) const {
  return Tree::dict({{"params", state.params},
                     {"opt", state.optState},
                     {"inputs", Tree(batch.inputs)},
                     {"targets", Tree(batch.targets)},
                     {"step", Tree(Array::scalar(static_cast<double>(state.step), DType::I32))}});
}

Result<StepMetrics> Trainer::step(TrainState& state, const Batch& unplaced) {
  auto t0 = std::chrono::steady_clock::now();
  TSR_ASSIGN(Batch batch, placeBatch(unplaced));
  // The state moves into the arguments so that its buffers can be donated; on failure it moves back.
  Tree args = Tree::dict({{"params", std::move(state.params)},
                          {"opt", std::move(state.optState)},
                          {"inputs", Tree(batch.inputs)},
                          {"targets", Tree(batch.targets)},
                          {"step", Tree(Array::scalar(static_cast<double>(state.step), DType::I32))}});
  auto result = m_step->call(args);
  if (!result.ok()) {
    state.params = *args.find("params");
    state.optState = *args.find("opt");
    return result.error();
  }
  args = Tree();
  Tree out = std::move(*result);
  StepMetrics m;
  m.loss = out.find("loss")->leaf().item();
  m.gradNorm = out.find("grad_norm")->leaf().item();
  m.lr = out.find("lr")->leaf().item();
  state.params = *out.find("params");
  state.optState = *out.find("opt");
  ++state.step;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

Result<double> Trainer::evalLoss(const TrainState& state, const Batch& unplaced) {
  TSR_ASSIGN(Batch batch, placeBatch(unplaced));
  Tree args = Tree::dict({{"params", state.params}, {"inputs", Tree(batch.inputs)}, {"targets", Tree(batch.targets)}});
  TSR_ASSIGN(Tree out, m_eval->call(args));
  return out.leaf().item();
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
                                       const Aval& targets) {
  return m_step->lower(TreeOf<Aval>::dict({{"params", params},
                                           {"opt", opt},
                                           {"inputs", TreeOf<Aval>(inputs)},
                                           {"targets", TreeOf<Aval>(targets)},
                                           {"step", TreeOf<Aval>(Aval{Shape{}, DType::I32})}}));
}

}  // namespace tsr::train
