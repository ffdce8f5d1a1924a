#include "app/cli/project_args.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "engine/store/lock_wait.h"
#include "engine/train/checkpoints.h"
#include "engine/train/safetensors.h"

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

std::string shellWord(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_./+:,@%=-", c) != nullptr;
  });
  if (plain) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

CLI::Validator positiveNumber() { return numberAtLeast(0, false, "a positive number"); }
CLI::Validator nonNegativeNumber() { return numberAtLeast(0, true, "a non-negative number"); }

void addSetOption(CLI::App* cmd, std::vector<std::string>& sets) {
  cmd->add_option("--set", sets, "Override a project.toml key: SECTION.KEY=VALUE (e.g. train.lr=3e-4); repeatable")
      ->take_last()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void addLockWaitOption(CLI::App* cmd, double* seconds) {
  cmd->add_option_function<double>(
         "--lock-wait",
         [seconds](const double& s) {
           store::setLockWaitLimit(std::chrono::milliseconds(std::llround(s * 1000)));
           if (seconds) *seconds = s;
         },
         "Seconds to wait for a run store another process holds locked before failing (default: "
         "TESSERA_STORE_LOCK_WAIT, else 30)")
      ->type_name("SECONDS")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            const bool ok = !text.empty() && *end == '\0' && std::isfinite(v) && v > 0 && v <= 86400;
            return ok ? std::string() : text + " is not a number of seconds above 0, at most 86400";
          },
          ""));
}

Result<project::Project> loadProject(const std::string& path, const std::vector<std::string>& sets) {
  TSR_ASSIGN(std::vector<project::Override> overrides, project::parseOverrides(sets));
  return project::loadProject(path, overrides);
}

Status checkBatchOnMesh(const project::Project& p) {
  const auto& mesh = p.mesh;
  int64_t devices = 1;
  for (int64_t d : mesh.shape) devices *= d;
  if (devices <= 1 || mesh.shape.empty() || mesh.axes.empty()) return {};
  const int64_t n = mesh.shape[0], batch = p.train.batchSize;
  if (batch % n == 0) return {};
  std::string setBy;
  for (const project::Override& o : p.overrides)
    if (o.section == "train" && o.key == "batch_size") setBy = " (--set " + o.spec() + ")";
  const int64_t below = batch / n * n, above = below + n;
  return makeError("{}: [train] batch_size {}{} is split over the mesh's first axis '{}' of size {}, which does not "
                   "divide it; make batch_size a multiple of {} (the nearest: {}{})",
                   p.file, batch, setBy, mesh.axes[0], n, n, below > 0 ? std::to_string(below) + " or " : "", above);
}

void addCheckpointOptions(CLI::App* cmd, CheckpointArgs& a, const std::string& fileHelp) {
  auto* file = cmd->add_option("--checkpoint", a.file, fileHelp);
  cmd->add_option("--run", a.run, "The run whose checkpoint to read (default: the latest run with one)")
      ->excludes(file);
  auto* best = cmd->add_flag("--best", a.best, "The run's best checkpoint ([train] best_metric) instead of its latest")
                   ->excludes(file);
  cmd->add_option("--from", a.from,
                  "The run's checkpoint to read: latest (default), best, or a step that keep_checkpoints kept (200)")
      ->excludes(file)
      ->excludes(best);
  cmd->add_option("--db,--store", a.store, "Run store the run belongs to (default: PROJECT/runs.db)")->excludes(file);
  addLockWaitOption(cmd);
}

std::string commandLine(const std::string& command, const std::string& project, const std::vector<std::string>& sets) {
  std::string line = fmt::format("tessera {} {}", command, shellWord(project));
  for (const std::string& set : sets) line += " --set " + shellWord(set);
  return line;
}

Result<std::string> resolveCheckpoint(const project::Project& p, const CheckpointArgs& a, const CheckpointReader& reader) {
  if (!a.file.empty()) return a.file;
  const std::string which = !a.from.empty() ? a.from : a.best ? "best" : "latest";
  TSR_ASSIGN(train::RunCheckpoint found, train::findRunCheckpoint(p, a.run, which, a.store));
  // The header and the file's size, what truncation or garbage breaks, before the model is built.
  auto header = train::readSafetensorsMetadata(found.path);
  if (header.ok() || found.run == 0) return found.path;
  std::string command = reader.command;
  if (!a.store.empty()) command += " --db " + shellWord(a.store);
  return train::damagedCheckpointError(
      found.path, header.error().message,
      {fmt::format("cannot {} run {}", reader.verb, found.run), fmt::format("To {} the newest", reader.verb),
       fmt::format("{} --run {}", command, found.run),
       fmt::format("A new run trains from the start: tessera train {}", shellWord(reader.project))});
}

}  // namespace tsr::cli
