#include "engine/train/run.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "engine/core/env_options.h"
#include "engine/data/file_io.h"
#include "engine/dist/communicator.h"
#include "engine/random/random.h"
#include "engine/store/run_store.h"
#include "engine/train/checkpoints.h"
#include "engine/train/run_process.h"
#include "engine/train/data_source.h"
#include "engine/train/project_model.h"
#include "engine/train/safetensors.h"
#include "engine/train/sample.h"
#include "engine/train/setup.h"
#include "engine/train/trainer.h"
#include "engine/spmd/spmd.h"
#include "engine/transform/trace.h"
#include "engine/version.h"

namespace tsr::train {

namespace {

namespace fs = std::filesystem;

// The text of a command's output, or "" when it cannot run (no git, not a repository).
std::string commandOutput(const std::string& command) {
  std::string out;
  if (FILE* f = ::popen(command.c_str(), "r")) {
    char buf[256];
    while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    if (::pclose(f) != 0) return "";
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// The git commit of the project folder, "+dirty" when tracked files have changes; "" outside a repository.
std::string gitCommitOf(const std::string& dir) {
  const std::string quoted = "'" + std::regex_replace(dir, std::regex("'"), "'\\''") + "'";
  const std::string commit = commandOutput("git -C " + quoted + " rev-parse HEAD 2>/dev/null");
  if (commit.empty()) return "";
  const bool dirty = !commandOutput("git -C " + quoted + " status --porcelain --untracked-files=no 2>/dev/null").empty();
  return dirty ? commit + "+dirty" : commit;
}

// A setting's TOML text as a table shows it: strings without their quotes (when they need no escapes).
std::string settingDisplay(const std::string& toml) {
  if (toml.size() >= 2 && toml.front() == '"' && toml.back() == '"' && toml.find('\\') == std::string::npos)
    return toml.substr(1, toml.size() - 2);
  return toml;
}

// What a run records of its configuration: every resolved setting (defaults and overrides applied), with
// train.steps as the run was asked for (--steps, else [train] steps), and where and with what it ran.
std::map<std::string, std::string> hyperparameters(const project::Project& p, int64_t params, int64_t steps) {
  std::map<std::string, std::string> h;
  for (const project::Setting& s : p.settings) h[s.section + "." + s.key] = settingDisplay(s.value);
  for (const project::ShardingRule& r : p.sharding) h["sharding." + r.pattern] = r.spec;
  h["train.steps"] = std::to_string(steps);
  h["model.params"] = std::to_string(params);
  std::string overrides;
  for (const project::Override& o : p.overrides) overrides += (overrides.empty() ? "" : " ") + o.spec();
  if (!overrides.empty()) h["run.overrides"] = overrides;
  std::string outside;
  for (const std::string& f : filesOutsideProject(p)) outside += (outside.empty() ? "" : ", ") + f;
  if (!outside.empty()) h["data.outside_project"] = outside;
  h["run.tessera_version"] = kVersion;
  h["run.device"] = envOptions().device;
  h["run.cpu_devices"] = std::to_string(dist::configuredCpuDevices());
  h["run.processes"] = std::to_string(dist::launchedUnderMpi() ? envOptions().mpiWorldSize : 1);
  if (std::string commit = gitCommitOf(p.dir); !commit.empty()) h["run.git_commit"] = commit;
  return h;
}

// The first element of a checkpoint's tensors that is NaN or infinite, as "params.w[17] = nan"; none when all
// are finite.
std::optional<std::string> firstNonFinite(const SafetensorsFile& f) {
  for (const auto& [name, a] : f.tensors) {
    if (!isFloating(a.dtype())) continue;
    const auto* bytes = static_cast<const uint8_t*>(a.buffer()->data());
    const int64_t n = a.aval().numel();
    for (int64_t i = 0; i < n; ++i) {
      double v = 0;
      const uint8_t* e = bytes + i * dtypeSize(a.dtype());
      switch (a.dtype()) {
        case DType::F32: { float x; std::memcpy(&x, e, 4); v = x; break; }
        case DType::F64: std::memcpy(&v, e, 8); break;
        case DType::BF16: { uint16_t b; std::memcpy(&b, e, 2); v = bf16BitsToFloat(b); break; }
        case DType::F16: { uint16_t b; std::memcpy(&b, e, 2); v = f16BitsToFloat(b); break; }
        default: break;
      }
      if (!std::isfinite(v)) return fmt::format("{}[{}] = {}", name, i, v);
    }
  }
  return std::nullopt;
}

// Checkpoint: params, optimizer state and the model's state ("batch_stats.", BatchNorm's running statistics) in
// one safetensors file, the step and data position as metadata.
// Every process gathers the sharded arrays (a collective under MPI); the primary one writes the file. A state
// holding NaN or Inf is never written: it would replace the last good checkpoint with a diverged one.
// Returns the non-finite value instead of writing (none: written, or left to the primary process).
Result<std::optional<std::string>> saveCheckpoint(const std::string& path, const TrainState& s, const DataSource& data,
                                                  int64_t runId, bool write,
                                                  const std::map<std::string, std::string>& extra = {}) {
  SafetensorsFile f;
  Status failed;
  auto add = [&](const std::string& name, const Array& a) {
    auto whole = spmd::fetchWhole(a);
    if (!whole.ok() && failed.ok()) failed = whole.takeError();
    if (whole.ok()) f.tensors[name] = std::move(whole).value();
  };
  s.params.visit([&](const std::string& path, const Array& a) { add("params." + path, a); });
  s.optState.visit([&](const std::string& path, const Array& a) { add("opt." + path, a); });
  s.batchStats.visit([&](const std::string& path, const Array& a) { add("batch_stats." + path, a); });
  TSR_TRY(failed);
  if (!write) return std::optional<std::string>();
  if (auto bad = firstNonFinite(f)) return bad;
  f.metadata = {{"step", std::to_string(s.step)}, {"data", data.state()}, {"run", std::to_string(runId)}};
  f.metadata.insert(extra.begin(), extra.end());
  TSR_TRY(writeSafetensors(path, f));
  return std::optional<std::string>();
}


// The longest prompt window sampling feeds a language model: its context, at most [train] seq_len.
int64_t contextOf(const project::Project& p) {
  const int64_t context = p.model.contextLength();
  return context > 0 ? std::min(context, p.train.seqLen) : p.train.seqLen;
}

// What a damaged latest.safetensors becomes once a run resumed from another of its checkpoints saves again.
constexpr const char* kDamagedLatest = "latest.damaged.safetensors";

// What `--set` may change when a run resumes: how it logs and keeps checkpoints, nothing it computes.
bool changeableOnResume(const std::string& key) {
  return key == "train.log_every" || key == "train.checkpoint_every" || key == "train.keep_checkpoints";
}

// The configuration run `runId` was started with (its config/resolved.toml, its train.steps), for --resume: a
// --set given now that would change it is refused; a project.toml changed since is named and not used.
Result<project::Project> resumedProject(const project::Project& now, const store::RunStore& db, int64_t runId,
                                        int64_t& steps, const std::function<void(const std::string&)>& info) {
  auto resolved = db.artifact(runId, "config/resolved.toml");
  if (!resolved.ok()) {
    info(fmt::format("run {} stored no resolved configuration: it continues with project.toml as it is now", runId));
    return now;
  }
  std::vector<project::Override> kept;
  for (const project::Override& o : now.overrides)
    if (changeableOnResume(o.section + "." + o.key)) kept.push_back(o);
  auto parsed = project::parseProject(resolved->data, now.file, now.dir, kept);
  if (!parsed.ok()) return makeError("run {}'s stored configuration: {}", runId, parsed.error().message);
  project::Project run = std::move(parsed).value();
  run.text = now.text;
  TSR_ASSIGN(auto params, db.params(runId));
  std::map<std::string, std::string> before, after;
  for (const project::Setting& s : run.settings) before[s.section + "." + s.key] = s.value;
  for (const project::Setting& s : now.settings) after[s.section + "." + s.key] = s.value;
  // train.steps as the run was asked for (--steps), and the keys its own --set gave.
  if (auto it = params.find("train.steps"); it != params.end()) before["train.steps"] = it->second;
  std::set<std::string> setByRun;
  std::istringstream runOverrides(params.count("run.overrides") ? params.at("run.overrides") : "");
  for (std::string spec; runOverrides >> spec;) setByRun.insert(spec.substr(0, spec.find('=')));
  auto setNowFor = [&](const std::string& key) {
    return std::any_of(now.overrides.begin(), now.overrides.end(),
                       [&](const project::Override& o) { return o.section + "." + o.key == key; });
  };
  std::vector<std::string> setNow, editedSince;
  for (const auto& [key, value] : after) {
    auto it = before.find(key);
    const std::string was = it == before.end() ? "(unset)" : it->second;
    if (was == value || changeableOnResume(key)) continue;
    if (setNowFor(key)) setNow.push_back(fmt::format("{} = {} (the run has {})", key, value, was));
    else if (!setByRun.count(key) && !(key == "train.steps" && steps >= 0))
      editedSince.push_back(fmt::format("{} = {} (the run has {})", key, value, was));
  }
  for (const auto& [key, value] : before)
    if (!after.count(key) && !changeableOnResume(key)) editedSince.push_back(fmt::format("{} unset (the run has {})", key, value));
  if (!setNow.empty())
    return makeError("run {} continues with the configuration it was started with, and --set would change it: {}; "
                     "start a new run for another configuration (on resume --set may change train.log_every, "
                     "train.checkpoint_every and train.keep_checkpoints)",
                     runId, fmt::join(setNow, ", "));
  if (!editedSince.empty())
    info(fmt::format("project.toml has changed since run {} started: {}; the run continues with its own configuration",
                     runId, fmt::join(editedSince, ", ")));
  if (steps < 0 && params.count("train.steps")) {
    TSR_ASSIGN(steps, parseCount(params.at("train.steps"), "run setting train.steps"));
  }
  return run;
}

// The configuration a run records (config/resolved.toml): the project's, with train.steps as the run was asked
// for (--steps).
std::string resolvedConfig(project::Project p, int64_t steps) {
  if (steps == p.train.steps) return project::resolvedToml(p);
  for (project::Setting& s : p.settings)
    if (s.section == "train" && s.key == "steps") s.value = fmt::format("{}  # --steps (project.toml: {})", steps, p.train.steps);
  return project::resolvedToml(p);
}

// A checkpoint --resume would start from that does not read back (truncated, garbled): checkpoints.h.
Error damagedCheckpoint(const std::string& path, int64_t run, const std::string& why, const std::string& command) {
  return damagedCheckpointError(path, why,
                                {run > 0 ? fmt::format("cannot resume run {}", run) : "cannot resume the run",
                                 "To continue from the newest (the steps after it are trained again)",
                                 command + (run > 0 ? fmt::format(" --resume {}", run) : " --resume"),
                                 "A new run trains from the start: " + command});
}

std::string humanDuration(double seconds) {
  auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace

Result<std::shared_ptr<spmd::SpmdExecutable>> compileShardedStep(const project::Project& p) {
  int64_t meshSize = 1;
  for (int64_t d : p.mesh.shape) meshSize *= d;
  if (meshSize <= 1) return makeError("{}: [mesh] is one device: nothing is split", p.file);
  if (meshSize > dist::configuredCpuDevices() && !dist::launchedUnderMpi()) TSR_TRY(spmd::setCpuDevices(static_cast<int>(meshSize)));
  TSR_ASSIGN(TrainingSetup setup, makeTrainingSetup(p));
  TSR_ASSIGN(Batch batch, setup.next());
  return setup.trainer->compileStepSpmd(setup.state, batch);
}

Result<RunSummary> runTraining(const project::Project& given, const RunOptions& options,
                               const std::function<void(const RunEvent&)>& sink) {
  // Under mpirun every rank runs this function alike: the same data in the same order (each rank keeps its slice
  // of every batch), the same steps. Rank 0 alone prints, writes the run store and the checkpoints.
  TSR_ASSIGN(const bool primary, spmd::isPrimaryProcess());
  auto onEvent = [&](const RunEvent& e) {
    if (primary) sink(e);
  };
  auto info = [&](const std::string& text) { onEvent(RunEvent{RunEvent::Kind::Info, 0, text}); };
  for (const std::string& tag : options.tags)
    if (tag.empty()) return makeError("a tag cannot be empty (--tag)");
  std::error_code ec;
  if (const fs::path root = fs::path(given.dir) / "checkpoints"; fs::exists(root, ec) && !fs::is_directory(root, ec))
    return makeError("{} is not a folder: checkpoints cannot be written there", root.string());

  // The run store; a resumed run's checkpoint (its own folder's) and the configuration it was started with.
  std::string storePath = options.storePath.empty() ? (fs::path(given.dir) / "runs.db").string() : options.storePath;
  int64_t steps = options.steps;
  int64_t runId = 0;
  std::string resumedFrom;
  project::Project p = given;
  // The lease of the run this process trains (run_process.h): a run another process trains is refused before
  // anything is built, at every rank of a job (rank 0 holds it); the lease goes when this function returns, or
  // with the process.
  std::optional<store::RunLease> lease;
  bool leased = false;
  if (options.resume) {
    TSR_ASSIGN(RunCheckpoint found, findRunCheckpoint(given, options.resumeRun, options.resumeFrom, storePath));
    resumedFrom = found.path;
    runId = found.run;
    if (runId > 0) {
      TSR_ASSIGN(lease, takeRunLeaseForJob(storePath, runId));
      leased = true;
    }
    // A damaged checkpoint is said before anything is built (the header and the file's size: what truncation or
    // garbage breaks).
    if (auto header = readSafetensorsMetadata(resumedFrom); !header.ok())
      return damagedCheckpoint(resumedFrom, runId, header.error().message,
                               options.command.empty() ? "tessera train " + given.dir : options.command);
    if (runId > 0) {
      TSR_ASSIGN(store::RunStore stored, store::RunStore::openReadOnly(storePath));
      TSR_ASSIGN(p, resumedProject(given, stored, runId, steps, info));
    }
  }
  const auto& t = p.train;
  if (steps < 0) steps = t.steps;

  SetupOverrides overrides;
  overrides.scheduleSteps = steps;
  overrides.info = info;
  TSR_ASSIGN(TrainingSetup setup, makeTrainingSetup(p, overrides));
  Trainer& trainer = *setup.trainer;
  TrainState& state = setup.state;
  DataSource* trainData = setup.train.get();
  DataSource* valData = setup.val.get();
  const std::optional<data::BpeTokenizer>& tokenizer = setup.tokenizer;
  const ProjectModel& model = setup.model;
  const int64_t numParams = model.numParams;
  const double flopsPerItem = model.trainFlopsPerItem;

  // The run, and its checkpoint folder (checkpoints.h).
  std::optional<store::RunStore> db;
  if (primary) {
    TSR_ASSIGN(db, store::RunStore::open(storePath));
  }
  // A damaged latest.safetensors the run resumed around (--from best): renamed before the next save replaces it.
  std::string damagedLatest;
  // The best value of [train] best_metric so far and its step, carried in the latest checkpoint's metadata.
  double bestValue = std::numeric_limits<double>::infinity();
  int64_t bestStep = -1;
  std::string runDir;
  if (options.resume) {
    // Every error names the checkpoint: the user has one file to look at (or to delete).
    auto resume = [&]() -> Status {
      TSR_ASSIGN(SafetensorsFile ck, readSafetensors(resumedFrom));
      SafetensorsFile paramsPart = readCheckpointPart(ck, "params.");
      SafetensorsFile optPart = readCheckpointPart(ck, "opt.");
      TSR_ASSIGN(state.params, treeFromSafetensors(paramsPart, state.params));
      TSR_ASSIGN(state.optState, treeFromSafetensors(optPart, state.optState));
      if (!state.batchStats.leaves().empty()) {
        auto stats = treeFromSafetensors(readCheckpointPart(ck, "batch_stats."), state.batchStats);
        if (!stats.ok())
          return makeError("the model's state (batch_stats.*, its running statistics): {}", stats.error().message);
        state.batchStats = std::move(stats).value();
      }
      TSR_TRY(trainer.placeState(state));  // back onto the mesh
      TSR_ASSIGN(state.step, parseCount(ck.metadata["step"], "metadata 'step'"));
      TSR_ASSIGN(const int64_t ckRun, parseCount(ck.metadata["run"], "metadata 'run'"));
      if (runId > 0 && ckRun != runId) return makeError("holds run {}, not run {}", ckRun, runId);
      runId = ckRun;
      if (ck.metadata.count("best_step")) {
        TSR_ASSIGN(bestStep, parseCount(ck.metadata["best_step"], "metadata 'best_step'"));
        bestValue = std::strtod(ck.metadata["best_value"].c_str(), nullptr);
      }
      if (db) {
        auto run = db->run(runId);
        if (!run.ok())
          return makeError("belongs to run {}: {}; resume with the store it was trained with (--db)", runId,
                           run.error().message);
      }
      return trainData->restore(ck.metadata["data"]);
    };
    if (auto st = resume(); !st.ok()) {
      const std::string& m = st.error().message;
      return m.rfind(resumedFrom, 0) == 0 ? st.takeError() : makeError("cannot resume from {}: {}", resumedFrom, m);
    }
    if (!leased) {  // a checkpoint from before run folders names its run in its metadata
      TSR_ASSIGN(lease, takeRunLeaseForJob(storePath, runId));
    }
    if (state.step >= steps)
      return makeError("run {} is at step {} already, and the run is {} steps long: --steps N continues it further",
                       runId, state.step, steps);
    info(fmt::format("resumed run {} at step {} from {}", runId, state.step, resumedFrom));
    // From another checkpoint than latest: the run's latest.safetensors is replaced by its next checkpoint. A
    // damaged one is kept under another name then; an intact one is the user's choice to go back from.
    if (const fs::path latest = fs::path(resumedFrom).parent_path() / "latest.safetensors";
        primary && fs::exists(latest, ec) && !fs::equivalent(latest, resumedFrom, ec)) {
      auto header = readSafetensorsMetadata(latest.string());
      if (!header.ok()) {
        damagedLatest = latest.string();
        const std::string& why = header.error().message;
        info(fmt::format("{} is damaged ({}): it is kept as {} when this run writes its next checkpoint",
                         latest.string(), why.rfind(damagedLatest + ": ", 0) == 0 ? why.substr(damagedLatest.size() + 2) : why,
                         kDamagedLatest));
      } else if (header->count("step")) {
        info(fmt::format("{} (step {}) is replaced by this run's next checkpoint: the steps after {} are trained again",
                         latest.string(), header->at("step"), state.step));
      }
    }
    if (db) {
      TSR_TRY(db->reopenRun(runId));
      TSR_TRY(db->putArtifact(runId, thisProcessArtifact()));  // the process that runs it now
    }
    runDir = fs::path(resumedFrom).parent_path().string();
    // A checkpoint from before run folders (checkpoints/latest.safetensors) continues in the run's folder.
    if (fs::path(runDir) == fs::path(checkpointsRoot(p))) {
      runDir = runCheckpointDir(p, runId);
      if (primary) fs::create_directories(runDir, ec);
    }
  } else if (db) {
    TSR_ASSIGN(runId, db->createRun(options.runName.empty() ? p.name : options.runName, absoluteDir(p), p.text));
    // From here an error leaves the run failed, not running.
    auto start = [&]() -> Status {
      TSR_ASSIGN(lease, takeRunLease(storePath, runId));  // a new number: no other process holds it
      TSR_TRY(db->putArtifact(runId, thisProcessArtifact()));  // readers tell a killed run from a running one
      std::map<std::string, std::string> params = hyperparameters(p, numParams, steps);
      TSR_ASSIGN(runDir, createRunCheckpointDir(p, storePath, runId, params));
      TSR_TRY(db->setParams(runId, params));
      return db->putArtifact(runId, {"config/resolved.toml", "text", resolvedConfig(p, steps)});
    };
    if (Status st = start(); !st.ok()) {
      (void)db->finishRun(runId, store::RunStatus::Failed, st.error().message);
      return st.takeError();
    }
  } else {
    runDir = runCheckpointDir(p, runId);
  }
  if (db && !options.tags.empty()) TSR_TRY(db->addTags(runId, options.tags));
  if (primary) {
    // Temporary files of a save that was interrupted (kill -9, power loss) are of no use to anyone.
    for (const std::string& dir : {checkpointsRoot(p), runDir})
      for (const std::string& f : data::removeOrphanTempFiles(dir)) info("removed " + f + ", left by an interrupted save");
  }
  if (!options.resume) info(fmt::format("run {}: checkpoints in {}", runId, runDir));
  const std::string ckptPath = (fs::path(runDir) / "latest.safetensors").string();
  const std::string bestPath = (fs::path(runDir) / "best.safetensors").string();

  RunSummary summary;
  summary.runId = runId;
  summary.storePath = storePath;
  summary.checkpointPath = ckptPath;
  // The mean validation loss over eval_steps batches and the model's metrics over all of them (poolEvaluations).
  auto evaluate = [&]() -> Result<StepMetrics> {
    if (!valData) return StepMetrics{};
    TSR_TRY(valData->rewind());
    std::vector<StepMetrics> batches;
    for (int64_t i = 0; i < t.evalSteps; ++i) {
      TSR_ASSIGN(Batch b, valData->next());
      TSR_ASSIGN(StepMetrics m, trainer.evaluate(state, b));
      batches.push_back(std::move(m));
    }
    return poolEvaluations(batches);
  };

  // Every step's scalars are kept and written a few times a second, many steps per transaction.
  std::vector<store::StepMetrics> pending;
  auto lastFlush = std::chrono::steady_clock::now();
  auto flushMetrics = [&]() -> Status {
    lastFlush = std::chrono::steady_clock::now();
    if (!db || pending.empty()) return {};
    Status st = db->logMetricsBatch(runId, pending);
    pending.clear();
    return st;
  };

  // A checkpoint of the state now: its metadata carries the best value so far. Returns the first non-finite
  // value instead of writing it (a diverged state never replaces a good checkpoint).
  auto checkpoint = [&](const std::string& path, std::map<std::string, std::string> extra = {})
      -> Result<std::optional<std::string>> {
    if (bestStep >= 0) {
      extra["best_step"] = std::to_string(bestStep);
      extra["best_value"] = fmt::format("{}", bestValue);
      extra["best_metric"] = t.bestMetric;
    }
    // The damaged latest this run resumed around moves aside for the save that replaces it, and comes back
    // when nothing replaced it (an error, or a state holding NaN that is never written).
    std::string kept;
    if (!damagedLatest.empty() && path == ckptPath) {
      std::error_code moved;
      kept = (fs::path(runDir) / kDamagedLatest).string();
      for (int n = 2; fs::exists(kept, moved); ++n)  // an earlier damaged one stays too
        kept = (fs::path(runDir) / fmt::format("latest.damaged-{}.safetensors", n)).string();
      fs::rename(damagedLatest, kept, moved);
      if (moved) return makeError("cannot keep the damaged {} as {}: {}", damagedLatest, kept, moved.message());
    }
    auto saved = saveCheckpoint(path, state, *trainData, runId, primary, extra);
    if (!kept.empty()) {
      std::error_code back;
      if (saved.ok() && !*saved) {
        info(fmt::format("kept the damaged {} as {}", damagedLatest, kept));
        damagedLatest.clear();
      } else if (!fs::exists(damagedLatest, back)) {
        fs::rename(kept, damagedLatest, back);
      }
    }
    return saved;
  };
  // A value of [train] best_metric: when it is the lowest yet, best.safetensors becomes this state.
  auto considerBest = [&](double value) -> Result<std::optional<std::string>> {
    if (!(value < bestValue)) return std::optional<std::string>();
    bestValue = value;
    bestStep = state.step;
    auto saved = checkpoint(bestPath, {{"metric", t.bestMetric}, {"value", fmt::format("{}", value)}});
    if (saved.ok() && !*saved) {
      onEvent(RunEvent{RunEvent::Kind::Checkpoint, state.step,
                       fmt::format("best checkpoint ({} {:.4f}) {}", t.bestMetric, value, bestPath)});
      if (db) TSR_TRY(db->setParams(runId, {{"checkpoint.best_step", std::to_string(bestStep)},
                                            {"checkpoint.best_value", fmt::format("{}", bestValue)}}));
    }
    return saved;
  };
  if (t.bestMetric == "val_loss" && !valData)
    info("no validation data, so no best.safetensors: [train] best_metric = \"loss\" keeps the best by training loss");

  const bool lm = p.model.languageModel();
  const int64_t itemsPerStep = trainData->itemsPerBatch() * t.accumulate;
  auto runStart = std::chrono::steady_clock::now();
  const int64_t firstStep = state.step;
  int64_t itemsDone = 0;
  bool stopped = false, diverged = false;
  Status failure;
  // The step the checkpoint file holds, where this process knows it (a resumed run starts from it).
  int64_t savedStep = options.resume ? firstStep : -1;
  // The training loss since the last checkpoint, for best_metric = "loss".
  double lossSinceSave = 0;
  int64_t stepsSinceSave = 0;
  auto divergedAt = [&](const std::string& what) {
    diverged = true;
    failure = makeError("diverged at step {}: {}", state.step, what);
  };
  // Whether a save in the loop went through: an error, or a state holding a non-finite value (then the run has
  // diverged), ends the loop.
  auto savedInLoop = [&](Result<std::optional<std::string>> saved) {
    if (!saved.ok()) failure = saved.takeError();
    else if (*saved) divergedAt("the state holds " + **saved);
    return failure.ok();
  };
  while (state.step < steps) {
    if ((options.stop && options.stop->load()) || (options.stopAtStep >= 0 && state.step >= options.stopAtStep)) {
      stopped = true;
      break;
    }
    std::vector<Batch> micro;
    for (int64_t k = 0; k < t.accumulate && failure.ok(); ++k) {
      auto batch = trainData->next();
      if (!batch.ok()) failure = batch.takeError();
      else micro.push_back(std::move(*batch));
    }
    if (!failure.ok()) break;
    auto m = trainer.step(state, micro);
    if (!m.ok()) { failure = m.takeError(); break; }
    itemsDone += itemsPerStep;
    double perSec = static_cast<double>(itemsPerStep) / m->seconds;
    double mfu = flopsPerItem * perSec / options.peakFlops;
    if (state.step == firstStep + 1) summary.firstLoss = m->loss;  // step 1, or the first after a resume
    summary.lastLoss = m->loss;
    lossSinceSave += m->loss;
    ++stepsSinceSave;
    {
      store::StepMetrics row{state.step, std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
                             {{"loss", m->loss}, {"lr", m->lr}, {"grad_norm", m->gradNorm}, {"step_time", m->seconds},
                              {lm ? "tokens_per_sec" : "samples_per_sec", perSec}, {"mfu", mfu}}};
      for (const auto& [name, value] : m->extra) row.values.emplace_back(name, value);
      // SQLite stores NaN as NULL, which the metrics table refuses: a diverged step's NaNs stay out of the store
      // (the run's message names them).
      std::erase_if(row.values, [](const auto& kv) { return std::isnan(kv.second); });
      pending.push_back(std::move(row));
      if (std::chrono::steady_clock::now() - lastFlush > std::chrono::milliseconds(500))
        if (auto st = flushMetrics(); !st.ok()) { failure = st; break; }
    }
    if (state.step % t.logEvery == 0 || state.step == steps) {
      // ETA: the remaining steps at the mean wall time of this session's steps (evaluation included).
      double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - runStart).count();
      double eta = wall / static_cast<double>(state.step - firstStep) * static_cast<double>(steps - state.step);
      std::string extra;
      for (const auto& [name, value] : m->extra) extra += fmt::format(" | {} {:.4g}", name, value);
      onEvent(RunEvent{RunEvent::Kind::Step, state.step,
                       fmt::format("step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | grad norm {:.3f} | {:.0f} ms | {:.0f} {}/s | MFU {:.1f}% | ETA {}",
                                   state.step, steps, m->loss, extra, m->lr, m->gradNorm, m->seconds * 1e3, perSec,
                                   lm ? "tok" : "samples", mfu * 100, humanDuration(eta))});
    }
    if (!std::isfinite(m->loss) || !std::isfinite(m->gradNorm)) {
      divergedAt(fmt::format("the {} is {}; run with TESSERA_DEBUG_NANS=1 to find the op",
                             std::isfinite(m->loss) ? "gradient norm" : "loss",
                             std::isfinite(m->loss) ? m->gradNorm : m->loss));
      break;
    }
    if (t.evalEvery > 0 && state.step % t.evalEvery == 0 && valData) {
      auto evaluated = evaluate();
      if (!evaluated.ok()) { failure = evaluated.takeError(); break; }
      const double vl = evaluated->loss;
      if (!std::isfinite(vl)) {
        divergedAt(fmt::format("the validation loss is {}", vl));
        break;
      }
      summary.lastValLoss = vl;
      std::vector<std::pair<std::string, double>> logged = {{"val_loss", vl}};
      std::string extra;
      for (const auto& [name, value] : evaluated->extra) {
        logged.emplace_back("val_" + name, value);
        extra += fmt::format(", {} {:.4g}", name, value);
      }
      if (db) TSR_TRY(db->logMetrics(runId, state.step, logged));
      onEvent(RunEvent{RunEvent::Kind::Eval, state.step,
                       fmt::format("step {:>5}: validation loss {:.4f}{}", state.step, vl, extra)});
      if (t.bestMetric == "val_loss" && !savedInLoop(considerBest(vl))) break;
    }
    if (t.checkpointEvery > 0 && state.step % t.checkpointEvery == 0) {
      if (t.bestMetric == "loss" && stepsSinceSave > 0 &&
          !savedInLoop(considerBest(lossSinceSave / static_cast<double>(stepsSinceSave))))
        break;
      lossSinceSave = 0;
      stepsSinceSave = 0;
      // The store holds every step up to a checkpoint before the checkpoint exists: a run killed after it
      // resumes from it and writes the later steps again, so no step's metrics are ever missing.
      if (auto st = flushMetrics(); !st.ok()) { failure = st; break; }
      if (!savedInLoop(checkpoint(ckptPath))) break;
      savedStep = state.step;
      onEvent(RunEvent{RunEvent::Kind::Checkpoint, state.step, "checkpoint " + ckptPath});
      if (primary && t.keepCheckpoints > 0) {
        // The periodic copy is a second name for the file just written (the next save replaces latest's name,
        // not its contents); a copy where the file system has no hard links.
        const fs::path stepFile = fs::path(runDir) / stepCheckpointName(state.step);
        fs::remove(stepFile, ec);
        fs::create_hard_link(ckptPath, stepFile, ec);
        if (ec) fs::copy_file(ckptPath, stepFile, fs::copy_options::overwrite_existing, ec);
        if (ec) info(fmt::format("could not keep {}: {}", stepFile.string(), ec.message()));
        pruneStepCheckpoints(runDir, t.keepCheckpoints);
      }
    }
  }
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - runStart).count();
  summary.steps = state.step;
  summary.tokensPerSecond = elapsed > 0 ? static_cast<double>(itemsDone) / elapsed : 0;
  Status flushed = flushMetrics();
  if (failure.ok() && !flushed.ok()) failure = flushed;

  // Whatever happened, keep the work done so far, unless the checkpoint holds it already or the state has
  // diverged: a non-finite state never replaces a finite checkpoint.
  Status saved;
  if (savedStep != state.step) {
    if (!diverged && t.bestMetric == "loss" && stepsSinceSave > 0) {
      auto best = considerBest(lossSinceSave / static_cast<double>(stepsSinceSave));
      if (!best.ok()) saved = best.takeError();
    }
    auto written = checkpoint(ckptPath);
    if (!written.ok()) {
      saved = written.takeError();
    } else if (*written) {
      std::string kept = savedStep >= 0 ? fmt::format("keeps step {}", savedStep) : "is left as it was";
      std::string why = fmt::format("the state holds {}, so {} {}", **written, ckptPath, kept);
      if (failure.ok()) failure = makeError("diverged at step {}: {}", state.step, why);
      else failure = makeError("{}; {}", failure.error().message, why);
      diverged = true;
    } else {
      onEvent(RunEvent{RunEvent::Kind::Checkpoint, state.step, "checkpoint " + ckptPath});
    }
  }
  if (!failure.ok()) {
    if (diverged && savedStep >= 0 && failure.error().message.find(ckptPath) == std::string::npos)
      failure = makeError("{}; {} keeps step {}", failure.error().message, ckptPath, savedStep);
    if (db)
      (void)db->finishRun(runId, diverged ? store::RunStatus::Diverged : store::RunStatus::Failed,
                          failure.error().message);
    return failure.takeError();
  }
  TSR_TRY(saved);
  if (stopped) {
    if (db) TSR_TRY(db->finishRun(runId, store::RunStatus::Stopped, fmt::format("stopped at step {}", state.step)));
    onEvent(RunEvent{RunEvent::Kind::Done, state.step,
                     fmt::format("stopped at step {}; continue with --resume {}", state.step, runId)});
    return summary;
  }
  // Sampling runs eager ops on the parameters, which under MPI would be collectives on every rank: skipped.
  const bool oneProcess = !dist::launchedUnderMpi();
  if (tokenizer && options.sampleTokens > 0 && !oneProcess)
    info("no text sample under mpirun: sample from the checkpoint with tessera generate");
  if (tokenizer && options.sampleTokens > 0 && oneProcess && !model.forward)
    info("no text sample: the model gives its loss but no logits");
  if (tokenizer && options.sampleTokens > 0 && oneProcess && model.forward) {
    auto text = sampleText(contextOf(p),
                           [&](const Array& tokens) { return model.forward(state.params, state.batchStats, tokens); }, *tokenizer,
                           "\n", options.sampleTokens, 0.8, 40, t.seed);
    if (text.ok()) {
      if (db) TSR_TRY(db->putArtifact(runId, {"sample.txt", "text", *text}));
      onEvent(RunEvent{RunEvent::Kind::Sample, state.step, *text});
    }
  }
  if (db) TSR_TRY(db->finishRun(runId, store::RunStatus::Finished));
  onEvent(RunEvent{RunEvent::Kind::Done, state.step,
                   fmt::format("run {} finished: {} steps, loss {:.4f} -> {:.4f}, metrics in {}", runId, state.step,
                               summary.firstLoss, summary.lastLoss, storePath)});
  return summary;
}

namespace {

// The module a parameter belongs to in the model-info table: the path through its block index
// ("h.3.attn.c_attn.weight" -> "h.3"), or its module when it lies outside any block ("ln_f.weight" -> "ln_f").
std::string moduleOf(const std::string& path) {
  size_t pos = 0;
  while (pos < path.size()) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return path.substr(0, dot == std::string::npos ? path.size() : dot);
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  size_t last = path.rfind('.');
  return last == std::string::npos ? path : path.substr(0, last);
}

}  // namespace

Result<ClosedGraph> traceTrainingStep(const project::Project& p) {
  SetupOverrides o;
  o.data = false;
  o.materialize = false;
  o.mesh = false;
  TSR_ASSIGN(TrainingSetup setup, makeTrainingSetup(p, o));
  const project::BatchSignature& batch = setup.model.batch;
  const TreeOf<Aval>* stats = setup.avals->find("batch_stats");
  return setup.trainer->lowerStep(*setup.avals->find("params"), *setup.avals->find("opt"), batch.inputs, batch.targets,
                                  stats ? *stats : TreeOf<Aval>());
}

Result<ModelInfo> describeModel(const project::Project& p) {
  // The parameter avals, from the setup's abstract trace of init: no weights are materialised.
  SetupOverrides o;
  o.data = false;
  o.materialize = false;
  o.mesh = false;
  TSR_ASSIGN(TrainingSetup setup, makeTrainingSetup(p, o));
  const ProjectModel& model = setup.model;
  ModelInfo info;
  info.family = p.model.family;
  info.trainFlopsPerItem = model.trainFlopsPerItem;
  info.forwardFlopsPerItem = model.forwardFlopsPerItem;
  info.itemName = model.itemName == "tokens" ? "token" : "sample";
  setup.avals->find("params")->visit([&](const std::string& path, const Aval& a) {
    std::string module = moduleOf(path);
    if (info.modules.empty() || info.modules.back().path != module) info.modules.push_back({module, 0, 0});
    info.modules.back().params += a.numel();
    info.modules.back().bytes += a.bytes();
    info.numParams += a.numel();
    info.bytes += a.bytes();
  });
  return info;
}

Result<StepMetrics> evaluateCheckpointMetrics(const project::Project& p, const std::string& checkpoint,
                                              const std::function<void(const std::string&)>& info) {
  TSR_ASSIGN(ProjectData data, prepareData(p, info));
  if (!data.val) return makeError("{}: the project has no validation data", p.file);
  TSR_ASSIGN(ProjectModel model, buildModel(p, data.tokenizer ? data.tokenizer->vocabSize() : 0));
  TSR_ASSIGN(Tree like, capture([&] { return model.init(random::key(p.train.seed)); }));
  TSR_ASSIGN(Tree params, loadCheckpointParams(checkpoint, like));
  // A model with state (BatchNorm's running statistics) evaluates in inference with the checkpoint's.
  TSR_ASSIGN(Tree stats, loadCheckpointState(checkpoint, model.initState ? model.initState() : Tree()));
  Trainer trainer(model.loss, optim::sgd(optim::constantSchedule(0.0), 0.0), optim::constantSchedule(0.0), p.train.seed);
  TrainState state = trainer.init(std::move(params), std::move(stats));
  // Over the batches, as a training run's evaluation computes it.
  std::vector<StepMetrics> batches;
  for (int64_t i = 0; i < p.train.evalSteps; ++i) {
    TSR_ASSIGN(Batch b, data.val->next());
    TSR_ASSIGN(StepMetrics m, trainer.evaluate(state, b));
    // A NaN mean would read as a result; it is the sign of a diverged checkpoint.
    if (!std::isfinite(m.loss))
      return makeError("{}: the validation loss is {} on batch {} of {}", checkpoint, m.loss, i + 1, p.train.evalSteps);
    batches.push_back(std::move(m));
  }
  return poolEvaluations(batches);
}

Result<double> evaluateCheckpoint(const project::Project& p, const std::string& checkpoint,
                                  const std::function<void(const std::string&)>& info) {
  TSR_ASSIGN(StepMetrics m, evaluateCheckpointMetrics(p, checkpoint, info));
  return m.loss;
}

Result<std::string> generateFromCheckpoint(const project::Project& p, const std::string& checkpoint,
                                           const GenerateOptions& o) {
  if (!p.model.languageModel()) return makeError("{}: generate needs a language model, and {} is not one", p.file, p.model.family);
  std::optional<data::BpeTokenizer> tokenizer;
  if (p.data.tokenizer == "gpt2") {
    TSR_ASSIGN(tokenizer, data::BpeTokenizer::load(p.resolve(p.data.encoderJson), p.resolve(p.data.vocabBpe)));
  } else {
    std::string dir = (fs::path(p.dir) / ".tessera" / "data" / "tokenizer").string();
    std::error_code ec;
    if (!fs::exists(dir, ec)) return makeError("no tokenizer in {}: train the project first", dir);
    TSR_ASSIGN(tokenizer, data::BpeTokenizer::loadDirectory(dir));
  }
  TSR_ASSIGN(ProjectModel model, buildModel(p, tokenizer->vocabSize()));
  if (!model.forward) return makeError("{}: generate needs the model's logits, and its model gives only a loss", p.file);
  TSR_ASSIGN(Tree like, capture([&] { return model.init(random::key(p.train.seed)); }));
  TSR_ASSIGN(Tree params, loadCheckpointParams(checkpoint, like));
  TSR_ASSIGN(Tree stats, loadCheckpointState(checkpoint, model.initState ? model.initState() : Tree()));
  return sampleText(contextOf(p), [&](const Array& tokens) { return model.forward(params, stats, tokens); }, *tokenizer, o.prompt,
                    o.tokens, o.temperature, o.topK, o.seed);
}

}  // namespace tsr::train
