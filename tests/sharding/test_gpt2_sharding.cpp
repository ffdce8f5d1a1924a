// GPT-2 with Megatron-style tensor parallelism from parameter-path rules, as a project's [sharding] writes them:
// c_attn (viewed by head, [C, 3, H, D]) and c_fc column-parallel, the attention's and the MLP's c_proj
// row-parallel (their biases replicated), embeddings and layer norms replicated, the batch split over 'data'.
// Trained with AdamW on a (data 2 x model 2) mesh and on a model-only (data 1 x model 2) mesh, the losses equal
// the one-device run's to 1e-5 relative, and the step's collectives are exactly the analytic minimum:
//
//   over 'model', per block: forward  - one all_reduce after the attention's c_proj (each device holds the
//                                       partial product of its heads) and one after the MLP's c_proj;
//                            backward - one all_reduce of the input gradient of c_fc and one of c_attn (each
//                                       device's columns give a partial sum over the contraction);
//                 per step:  one scalar all_reduce for the global gradient norm (the squares of the split
//                            gradients are partial sums; the trainer reports the norm);
//   over 'data':  one all_reduce per parameter gradient (28 leaves for 2 blocks; wte's two uses, the lookup and
//                 the tied head, are summed before it) and one for the loss.
//
// Nothing else: no all_gather, all_to_all, reduce_scatter or collective_permute. An axis of size 1 moves nothing,
// so the model-only mesh has the 'model' collectives only.
#include "tests/check.h"

#include <cstdio>
#include <iomanip>
#include <map>
#include <random>

#include "engine/nn/gpt2.h"
#include "engine/optim/optim.h"
#include "engine/random/random.h"
#include "engine/spmd/spmd.h"
#include "engine/train/safetensors.h"
#include "engine/train/trainer.h"
#include "tests/sharding/sharding_test_util.h"

using namespace tsr;
using tsr::test::must;

namespace {

constexpr int kSteps = 3;
constexpr int64_t kLayers = 2, kBatch = 4, kSeq = 16, kVocab = 256;

nn::Gpt2Config config() {
  nn::Gpt2Config c;
  c.vocabSize = kVocab;
  c.blockSize = kSeq;
  c.nLayer = kLayers;
  c.nHead = 4;
  c.nEmbd = 64;
  c.qkvHeads = true;
  return c;
}

// The rules of sample_projects/gpt2_tp.
const std::vector<std::pair<std::string, std::string>> kRules = {
    {R"(attn\.c_attn\.weight)", "None, None, model, None"},  // column-parallel: the heads
    {R"(attn\.c_attn\.bias)", "None, model, None"},
    {R"(attn\.c_proj\.weight)", "model, None"},  // row-parallel
    {R"(mlp\.c_fc\.weight)", "None, model"},     // column-parallel
    {R"(mlp\.c_fc\.bias)", "model"},
    {R"(mlp\.c_proj\.weight)", "model, None"},  // row-parallel
};

train::Batch batch() {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
  std::vector<int32_t> in(kBatch * kSeq), out(kBatch * kSeq);
  for (auto& t : in) t = token(gen);
  for (auto& t : out) t = token(gen);
  return {Array::fromVector(in, Shape{kBatch, kSeq}), Array::fromVector(out, Shape{kBatch, kSeq})};
}

struct Run {
  std::vector<double> losses;
  std::map<std::string, int> collectives;  // "all_reduce('model')" -> count
  std::map<int64_t, int> modelBytes;       // all_reduce('model')'s bytes per device -> count
  std::string listing;
};

Run trainSteps(const std::optional<train::TrainSharding>& sharding) {
  auto model = std::make_shared<nn::Gpt2>(config());
  train::TrainLossFn loss = [model](const Tree& p, const train::Batch& b, nn::Context& ctx) {
    return optim::softmaxCrossEntropy(model->apply(p, b.inputs, ctx), b.targets);
  };
  optim::Schedule lr = optim::constantSchedule(1e-3);
  train::Trainer trainer(loss, optim::adamw(lr, 0.9, 0.95, 1e-8, 0.1), lr, 0);
  if (sharding && !trainer.setSharding(*sharding).ok()) TSR_FATAL("bad sharding rules");
  train::TrainState state = trainer.init(model->init(random::key(0)));
  train::Batch b = batch();
  Run run;
  for (int s = 0; s < kSteps; ++s) run.losses.push_back(must(trainer.step(state, b)).loss);
  if (const auto* spmd = trainer.spmdStep())
    for (const auto& c : spmd->partitioned().collectives) {
      ++run.collectives[c.opName + "(" + c.axisNames + ")"];
      if (c.axisNames == "'model'") ++run.modelBytes[c.bytes];
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

std::string counts(const Run& r) {
  std::string s;
  for (const auto& [k, n] : r.collectives) s += k + " x" + std::to_string(n) + "  ";
  return s;
}

// Every test case runs on 4 CPU devices.
struct FourDevices {
  FourDevices() { REQUIRE(spmd::setCpuDevices(4).ok()); }
};

// The run on one device that the sharded runs are compared with, trained once.
const Run& single() {
  static const Run run = [] {
    Run r = trainSteps(std::nullopt);
    std::printf("one device: losses %.8f %.8f %.8f\n", r.losses[0], r.losses[1], r.losses[2]);
    REQUIRE(r.losses[kSteps - 1] < r.losses[0]);
    return r;
  }();
  return run;
}

}  // namespace

// The heads view holds the fused layout's numbers: the same init, the same first loss.
TEST_CASE_FIXTURE(FourDevices, "headsLayoutEqualsFused") {
  nn::Gpt2Config fusedCfg = config();
  fusedCfg.qkvHeads = false;
  nn::Gpt2 fused(fusedCfg), heads(config());
  Tree pf = fused.init(random::key(0)), ph = heads.init(random::key(0));
  TSR_COMPARE(ph.findPath("h.0.attn.c_attn.weight")->leaf().shape(), (Shape{64, 3, 4, 16}));
  TSR_COMPARE(ph.findPath("h.0.attn.c_attn.bias")->leaf().shape(), (Shape{3, 4, 16}));
  TSR_COMPARE(pf.findPath("h.0.attn.c_attn.weight")->leaf().shape(), (Shape{64, 192}));
  train::Batch b = batch();
  nn::Context ctx;
  double lf = optim::softmaxCrossEntropy(fused.apply(pf, b.inputs, ctx), b.targets).item();
  double lh = optim::softmaxCrossEntropy(heads.apply(ph, b.inputs, ctx), b.targets).item();
  REQUIRE_MESSAGE(std::abs(lf - lh) <= 1e-6 * std::abs(lf), "fused " << lf << ", heads " << lh);
  // Hugging Face weights ([C, 3C]) load into the heads view: the fused model's numbers, reshaped.
  train::SafetensorsFile hf;
  pf.visit([&](const std::string& path, const Array& a) { hf.tensors[path] = a; });
  Tree loaded = must(train::treeFromHuggingFace(hf, heads.init(random::key(1))));
  const Array& w = loaded.findPath("h.1.attn.c_attn.weight")->leaf();
  TSR_COMPARE(w.shape(), (Shape{64, 3, 4, 16}));
  REQUIRE(w.toFloats() == pf.findPath("h.1.attn.c_attn.weight")->leaf().toFloats());
}

TEST_CASE_FIXTURE(FourDevices, "dataTimesTensorParallel2x2") {
  auto mesh = must(sharding::Mesh::create({2, 2}, {"data", "model"}));
  Run r = trainSteps(train::TrainSharding{mesh, kRules});
  std::printf("2x2 data x model: losses %.8f %.8f %.8f; collectives: %s\n%s", r.losses[0], r.losses[1],
              r.losses[2], counts(r).c_str(), r.listing.c_str());
  compareLosses(single(), r);
  const int params = 4 + 12 * kLayers;  // wte, wpe, ln_f.{weight,bias}; 12 per block
  TSR_COMPARE(r.collectives["all_reduce('model')"], 4 * kLayers + 1);
  TSR_COMPARE(r.collectives["all_reduce('data')"], params + 1);
  REQUIRE_MESSAGE(r.collectives.size() == 2, counts(r).c_str());
  // The activations' all_reduces move a device's [B / 2, T, C] f32; the norm's, one f32.
  TSR_COMPARE(r.modelBytes[kBatch / 2 * kSeq * 64 * 4], 4 * kLayers);
  TSR_COMPARE(r.modelBytes[4], 1);
}

// A state read back from a checkpoint (one-device arrays) goes back onto the mesh as init placed it.
TEST_CASE_FIXTURE(FourDevices, "resumedStateIsPlacedOnTheMesh") {
  auto model = std::make_shared<nn::Gpt2>(config());
  optim::Schedule lr = optim::constantSchedule(1e-3);
  train::Trainer trainer([](const Tree&, const train::Batch&, nn::Context&) { return Array::scalar(0.0); },
                         optim::adamw(lr), lr, 0);
  auto mesh = must(sharding::Mesh::create({2, 2}, {"data", "model"}));
  REQUIRE(trainer.setSharding(train::TrainSharding{mesh, kRules}).ok());
  train::TrainState placed = trainer.init(model->init(random::key(0)));
  auto onHost = [](const Tree& t) { return t.map([](const Array& a) { return a.gathered(); }); };
  train::TrainState read{onHost(placed.params), onHost(placed.optState), 2, {}};
  REQUIRE(!read.params.findPath("h.0.mlp.c_fc.weight")->leaf().isSharded());
  REQUIRE(trainer.placeState(read).ok());
  auto specOf = [](const Tree& t, const std::string& path) {
    const Array& a = t.findPath(path)->leaf();
    return a.isSharded() ? a.sharding()->spec.toString() : std::string("one device");
  };
  for (const std::string path : {"h.0.mlp.c_fc.weight", "h.1.attn.c_attn.weight", "wte.weight"})
    TSR_COMPARE(specOf(read.params, path), specOf(placed.params, path));
  TSR_COMPARE(specOf(read.params, "h.0.mlp.c_fc.weight"), std::string("P(None, 'model')"));
  REQUIRE(read.params.findPath("h.0.mlp.c_fc.weight")->leaf().toFloats() ==
          placed.params.findPath("h.0.mlp.c_fc.weight")->leaf().toFloats());
}

TEST_CASE_FIXTURE(FourDevices, "tensorParallelOnly") {
  auto mesh = must(sharding::Mesh::create({1, 2}, {"data", "model"}));
  Run r = trainSteps(train::TrainSharding{mesh, kRules});
  std::printf("1x2 model only: losses %.8f %.8f %.8f; collectives: %s\n%s", r.losses[0], r.losses[1], r.losses[2],
              counts(r).c_str(), r.listing.c_str());
  compareLosses(single(), r);
  TSR_COMPARE(r.collectives["all_reduce('model')"], 4 * kLayers + 1);
  REQUIRE_MESSAGE(r.collectives.size() == 1, counts(r).c_str());
  TSR_COMPARE(r.modelBytes[kBatch * kSeq * 64 * 4], 4 * kLayers);
  TSR_COMPARE(r.modelBytes[4], 1);
}
