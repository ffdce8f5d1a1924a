#pragma once
// The one place a project's training is assembled: model (from its family), data, optimiser with its learning-
// rate schedule, the Trainer and its placement on [mesh]. `tessera train` (runTraining), `bench`, `profile`,
// `compile` (the traced and the sharded step), `shard plan` and the IDE all start here, so they build, measure
// and show the same thing.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/core/result.h"
#include "engine/project/project.h"
#include "engine/train/data_source.h"
#include "engine/train/project_model.h"
#include "engine/train/trainer.h"

namespace tsr::train {

struct SetupOverrides {
  int64_t batchSize = 0;       // instead of [train] batch_size (0: the project's)
  int64_t seqLen = 0;          // instead of [train] seq_len (0: the project's)
  int64_t scheduleSteps = -1;  // the learning-rate schedule's length (-1: [train] steps)
  // Read [data] (tokenized and cached for text). Without data, a language model's vocabulary is the configured
  // one (configuredVocab) and batches come from the caller (syntheticBatch).
  bool data = true;
  // Initialise the parameters and the optimiser state, after checking that they fit in the memory this process
  // can take. Without, only `avals` is set: nothing is materialised (the traced step, model descriptions of
  // 124M-parameter projects).
  bool materialize = true;
  // Place the state and batches on [mesh] with the [sharding] rules (when the mesh has more than one device).
  bool mesh = true;
  std::function<void(const std::string&)> info;  // progress lines; may be empty
};

struct TrainingSetup {
  project::Project project;  // as the overrides left it
  ProjectModel model;
  std::unique_ptr<Trainer> trainer;
  TrainState state;                     // with materialize
  // the state's shapes: {"params": ..., "opt": ...}, and "batch_stats" for a model with state
  std::optional<TreeOf<Aval>> avals;
  std::shared_ptr<DataSource> train, val;  // with data (val may be absent: no validation batches)
  std::optional<data::BpeTokenizer> tokenizer;
  int64_t itemsPerBatch = 0;  // tokens (or samples) a step consumes

  // The next training batch, from the first on (with data).
  Result<Batch> next() const;
};

Result<TrainingSetup> makeTrainingSetup(const project::Project& project, const SetupOverrides& overrides = {});

}  // namespace tsr::train
