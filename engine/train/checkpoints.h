#pragma once
// Where a project's runs keep their checkpoints, and which one a command means. Each run has its own folder,
// <project>/checkpoints/run-N/, holding
//   latest.safetensors        the run's last saved state (every checkpoint_every steps, and when it ends or stops)
//   best.safetensors          the state at which [train] best_metric was lowest so far
//   step-000200.safetensors   with keep_checkpoints = K: the last K periodic states
// A checkpoint is parameters and optimizer state in one safetensors file; its metadata holds the step, the data
// position and the run (and, for best, the metric and its value).
//
// A folder belongs to the run that made it, never to a run of another store with the same number (--db, or a
// runs.db deleted since): the run writes its random owner id into the folder (kOwnerFile) and records the id and
// the folder's name in its settings (checkpoint.owner, checkpoint.dir). A new run whose run-N is taken gets
// run-N-<id>. Reading, resuming and deleting check the owner file; a run recorded before owner files keeps
// run-N when no owner file is in it.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/project/project.h"

namespace tsr::store {
class RunStore;
}

namespace tsr::train {

inline constexpr const char* kOwnerFile = "owner.txt";

// The project folder as a run records it: absolute, so that runs delete and the IDE find a run's checkpoints
// from any working directory.
std::string absoluteDir(const project::Project& p);
std::string checkpointsRoot(const project::Project& p);                // <project>/checkpoints
std::string runCheckpointDir(const project::Project& p, int64_t run);  // <project>/checkpoints/run-N
std::string runCheckpointDir(const std::string& projectDir, int64_t run);
std::string stepCheckpointName(int64_t step);                          // step-000200.safetensors

// A new run's checkpoint folder, created with its owner file: run-N, or run-N-<id> when run-N exists. Returns the
// folder; `params` gets checkpoint.owner and checkpoint.dir for the run store.
Result<std::string> createRunCheckpointDir(const project::Project& p, const std::string& storePath, int64_t run,
                                           std::map<std::string, std::string>& params);
// The checkpoint folder of run `run` of `db` under <projectDir>/checkpoints, checked to be that run's own: an
// error naming the owner file when another run's folder has the name.
Result<std::string> ownedCheckpointDir(const std::string& projectDir, const store::RunStore& db, int64_t run);

// The runs of `db` whose own checkpoint folder under <projectDir>/checkpoints (run-N, or run-N-<id> where run-N was
// another store's) holds a latest.safetensors, in increasing order.
Result<std::vector<int64_t>> runsWithCheckpoints(const std::string& projectDir, const store::RunStore& db);

// The checkpoint a command reads: run `run` of the store at storePath (default <project>/runs.db; 0: the latest
// run that has one), `which` = "latest", "best" or a step a periodic checkpoint keeps ("200": step-000200),
// from the run's own folder. Projects trained before checkpoints had run folders keep
// checkpoints/latest.safetensors: it is the answer for run 0 when no run has a folder. Errors say which runs
// have checkpoints.
struct RunCheckpoint {
  int64_t run = 0;  // 0: the legacy checkpoints/latest.safetensors
  std::string path;
};
Result<RunCheckpoint> findRunCheckpoint(const project::Project& p, int64_t run, const std::string& which,
                                        const std::string& storePath);
Result<std::string> findCheckpoint(const project::Project& p, int64_t run = 0, const std::string& which = "latest",
                                   const std::string& storePath = "");

// The periodic step-N checkpoints of a run folder, oldest first.
std::vector<std::string> stepCheckpoints(const std::string& runDir);

// A run folder's checkpoints that read back (readSafetensorsMetadata: the header and the file's size check out),
// the newest step first, `except` left out: what a resume can start from when the latest is damaged.
struct IntactCheckpoint {
  std::string path;
  std::string which;  // as --from takes it: "latest", "best", "200"
  int64_t step = 0;
  std::string note;   // best's metric and value: "val_loss 3.1234"
  std::string describe() const;  // "best.safetensors (step 120, val_loss 3.1234)"
};
std::vector<IntactCheckpoint> intactCheckpoints(const std::string& runDir, const std::string& except = "");

// A run's checkpoint that a command would read and that does not read back (truncated, garbled): the error names
// the run's intact checkpoints and the command that uses the newest, as `tessera train --resume` and `tessera eval`
// and `generate` say it. Nothing is removed or replaced: which state to use is the user's choice, as a Lightning
// ckpt_path or an orbax step is. `why` is the read error (its leading "PATH: " is dropped).
struct DamagedCheckpointAdvice {
  std::string cannot;     // "cannot resume run 3"
  std::string useNewest;  // "To continue from the newest (the steps after it are trained again)"
  std::string command;    // the command that reads WHICH with " --from WHICH" appended: "tessera train P --resume 3"
  std::string otherwise;  // no intact checkpoint: "A new run trains from the start: tessera train P"
};
Error damagedCheckpointError(const std::string& path, const std::string& why, const DamagedCheckpointAdvice& advice);

// Keeps the newest `keep` step-N checkpoints of a run folder and removes the rest; returns what it removed.
std::vector<std::string> pruneStepCheckpoints(const std::string& runDir, int64_t keep);

// An output file (runs export --out, export-trace -o, profile --trace) must replace neither the run store at
// storePath (nor its -wal, -shm, -journal or -leases file) nor a run's checkpoint: an error naming the file when it would.
Status checkOutputFile(const std::string& out, const std::string& storePath);

// The bytes a checkpoint folder holds (0 when there is none).
int64_t checkpointDirBytes(const std::string& dir);

// `runs delete` and the Runs panel: what deleting a run removes, for the confirmation ("run 3 (baseline) with its
// metrics, artifacts and profiles, and its checkpoints (12.3 MB in ...)"), and the deletion itself: the run's
// rows in the store at dbPath, then its checkpoint folder (a store that refuses, locked by another process,
// leaves both). A run that a process trains (its lease is held, on any machine sharing the store) is refused,
// naming that process; one stored as running whose lease is free was orphaned and is deleted. A folder of its name that another run owns is left as it is (and the description says so).
Result<std::string> describeRunDeletion(const std::string& dbPath, int64_t run);
Status deleteRunAndCheckpoints(const std::string& dbPath, int64_t run);

}  // namespace tsr::train
