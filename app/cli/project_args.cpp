#include "app/cli/project_args.h"

#include <cmath>
#include <cstdlib>

#include "engine/train/checkpoints.h"

namespace tsr::cli {

namespace {

CLI::Validator numberAtLeast(double lowest, bool inclusive, const std::string& what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool ok = !text.empty() && *end == '\0' && std::isfinite(v) && (inclusive ? v >= lowest : v > lowest);
        return ok ? std::string() : text + " is not " + what;
      },
      what == "a positive number" ? "POSITIVE" : "NONNEGATIVE");
}

}  // namespace

CLI::Validator positiveNumber() { return numberAtLeast(0, false, "a positive number"); }
CLI::Validator nonNegativeNumber() { return numberAtLeast(0, true, "a non-negative number"); }

void addSetOption(CLI::App* cmd, std::vector<std::string>& sets) {
  cmd->add_option("--set", sets, "Override a project.toml key: SECTION.KEY=VALUE (e.g. train.lr=3e-4); repeatable")
      ->take_last()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

Result<project::Project> loadProject(const std::string& path, const std::vector<std::string>& sets) {
  TSR_ASSIGN(std::vector<project::Override> overrides, project::parseOverrides(sets));
  return project::loadProject(path, overrides);
}

void addCheckpointOptions(CLI::App* cmd, CheckpointArgs& a, const std::string& fileHelp) {
  auto* file = cmd->add_option("--checkpoint", a.file, fileHelp);
  cmd->add_option("--run", a.run, "The run whose checkpoint to read (default: the latest run with one)")
      ->excludes(file);
  cmd->add_flag("--best", a.best, "The run's best checkpoint ([train] best_metric) instead of its latest")
      ->excludes(file);
  cmd->add_option("--db,--store", a.store, "Run store the run belongs to (default: PROJECT/runs.db)")->excludes(file);
}

Result<std::string> resolveCheckpoint(const project::Project& p, const CheckpointArgs& a) {
  if (!a.file.empty()) return a.file;
  return train::findCheckpoint(p, a.run, a.best ? "best" : "latest", a.store);
}

}  // namespace tsr::cli
