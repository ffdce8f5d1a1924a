#include "engine/train/checkpoints.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/data/file_io.h"
#include "engine/store/run_store.h"
#include "engine/train/run_process.h"
#include "engine/train/safetensors.h"

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

// The owner id in a checkpoint folder's owner file; "" when the folder has none.
// A line "KEY = VALUE" of the folder's owner file: "" without the file, "?" when the file lacks the key.
std::string ownerField(const fs::path& dir, const std::string& name) {
  auto text = data::readFile((dir / kOwnerFile).string());
  if (!text.ok()) return "";
  const std::string key = name + " = ";
  const size_t at = text->find(key);
  if (at == std::string::npos) return "?";  // an owner file, unreadable: nobody's folder to take
  const size_t end = text->find('\n', at);
  return text->substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
}

std::string ownerOf(const fs::path& dir) { return ownerField(dir, "owner"); }

std::string randomId() {
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  return fmt::format("{:016x}", id);
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

Result<std::string> createRunCheckpointDir(const project::Project& p, const std::string& storePath, int64_t run,
                                           std::map<std::string, std::string>& params) {
  const std::string id = randomId();
  fs::path dir = runCheckpointDir(p, run);
  std::error_code ec;
  // A run-N of another store (--db, a runs.db deleted since) stays that run's.
  if (fs::exists(dir, ec) || fs::is_symlink(dir, ec)) dir += "-" + id.substr(0, 8);
  if (fs::exists(dir, ec)) return makeError("cannot create the checkpoint folder {}: it exists", dir.string());
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    return makeError("cannot create the checkpoint folder {}: {}", dir.string(),
                     ec ? ec.message() : std::string("not a folder"));
  fs::path store = fs::absolute(storePath, ec);
  TSR_TRY(data::writeFileAtomically((dir / kOwnerFile).string(),
                                    fmt::format("owner = {}\nrun = {}\nstore = {}\n", id, run,
                                                store.lexically_normal().string())));
  params["checkpoint.owner"] = id;
  params["checkpoint.dir"] = dir.filename().string();
  return dir.string();
}

Result<std::string> ownedCheckpointDir(const std::string& projectDir, const store::RunStore& db, int64_t run) {
  TSR_ASSIGN(auto params, db.params(run));
  const auto name = params.find("checkpoint.dir");
  const auto id = params.find("checkpoint.owner");
  const bool legacy = name == params.end() || id == params.end();
  const fs::path dir = legacy ? fs::path(runCheckpointDir(projectDir, run))
                              : fs::path(projectDir) / "checkpoints" / name->second;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return dir.string();
  const std::string owner = ownerOf(dir);
  if (legacy ? !owner.empty() : owner != id->second)
    return makeError("{} belongs to another run, not to run {} of {} ({}; a run of another store, or of one "
                     "deleted since, with the same number): it is left as it is",
                     dir.string(), run, db.path(),
                     owner.empty() ? "it has no " + std::string(kOwnerFile)
                                   : (dir / kOwnerFile).string() + " names another owner");
  return dir.string();
}

Result<std::vector<int64_t>> runsWithCheckpoints(const std::string& projectDir, const store::RunStore& db) {
  TSR_ASSIGN(std::vector<store::RunInfo> all, db.runs());
  std::vector<int64_t> runs;
  std::error_code ec;
  for (const store::RunInfo& r : all) {
    auto dir = ownedCheckpointDir(projectDir, db, r.id);
    if (dir.ok() && fs::is_regular_file(fs::path(*dir) / "latest.safetensors", ec)) runs.push_back(r.id);
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

namespace {

// The file of a run folder that `which` names: latest, best, or a step's periodic checkpoint ("200", "step-200").
Result<std::string> checkpointFileName(const std::string& which) {
  if (which == "latest" || which == "best") return which + ".safetensors";
  const std::string digits = which.rfind("step-", 0) == 0 ? which.substr(5) : which;
  const int64_t step = numberIn("s" + digits + ".", "s", ".");
  if (step < 0) return makeError("no '{}' checkpoint: latest, best or a step kept by keep_checkpoints (200)", which);
  return stepCheckpointName(step);
}

}  // namespace

Result<RunCheckpoint> findRunCheckpoint(const project::Project& p, int64_t run, const std::string& which,
                                        const std::string& storePath) {
  TSR_ASSIGN(const std::string fileName, checkpointFileName(which));
  const std::string dbPath = storePath.empty() ? (fs::path(p.dir) / "runs.db").string() : storePath;
  const fs::path legacy = fs::path(checkpointsRoot(p)) / "latest.safetensors";
  std::error_code ec;
  std::optional<store::RunStore> db;
  if (fs::exists(dbPath, ec)) {
    TSR_ASSIGN(db, store::RunStore::openReadOnly(dbPath));
  }
  std::vector<int64_t> runs;
  if (db) {
    TSR_ASSIGN(runs, runsWithCheckpoints(p.dir, *db));
  }
  if (run == 0) {
    if (runs.empty() && which == "latest" && fs::is_regular_file(legacy, ec)) return RunCheckpoint{0, legacy.string()};
    if (runs.empty())
      return makeError("{}: no run of {} has a checkpoint yet (train it first: tessera train {})", p.dir, dbPath, p.dir);
    run = runs.back();
  }
  if (!db) return makeError("no run {}: there is no run store {} (train first, or name the store: --db)", run, dbPath);
  TSR_ASSIGN(std::string dir, ownedCheckpointDir(p.dir, *db, run));
  const fs::path file = fs::path(dir) / fileName;
  if (fs::is_regular_file(file, ec)) return RunCheckpoint{run, file.string()};
  if (std::find(runs.begin(), runs.end(), run) == runs.end())
    return makeError("run {} has no checkpoint in {}{}", run, checkpointsRoot(p),
                     runs.empty() ? std::string(" (no run has one)") : fmt::format(" (runs with one: {})", fmt::join(runs, ", ")));
  if (which == "latest" || which == "best")
    return makeError("run {} has no {} checkpoint ({}){}", run, which, file.string(),
                     which == "best" ? ": best is saved when [train] best_metric is measured (val_loss needs validation data)" : "");
  std::vector<std::string> kept;
  for (const std::string& f : stepCheckpoints(dir)) kept.push_back(fs::path(f).filename().string());
  return makeError("run {} has no {} ({}){}", run, fileName, dir,
                   kept.empty() ? std::string(": it keeps no step checkpoints ([train] keep_checkpoints)")
                                : fmt::format(": it keeps {}", fmt::join(kept, ", ")));
}

Result<std::string> findCheckpoint(const project::Project& p, int64_t run, const std::string& which,
                                   const std::string& storePath) {
  TSR_ASSIGN(RunCheckpoint found, findRunCheckpoint(p, run, which, storePath));
  return found.path;
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

std::string IntactCheckpoint::describe() const {
  return fmt::format("{} (step {}{})", fs::path(path).filename().string(), step, note.empty() ? "" : ", " + note);
}

std::vector<IntactCheckpoint> intactCheckpoints(const std::string& runDir, const std::string& except) {
  std::vector<IntactCheckpoint> out;
  auto consider = [&](const fs::path& file, const std::string& which) {
    std::error_code ec;
    if (!fs::is_regular_file(file, ec) || (!except.empty() && fs::equivalent(file, except, ec))) return;
    auto metadata = readSafetensorsMetadata(file.string());
    if (!metadata.ok() || !metadata->count("step")) return;
    const int64_t step = numberIn("s" + metadata->at("step") + ".", "s", ".");
    if (step < 0) return;
    IntactCheckpoint c{file.string(), which, step, ""};
    if (metadata->count("metric") && metadata->count("value"))  // as training printed it
      c.note = fmt::format("{} {:.4f}", metadata->at("metric"), std::strtod(metadata->at("value").c_str(), nullptr));
    out.push_back(std::move(c));
  };
  consider(fs::path(runDir) / "latest.safetensors", "latest");
  consider(fs::path(runDir) / "best.safetensors", "best");
  for (const std::string& f : stepCheckpoints(runDir))
    consider(f, std::to_string(numberIn(fs::path(f).filename().string(), "step-", ".safetensors")));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return out;
}

Error damagedCheckpointError(const std::string& path, const std::string& why, const DamagedCheckpointAdvice& advice) {
  const std::string reason = why.rfind(path + ": ", 0) == 0 ? why.substr(path.size() + 2) : why;
  const std::vector<IntactCheckpoint> intact = intactCheckpoints(fs::path(path).parent_path().string(), path);
  if (intact.empty())
    return makeError("{}: its checkpoint {} is damaged ({}), and it has no other intact checkpoint; the file is left "
                     "as it is. {}",
                     advice.cannot, path, reason, advice.otherwise);
  std::vector<std::string> listed;
  for (const IntactCheckpoint& c : intact) listed.push_back(c.describe());
  return makeError("{}: its checkpoint {} is damaged ({}); the file is left as it is. Its intact checkpoints: {}. {}: "
                   "{} --from {}",
                   advice.cannot, path, reason, fmt::join(listed, ", "), advice.useNewest, advice.command,
                   intact.front().which);
}

std::vector<std::string> pruneStepCheckpoints(const std::string& runDir, int64_t keep) {
  std::vector<std::string> files = stepCheckpoints(runDir), removed;
  const auto excess = static_cast<int64_t>(files.size()) - std::max<int64_t>(keep, 0);
  std::error_code ec;
  for (int64_t i = 0; i < excess; ++i)
    if (fs::remove(files[static_cast<size_t>(i)], ec)) removed.push_back(files[static_cast<size_t>(i)]);
  return removed;
}

Status checkOutputFile(const std::string& out, const std::string& storePath) {
  std::error_code ec;
  const fs::path target = fs::weakly_canonical(out, ec);
  if (ec) return {};  // a path that cannot be resolved fails when it is written, with its own message
  for (const char* suffix : {"", "-wal", "-shm", "-journal", "-leases"}) {  // -leases: store/run_lease.h
    if (storePath.empty()) break;
    if (fs::weakly_canonical(storePath + suffix, ec) == target)
      return makeError("{} is the run store{}: the output would destroy it; write to another file", out,
                       *suffix ? std::string(" ") + storePath + "'s " + (suffix + 1) + " file" : std::string());
  }
  const fs::path dir = target.parent_path();
  const bool inCheckpoints = dir.filename() == "checkpoints" || dir.parent_path().filename() == "checkpoints";
  if (fs::exists(dir / kOwnerFile, ec) || (inCheckpoints && target.extension() == ".safetensors"))
    return makeError("{} is in a run's checkpoint folder ({}): the output would replace its files; write to another "
                     "file", out, dir.string());
  return {};
}

int64_t checkpointDirBytes(const std::string& dir) {
  int64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) bytes += static_cast<int64_t>(e.file_size(ec));
  return bytes;
}

namespace {

constexpr const char* kThenDelete = "then delete it";

bool sameFile(const std::string& a, const std::string& b) {
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  return !ea && !eb && ca == cb;
}

// The checkpoint folder that deleting a run removes. The one beside the store comes first when the store is its
// project's runs.db: a project copied or moved with its store keeps its runs and their checkpoints together,
// while the run recorded the project folder it was trained in. A folder under that recorded project whose owner
// file names another store belongs to that store (the project was copied, store and all): not this one's to
// remove.
Result<std::string> deletableCheckpointDir(const std::string& dbPath, const store::RunStore& db,
                                           const store::RunInfo& info) {
  std::error_code ec;
  const fs::path storeFolder = fs::absolute(dbPath, ec).parent_path();
  if (auto beside = ownedCheckpointDir(storeFolder.string(), db, info.id); beside.ok() && fs::exists(*beside, ec))
    return beside;
  TSR_ASSIGN(std::string dir, ownedCheckpointDir(info.project, db, info.id));
  const std::string owner = fs::exists(dir, ec) ? ownerField(dir, "store") : "";
  if (!owner.empty() && owner != "?" && !sameFile(owner, dbPath))
    return makeError("{} belongs to run {} of {} (its {}), not to this run of {} (a copy of that store?): it is left "
                     "as it is",
                     dir, info.id, owner, kOwnerFile, dbPath);
  return dir;
}

}  // namespace

Result<std::string> describeRunDeletion(const std::string& dbPath, int64_t run) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::openReadOnly(dbPath));
  TSR_ASSIGN(store::RunInfo info, db.run(run));
  TSR_TRY(checkRunNotTrainedElsewhere(dbPath, run, kThenDelete));  // said before the user is asked to confirm
  auto dir = deletableCheckpointDir(dbPath, db, info);
  if (!dir.ok())
    return fmt::format("run {} ({}) with its metrics, artifacts and profiles (no checkpoints: {})", run, info.name,
                       dir.error().message);
  const int64_t bytes = checkpointDirBytes(*dir);
  return fmt::format("run {} ({}) with its metrics, artifacts and profiles{}", run, info.name,
                     bytes ? fmt::format(", and its checkpoints ({:.1f} MB in {})", static_cast<double>(bytes) / 1e6, *dir)
                           : "");
}

Status deleteRunAndCheckpoints(const std::string& dbPath, int64_t run) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::open(dbPath));
  TSR_ASSIGN(store::RunInfo info, db.run(run));
  // A process that trains the run holds its lease, on this machine or another sharing the store; a run stored as
  // running whose lease is free was orphaned (killed, crashed) and may go. The deletion holds the lease itself,
  // so that no resume starts on what it removes.
  TSR_ASSIGN(std::optional<store::RunLease> lease, store::RunLease::tryTake(dbPath, run));
  if (!lease) {
    TSR_TRY(checkRunNotTrainedElsewhere(dbPath, run, kThenDelete));
    return makeError("run {} of {} is being trained by another process: stop it first, {}", run, dbPath, kThenDelete);
  }
  // Another run's folder of the same name is not this run's to remove. Found while the run's rows say whose it is.
  auto dir = deletableCheckpointDir(dbPath, db, info);
  // The rows go first, all at once: when the store refuses (another process holds its lock) nothing is removed
  // and the run is still there to delete again. A folder that then cannot be removed (all or in part) belongs
  // to a run the user has deleted and is named to remove by hand. The other order lost a run's checkpoints while
  // its rows stayed.
  TSR_TRY(db.deleteRun(run));
  if (!dir.ok()) return {};
  std::error_code ec;
  fs::remove_all(*dir, ec);
  if (ec)
    return makeError("run {} was deleted, but its checkpoint folder {} could not be removed ({}); remove it by hand",
                     run, *dir, ec.message());
  return {};
}

}  // namespace tsr::train
