#include "engine/train/bench.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "engine/random/random.h"
#include "engine/runtime/profiler.h"
#include "engine/train/setup.h"

namespace tsr::train {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

Result<BenchReport> benchTrainingStep(const project::Project& project, const BenchOptions& o,
                                      const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  if (o.steps < 1) return makeError("--steps must be at least 1, got {}", o.steps);
  // No data (synthetic batches of the project's shapes) and one device: the step alone is measured.
  SetupOverrides overrides;
  overrides.batchSize = o.batch;
  overrides.seqLen = o.seq;
  overrides.data = false;
  overrides.mesh = false;
  overrides.info = say;
  TSR_ASSIGN(TrainingSetup setup, makeTrainingSetup(project, overrides));
  const project::Project& p = setup.project;
  const project::TrainSection& t = p.train;
  const ProjectModel& model = setup.model;
  Trainer& trainer = *setup.trainer;
  TrainState& state = setup.state;
  const bool lm = p.model.languageModel();

  // A few distinct batches, made before timing and cycled through.
  int64_t warmup = std::max<int64_t>(o.warmup, 1);
  TSR_ASSIGN(std::vector<Batch> batches, capture([&] {
    std::vector<Batch> made;
    for (int64_t i = 0; i < std::min<int64_t>(3, warmup + o.steps); ++i)
      made.push_back(syntheticBatch(model.batch, o.seed * 1000 + static_cast<uint64_t>(i)));
    return made;
  }));

  BenchReport r;
  r.project = p.name;
  r.family = p.model.family;
  r.optimizer = t.optimizer;
  r.itemName = model.itemName;
  r.params = model.numParams;
  r.batch = t.batchSize;
  r.seq = lm ? t.seqLen : 0;
  r.itemsPerStep = setup.itemsPerBatch;
  r.flopsPerStep = model.trainFlopsPerItem * static_cast<double>(r.itemsPerStep);
  r.flopsRule = model.flopsRule;
  TSR_ASSIGN(ClosedGraph g, trainer.lowerStep(state, batches.front()));
  r.graphFlopsPerStep = ir::graphCost(g.graph, ops::registry()).flops;

  size_t next = 0;
  auto step = [&]() -> Result<StepMetrics> {
    const Batch& b = batches[next++ % batches.size()];
    return trainer.step(state, b);
  };
  for (int64_t i = 0; i < warmup; ++i) {
    double before = trainer.stepFunction().stats().compileSeconds;
    TSR_ASSIGN(StepMetrics m, step());
    if (i == 0) {
      r.firstStepSeconds = m.seconds;
      r.compileSeconds = trainer.stepFunction().stats().compileSeconds - before;
      r.firstLoss = m.loss;
      say(fmt::format("warm-up step 1: {:.3f} s ({:.3f} s compiling), loss {:.4f}", m.seconds, r.compileSeconds,
                      m.loss));
    }
  }
  for (int64_t i = 0; i < o.steps; ++i) {
    TSR_ASSIGN(StepMetrics m, step());
    r.stepSeconds.push_back(m.seconds);
    r.lastLoss = m.loss;
    say(fmt::format("step {}/{}: {:.1f} ms, loss {:.4f}", i + 1, o.steps, m.seconds * 1e3, m.loss));
  }
  if (o.profile) {
    runtime::Profiler profiler;
    {
      runtime::ProfilerScope scope(profiler);
      int64_t start = runtime::Profiler::nowNs();
      TSR_ASSIGN(StepMetrics m, step());
      profiler.mark({"profiled step", start, runtime::Profiler::nowNs() - start});
      say(fmt::format("profiled step: {:.1f} ms", m.seconds * 1e3));
    }
    r.profile = runtime::Trace::from(profiler);
  }
  r.medianSeconds = median(r.stepSeconds);
  r.minSeconds = *std::min_element(r.stepSeconds.begin(), r.stepSeconds.end());
  return r;
}

}  // namespace tsr::train
