// Runs own their checkpoints: two runs of a project keep two folders; --resume N continues run N bit for bit;
// best.safetensors holds the state at the lowest validation loss; keep_checkpoints keeps the last K periodic
// states. A run records its resolved config, stores every step's scalars, and gradient accumulation gives the
// update of one batch holding all the micro-batches.
#include "tests/check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/optim/optim.h"
#include "engine/project/project.h"
#include "engine/store/run_store.h"
#include "engine/train/checkpoints.h"
#include "engine/train/run.h"
#include "engine/train/safetensors.h"
#include "engine/train/trainer.h"
#include "engine/transform/api.h"
#include "tests/temp_dir.h"
#include "tests/train/project_files.h"

using namespace tsr;
using test::writeProject;
namespace fs = std::filesystem;

namespace {

const char* kProject = R"(
[model]
family = "mlp"
sizes = [16, 32, 4]
[data]
kind = "synthetic-digits"
[train]
steps = 12
batch_size = 8
optimizer = "adamw"
lr = 1e-2
warmup_steps = 2
eval_every = 3
log_every = 5
checkpoint_every = 3
keep_checkpoints = 2
seed = 3
)";

std::string fileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The tensors of a checkpoint, bytes by name (metadata aside).
std::map<std::string, std::string> tensorsOf(const std::string& path) {
  auto f = train::readSafetensors(path);
  REQUIRE_MESSAGE(f.ok(), f.error().message);
  std::map<std::string, std::string> out;
  for (const auto& [name, a] : f->tensors)
    out[name] = std::string(static_cast<const char*>(a.buffer()->data()), static_cast<size_t>(a.aval().bytes()));
  return out;
}

const auto quiet = [](const train::RunEvent&) {};

}  // namespace

TEST_CASE("two runs keep two checkpoint folders, and resume N continues run N bit for bit") {
  test::TempDir dir;
  auto p = writeProject(dir.path(), kProject);
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  // Run 1 stops at step 5; run 2 trains the whole run; then run 1 resumes by number, though run 2 is later.
  train::RunOptions half;
  half.stopAtStep = 5;
  auto r1 = train::runTraining(*p, half, quiet);
  REQUIRE_MESSAGE(r1.ok(), r1.error().message);
  auto r2 = train::runTraining(*p, {}, quiet);
  REQUIRE_MESSAGE(r2.ok(), r2.error().message);
  TSR_COMPARE(r1->runId, int64_t(1));
  TSR_COMPARE(r2->runId, int64_t(2));
  {
    auto store = store::RunStore::openReadOnly(r2->storePath);
    REQUIRE(store.ok());
    TSR_COMPARE(*train::runsWithCheckpoints(p->dir, *store), (std::vector<int64_t>{1, 2}));
  }
  const std::string latest1 = dir.filePath("checkpoints/run-1/latest.safetensors");
  const std::string latest2 = dir.filePath("checkpoints/run-2/latest.safetensors");
  TSR_COMPARE(train::readSafetensors(latest1)->metadata["step"], std::string("5"));

  train::RunOptions resume;
  resume.resume = true;
  resume.resumeRun = 1;
  auto again = train::runTraining(*p, resume, quiet);
  REQUIRE_MESSAGE(again.ok(), again.error().message);
  TSR_COMPARE(again->runId, int64_t(1));
  TSR_COMPARE(train::readSafetensors(latest1)->metadata["step"], std::string("12"));
  // The resumed run ends where the uninterrupted one did, bit for bit, and run 2's checkpoint was not touched.
  TSR_COMPARE(tensorsOf(latest1), tensorsOf(latest2));
  TSR_COMPARE(train::readSafetensors(latest2)->metadata["run"], std::string("2"));
  // Their stored losses agree step by step too (every step is stored, though log_every is 5).
  auto db = store::RunStore::open(r2->storePath);
  REQUIRE(db.ok());
  auto l1 = db->metrics(1, "loss");
  auto l2 = db->metrics(2, "loss");
  TSR_COMPARE(l1->size(), size_t(12));
  TSR_COMPARE(l2->size(), size_t(12));
  for (size_t i = 0; i < 12; ++i) TSR_COMPARE(l1->at(i).value, l2->at(i).value);
  for (const char* key : {"lr", "grad_norm", "samples_per_sec", "step_time"}) TSR_COMPARE(db->metrics(2, key)->size(), size_t(12));
  TSR_COMPARE(db->run(1)->status, store::RunStatus::Finished);

  // Which checkpoint a command reads: the latest run by default, a given run, or its best.
  TSR_COMPARE(*train::findCheckpoint(*p), latest2);
  TSR_COMPARE(*train::findCheckpoint(*p, 1), latest1);
  REQUIRE(!train::findCheckpoint(*p, 9).ok());
  TSR_COMPARE(train::findCheckpoint(*p, 9).error().message.find("runs with one: 1, 2") != std::string::npos, true);

  // A finished run has nothing left to train; --resume says so rather than finishing it twice.
  auto done = train::runTraining(*p, resume, quiet);
  REQUIRE(!done.ok());
  REQUIRE_MESSAGE(done.error().message.find("at step 12 already") != std::string::npos, done.error().message);
}

TEST_CASE("best holds the lowest validation loss and keep_checkpoints the last K periodic states") {
  test::TempDir dir;
  auto p = writeProject(dir.path(), kProject);
  REQUIRE(p.ok());
  auto r = train::runTraining(*p, {}, quiet);
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  auto db = store::RunStore::open(r->storePath);
  auto val = db->metrics(r->runId, "val_loss");
  REQUIRE(val->size() == 4);  // steps 3, 6, 9, 12
  auto lowest = std::min_element(val->begin(), val->end(), [](const auto& a, const auto& b) { return a.value < b.value; });
  auto best = train::readSafetensors(dir.filePath("checkpoints/run-1/best.safetensors"));
  REQUIRE(best.ok());
  TSR_COMPARE(best->metadata["step"], std::to_string(lowest->step));
  TSR_COMPARE(best->metadata["metric"], std::string("val_loss"));
  TSR_COMPARE(std::stod(best->metadata["value"]), lowest->value);
  TSR_COMPARE(db->params(r->runId)->at("checkpoint.best_step"), std::to_string(lowest->step));
  // Steps 3, 6, 9 and 12 were periodic; the last two are kept, and step 12's equals latest.
  auto steps = train::stepCheckpoints(dir.filePath("checkpoints/run-1"));
  TSR_COMPARE(steps.size(), size_t(2));
  TSR_COMPARE(fs::path(steps[0]).filename().string(), std::string("step-000009.safetensors"));
  TSR_COMPARE(fs::path(steps[1]).filename().string(), std::string("step-000012.safetensors"));
  TSR_COMPARE(fileBytes(steps[1]), fileBytes(dir.filePath("checkpoints/run-1/latest.safetensors")));
  TSR_COMPARE(train::readSafetensors(steps[0])->metadata["step"], std::string("9"));
  // The best checkpoint evaluates to its recorded validation loss.
  auto evaluated = train::evaluateCheckpoint(*p, *train::findCheckpoint(*p, 1, "best"), [](const std::string&) {});
  REQUIRE(evaluated.ok());
  TSR_COMPARE(*evaluated, lowest->value);
}

TEST_CASE("a run records its resolved config, overrides, tags and where it ran") {
  test::TempDir dir;
  auto p = writeProject(dir.path(), kProject, {"train.lr=3e-3", "train.schedule=cosine"});
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  train::RunOptions o;
  o.steps = 4;  // recorded as given
  o.tags = {"baseline", "lr=3e-3"};
  auto r = train::runTraining(*p, o, quiet);
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  auto db = store::RunStore::open(r->storePath);
  auto params = db->params(r->runId);
  TSR_COMPARE(params->at("train.steps"), std::string("4"));
  TSR_COMPARE(params->at("train.lr"), std::string("0.003"));
  TSR_COMPARE(params->at("train.schedule"), std::string("cosine"));
  TSR_COMPARE(params->at("train.batch_size"), std::string("8"));
  TSR_COMPARE(params->at("train.accumulate"), std::string("1"));  // a default the file never names
  TSR_COMPARE(params->at("model.sizes"), std::string("[16, 32, 4]"));
  TSR_COMPARE(params->at("mesh.shape"), std::string("[1]"));
  TSR_COMPARE(params->at("model.params"), std::to_string(16 * 32 + 32 + 32 * 4 + 4));
  TSR_COMPARE(params->at("run.overrides"), std::string("train.lr=3e-3 train.schedule=cosine"));
  REQUIRE(params->count("run.tessera_version"));
  TSR_COMPARE(params->at("run.device"), std::string("cpu"));
  TSR_COMPARE(db->run(r->runId)->tags, (std::vector<std::string>{"baseline", "lr=3e-3"}));
  TSR_COMPARE(db->run(r->runId)->config, std::string(kProject));  // the file as written
  // The folder is recorded absolute: runs delete finds the checkpoints from any working directory.
  REQUIRE(fs::path(db->run(r->runId)->project).is_absolute());
  auto resolved = db->artifact(r->runId, "config/resolved.toml");
  REQUIRE(resolved.ok());
  // The resolved config trains the same run: it reads back to the same settings.
  auto back = project::parseProject(resolved->data, "resolved.toml", dir.path());
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  TSR_COMPARE(back->train.lr, 3e-3);
  TSR_COMPARE(back->train.schedule, std::string("cosine"));
  TSR_COMPARE(back->train.keepCheckpoints, int64_t(2));
}

// One SGD step over K micro-batches of B equals one step over the batch of K*B that holds them (the loss is
// a mean), and so does a training run with [train] accumulate = K against batch_size = K*B on the same items; the
// model's metrics are their mean over the micro-batches.
TEST_CASE("gradient accumulation is the update of the batch that holds the micro-batches") {
  // A linear model, MSE: the update is computed by hand from the data below too.
  // It reports the batch's mean target beside the loss (Context::sow), as a model's metric.
  train::TrainLossFn loss = [](const Tree& p, const train::Batch& b, nn::Context& ctx) {
    Array pred = matmul(b.inputs, p.find("w")->leaf());
    Array d = pred - b.targets;
    ctx.sow("mean_target", mean(b.targets));
    return mean(d * d);
  };
  auto makeBatch = [](int64_t rows, float offset) {
    std::vector<float> x, y;
    for (int64_t i = 0; i < rows; ++i) {
      for (int j = 0; j < 3; ++j) x.push_back(offset + 0.25f * static_cast<float>(i * 3 + j) - 1.0f);
      y.push_back(offset - 0.5f * static_cast<float>(i));
    }
    return train::Batch{Array::fromVector(x, Shape{rows, 3}), Array::fromVector(y, Shape{rows, 1})};
  };
  const double lr = 0.1;
  Tree params0 = Tree::dict({{"w", Tree(Array::fromVector(std::vector<float>{0.5f, -0.25f, 1.0f}, Shape{3, 1}))}});
  auto stepWith = [&](const std::vector<train::Batch>& batches) {
    train::Trainer t(loss, optim::sgd(optim::constantSchedule(lr), 0.0), optim::constantSchedule(lr), 0);
    train::TrainState s = t.init(params0);
    auto m = t.step(s, batches);
    REQUIRE_MESSAGE(m.ok(), m.error().message);
    return std::make_pair(s.params.find("w")->leaf().toFloats(), *m);
  };
  train::Batch a = makeBatch(4, 0.0f), b = makeBatch(4, 1.0f);
  train::Batch both{concatenate({a.inputs, b.inputs}, 0), concatenate({a.targets, b.targets}, 0)};
  auto [wAcc, mAcc] = stepWith({a, b});
  auto [wOne, mOne] = stepWith({both});
  // By hand: grad = 2/N X^T (X w - y) over the 8 rows; w' = w - lr grad.
  std::vector<float> X = both.inputs.toFloats(), Y = both.targets.toFloats();
  std::vector<double> w = {0.5, -0.25, 1.0}, grad(3, 0.0);
  double lossByHand = 0;
  for (int i = 0; i < 8; ++i) {
    double r = -Y[i];
    for (int j = 0; j < 3; ++j) r += X[i * 3 + j] * w[j];
    lossByHand += r * r / 8;
    for (int j = 0; j < 3; ++j) grad[j] += 2.0 / 8 * X[i * 3 + j] * r;
  }
  for (int j = 0; j < 3; ++j) {
    TSR_COMPARE(wAcc[j], static_cast<float>(w[j] - lr * grad[j]));
    TSR_COMPARE(wAcc[j], wOne[j]);
  }
  TSR_COMPARE(static_cast<float>(mAcc.loss), static_cast<float>(lossByHand));
  TSR_COMPARE(mAcc.gradNorm, mOne.gradNorm);
  // The metric is the mean over the micro-batches, as over the batch that holds them: the mean of Y.
  double meanY = 0;
  for (float v : Y) meanY += v / 8.0;
  REQUIRE(mAcc.extra.size() == 1);
  TSR_COMPARE(mAcc.extra[0].first, std::string("mean_target"));
  REQUIRE(std::abs(mAcc.extra[0].second - meanY) < 1e-6);
  REQUIRE(std::abs(mOne.extra[0].second - meanY) < 1e-6);
}

// A run with accumulate = K draws K batches per optimizer step (the data position says so), and resumes from
// a checkpoint taken between steps exactly as an uninterrupted run goes on.
TEST_CASE("accumulate = K draws K batches per step and resumes exactly") {
  test::TempDir a, b;
  const std::vector<std::string> sets = {"train.accumulate=3", "train.steps=4", "train.checkpoint_every=0"};
  auto pa = writeProject(a.path(), kProject, sets);
  auto pb = writeProject(b.path(), kProject, sets);
  REQUIRE_MESSAGE(pa.ok(), pa.error().message);
  auto ra = train::runTraining(*pa, {}, quiet);
  REQUIRE_MESSAGE(ra.ok(), ra.error().message);
  auto ck = train::readSafetensors(a.filePath("checkpoints/run-1/latest.safetensors"));
  TSR_COMPARE(ck->metadata["step"], std::string("4"));
  TSR_COMPARE(ck->metadata["data"], std::string("12"));  // 4 steps x 3 micro-batches
  train::RunOptions half;
  half.stopAtStep = 2;
  REQUIRE(train::runTraining(*pb, half, quiet).ok());
  train::RunOptions rest;
  rest.resume = true;
  REQUIRE(train::runTraining(*pb, rest, quiet).ok());
  TSR_COMPARE(tensorsOf(a.filePath("checkpoints/run-1/latest.safetensors")),
              tensorsOf(b.filePath("checkpoints/run-1/latest.safetensors")));
  auto db = store::RunStore::open(ra->storePath);
  auto perSec = db->metrics(1, "samples_per_sec");
  auto stepTime = db->metrics(1, "step_time");
  TSR_COMPARE(perSec->at(2).value, 3 * 8 / stepTime->at(2).value);  // K x B samples per step
}

// A run whose run-N folder was another store's checkpoints in run-N-<id>, and it counts as a run with a checkpoint
// of its own store (the folder name was once read as no run at all); each store sees its own run N.
TEST_CASE("runs with checkpoints include run-N-<id> folders") {
  test::TempDir dir;
  auto p = writeProject(dir.path(), kProject);
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  train::RunOptions first;
  first.stopAtStep = 1;
  REQUIRE(train::runTraining(*p, first, quiet).ok());
  train::RunOptions other = first;
  other.storePath = dir.filePath("other.db");
  auto r = train::runTraining(*p, other, quiet);
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  auto params = store::RunStore::openReadOnly(other.storePath)->params(1);
  REQUIRE(params.ok());
  REQUIRE(params->at("checkpoint.dir").rfind("run-1-", 0) == 0);
  auto runsOf = [&](const std::string& db) {
    auto store = store::RunStore::openReadOnly(db);
    REQUIRE(store.ok());
    return *train::runsWithCheckpoints(p->dir, *store);
  };
  TSR_COMPARE(runsOf(dir.filePath("runs.db")), (std::vector<int64_t>{1}));
  TSR_COMPARE(runsOf(other.storePath), (std::vector<int64_t>{1}));
  // With run-1 gone, only the other store's run 1 has a checkpoint.
  std::filesystem::remove_all(dir.filePath("checkpoints/run-1"));
  TSR_COMPARE(runsOf(dir.filePath("runs.db")), (std::vector<int64_t>{}));
  TSR_COMPARE(runsOf(other.storePath), (std::vector<int64_t>{1}));
}
