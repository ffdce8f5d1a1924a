#pragma once
// What every command that opens a project shares: --set overrides, and which checkpoint of which run it reads.
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/core/result.h"
#include "engine/project/project.h"

namespace tsr::cli {

// Validators for numeric options whose messages a user reads ("--steps: -5 is not a positive number"): a value
// out of range is an error, never a silent default.
CLI::Validator positiveNumber();
CLI::Validator nonNegativeNumber();

// A word as a shell reads it back: quoted when it holds anything but letters, digits and _./+:,@%=- ("my proj",
// "it's", "$HOME"), so that the command a user is told to type can be pasted as it is.
std::string shellWord(const std::string& word);

// --set SECTION.KEY=VALUE, repeatable.
void addSetOption(CLI::App* cmd, std::vector<std::string>& sets);
// --lock-wait SECONDS, on every command that opens a run store: how long a wait for a store another process holds
// locked may last before the command fails saying so (store::setLockWaitLimit, set as the option is parsed;
// default TESSERA_STORE_LOCK_WAIT, else 30). `seconds`, where given, gets the value (0 when the option is not):
// for a command that passes it on (a sweep's runs).
void addLockWaitOption(CLI::App* cmd, double* seconds = nullptr);
// The project at `path` with the overrides applied (their errors name the --set).
Result<project::Project> loadProject(const std::string& path, const std::vector<std::string>& sets);

// The batch is split over the mesh's first axis (engine/train/placement.h): a [train] batch_size that axis does
// not divide is an error in the project's terms (the file, the key, its value and where it was set, the axis and
// its size), said before a plan of the step is traced, which would name the traced array ("inputs [8190,784]").
Status checkBatchOnMesh(const project::Project& p);

// --checkpoint FILE, else --run N (the latest run with a checkpoint by default) of --db, and which of its
// checkpoints: --best, or --from latest|best|STEP as `tessera train --resume` takes it.
struct CheckpointArgs {
  std::string file;
  std::string store;
  int64_t run = 0;
  bool best = false;
  std::string from;
};
void addCheckpointOptions(CLI::App* cmd, CheckpointArgs& a, const std::string& fileHelp);
// Who reads the checkpoint, for the error about a damaged one: the command as the user would type it again
// without its checkpoint options ("tessera eval proj --set train.eval_steps=4"), its project and what it does
// with the checkpoint ("evaluate").
struct CheckpointReader {
  std::string command, project, verb;
};
// "tessera <command> <project> --set ..." with its words quoted for the shell.
std::string commandLine(const std::string& command, const std::string& project, const std::vector<std::string>& sets);
// The checkpoint the options name. A run's checkpoint that does not read back is an error naming the run's intact
// checkpoints and the command that reads the newest (`--run N --from best`), as `train --resume` says it.
Result<std::string> resolveCheckpoint(const project::Project& p, const CheckpointArgs& a, const CheckpointReader& reader);

}  // namespace tsr::cli
