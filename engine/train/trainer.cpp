#include "engine/train/trainer.h"

#include <chrono>

#include "engine/random/random.h"
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
    return a.isConcrete() ? Array::fromBytes(a.aval(), a.buffer()->data()) : a;
  });
  return s;
}

Tree Trainer::stepArgs(const TrainState& state, const Batch& batch) const {
  return Tree::dict({{"params", state.params},
                     {"opt", state.optState},
                     {"inputs", Tree(batch.inputs)},
                     {"targets", Tree(batch.targets)},
                     {"step", Tree(Array::scalar(static_cast<double>(state.step), DType::I32))}});
}

Result<StepMetrics> Trainer::step(TrainState& state, const Batch& batch) {
  auto t0 = std::chrono::steady_clock::now();
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

Result<double> Trainer::evalLoss(const TrainState& state, const Batch& batch) {
  Tree args = Tree::dict({{"params", state.params}, {"inputs", Tree(batch.inputs)}, {"targets", Tree(batch.targets)}});
  TSR_ASSIGN(Tree out, m_eval->call(args));
  return out.leaf().item();
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
