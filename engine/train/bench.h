#pragma once
// The training step of a project timed on synthetic batches, for `tessera bench`: the model and optimiser are
// built exactly as a training run builds them; only the data differs (random token ids, images or inputs of the
// requested shape), so no corpus or tokenizer is needed.
#include <functional>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/project/project.h"
#include "engine/runtime/trace_export.h"
#include "engine/train/data_source.h"  // syntheticBatch
#include "engine/train/trainer.h"

namespace tsr::train {

struct BenchOptions {
  int64_t batch = 0;   // <= 0: [train] batch_size
  int64_t seq = 0;     // <= 0: [train] seq_len (gpt2 only)
  int64_t steps = 5;   // timed steps
  int64_t warmup = 1;  // untimed steps first; the first one compiles (at least 1)
  uint64_t seed = 0;
  bool profile = false;  // one more step after the timed ones, under the profiler (BenchReport::profile)
};

struct BenchReport {
  std::string project, family, optimizer;
  std::string itemName;  // "tokens" or "samples"
  int64_t params = 0;
  int64_t batch = 0, seq = 0;  // seq: 0 for models without a sequence
  int64_t itemsPerStep = 0;
  double compileSeconds = 0;    // tracing and compiling the step (inside the first warm-up step)
  double firstStepSeconds = 0;  // the first step, compilation included
  std::vector<double> stepSeconds;  // the timed steps
  double medianSeconds = 0, minSeconds = 0;
  // Model FLOPs of one step: 6 N per item (+ 12 L C T per token of attention for gpt2), the PaLM/nanoGPT rule
  // that the peers' figures use too.
  double flopsPerStep = 0;
  std::string flopsRule;
  // The sum of the ops' cost rules over the traced step (every op: GEMMs, elementwise, reductions, optimiser).
  double graphFlopsPerStep = 0;
  double firstLoss = 0, lastLoss = 0;
  runtime::Trace profile;  // the profiled step when BenchOptions::profile (not counted in stepSeconds)
};

// Builds the project's model, optimiser and jitted step, runs `warmup` then `steps` steps on synthetic batches.
// `progress` receives a line per phase (may be empty).
Result<BenchReport> benchTrainingStep(const project::Project& project, const BenchOptions& options,
                                      const std::function<void(const std::string&)>& progress = {});

}  // namespace tsr::train
