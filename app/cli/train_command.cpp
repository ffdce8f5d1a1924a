#include "app/cli/train_command.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <optional>

#include "app/cli/project_args.h"
#include "engine/core/env_options.h"
#include "engine/project/project.h"
#include "engine/train/run.h"

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
  std::string from = "latest";     // --from: the checkpoint of that run to continue from
  std::vector<std::string> sets, tags;
  std::string device, matmulPrecision;
  std::string store;
  std::string name;
  int64_t sampleTokens = 64;
  bool quiet = false;
};

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
  options.resumeFrom = a.from;
  options.command = "tessera train " + shellWord(a.project);
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
  CLI::Option* resume = cmd->add_option("--resume", args->resume,
                                         "Continue run N from its latest checkpoint; without N, the latest run that has one")
                            ->expected(0, 1)
                            ->default_str("0");
  // As Lightning's ckpt_path and an orbax step: which state to go on from is named, never guessed (a damaged
  // latest is reported with the run's intact checkpoints, not passed over).
  cmd->add_option("--from", args->from,
                  "With --resume: the run's checkpoint to continue from: latest (default), best, or a step that "
                  "keep_checkpoints kept (200); the steps after it are trained again")
      ->needs(resume);
  addSetOption(cmd, args->sets);
  cmd->add_option("--tag", args->tags, "Tag the run (repeatable)");
  cmd->add_option("--device", args->device,
                  "Where the step runs: cpu (default) or cuda (GPU 0; TESSERA_CUDA_DEVICE; under mpirun the rank's own)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--matmul-precision", args->matmulPrecision, "f32 matmuls on the GPU: f32, tf32 or bf16 inputs")
      ->check(CLI::IsMember({"f32", "tf32", "bf16"}));
  cmd->add_option("--db,--store", args->store, "Run store (default: PROJECT/runs.db)");
  addLockWaitOption(cmd);
  cmd->add_option("--name", args->name, "Run name (default: the project name)");
  cmd->add_option("--sample", args->sampleTokens, "Tokens of text to sample at the end (language models)")
      ->capture_default_str()
      ->check(nonNegativeNumber());
  cmd->add_flag("--quiet", args->quiet, "Print no per-step lines");
  return [cmd, args]() { return cmd->parsed() ? runTrain(*args) : -1; };
}

}  // namespace tsr::cli
