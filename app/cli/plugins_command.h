#pragma once
// Plugins in the CLI: every command loads the plugins of the search order (engine/plugin/loader.h) before it
// runs, with the project it names (a `project` argument or --project) first; `tessera plugins [PROJECT]`
// lists each plugin with its version, path and what it registers, or why it was skipped.
#include <functional>

#include <CLI/CLI.hpp>

namespace tsr::cli {

// Loads the plugins for the parsed command line; skipped plugins are reported on stderr (except to
// `tessera plugins`, which lists them). Never fails: a broken plugin is reported and the command runs.
void loadPluginsFor(const CLI::App& app);

std::function<int()> addPluginsCommand(CLI::App& app);

}  // namespace tsr::cli
