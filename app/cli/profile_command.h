#pragma once
// `tessera profile PROJECT`: profiles a project's training step: a Chrome/Perfetto trace, a profile in the run
// store, and a table of the kernels that took the time.
#include <functional>

#include <CLI/CLI.hpp>

#include "engine/runtime/trace_export.h"

namespace tsr::cli {

// Adds the subcommand; the returned function runs it when it was parsed (returns the exit code, -1 if not parsed).
std::function<int()> addProfileCommand(CLI::App& app);
// `tessera profile-diff RUN_A RUN_B`: two runs' latest profiles by kernel and by graph node (train/profile_diff.h).
std::function<int()> addProfileDiffCommand(CLI::App& app);

// The `top` kernels of a trace by total time (count, mean, share, GFLOP/s, GB/s), then each step mark with its
// kernel time and FLOPs.
void printKernelTable(const runtime::Trace& trace, int64_t top);

}  // namespace tsr::cli
