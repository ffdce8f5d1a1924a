#include "app/cli/train_command.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "app/cli/project_args.h"
#include "engine/core/env_options.h"
#include "engine/project/project.h"
#include "engine/store/run_store.h"
#include "engine/train/checkpoints.h"
#include "engine/train/run.h"
#include "engine/train/run_process.h"

namespace tsr::cli {

namespace {

namespace fs = std::filesystem;

std::atomic<bool> gStop{false};
std::atomic<int> gInterrupts{0};

void onInterrupt(int, siginfo_t* info, void*) {
  // First Ctrl-C: finish the step, checkpoint and exit; a second one kills at once. A closed stdout stops the run
  // too but is no Ctrl-C: one after it (a sweep stopping its runs) still checkpoints. A stop the parent process
  // sends (a sweep passing on an interrupt, the IDE's Stop) is never that second Ctrl-C: the run may have had the
  // same Ctrl-C from the terminal already (`kill -INT -GROUP` reaches the sweep and its runs at once).
  const bool fromParent = info && info->si_code == SI_USER && info->si_pid == ::getppid();
  if (!fromParent && gInterrupts.fetch_add(1) > 0) std::_Exit(130);
  gStop = true;
}

// Whether stdout was closed under us (`tessera train | head`): SIGPIPE is ignored, so the write fails instead of
// killing the process, and the run stops as an interruption would, checkpointed and resumable.
void stopWhenStdoutCloses() {
  if (!std::cout.good() && !gStop.exchange(true))
    std::cerr << "tessera train: stdout was closed: stopping after this step, with a checkpoint\n";
}

struct TrainArgs {
  std::string project;
  int64_t steps = -1;
  int64_t stopAt = -1;
  std::optional<int64_t> resume;  // --resume: 0 (the latest run), --resume N: run N
  std::vector<std::string> sets, tags;
  std::string device, matmulPrecision;
  std::string store;
  std::string name;
  int64_t sampleTokens = 64;
  bool quiet = false;
};

// The run --resume continues, when another process of this machine is training it (it started or resumed the
// run and is alive): both would write the run's metrics and its checkpoint. Anything else (no such run, a
// damaged store) is left to the run, which says it in full.
Status checkNotTrainedElsewhere(const project::Project& p, const TrainArgs& a) {
  const std::string storePath = a.store.empty() ? (fs::path(p.dir) / "runs.db").string() : a.store;
  auto found = train::findRunCheckpoint(p, a.resume.value_or(0), "latest", storePath);
  if (!found.ok() || found->run <= 0) return {};
  auto db = store::RunStore::openReadOnly(storePath);
  if (!db.ok()) return {};
  auto run = db->run(found->run);
  if (!run.ok()) return {};
  train::settleOrphanedRun(*db, *run);
  if (run->status != store::RunStatus::Running) return {};
  auto process = db->artifact(run->id, train::kRunProcessArtifact);
  if (!process.ok()) return {};
  const nlohmann::json j = nlohmann::json::parse(process->data, nullptr, false);
  char host[256] = {};
  if (!j.is_object() || ::gethostname(host, sizeof host - 1) != 0 || j.value("host", std::string()) != host)
    return {};
  const long long pid = j.value("pid", 0LL);
  if (pid <= 0 || pid == ::getpid()) return {};
  return makeError("run {} of {} is being trained by another process (pid {}): stop it first (Ctrl-C where it runs, "
                   "or kill -INT {}), then resume; two processes would both write its metrics and its checkpoint",
                   run->id, storePath, pid, pid);
}

// A run writes its checkpoints under the project's folder (checkpoints/run-N): a folder this user may not write
// is said before the run is created, rather than as a failed run ("cannot create the checkpoint folder ...").
Status checkCheckpointsWritable(const project::Project& p) {
  std::error_code ec;
  const fs::path dir = p.dir.empty() ? fs::path(".") : fs::path(p.dir), checkpoints = dir / "checkpoints";
  const fs::path target = fs::is_directory(checkpoints, ec) ? checkpoints : dir;
  if (::access(target.c_str(), W_OK) == 0) return {};
  return makeError("{}: this user may not write {}, where a run keeps its checkpoints (checkpoints/run-N); copy the "
                   "project to a folder of yours",
                   p.file, target.string());
}

int runTrain(const TrainArgs& a) {
  auto project = loadProject(a.project, a.sets);
  if (!project.ok()) {
    std::cerr << "tessera train: " << project.error().message << "\n";
    return 1;
  }
  if (auto st = checkCheckpointsWritable(*project); !st.ok()) {
    std::cerr << "tessera train: " << st.error().message << "\n";
    return 1;
  }
  if (a.resume)
    if (auto st = checkNotTrainedElsewhere(*project, a); !st.ok()) {
      std::cerr << "tessera train: " << st.error().message << "\n";
      return 1;
    }
  // The device and matmul precision reach every jitted function through the environment's settings
  // (engine/core/env_options.h), as TESSERA_EXECUTOR does: set, then read again.
  if (!a.device.empty()) setenv("TESSERA_DEVICE", a.device.c_str(), 1);
  if (!a.matmulPrecision.empty()) setenv("TESSERA_MATMUL_PRECISION", a.matmulPrecision.c_str(), 1);
  reloadEnvOptions();
  train::RunOptions options;
  options.steps = a.steps;
  options.stopAtStep = a.stopAt;
  options.resume = a.resume.has_value();
  options.resumeRun = a.resume.value_or(0);
  options.tags = a.tags;
  options.storePath = a.store;
  options.runName = a.name;
  options.sampleTokens = a.sampleTokens;
  options.stop = &gStop;
  if (envOptions().peakFlops) options.peakFlops = *envOptions().peakFlops;
  struct sigaction interrupt {};
  interrupt.sa_sigaction = onInterrupt;
  interrupt.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&interrupt.sa_mask);
  ::sigaction(SIGINT, &interrupt, nullptr);
  ::sigaction(SIGTERM, &interrupt, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  auto summary = train::runTraining(*project, options, [&](const train::RunEvent& e) {
    if (a.quiet && e.kind == train::RunEvent::Kind::Step) return;
    if (e.kind == train::RunEvent::Kind::Sample) {
      std::cout << "---- sample ----\n" << e.text << "\n----------------\n";
    } else {
      std::cout << e.text << "\n";
    }
    std::cout.flush();
    stopWhenStdoutCloses();
  });
  if (!summary.ok()) {
    std::cerr << "tessera train: " << summary.error().message << "\n";
    return 1;
  }
  return gStop.load() ? 130 : 0;
}

}  // namespace

std::function<int()> addTrainCommand(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Train a project (a folder with project.toml), headless");
  cmd->add_option("project", args->project, "Project folder or project.toml")->required();
  // As [train] steps, positive: a run of no steps trained nothing and reported "loss 0.0000 -> 0.0000".
  cmd->add_option("--steps", args->steps, "Override [train] steps")->check(positiveNumber());
  cmd->add_option("--stop-at", args->stopAt, "Stop after step N, checkpointed, as an interruption would")
      ->check(nonNegativeNumber());
  cmd->add_option("--resume", args->resume,
                  "Continue run N from its latest checkpoint; without N, the latest run that has one")
      ->expected(0, 1)
      ->default_str("0");
  addSetOption(cmd, args->sets);
  cmd->add_option("--tag", args->tags, "Tag the run (repeatable)");
  cmd->add_option("--device", args->device,
                  "Where the step runs: cpu (default) or cuda (GPU 0; TESSERA_CUDA_DEVICE; under mpirun the rank's own)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--matmul-precision", args->matmulPrecision, "f32 matmuls on the GPU: f32, tf32 or bf16 inputs")
      ->check(CLI::IsMember({"f32", "tf32", "bf16"}));
  cmd->add_option("--db,--store", args->store, "Run store (default: PROJECT/runs.db)");
  cmd->add_option("--name", args->name, "Run name (default: the project name)");
  cmd->add_option("--sample", args->sampleTokens, "Tokens of text to sample at the end (language models)")
      ->capture_default_str()
      ->check(nonNegativeNumber());
  cmd->add_flag("--quiet", args->quiet, "Print no per-step lines");
  return [cmd, args]() { return cmd->parsed() ? runTrain(*args) : -1; };
}

}  // namespace tsr::cli
