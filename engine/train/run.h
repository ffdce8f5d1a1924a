#pragma once
// A training run of a project, as `tessera train` and the IDE start it: data prepared and cached in the
// project's .tessera folder, metrics written to SQLite as they happen, checkpoints written atomically, and a
// resumed run that continues exactly like an uninterrupted one (same batches, same dropout masks).
#include <atomic>
#include <functional>
#include <string>

#include "engine/core/result.h"
#include "engine/project/project.h"

namespace tsr::train {

struct RunOptions {
  int64_t steps = -1;           // override [train] steps (the schedule's length too)
  int64_t stopAtStep = -1;      // stop (checkpointed, resumable) once this step is done, as an interruption would
  bool resume = false;          // continue from the project's latest checkpoint
  std::string storePath;        // default: <project>/runs.db
  std::string runName;          // default: the project name
  int64_t sampleTokens = 64;    // text sampled at the end (language models); 0: none
  double peakFlops = 150e9;     // for MFU (the CPU's practical SGEMM ceiling by default)
  std::atomic<bool>* stop = nullptr;  // set to stop after the current step (Ctrl-C): checkpoints and exits
};

struct RunEvent {
  enum class Kind { Info, Step, Eval, Checkpoint, Sample, Done } kind = Kind::Info;
  int64_t step = 0;
  std::string text;  // a line for the console
};

struct RunSummary {
  int64_t runId = 0;
  int64_t steps = 0;
  double firstLoss = 0, lastLoss = 0, lastValLoss = 0;
  double tokensPerSecond = 0;
  std::string storePath;
  std::string checkpointPath;
};

Result<RunSummary> runTraining(const project::Project& project, const RunOptions& options,
                               const std::function<void(const RunEvent&)>& onEvent);

}  // namespace tsr::train
