#pragma once
// `tessera families [PROJECT] [--json]`: every model family (the core ones and those of the plugins loaded for
// PROJECT) with its [model] keys, their types, defaults, ranges and doc strings, and the [data] kinds it trains
// on. `tessera new DIR --family NAME [--set key=value ...] [--corpus FILE]`: a new project from a family.
#include <functional>

#include <CLI/CLI.hpp>

namespace tsr::cli {

std::function<int()> addFamiliesCommand(CLI::App& app);
std::function<int()> addNewCommand(CLI::App& app);

}  // namespace tsr::cli
