#pragma once
// `tessera compile`: runs the compiler pipeline on an example or an IR file, and with --dump writes the graph
// after every pass (text and Graphviz DOT), the pass timings and every decision with its reason.
#include <functional>

#include <CLI/CLI.hpp>

namespace tsr::cli {

std::function<int()> addCompileCommand(CLI::App& app);

}  // namespace tsr::cli
