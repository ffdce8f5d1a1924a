#pragma once
// `tessera train PROJECT`: trains a project headless, logging to the project's runs.db.
#include <CLI/CLI.hpp>

namespace tsr::cli {

// Adds the subcommand; the returned function runs it when it was parsed (returns the exit code).
std::function<int()> addTrainCommand(CLI::App& app);

}  // namespace tsr::cli
