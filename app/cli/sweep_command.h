#pragma once
// `tessera sweep PROJECT --grid KEY=V1,V2 ... [--random N --range KEY=LO:HI[:log]]`: a hyperparameter sweep.
// Each point is one `tessera train` run with its values as --set overrides, tagged with the sweep's name and
// its values; runs go one after another, or --parallel J at a time with the cores split between them.
#include <functional>

#include <CLI/CLI.hpp>

namespace tsr::cli {

std::function<int()> addSweepCommand(CLI::App& app);

}  // namespace tsr::cli
