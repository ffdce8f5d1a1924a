#include "engine/train/checkpoints.h"

#include <algorithm>
#include <charconv>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/store/run_store.h"

namespace tsr::train {

namespace {

namespace fs = std::filesystem;

// The number in "run-12" or "step-000200.safetensors" (prefix and suffix given); -1 when the name is not one.
int64_t numberIn(const std::string& name, const std::string& prefix, const std::string& suffix) {
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size() - suffix.size();
  int64_t n = -1;
  auto [end, ec] = std::from_chars(first, last, n);
  return ec == std::errc() && end == last && n >= 0 ? n : -1;
}

}  // namespace

std::string absoluteDir(const project::Project& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p.dir, ec);
  return ec ? p.dir : abs.lexically_normal().string();
}

std::string checkpointsRoot(const project::Project& p) { return (fs::path(p.dir) / "checkpoints").string(); }

std::string runCheckpointDir(const project::Project& p, int64_t run) { return runCheckpointDir(p.dir, run); }

std::string runCheckpointDir(const std::string& projectDir, int64_t run) {
  return (fs::path(projectDir) / "checkpoints" / fmt::format("run-{}", run)).string();
}

std::string stepCheckpointName(int64_t step) { return fmt::format("step-{:06}.safetensors", step); }

std::vector<int64_t> runsWithCheckpoints(const project::Project& p) {
  std::vector<int64_t> runs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpointsRoot(p), ec)) {
    const int64_t n = numberIn(e.path().filename().string(), "run-", "");
    if (n > 0 && fs::is_regular_file(e.path() / "latest.safetensors", ec)) runs.push_back(n);
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

Result<std::string> findCheckpoint(const project::Project& p, int64_t run, const std::string& which) {
  if (which != "latest" && which != "best") return makeError("no '{}' checkpoint: latest or best", which);
  const std::vector<int64_t> runs = runsWithCheckpoints(p);
  std::error_code ec;
  if (run == 0) {
    const fs::path legacy = fs::path(checkpointsRoot(p)) / "latest.safetensors";
    if (runs.empty() && which == "latest" && fs::is_regular_file(legacy, ec)) return legacy.string();
    if (runs.empty())
      return makeError("{}: no run has a checkpoint yet (train it first: tessera train {})", p.dir, p.dir);
    run = runs.back();
  }
  const fs::path file = fs::path(runCheckpointDir(p, run)) / (which + ".safetensors");
  if (fs::is_regular_file(file, ec)) return file.string();
  if (std::find(runs.begin(), runs.end(), run) == runs.end())
    return makeError("run {} has no checkpoint in {}{}", run, checkpointsRoot(p),
                     runs.empty() ? std::string(" (no run has one)") : fmt::format(" (runs with one: {})", fmt::join(runs, ", ")));
  return makeError("run {} has no {} checkpoint ({}){}", run, which, file.string(),
                   which == "best" ? ": best is saved when [train] best_metric is measured (val_loss needs validation data)" : "");
}

std::vector<std::string> stepCheckpoints(const std::string& runDir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(runDir, ec)) {
    const int64_t step = numberIn(e.path().filename().string(), "step-", ".safetensors");
    if (step >= 0) found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

std::vector<std::string> pruneStepCheckpoints(const std::string& runDir, int64_t keep) {
  std::vector<std::string> files = stepCheckpoints(runDir), removed;
  const auto excess = static_cast<int64_t>(files.size()) - std::max<int64_t>(keep, 0);
  std::error_code ec;
  for (int64_t i = 0; i < excess; ++i)
    if (fs::remove(files[static_cast<size_t>(i)], ec)) removed.push_back(files[static_cast<size_t>(i)]);
  return removed;
}

Status deleteRunCheckpoints(const std::string& projectDir, int64_t run) {
  std::error_code ec;
  fs::remove_all(runCheckpointDir(projectDir, run), ec);
  if (ec) return makeError("cannot remove {}: {}", runCheckpointDir(projectDir, run), ec.message());
  return {};
}

int64_t runCheckpointBytes(const std::string& projectDir, int64_t run) {
  int64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(runCheckpointDir(projectDir, run), ec))
    if (e.is_regular_file(ec)) bytes += static_cast<int64_t>(e.file_size(ec));
  return bytes;
}

Result<std::string> describeRunDeletion(const std::string& dbPath, int64_t run) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::openReadOnly(dbPath));
  TSR_ASSIGN(store::RunInfo info, db.run(run));
  const int64_t bytes = runCheckpointBytes(info.project, run);
  return fmt::format("run {} ({}) with its metrics, artifacts and profiles{}", run, info.name,
                     bytes ? fmt::format(", and its checkpoints ({:.1f} MB in {})", static_cast<double>(bytes) / 1e6,
                                         runCheckpointDir(info.project, run))
                           : "");
}

Status deleteRunAndCheckpoints(const std::string& dbPath, int64_t run) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::open(dbPath));
  TSR_ASSIGN(store::RunInfo info, db.run(run));
  if (info.status == store::RunStatus::Running)
    return makeError("run {} is running: stop it first (a run whose process died is marked crashed by the IDE, or "
                     "resume it)", run);
  TSR_TRY(deleteRunCheckpoints(info.project, run));
  return db.deleteRun(run);
}

}  // namespace tsr::train
