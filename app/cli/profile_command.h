#pragma once
// `tessera profile PROJECT`: profiles a project's training step: a Chrome/Perfetto trace, a profile in the run
// store, and a table of the kernels that took the time.
#include <functional>

#include <CLI/CLI.hpp>

namespace tsr::cli {

// Adds the subcommand; the returned function runs it when it was parsed (returns the exit code, -1 if not parsed).
std::function<int()> addProfileCommand(CLI::App& app);

}  // namespace tsr::cli
