// Compiled equals eager on the models: GPT-2 (AdamW, clipping) and the MLP (SGD, MSE) trained for a few steps
// by the fused CPU executable and by the reference interpreter give the same losses and parameters; the
// parameters and optimizer state are updated in place (donated), never copied.
#include "tests/check.h"

#include <cmath>

#include "engine/nn/gpt2.h"
#include "engine/nn/mlp.h"
#include "engine/optim/optim.h"
#include "engine/random/random.h"
#include "engine/runtime/debug_nans.h"
#include "engine/train/trainer.h"

using namespace tsr;

namespace {

struct Trajectory {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
  std::vector<const void*> paramBuffers;  // after each step
};

Trajectory run(train::Trainer& tr, Tree params, const train::Batch& batch, int steps) {
  Trajectory t;
  train::TrainState st = tr.init(std::move(params));
  for (int s = 0; s < steps; ++s) {
    auto m = tr.step(st, batch);
    if (!m.ok()) TSR_FATAL("step: " << m.error().message);
    t.losses.push_back(m->loss);
    const void* first = st.params.leaves()[0].buffer()->data();
    t.paramBuffers.push_back(first);
  }
  for (const auto& a : st.params.leaves()) t.params.push_back(a.toFloats());
  return t;
}

train::Batch tokens(int64_t b, int64_t t, int64_t vocab) {
  std::vector<int32_t> x(static_cast<size_t>(b * t)), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>((i * 7919) % static_cast<size_t>(vocab));
    y[i] = static_cast<int32_t>((i * 104729 + 3) % static_cast<size_t>(vocab));
  }
  return {Array::fromVector(x, Shape({b, t})), Array::fromVector(y, Shape({b, t}))};
}

// Largest |a - b| over the parameters, relative to the largest |b|.
double paramDiff(const Trajectory& a, const Trajectory& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.params.size(); ++i)
    for (size_t j = 0; j < a.params[i].size(); ++j) {
      worst = std::max(worst, std::fabs(double(a.params[i][j]) - b.params[i][j]));
      scale = std::max(scale, std::fabs(double(b.params[i][j])));
    }
  return worst / scale;
}

}  // namespace

TEST_CASE("gpt2TrainsTheSameCompiledAndInterpreted") {
  nn::Gpt2Config cfg{64, 16, 2, 2, 32};
  auto model = std::make_shared<nn::Gpt2>(cfg);
  Tree params = model->init(random::key(3));
  auto loss = [model](const Tree& p, const train::Batch& b, nn::Context& ctx) {
    return optim::softmaxCrossEntropy(model->apply(p, b.inputs, ctx), b.targets);
  };
  auto lr = optim::constantSchedule(3e-3);
  auto opt = [&] { return optim::chain({optim::clipByGlobalNorm(1.0), optim::adamw(lr, 0.9, 0.999, 1e-8, 0.1)}); };
  train::Batch batch = tokens(4, 16, 64);
  train::Trainer compiled(loss, opt(), lr, 0), interpreted(loss, opt(), lr, 0);
  interpreted.setUseInterpreter(true);
  Trajectory a = run(compiled, params, batch, 6), b = run(interpreted, params, batch, 6);
  for (size_t s = 0; s < a.losses.size(); ++s)
    REQUIRE_MESSAGE(std::fabs(a.losses[s] - b.losses[s]) <= 1e-4 * std::fabs(b.losses[s]),
                    "step " << s << ": " << a.losses[s] << " vs " << b.losses[s]);
  REQUIRE(a.losses.back() < a.losses.front() - 0.1);  // it learns
  // Adam divides by sqrt(v): parameters whose gradient is ~0 can move by lr either way, so compare
  // against lr * steps.
  REQUIRE_MESSAGE(paramDiff(a, b) < 2 * 3e-3 * 6, paramDiff(a, b));
  // In place: the first parameter lives in the same buffer after every step.
  for (const void* p : a.paramBuffers) TSR_COMPARE(p, a.paramBuffers.front());
}

TEST_CASE("mlpTrainsTheSameCompiledAndInterpreted") {
  nn::MlpConfig cfg;
  cfg.sizes = {784, 64, 64, 10};
  auto model = std::make_shared<nn::Mlp>(cfg);
  Tree params = model->init(random::key(1));
  auto loss = [model](const Tree& p, const train::Batch& b, nn::Context& ctx) {
    return optim::meanSquaredError(model->apply(p, b.inputs, ctx), b.targets);
  };
  auto lr = optim::constantSchedule(1e-2);
  Array x = random::uniform(random::key(5), Shape({32, 784}));
  Array y = random::uniform(random::key(6), Shape({32, 10}));
  train::Batch batch{x, y};
  train::Trainer compiled(loss, optim::sgd(lr), lr, 0), interpreted(loss, optim::sgd(lr), lr, 0);
  interpreted.setUseInterpreter(true);
  std::vector<std::vector<float>> before, after;
  for (auto& l : params.leaves()) before.push_back(l.toFloats());
  auto xb = x.toFloats(), yb = y.toFloats();
  Trajectory a = run(compiled, params, batch, 5);
  for (auto& l : params.leaves()) after.push_back(l.toFloats());
  TSR_COMPARE(after, before);
  TSR_COMPARE(x.toFloats(), xb);
  TSR_COMPARE(y.toFloats(), yb);
  Trajectory b = run(interpreted, params, batch, 5);
  for (size_t s = 0; s < a.losses.size(); ++s)
    REQUIRE_MESSAGE(std::fabs(a.losses[s] - b.losses[s]) <= 1e-5 * std::fabs(b.losses[s]),
                    "step " << s << ": " << a.losses[s] << " vs " << b.losses[s]);
  REQUIRE_MESSAGE(paramDiff(a, b) < 1e-5, paramDiff(a, b));
  for (const void* p : a.paramBuffers) TSR_COMPARE(p, a.paramBuffers.front());
}

TEST_CASE("donatedArraysAreDeletedNotSilentlyChanged") {
  Jit f = jit(
      [](const Tree& args, const StaticArgs&) {
        return Tree::dict({{"p", Tree(args.find("p")->leaf() * 2.0)}});
      },
      "double");
  f.setDonatedArgs({"p"});
  // Still held by the caller (an Array handle of its own): not donated, kept intact.
  Array p = Array::fromVector(std::vector<float>{1, 2, 3}, Shape({3}));
  Tree args = Tree::dict({{"p", Tree(p)}});
  auto out = f.call(args);
  REQUIRE(out.ok());
  TSR_COMPARE(p.toFloats(), (std::vector<float>{1, 2, 3}));
  TSR_COMPARE(out->find("p")->leaf().toFloats(), (std::vector<float>{2, 4, 6}));
  REQUIRE(out->find("p")->leaf().buffer()->data() != p.buffer()->data());
  // Given up: written in place, and the tree's old handle is deleted (a copy of the tree sees it too).
  Tree moved = Tree::dict({{"p", Tree(Array::fromVector(std::vector<float>{1, 2, 3}, Shape({3})))}});
  Tree copy = moved;
  const void* before = moved.find("p")->leaf().buffer()->data();
  auto out2 = f.call(moved);
  REQUIRE(out2.ok());
  TSR_COMPARE(out2->find("p")->leaf().buffer()->data(), before);
  TSR_COMPARE(out2->find("p")->leaf().toFloats(), (std::vector<float>{2, 4, 6}));
  bool threw = false;
  try {
    copy.find("p")->leaf().toFloats();
  } catch (const Exception& e) {
    threw = e.error().message.find("donated") != std::string::npos;
  }
  REQUIRE(threw);
}

TEST_CASE("debugNansNamesTheOpEvenWithDonation") {
  // With debug NaNs on, nothing is donated: the op-by-op re-run that names the culprit needs the arguments.
  runtime::setDebugNans(true);
  Jit f = jit(
      [](const Tree& args, const StaticArgs&) {
        return Tree::dict({{"p", Tree(log(args.find("p")->leaf() - 2.0))}});
      },
      "log_step");
  f.setDonatedArgs({"p"});
  Tree args = Tree::dict({{"p", Tree(Array::fromVector(std::vector<float>{3, 1, 4}, Shape({3})))}});
  auto out = f.call(args);
  runtime::setDebugNans(false);
  REQUIRE(!out.ok());
  REQUIRE_MESSAGE(out.error().message.find("log") != std::string::npos, out.error().message.c_str());
  TSR_COMPARE(args.find("p")->leaf().toFloats(), (std::vector<float>{3, 1, 4}));
}
