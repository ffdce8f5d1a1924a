// The distributed-arrays tutorial, reproduced: the MLP 784-1024-1024-1024-10, batch 8192, SGD 1e-3 on mean
// squared error, trained on 8 virtual CPU devices under (i) 8-way batch data parallelism and (ii) 4-way batch x
// 2-way model parallelism (layer 1 column-parallel, layer 2 row-parallel, the rest replicated). The losses equal
// the one-device run to 1e-5 relative, and the collectives are exactly those the math requires, listed here:
//   (i)  one all_reduce over 'batch' per parameter gradient (8) and one for the loss;
//   (ii) the same 9 over 'batch', plus one all_reduce over 'model' after the row-parallel layer 2.
#include "tests/check.h"

#include <cstdio>
#include <iomanip>
#include <map>

#include "engine/nn/mlp.h"
#include "engine/optim/optim.h"
#include "engine/random/random.h"
#include "engine/spmd/spmd.h"
#include "tests/sharding/sharding_test_util.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/compile/jit.h"

using namespace tsr;
using namespace tsr::sharding;
using tsr::test::must;
using tsr::test::named;

namespace {

constexpr int kSteps = 3;

struct Run {
  std::vector<double> losses;
  std::map<std::string, int> collectives;  // "all_reduce('batch')" -> count
  std::string listing;
  int compiles = 0;
};

// Trains kSteps with the parameters and batch placed by `place` (identity for one device).
Run train(const std::function<Array(const std::string& path, const Array& x)>& place) {
  nn::Mlp mlp(nn::MlpConfig{});
  Tree params = mlp.init(random::key(0));
  Array x = random::normal(random::key(1), {8192, 784});
  Array y = oneHot(argmax(random::normal(random::key(2), {8192, 10}), 1), 10);  // random one-hot labels
  params = optim::treeMapWithPath(params, place);
  x = place("batch.x", x);
  y = place("batch.y", y);
  Jit step = jit(
      Jit::Fn([&mlp](const Tree& args, const StaticArgs&) -> Tree {
        const Array& x = args.child(1).leaf();
        const Array& y = args.child(2).leaf();
        LossFn lossFn = [&](const Tree& p) {
          nn::Context ctx;
          return optim::meanSquaredError(mlp.apply(p, x, ctx), y);
        };
        ValueAndGrad vg = valueAndGrad(lossFn)(args.child(0));
        const Tree& grads = vg.grads;
        Array loss = vg.value;
        Tree updated = optim::treeMap2(args.child(0), grads, [](const Array& p, const Array& g) { return p - g * 1e-3; });
        std::vector<Tree> out;
        out.push_back(updated);
        out.emplace_back(loss);
        return Tree::list(std::move(out));
      }),
      "mlp_step");
  Run run;
  for (int s = 0; s < kSteps; ++s) {
    std::vector<Tree> args;
    args.push_back(params);
    args.emplace_back(x);
    args.emplace_back(y);
    Tree out = must(step.call(Tree::list(std::move(args))));
    params = out.child(0);
    run.losses.push_back(out.child(1).leaf().item());
  }
  // The updated parameters come back with the shardings they went in with: one compile for every step.
  run.compiles = static_cast<int>(step.cacheSize());
  if (const auto* spmd = step.lastSpmd())
    for (const auto& c : spmd->partitioned().collectives) {
      ++run.collectives[c.opName + "(" + c.axisNames + ")"];
      run.listing += "  " + c.toString() + "\n";
    }
  return run;
}

void compareLosses(const Run& single, const Run& sharded) {
  for (int s = 0; s < kSteps; ++s) {
    double a = single.losses[static_cast<size_t>(s)], b = sharded.losses[static_cast<size_t>(s)];
    REQUIRE_MESSAGE(std::abs(a - b) <= 1e-5 * std::abs(a),
                    "step " << s << ": one device " << std::setprecision(10) << a << ", sharded " << b);
  }
}

// Every test case runs on 8 CPU devices.
struct EightDevices {
  EightDevices() { REQUIRE(spmd::setCpuDevices(8).ok()); }
};

// The run on one device that the sharded runs are compared with, trained once.
const Run& single() {
  static const Run run = [] {
    Run r = train([](const std::string&, const Array& a) { return a; });
    REQUIRE(r.losses[kSteps - 1] < r.losses[0]);
    return r;
  }();
  return run;
}

}  // namespace

TEST_CASE_FIXTURE(EightDevices, "dataParallel8Way") {
  Mesh mesh = must(Mesh::create({8}, {"batch"}));
  Run r = train([&](const std::string& path, const Array& a) {
    bool batch = path.rfind("batch.", 0) == 0;
    return must(spmd::devicePut(a, named(mesh, batch ? "batch" : "")));
  });
  std::printf("8-way data parallel: losses %.8f %.8f %.8f; collectives:\n%s", r.losses[0], r.losses[1], r.losses[2],
              r.listing.c_str());
  compareLosses(single(), r);
  TSR_COMPARE(r.compiles, 1);
  TSR_COMPARE(r.collectives.size(), size_t(1));
  TSR_COMPARE(r.collectives["all_reduce('batch')"], 9);  // 8 gradients + the loss
}

TEST_CASE_FIXTURE(EightDevices, "dataTimesModelParallel4x2") {
  Mesh mesh = must(Mesh::create({4, 2}, {"batch", "model"}));
  const std::map<std::string, std::string> rules = {
      {"layers.0.weight", "None,model"}, {"layers.0.bias", "model"},  // column-parallel
      {"layers.1.weight", "model,None"},                               // row-parallel
      {"batch.x", "batch"},              {"batch.y", "batch"},
  };
  Run r = train([&](const std::string& path, const Array& a) {
    auto it = rules.find(path);
    return must(spmd::devicePut(a, named(mesh, it == rules.end() ? "" : it->second)));
  });
  std::printf("4x2 data x model parallel: losses %.8f %.8f %.8f; collectives:\n%s", r.losses[0], r.losses[1],
              r.losses[2], r.listing.c_str());
  compareLosses(single(), r);
  TSR_COMPARE(r.compiles, 1);
  TSR_COMPARE(r.collectives.size(), size_t(2));
  TSR_COMPARE(r.collectives["all_reduce('batch')"], 9);
  TSR_COMPARE(r.collectives["all_reduce('model')"], 1);
}
