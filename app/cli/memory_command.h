#pragma once
// `tessera memory PROJECT [--json]`: the training step's memory over its kernels, by kind, with the peak and the
// buffers live there (engine/train/step_memory.h).
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tsr::cli {

// Adds the subcommand; the returned function runs it when it was parsed (the exit code, -1 if not).
std::function<int()> addMemoryCommand(CLI::App& app);

struct MemoryPrintOptions {
  bool json = false;
  int top = 15;    // buffers live at the peak to list
  int width = 72;  // columns of the chart
};
// Prints the step memory of a project (what `tessera memory` and `tessera compile PROJECT --memory` print);
// `command` names the command in errors. Returns the exit code.
int printStepMemory(const std::string& command, const std::string& project, const std::vector<std::string>& sets,
                    const MemoryPrintOptions& options);

}  // namespace tsr::cli
