#pragma once
// `tessera runs [--db FILE | --project DIR] list | show ID | export ID --csv [--out FILE]`: the run store,
// read from the command line.
#include <CLI/CLI.hpp>

namespace tsr::cli {

// Adds the subcommand; the returned function runs it when it was parsed (returns the exit code, -1 if not).
std::function<int()> addRunsCommand(CLI::App& app);

}  // namespace tsr::cli
