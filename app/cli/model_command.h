#pragma once
// `tessera model-info PROJECT`, `tessera eval PROJECT --checkpoint F`, `tessera generate PROJECT --checkpoint F`:
// a project's model described from shapes, and a checkpoint evaluated or sampled from.
#include <CLI/CLI.hpp>

namespace tsr::cli {

// Each adds its subcommand; the returned function runs it when it was parsed (returns the exit code, -1 if not).
std::function<int()> addModelInfoCommand(CLI::App& app);
std::function<int()> addEvalCommand(CLI::App& app);
std::function<int()> addGenerateCommand(CLI::App& app);

// 124439808 -> "124,439,808".
std::string withThousands(int64_t n);

}  // namespace tsr::cli
