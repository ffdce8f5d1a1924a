// Segmentation and the metrics runs log: accuracy, pixel accuracy and mean IoU on batches worked out by hand; the
// shapes [data] kind (deterministic images whose masks match what is drawn, and its errors); a data-parallel
// evaluation on two devices scores the global batch, as a loop over the model's logits does; and a unet run logs
// its metrics, in [0, 1], at every evaluation (training steps compute none).
#include "tests/check.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "engine/data/synthetic_shapes.h"
#include "engine/optim/metrics.h"
#include "engine/spmd/spmd.h"
#include "engine/store/run_store.h"
#include "engine/train/data_source.h"
#include "engine/train/project_model.h"
#include "engine/train/run.h"
#include "engine/train/setup.h"
#include "tests/temp_dir.h"
#include "tests/train/project_files.h"

using namespace tsr;

namespace {

const char* kUnetProject = R"([model]
family = "unet"
in_channels = 3
num_classes = 4
base_width = 4
depth = 2
image_size = 16
[data]
kind = "shapes"
samples = 64
val_fraction = 0.25
[train]
steps = 4
batch_size = 8
eval_every = 2
eval_steps = 2
lr = 3e-3
warmup_steps = 0
)";

// Logits [..., C] that put 2.0 on each position's predicted class and 0 elsewhere.
Array logitsFor(const std::vector<int32_t>& predicted, Shape shape, int64_t classes) {
  std::vector<float> v;
  for (int32_t p : predicted)
    for (int64_t c = 0; c < classes; ++c) v.push_back(c == p ? 2.0f : 0.0f);
  std::vector<int64_t> dims = shape.dims();
  dims.push_back(classes);
  return Array::fromVector(v, Shape(dims));
}

double scalar(const Array& a) { return a.item(); }

// The mean IoU of host labels, as sklearn's jaccard_score(average="macro") computes it: over the classes that
// occur in the labels or the predictions.
double hostMeanIou(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted, int64_t classes) {
  double total = 0;
  int present = 0;
  for (int64_t c = 0; c < classes; ++c) {
    int64_t inter = 0, uni = 0;
    for (size_t i = 0; i < truth.size(); ++i) {
      inter += truth[i] == c && predicted[i] == c;
      uni += truth[i] == c || predicted[i] == c;
    }
    if (uni == 0) continue;
    total += static_cast<double>(inter) / static_cast<double>(uni);
    ++present;
  }
  return total / present;
}

}  // namespace

// A 2x3 image, 4 classes, class 3 nowhere:
//   labels     0 0 1      predicted  0 1 1
//              1 2 2                 1 2 0
// class 0: predicted {(0,0), (1,2)}, labelled {(0,0), (0,1)}: intersection 1, union 3 -> 1/3
// class 1: predicted {(0,1), (0,2), (1,0)}, labelled {(0,2), (1,0)}: 2 / 3
// class 2: predicted {(1,1)}, labelled {(1,1), (1,2)}: 1 / 2
// mean over the three present classes: (1/3 + 2/3 + 1/2) / 3 = 0.5 (class 3 counted as 0 would give 0.375, as 1
// 0.625); pixel accuracy 4 of 6.
TEST_CASE("pixelAccuracyAndMeanIouByHand") {
  Array labels = Array::fromVector(std::vector<int32_t>{0, 0, 1, 1, 2, 2}, Shape{1, 2, 3});
  Array logits = logitsFor({0, 1, 1, 1, 2, 0}, Shape{1, 2, 3}, 4);
  REQUIRE(std::fabs(scalar(optim::meanIou(logits, labels)) - 0.5) < 1e-6);
  REQUIRE(std::fabs(scalar(optim::accuracy(logits, labels)) - 4.0 / 6.0) < 1e-6);
  // A class predicted but in no label counts, with IoU 0: labels all 0, one pixel predicted 1 of 4:
  // class 0 3/4, class 1 0/1 -> 0.375.
  Array zeros = Array::fromVector(std::vector<int32_t>{0, 0, 0, 0}, Shape{1, 2, 2});
  REQUIRE(std::fabs(scalar(optim::meanIou(logitsFor({0, 0, 0, 1}, Shape{1, 2, 2}, 2), zeros)) - 0.375) < 1e-6);
  // The batch is scored as a whole, not image by image: two 1x2 images, labels (0 1) and (0 0), predictions
  // (0 1) and (1 0). Over the batch: class 0 1+1 of 3 -> 2/3... intersection {img0 px0, img1 px1} = 2, union
  // {img0 px0, img1 px0, img1 px1} = 3; class 1: intersection {img0 px1} = 1, union {img0 px1, img1 px0} = 2.
  // Mean (2/3 + 1/2) / 2 = 7/12; image by image it would be (1 + 0.25) / 2 = 0.625.
  Array two = Array::fromVector(std::vector<int32_t>{0, 1, 0, 0}, Shape{2, 1, 2});
  REQUIRE(std::fabs(scalar(optim::meanIou(logitsFor({0, 1, 1, 0}, Shape{2, 1, 2}, 2), two)) - 7.0 / 12.0) < 1e-6);
  // A classifier's accuracy: 3 of 4 rows have their label on top.
  Array rows = Array::fromVector(std::vector<float>{0.1f, 0.7f, 0.2f, 0.9f, 0.0f, 0.1f, 0.3f, 0.3f, 0.4f, 0.2f, 0.5f, 0.3f},
                                 Shape{4, 3});
  Array classes = Array::fromVector(std::vector<int32_t>{1, 0, 2, 2}, Shape{4});
  REQUIRE(std::fabs(scalar(optim::accuracy(rows, classes)) - 0.75) < 1e-6);
}

// An evaluation pools mean IoU over its batches, as one batch holding them all gives it, where the mean of the
// batches' values would differ. The two 1x2 batches of the last case, evaluated apart: batch 1, labels (0 1),
// predicted (0 1): class 0 1/1, class 1 1/1 -> 1; batch 2, labels (0 0), predicted (1 0): class 0 1/2, class 1
// 0/1 -> 0.25. Their mean 0.625; pooled, 7/12 (the sums: intersections 2 and 1, unions 3 and 2). Pixel accuracy,
// a plain mean: (1 + 0.5) / 2.
TEST_CASE("anEvaluationPoolsMeanIouOverItsBatches") {
  auto batchOf = [](const std::vector<int32_t>& labels, const std::vector<int32_t>& predicted) {
    Array y = Array::fromVector(labels, Shape{1, 1, 2});
    Array logits = logitsFor(predicted, Shape{1, 1, 2}, 2);
    train::StepMetrics m;
    m.loss = static_cast<double>(labels[0] + labels[1]);
    m.pooled.push_back({"mean_iou", optim::meanIouSums(logits, y).toDoubles(), optim::meanIouOfSums});
    m.extra = {{"pixel_accuracy", scalar(optim::accuracy(logits, y))},
               {"mean_iou", optim::meanIouOfSums(m.pooled[0].sums)}};
    return m;
  };
  const train::StepMetrics first = batchOf({0, 1}, {0, 1}), second = batchOf({0, 0}, {1, 0});
  REQUIRE(first.pooled[0].sums == std::vector<double>{1, 1, 1, 1});
  REQUIRE(second.pooled[0].sums == std::vector<double>{1, 0, 2, 1});
  REQUIRE(std::fabs(first.extra[1].second - 1.0) < 1e-9);
  REQUIRE(std::fabs(second.extra[1].second - 0.25) < 1e-9);
  const train::StepMetrics pooled = train::poolEvaluations({first, second});
  REQUIRE(std::fabs(pooled.loss - 0.5) < 1e-9);
  TSR_COMPARE(pooled.extra[0].first, std::string("pixel_accuracy"));
  REQUIRE(std::fabs(pooled.extra[0].second - 0.75) < 1e-9);
  TSR_COMPARE(pooled.extra[1].first, std::string("mean_iou"));
  REQUIRE_MESSAGE(std::fabs(pooled.extra[1].second - 7.0 / 12.0) < 1e-9, pooled.extra[1].second);
  // No class anywhere (no pixels): 0, not a division by zero.
  REQUIRE(optim::meanIouOfSums({0, 0, 0, 0}) == 0.0);
}

// A unet run's evaluation over eval_steps batches (what tessera eval and a run's val_mean_iou report) against
// the mean IoU of every pixel of those batches, computed with loops from the model's logits.
TEST_CASE("aCheckpointsMeanIouIsOverEveryEvaluatedPixel") {
  test::TempDir dir;
  auto p = test::writeProject(dir.path(), kUnetProject, {"train.eval_steps=3"});
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  auto run = train::runTraining(*p, {}, [](const train::RunEvent&) {});
  REQUIRE_MESSAGE(run.ok(), run.error().message);
  auto evaluated = train::evaluateCheckpointMetrics(*p, run->checkpointPath, [](const std::string&) {});
  REQUIRE_MESSAGE(evaluated.ok(), evaluated.error().message);
  std::map<std::string, double> got(evaluated->extra.begin(), evaluated->extra.end());
  // The reference: the same checkpoint and validation batches, every pixel's argmax against its label.
  auto setup = train::makeTrainingSetup(*p);
  REQUIRE_MESSAGE(setup.ok(), setup.error().message);
  auto params = train::loadCheckpointParams(run->checkpointPath, setup->state.params);
  REQUIRE_MESSAGE(params.ok(), params.error().message);
  auto stats = train::loadCheckpointState(run->checkpointPath, setup->state.batchStats);
  REQUIRE_MESSAGE(stats.ok(), stats.error().message);
  std::vector<int64_t> truth, predicted;
  double perBatch = 0;
  for (int i = 0; i < 3; ++i) {
    auto batch = setup->val->next();
    REQUIRE_MESSAGE(batch.ok(), batch.error().message);
    const std::vector<double> l = setup->model.forward(*params, *stats, batch->inputs).toDoubles();
    const std::vector<double> y = batch->targets.toDoubles();
    std::vector<int64_t> batchTruth, batchPredicted;
    for (size_t k = 0; k < y.size(); ++k) {
      const auto first = l.begin() + static_cast<std::ptrdiff_t>(k) * 4;
      batchPredicted.push_back(std::max_element(first, first + 4) - first);
      batchTruth.push_back(static_cast<int64_t>(y[k]));
    }
    perBatch += hostMeanIou(batchTruth, batchPredicted, 4) / 3;
    truth.insert(truth.end(), batchTruth.begin(), batchTruth.end());
    predicted.insert(predicted.end(), batchPredicted.begin(), batchPredicted.end());
  }
  const double reference = hostMeanIou(truth, predicted, 4);
  REQUIRE_MESSAGE(std::fabs(got.at("mean_iou") - reference) < 1e-6,
                  got.at("mean_iou") << " vs " << reference << " (the mean of the batches' values: " << perBatch << ")");
}

// Sample i is the same every time; with no noise a pixel of class 0 has the background's colour and every other
// pixel a shape's; each kind of shape turns up; the seed changes the images.
TEST_CASE("shapesAreDeterministicAndTheirMasksMatchTheImages") {
  data::ShapesOptions o;
  o.size = 24;
  o.noise = 0;
  const int64_t plane = o.size * o.size;
  std::vector<float> image(static_cast<size_t>(3 * plane)), again(image.size());
  std::vector<int32_t> mask(static_cast<size_t>(plane)), mask2(mask.size());
  std::set<int32_t> seen;
  for (int64_t index = 0; index < 40; ++index) {
    data::renderShapes(o, index, image.data(), mask.data());
    data::renderShapes(o, index, again.data(), mask2.data());
    REQUIRE(image == again);
    REQUIRE(mask == mask2);
    // The background's colour: that of any pixel of class 0 (the shapes cover at most half of the image's corners).
    int64_t bg = -1;
    for (int64_t i = 0; i < plane && bg < 0; ++i)
      if (mask[static_cast<size_t>(i)] == 0) bg = i;
    REQUIRE(bg >= 0);
    for (int64_t i = 0; i < plane; ++i) {
      const int32_t m = mask[static_cast<size_t>(i)];
      REQUIRE((m >= 0 && m <= 3));
      seen.insert(m);
      bool same = true;
      for (int64_t c = 0; c < 3; ++c) same = same && image[static_cast<size_t>(c * plane + i)] == image[static_cast<size_t>(c * plane + bg)];
      CAPTURE(index);
      CAPTURE(i);
      // Shape colours lie at least 0.3 from the background's in some channel.
      REQUIRE(same == (m == 0));
    }
  }
  TSR_COMPARE(seen.size(), size_t(4));
  data::ShapesOptions other = o;
  other.seed = 1;
  data::renderShapes(other, 0, again.data(), mask2.data());
  data::renderShapes(o, 0, image.data(), mask.data());
  REQUIRE(image != again);
}

TEST_CASE("shapesDataErrorsNameTheKeyAndTheLimit") {
  test::TempDir dir;
  auto errorOf = [&](const std::vector<std::string>& sets) -> std::string {
    auto p = test::writeProject(dir.path(), kUnetProject, sets);
    if (!p.ok()) return p.error().message;
    auto d = train::prepareData(*p, [](const std::string&) {});
    return d.ok() ? std::string("(prepared)") : d.error().message;
  };
  REQUIRE(errorOf({}) == "(prepared)");
  const std::string classes = errorOf({"model.num_classes=6"});
  REQUIRE_MESSAGE(classes.find("num_classes must be 2 to 4") != std::string::npos, classes);
  const std::string few = errorOf({"data.samples=8"});
  REQUIRE_MESSAGE(few.find("leaves 6 training images, fewer than [train] batch_size = 8") != std::string::npos, few);
  const std::string side = errorOf({"model.image_size=18"});
  REQUIRE_MESSAGE(side.find("image_size (18) must be divisible by 2^depth = 4") != std::string::npos, side);
  const std::string noise = errorOf({"data.noise=-1"});
  REQUIRE_MESSAGE(noise.find("noise") != std::string::npos, noise);
  const std::string kind = errorOf({"data.kind=\"npy\""});
  REQUIRE_MESSAGE(kind.find("shapes (what the unet family trains on)") != std::string::npos, kind);
}

// Every norm with every upsampling compiles and runs a training step (nearest upsampling's gradient once failed
// in the fusion planner) and its evaluation, with finite values.
TEST_CASE("everyUnetVariantTrainsAStep") {
  test::TempDir dir;
  for (const char* norm : {"batch", "group", "none"})
    for (const char* up : {"transpose", "bilinear", "nearest"}) {
      CAPTURE(norm);
      CAPTURE(up);
      auto p = test::writeProject(dir.path(), kUnetProject,
                                  {std::string("model.norm=") + norm, std::string("model.upsample=") + up});
      REQUIRE_MESSAGE(p.ok(), p.error().message);
      auto setup = train::makeTrainingSetup(*p);
      REQUIRE_MESSAGE(setup.ok(), setup.error().message);
      auto batch = setup->next();
      REQUIRE(batch.ok());
      auto m = setup->trainer->step(setup->state, *batch);
      REQUIRE_MESSAGE(m.ok(), m.error().message);
      REQUIRE(std::isfinite(m->loss));
      auto e = setup->trainer->evaluate(setup->state, *batch);
      REQUIRE_MESSAGE(e.ok(), e.error().message);
      REQUIRE(std::isfinite(e->loss));
    }
}

// Two virtual CPU devices, the batch split over "data": the metrics an evaluation reports are those of the whole
// batch, computed here from the model's logits with loops, and one device's.
TEST_CASE("aDataParallelEvaluationScoresTheGlobalBatch") {
  auto devices = spmd::devices();
  REQUIRE(devices.ok());
  if ((*devices)->numDevices() < 2) TSR_SKIP("needs TESSERA_CPU_DEVICES=2");
  test::TempDir dir;
  auto one = test::writeProject(dir.path(), kUnetProject);
  REQUIRE_MESSAGE(one.ok(), one.error().message);
  auto two = test::writeProject(dir.path(), kUnetProject, {"mesh.shape=[2]", "mesh.axes=[\"data\"]"});
  REQUIRE_MESSAGE(two.ok(), two.error().message);
  auto metricsOf = [](const project::Project& p) {
    auto setup = train::makeTrainingSetup(p);
    if (!setup.ok()) TSR_FATAL(setup.error().message);
    // Two steps first, so that the predictions are not all one class.
    for (int i = 0; i < 2; ++i) {
      auto b = setup->next();
      if (!b.ok() || !setup->trainer->step(setup->state, *b).ok()) TSR_FATAL("a training step failed");
    }
    auto batch = setup->val->next();
    if (!batch.ok()) TSR_FATAL(batch.error().message);
    auto m = setup->trainer->evaluate(setup->state, *batch);
    if (!m.ok()) TSR_FATAL(m.error().message);
    std::map<std::string, double> out(m->extra.begin(), m->extra.end());
    // The reference: argmax of the model's logits (gathered to one device) against the labels, in loops.
    Array logits = setup->model.forward(setup->state.params, setup->state.batchStats, batch->inputs).gathered();
    const std::vector<double> l = logits.toDoubles(), y = batch->targets.toDoubles();
    const int64_t classes = logits.dim(-1);
    std::vector<int64_t> truth, predicted;
    int64_t correct = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const auto first = l.begin() + static_cast<std::ptrdiff_t>(i) * classes;
      predicted.push_back(std::max_element(first, first + classes) - first);
      truth.push_back(static_cast<int64_t>(y[i]));
      correct += predicted.back() == truth.back();
    }
    out["ref_pixel_accuracy"] = static_cast<double>(correct) / static_cast<double>(y.size());
    out["ref_mean_iou"] = hostMeanIou(truth, predicted, classes);
    return out;
  };
  const auto single = metricsOf(*one), sharded = metricsOf(*two);
  for (const auto* m : {&single, &sharded}) {
    REQUIRE(m->count("pixel_accuracy"));
    REQUIRE(m->count("mean_iou"));
    REQUIRE_MESSAGE(std::fabs(m->at("pixel_accuracy") - m->at("ref_pixel_accuracy")) < 1e-6,
                    m->at("pixel_accuracy") << " vs " << m->at("ref_pixel_accuracy"));
    REQUIRE_MESSAGE(std::fabs(m->at("mean_iou") - m->at("ref_mean_iou")) < 1e-6,
                    m->at("mean_iou") << " vs " << m->at("ref_mean_iou"));
  }
  REQUIRE(std::fabs(single.at("mean_iou") - sharded.at("mean_iou")) < 1e-4);
  REQUIRE(std::fabs(single.at("pixel_accuracy") - sharded.at("pixel_accuracy")) < 1e-4);
}

// A unet run logs val_pixel_accuracy and val_mean_iou at every evaluation, each in [0, 1], and an mlp run
// val_accuracy; training steps log none (their graph is the loss's alone).
TEST_CASE("runsLogTheirFamilysMetricsAtEvaluations") {
  test::TempDir dir;
  auto p = test::writeProject(dir.path(), kUnetProject);
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  auto run = train::runTraining(*p, {}, [](const train::RunEvent&) {});
  REQUIRE_MESSAGE(run.ok(), run.error().message);
  auto db = store::RunStore::open(run->storePath);
  REQUIRE_MESSAGE(db.ok(), db.error().message);
  for (const char* key : {"val_pixel_accuracy", "val_mean_iou"}) {
    CAPTURE(key);
    auto series = db->metrics(run->runId, key);
    REQUIRE_MESSAGE(series.ok(), series.error().message);
    TSR_COMPARE(series->size(), size_t(2));
    for (const auto& point : *series) REQUIRE((point.value >= 0 && point.value <= 1));
  }
  TSR_COMPARE(db->metrics(run->runId, "mean_iou")->size(), size_t(0));
  TSR_COMPARE(db->metrics(run->runId, "pixel_accuracy")->size(), size_t(0));

  test::TempDir mlpDir;
  auto mlp = test::writeProject(mlpDir.path(), "[model]\nfamily = \"mlp\"\nsizes = [16, 32, 4]\n[data]\nkind = "
                                                 "\"synthetic-digits\"\n[train]\nsteps = 4\neval_every = 2\nbatch_size = 8\n");
  REQUIRE_MESSAGE(mlp.ok(), mlp.error().message);
  auto mlpRun = train::runTraining(*mlp, {}, [](const train::RunEvent&) {});
  REQUIRE_MESSAGE(mlpRun.ok(), mlpRun.error().message);
  auto mlpDb = store::RunStore::open(mlpRun->storePath);
  REQUIRE(mlpDb.ok());
  auto accuracy = mlpDb->metrics(mlpRun->runId, "val_accuracy");
  REQUIRE(accuracy.ok());
  TSR_COMPARE(accuracy->size(), size_t(2));
  for (const auto& point : *accuracy) REQUIRE((point.value >= 0 && point.value <= 1));
  TSR_COMPARE(mlpDb->metrics(mlpRun->runId, "accuracy")->size(), size_t(0));
}
