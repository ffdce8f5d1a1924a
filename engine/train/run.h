#pragma once
// A training run of a project, as `tessera train` and the IDE start it: data prepared and cached in the
// project's .tessera folder, metrics written to SQLite as they happen, checkpoints written atomically, and a
// resumed run that continues exactly like an uninterrupted one (same batches, same dropout masks).
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/project/project.h"
#include "engine/train/trainer.h"
#include "engine/transform/trace.h"

namespace tsr::train {

struct RunOptions {
  int64_t steps = -1;           // override [train] steps (the schedule's length too)
  int64_t stopAtStep = -1;      // stop (checkpointed, resumable) once this step is done, as an interruption would
  bool resume = false;          // continue a run from its latest checkpoint
  int64_t resumeRun = 0;        // which run to continue; 0: the latest run with a checkpoint
  // The checkpoint of that run to continue from: latest, best, or a step keep_checkpoints kept ("200"). A latest
  // that is damaged is never passed over silently: the error names the run's intact checkpoints and the command
  // that resumes from the newest, and the file is left as it is.
  std::string resumeFrom = "latest";
  std::string command;          // how the user trains this project, for the commands messages name
                                // ("tessera train 'my proj'"); empty: "tessera train <project folder>"
  std::vector<std::string> tags;  // added to the run (a sweep tags its runs)
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
  std::string checkpointPath;  // the run's latest checkpoint
};

// Trains a project: data prepared (and cached), the model built and initialised, metrics logged.
Result<RunSummary> runTraining(const project::Project& project, const RunOptions& options,
                               const std::function<void(const RunEvent&)>& onEvent);

// The project's training step as the per-device program its [mesh] and [sharding] make, compiled but not run
// (`tessera compile --dump`). A process with fewer devices than the mesh gets virtual CPU devices (nothing runs
// on them). An error when the mesh is one device.
Result<std::shared_ptr<spmd::SpmdExecutable>> compileShardedStep(const project::Project& project);

// A project's model described from shapes alone (an abstract trace of init): no data, no weights.
struct ModuleSize {
  std::string path;  // "h.3", "wte", "vit.encoder.layer.0"
  int64_t params = 0;
  int64_t bytes = 0;
};

struct ModelInfo {
  std::string family;
  int64_t numParams = 0;
  int64_t bytes = 0;
  std::vector<ModuleSize> modules;  // in parameter order
  double trainFlopsPerItem = 0;     // a training step (forward + backward)
  double forwardFlopsPerItem = 0;
  std::string itemName;             // "token" or "sample"
};

Result<ModelInfo> describeModel(const project::Project& project);

// The project's training step (forward, backward, optimizer update) traced on avals alone, for
// `tessera compile PROJECT` and the IDE's graph view: no data is read and no weights are materialised.
Result<ClosedGraph> traceTrainingStep(const project::Project& project);

// The mean validation loss over [train] eval_steps batches with the parameters of a checkpoint, and the mean of
// each metric the model reports (a classifier's accuracy, a segmentation model's pixel_accuracy and mean_iou).
Result<StepMetrics> evaluateCheckpointMetrics(const project::Project& project, const std::string& checkpoint,
                                              const std::function<void(const std::string&)>& info);
// Mean validation loss over [train] eval_steps batches with the parameters of a checkpoint.
Result<double> evaluateCheckpoint(const project::Project& project, const std::string& checkpoint,
                                  const std::function<void(const std::string&)>& info);

struct GenerateOptions {
  std::string prompt = "\n";
  int64_t tokens = 64;
  double temperature = 0.8;
  int64_t topK = 40;
  uint64_t seed = 0;
};

// Text sampled from a language-model project's checkpoint, with the tokenizer cached by training.
Result<std::string> generateFromCheckpoint(const project::Project& project, const std::string& checkpoint,
                                           const GenerateOptions& options);

}  // namespace tsr::train
