#include "engine/train/bench.h"

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "engine/random/random.h"
#include "engine/runtime/profiler.h"
#include "engine/train/project_model.h"
#include "engine/train/trainer.h"

namespace tsr::train {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

Batch syntheticBatch(const project::Project& p, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  const auto& t = p.train;
  auto ints = [&](int64_t n, int64_t bound) {
    std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(bound - 1));
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(gen);
    return v;
  };
  auto normals = [&](int64_t n) {
    std::normal_distribution<float> d;
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(gen);
    return v;
  };
  int64_t b = t.batchSize;
  if (p.model.languageModel()) {
    Shape s{b, t.seqLen};
    Array inputs = Array::fromVector(ints(b * t.seqLen, vocab), s);
    return Batch{inputs, Array::fromVector(ints(b * t.seqLen, vocab), s)};
  }
  if (p.model.family == "vit") {
    const auto& v = p.model.vit;
    Array images = Array::fromVector(normals(b * v.channels * v.imageSize * v.imageSize),
                                     Shape{b, v.channels, v.imageSize, v.imageSize});
    return Batch{images, Array::fromVector(ints(b, v.numClasses), Shape{b})};
  }
  const auto& sizes = p.model.mlp.sizes;
  Array inputs = Array::fromVector(normals(b * sizes.front()), Shape{b, sizes.front()});
  return Batch{inputs, Array::fromVector(ints(b, sizes.back()), Shape{b})};
}

Result<BenchReport> benchTrainingStep(const project::Project& project, const BenchOptions& o,
                                      const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  project::Project p = project;
  project::TrainSection& t = p.train;
  if (o.batch > 0) t.batchSize = o.batch;
  if (o.seq > 0) t.seqLen = o.seq;
  if (o.steps < 1) return makeError("--steps must be at least 1, got {}", o.steps);
  bool lm = p.model.languageModel();
  if (lm && t.seqLen > p.model.gpt2.blockSize)
    return makeError("{}: sequence length {} exceeds the model's block size {}", p.file, t.seqLen,
                     p.model.gpt2.blockSize);

  int64_t vocab = lm ? configuredVocab(p) : 0;
  ProjectModel model = buildModel(p, vocab);
  optim::Schedule lr = optim::warmupCosineSchedule(t.lr, t.warmupSteps, std::max<int64_t>(t.steps, 1), t.minLr);
  Trainer trainer(model.loss, makeOptimizer(t, lr), lr, t.seed);
  say(fmt::format("{}: {} with {} parameters, batch {}{}, {}", p.name, p.model.family, model.numParams,
                  t.batchSize, lm ? fmt::format(" x {} tokens", t.seqLen) : "", t.optimizer));
  TSR_ASSIGN(Tree params, capture([&] { return model.init(random::key(t.seed)); }));
  TrainState state = trainer.init(std::move(params));

  // A few distinct batches, made before timing and cycled through.
  int64_t warmup = std::max<int64_t>(o.warmup, 1);
  TSR_ASSIGN(std::vector<Batch> batches, capture([&] {
    std::vector<Batch> made;
    for (int64_t i = 0; i < std::min<int64_t>(3, warmup + o.steps); ++i)
      made.push_back(syntheticBatch(p, vocab, o.seed * 1000 + static_cast<uint64_t>(i)));
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
  r.itemsPerStep = lm ? t.batchSize * t.seqLen : t.batchSize;
  r.flopsPerStep = model.trainFlopsPerItem * static_cast<double>(r.itemsPerStep);
  if (lm) r.flopsRule = "6*N*tokens + 12*L*C*T*tokens (N without wpe)";
  else if (p.model.family == "vit") r.flopsRule = "6*N*samples*(patches+1)";
  else r.flopsRule = "6*N*samples";
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
