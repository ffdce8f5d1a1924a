#pragma once
// `tessera memory PROJECT [--json]`: the training step's memory over its kernels, by kind, with the peak and the
// buffers live there (engine/train/step_memory.h).
#include <functional>

#include <CLI/CLI.hpp>

namespace tsr::cli {

// Adds the subcommand; the returned function runs it when it was parsed (the exit code, -1 if not).
std::function<int()> addMemoryCommand(CLI::App& app);

}  // namespace tsr::cli
