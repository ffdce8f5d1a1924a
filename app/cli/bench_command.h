#pragma once
// `tessera bench PROJECT`: times a project's training step on synthetic batches (median and min step time,
// tokens or samples per second, model FLOPs, GFLOP/s) against the SGEMM peak measured in the same run.
#include <CLI/CLI.hpp>

namespace tsr::cli {

// Adds the subcommand; the returned function runs it when it was parsed (returns the exit code, -1 if not).
std::function<int()> addBenchCommand(CLI::App& app);

}  // namespace tsr::cli
