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

// --set SECTION.KEY=VALUE, repeatable.
void addSetOption(CLI::App* cmd, std::vector<std::string>& sets);
// The project at `path` with the overrides applied (their errors name the --set).
Result<project::Project> loadProject(const std::string& path, const std::vector<std::string>& sets);

// --checkpoint FILE, else --run N (the latest run with a checkpoint by default) of --db and --best.
struct CheckpointArgs {
  std::string file;
  std::string store;
  int64_t run = 0;
  bool best = false;
};
void addCheckpointOptions(CLI::App* cmd, CheckpointArgs& a, const std::string& fileHelp);
Result<std::string> resolveCheckpoint(const project::Project& p, const CheckpointArgs& a);

}  // namespace tsr::cli
