#pragma once
// Where a project's runs keep their checkpoints, and which one a command means. Each run has its own folder,
// <project>/checkpoints/run-N/, holding
//   latest.safetensors        the run's last saved state (every checkpoint_every steps, and when it ends or stops)
//   best.safetensors          the state at which [train] best_metric was lowest so far
//   step-000200.safetensors   with keep_checkpoints = K: the last K periodic states
// A checkpoint is parameters and optimizer state in one safetensors file; its metadata holds the step, the data
// position and the run (and, for best, the metric and its value).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/project/project.h"

namespace tsr::train {

// The project folder as a run records it: absolute, so that runs delete and the IDE find a run's checkpoints
// from any working directory.
std::string absoluteDir(const project::Project& p);
std::string checkpointsRoot(const project::Project& p);                // <project>/checkpoints
std::string runCheckpointDir(const project::Project& p, int64_t run);  // <project>/checkpoints/run-N
std::string runCheckpointDir(const std::string& projectDir, int64_t run);
std::string stepCheckpointName(int64_t step);                          // step-000200.safetensors

// The runs with a checkpoint folder holding a latest.safetensors, in increasing order.
std::vector<int64_t> runsWithCheckpoints(const project::Project& p);

// The checkpoint a command reads: run `run` (0: the latest run that has one), `which` = "latest" or "best".
// Projects trained before checkpoints had run folders keep checkpoints/latest.safetensors: it is the answer
// for run 0 when no run folder exists. Errors say which runs have checkpoints.
Result<std::string> findCheckpoint(const project::Project& p, int64_t run = 0, const std::string& which = "latest");

// The periodic step-N checkpoints of a run folder, oldest first.
std::vector<std::string> stepCheckpoints(const std::string& runDir);

// Keeps the newest `keep` step-N checkpoints of a run folder and removes the rest; returns what it removed.
std::vector<std::string> pruneStepCheckpoints(const std::string& runDir, int64_t keep);

// Removes a run's checkpoint folder, <projectDir>/checkpoints/run-N (runs delete). No folder is not an error.
Status deleteRunCheckpoints(const std::string& projectDir, int64_t run);
// The bytes a run's checkpoint folder holds (0 when there is none).
int64_t runCheckpointBytes(const std::string& projectDir, int64_t run);

// `runs delete` and the Runs panel: what deleting a run removes, for the confirmation ("run 3 (baseline) with its
// metrics, artifacts and profiles, and its checkpoints (12.3 MB in ...)"), and the deletion itself: the run's
// rows in the store at dbPath and its checkpoint folder. A run still running is refused.
Result<std::string> describeRunDeletion(const std::string& dbPath, int64_t run);
Status deleteRunAndCheckpoints(const std::string& dbPath, int64_t run);

}  // namespace tsr::train
