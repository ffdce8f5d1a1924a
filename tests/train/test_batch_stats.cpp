// A model's state beside its parameters (BatchNorm's running statistics, "batch_stats"): each training step reads
// it and returns its update (the moving averages computed here by hand), gradient accumulation moves it once per
// micro-batch, it is neither differentiated nor in the optimizer, evaluation normalises with it; checkpoints keep
// it and resume continues it bit for bit, `eval` reads the checkpoint's; and a data-parallel step on two devices
// normalises with the global batch's statistics, as one device does.
#include "tests/check.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "engine/nn/conv_layers.h"
#include "engine/nn/resnet.h"
#include "engine/optim/optim.h"
#include "engine/random/random.h"
#include "engine/spmd/spmd.h"
#include "engine/train/project_model.h"
#include "engine/train/run.h"
#include "engine/train/safetensors.h"
#include "engine/train/setup.h"
#include "engine/train/trainer.h"
#include "tests/temp_dir.h"
#include "tests/train/project_files.h"

using namespace tsr;
using Vec = std::vector<double>;

namespace {

const auto quiet = [](const train::RunEvent&) {};

// x [B, 3] through BatchNorm (state "bn") and a linear head to 2 classes.
struct TinyNet {
  nn::BatchNorm bn{3};
  nn::Dense fc{3, 2};

  Tree init() const { return Tree::dict({{"bn", bn.init()}, {"fc", fc.init(random::key(4))}}); }
  Tree initState() const { return Tree::dict({{"bn", bn.initStats()}}); }
  train::TrainLossFn loss() const {
    return [this](const Tree& p, const train::Batch& b, nn::Context& ctx) {
      nn::BatchNorm::Output o = bn.apply(*p.find("bn"), *ctx.state().find("bn"), b.inputs, ctx.training());
      if (ctx.training()) ctx.setUpdatedState(Tree::dict({{"bn", o.stats}}));
      return optim::softmaxCrossEntropy(fc.apply(*p.find("fc"), o.y), b.targets);
    };
  }
};

train::Batch batchOf(uint64_t seed) {
  return {random::normal(random::key(seed), Shape{6, 3}) * 1.5 + 0.7,
          Array::fromVector(std::vector<int32_t>{0, 1, 1, 0, 1, 0}, Shape{6})};
}

// Each column's mean and biased variance.
std::pair<Vec, Vec> columnStats(const Array& x) {
  const Vec v = x.toDoubles();
  const size_t rows = v.size() / 3;
  Vec m(3, 0.0), var(3, 0.0);
  for (size_t i = 0; i < v.size(); ++i) m[i % 3] += v[i] / static_cast<double>(rows);
  for (size_t i = 0; i < v.size(); ++i) var[i % 3] += std::pow(v[i] - m[i % 3], 2) / static_cast<double>(rows);
  return {m, var};
}

Vec follow(const Vec& running, const Vec& batch) {
  Vec out(running.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = 0.99 * running[i] + 0.01 * batch[i];
  return out;
}

void expectNear(const Vec& got, const Vec& want, double tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i)
    REQUIRE_MESSAGE(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])),
                    what << "[" << i << "]: " << got[i] << " vs " << want[i]);
}

Vec leafOf(const Tree& t, const std::string& path) {
  const Tree* n = t.findPath(path);
  if (!n) TSR_FATAL("no " << path);
  auto whole = spmd::fetchWhole(n->leaf());
  if (!whole.ok()) TSR_FATAL(whole.error().message);
  return whole->toDoubles();
}

// A CIFAR-10 binary file of `n` records (a label byte, then 3 x 32 x 32 pixel bytes), pseudo-random.
void writeCifar(const std::string& path, int n, uint32_t seed) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::string bytes;
  uint32_t s = seed;
  for (int r = 0; r < n; ++r) {
    bytes.push_back(static_cast<char>(r % 10));
    for (int i = 0; i < 3072; ++i) {
      s = s * 1664525u + 1013904223u;
      bytes.push_back(static_cast<char>((s >> 24) / 2 + (r % 10) * 12));
    }
  }
  test::writeFile(path, bytes);
}

const char* kResnetProject = R"(
[model]
family = "resnet"
depth = 18
stem = "cifar"
width = 4
num_classes = 10
image_size = 32
[data]
kind = "cifar10"
path = "data"
[train]
steps = 6
batch_size = 8
optimizer = "adamw"
lr = 1e-2
eval_every = 3
eval_steps = 1
log_every = 3
checkpoint_every = 3
seed = 1
)";

}  // namespace

TEST_CASE("aStepMovesTheRunningStatisticsAndNoGradientOrOptimizerTouchesThem") {
  TinyNet net;
  optim::Schedule lr = optim::constantSchedule(0.1);
  train::Trainer trainer(net.loss(), optim::adam(lr), lr, 0);
  train::TrainState state = trainer.init(net.init(), net.initState());
  // The optimizer's state follows the parameters only.
  for (const std::string& path : state.optState.paths()) REQUIRE_MESSAGE(path.find("running") == std::string::npos, path);
  const train::Batch b1 = batchOf(1), b2 = batchOf(2);
  auto [m1, v1] = columnStats(b1.inputs);
  auto [m2, v2] = columnStats(b2.inputs);
  REQUIRE(trainer.step(state, b1).ok());
  Vec rm = follow({0, 0, 0}, m1), rv = follow({1, 1, 1}, v1);
  expectNear(leafOf(state.batchStats, "bn.running_mean"), rm, 1e-6, "mean after one step");
  expectNear(leafOf(state.batchStats, "bn.running_var"), rv, 1e-6, "var after one step");
  REQUIRE(trainer.step(state, b2).ok());
  rm = follow(rm, m2), rv = follow(rv, v2);
  expectNear(leafOf(state.batchStats, "bn.running_mean"), rm, 1e-6, "mean after two steps");
  expectNear(leafOf(state.batchStats, "bn.running_var"), rv, 1e-6, "var after two steps");
  // The norm's scale did train (it has a gradient); the statistics are not parameters.
  REQUIRE(leafOf(state.params, "bn.weight") != Vec({1, 1, 1}));
  REQUIRE(!state.params.findPath("bn.running_mean"));

  // Evaluation normalises with the running statistics, whatever the batch's: the loss by hand.
  auto evaluated = trainer.evaluate(state, b1);
  REQUIRE_MESSAGE(evaluated.ok(), evaluated.error().message);
  const Vec x = b1.inputs.toDoubles(), w = leafOf(state.params, "bn.weight"), bias = leafOf(state.params, "bn.bias");
  const Vec fw = leafOf(state.params, "fc.weight"), fb = leafOf(state.params, "fc.bias");  // [3, 2], [2]
  const std::vector<int> labels = {0, 1, 1, 0, 1, 0};
  double want = 0;
  for (size_t r = 0; r < 6; ++r) {
    double logit[2] = {fb[0], fb[1]};
    for (size_t c = 0; c < 3; ++c) {
      const double y = (x[r * 3 + c] - rm[c]) / std::sqrt(rv[c] + 1e-5) * w[c] + bias[c];
      for (size_t k = 0; k < 2; ++k) logit[k] += y * fw[c * 2 + k];
    }
    const double lse = std::log(std::exp(logit[0]) + std::exp(logit[1]));
    want += (lse - logit[labels[r]]) / 6;
  }
  REQUIRE_MESSAGE(std::fabs(evaluated->loss - want) < 1e-5, evaluated->loss << " vs " << want);

  // Two micro-batches move the statistics twice, in order.
  REQUIRE(trainer.step(state, std::vector<train::Batch>{b1, b2}).ok());
  rm = follow(follow(rm, m1), m2);
  expectNear(leafOf(state.batchStats, "bn.running_mean"), rm, 1e-6, "mean after accumulation");
}

// Two virtual CPU devices, the batch split over "data": every device normalises with the statistics of the
// whole batch (the mean over the sharded batch axis is a reduction the partitioner completes with an
// all-reduce), so the loss and the running statistics are one device's.
TEST_CASE("aDataParallelStepNormalisesWithTheGlobalBatch") {
  auto devices = spmd::devices();
  REQUIRE(devices.ok());
  if ((*devices)->numDevices() < 2) TSR_SKIP("needs TESSERA_CPU_DEVICES=2");
  test::TempDir dir;
  writeCifar(dir.filePath("data/data_batch_1.bin"), 32, 7);
  auto one = test::writeProject(dir.path(), kResnetProject);
  REQUIRE_MESSAGE(one.ok(), one.error().message);
  auto two = test::writeProject(dir.path(), kResnetProject, {"mesh.shape=[2]", "mesh.axes=[\"data\"]"});
  REQUIRE_MESSAGE(two.ok(), two.error().message);
  auto half = test::writeProject(dir.path(), kResnetProject, {"train.batch_size=4"});
  REQUIRE_MESSAGE(half.ok(), half.error().message);
  struct Outcome {
    double loss;
    Tree stats;
    size_t allReduces = 0;  // in the step's partitioned program, when it ran on the mesh
  };
  auto stepOf = [](const project::Project& p) -> Outcome {
    auto setup = train::makeTrainingSetup(p);
    if (!setup.ok()) TSR_FATAL(setup.error().message);
    auto batch = setup->next();
    if (!batch.ok()) TSR_FATAL(batch.error().message);
    auto m = setup->trainer->step(setup->state, *batch);
    if (!m.ok()) TSR_FATAL(m.error().message);
    size_t allReduces = 0;
    if (const spmd::SpmdExecutable* spmd = setup->trainer->spmdStep())
      for (const sharding::CollectiveInfo& c : spmd->partitioned().collectives) allReduces += c.opName == "all_reduce";
    return {m->loss, setup->state.batchStats, allReduces};
  };
  const Outcome single = stepOf(*one), sharded = stepOf(*two), firstHalf = stepOf(*half);
  // The step ran split over the devices: at least a mean and a variance per norm (20) completed by all-reduces.
  REQUIRE_MESSAGE(sharded.allReduces >= 40, sharded.allReduces);
  REQUIRE_MESSAGE(std::fabs(single.loss - sharded.loss) < 1e-5 * (1 + std::fabs(single.loss)),
                  single.loss << " vs " << sharded.loss);
  for (const std::string& path : single.stats.paths())
    expectNear(leafOf(sharded.stats, path), leafOf(single.stats, path), 1e-5, path);
  // A device's half of the batch alone has other statistics: equal ones above were not local ones.
  const Vec local = leafOf(firstHalf.stats, "bn1.running_mean"), global = leafOf(single.stats, "bn1.running_mean");
  double apart = 0;
  for (size_t i = 0; i < local.size(); ++i) apart = std::max(apart, std::fabs(local[i] - global[i]));
  REQUIRE_MESSAGE(apart > 1e-4, "the half batch's statistics are the whole batch's: " << apart);
}

TEST_CASE("checkpointsKeepTheRunningStatisticsResumeContinuesThemAndEvalReadsThem") {
  test::TempDir dir;
  writeCifar(dir.filePath("data/data_batch_1.bin"), 48, 3);
  writeCifar(dir.filePath("data/test_batch.bin"), 16, 5);
  auto p = test::writeProject(dir.path(), kResnetProject);
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  train::RunOptions stop;
  stop.stopAtStep = 3;
  auto r1 = train::runTraining(*p, stop, quiet);
  REQUIRE_MESSAGE(r1.ok(), r1.error().message);
  auto r2 = train::runTraining(*p, {}, quiet);
  REQUIRE_MESSAGE(r2.ok(), r2.error().message);
  train::RunOptions resume;
  resume.resume = true;
  resume.resumeRun = 1;
  auto again = train::runTraining(*p, resume, quiet);
  REQUIRE_MESSAGE(again.ok(), again.error().message);
  auto resumed = train::readSafetensors(dir.filePath("checkpoints/run-1/latest.safetensors"));
  auto straight = train::readSafetensors(dir.filePath("checkpoints/run-2/latest.safetensors"));
  REQUIRE(resumed.ok());
  REQUIRE(straight.ok());
  // 20 norms, a mean and a variance each, under batch_stats.; none in the optimizer state.
  int stats = 0;
  for (const auto& entry : straight->tensors) {
    const std::string& name = entry.first;  // clang 14 captures no structured binding (the message, CAPTURE)
    if (name.rfind("batch_stats.", 0) == 0) ++stats;
    REQUIRE_MESSAGE(!(name.rfind("opt.", 0) == 0 && name.find("running") != std::string::npos), name);
  }
  TSR_COMPARE(stats, 40);
  REQUIRE(straight->tensors.count("batch_stats.layer2.0.downsample.1.running_var"));
  // The resumed run's statistics (and everything else) are the uninterrupted run's, bit for bit.
  for (const auto& entry : straight->tensors) {
    const std::string& name = entry.first;
    const Array& a = entry.second;
    CAPTURE(name);
    REQUIRE(resumed->tensors.count(name));
    const Array& b = resumed->tensors.at(name);
    REQUIRE(a.aval() == b.aval());
    REQUIRE(std::memcmp(a.buffer()->data(), b.buffer()->data(), static_cast<size_t>(a.aval().bytes())) == 0);
  }
  const Vec moved = straight->tensors.at("batch_stats.bn1.running_var").toDoubles();
  REQUIRE(moved != Vec(moved.size(), 1.0));

  // eval normalises with the checkpoint's statistics: the loss of the model applied in inference with them, and
  // another loss with the statistics the model starts from.
  const std::string ckpt = dir.filePath("checkpoints/run-2/latest.safetensors");
  auto evaluated = train::evaluateCheckpoint(*p, ckpt, [](const std::string&) {});
  REQUIRE_MESSAGE(evaluated.ok(), evaluated.error().message);
  auto model = train::buildModel(*p, 0);
  REQUIRE(model.ok());
  Tree like = model->init(random::key(0));
  auto params = train::loadCheckpointParams(ckpt, like);
  auto state = train::loadCheckpointState(ckpt, model->initState());
  REQUIRE(params.ok());
  REQUIRE(state.ok());
  auto setup = train::makeTrainingSetup(*p);
  REQUIRE(setup.ok());
  REQUIRE(setup->val);
  auto batch = setup->val->next();
  REQUIRE(batch.ok());
  auto lossWith = [&](const Tree& stats) {
    return train::projectLoss(p->train, model->forward(*params, stats, batch->inputs), batch->targets).item();
  };
  REQUIRE_MESSAGE(std::fabs(*evaluated - lossWith(*state)) < 1e-4 * (1 + *evaluated), *evaluated << " vs " << lossWith(*state));
  REQUIRE(std::fabs(*evaluated - lossWith(model->initState())) > 1e-3);
}
