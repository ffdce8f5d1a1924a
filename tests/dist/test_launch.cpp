// Run configurations: the commands they launch, their defaults for mesh projects, their file, and a crashed run
// recorded as such; an mpirun configuration of 2 ranks trains a project through the same launch path as the IDE.
#include "tests/check.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "engine/inspect/run_configuration.h"
#include "engine/project/project.h"
#include "engine/store/run_store.h"
#include "tests/temp_dir.h"

extern char** environ;

using namespace tsr;
using namespace tsr::inspect;
namespace fs = std::filesystem;

namespace {

const char* kTiny = R"([model]
family = "mlp"
sizes = [16, 32, 4]
[data]
kind = "synthetic-digits"
[train]
steps = 3
batch_size = 8
eval_every = 0
[mesh]
shape = [2]
axes = ["data"]
)";

std::vector<std::string> words(const LaunchCommand& c) {
  std::vector<std::string> w = {c.program};
  w.insert(w.end(), c.args.begin(), c.args.end());
  return w;
}

// Runs a launch command as the IDE does (the program looked up on PATH, env added); returns the exit status.
int runCommand(const LaunchCommand& c, const std::string& log) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  // Under mpirun, Open MPI's libraries keep allocations for the life of the process and unload their components
  // at exit, so LeakSanitizer (in the instrumented build) reports leaks it cannot attribute: off for the ranks,
  // AddressSanitizer's other checks stay on.
  if (c.program == "mpirun")
    for (std::string& e : env)
      if (e.rfind("ASAN_OPTIONS=", 0) == 0) e += ":detect_leaks=0";
  for (const auto& [k, v] : c.env) env.push_back(k + "=" + v);
  std::vector<std::string> all = words(c);
  std::vector<char*> argv, envp;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("configurations make the command lines a user would type") {
  RunConfiguration local;
  local.cpuDevices = 8;
  local.overrides = {"train.lr=3e-4", "model.sizes=[16, 8, 4]"};
  local.steps = 20;
  auto train = launchCommand(local, RunAction::Train, "/p", "/bin/tessera");
  REQUIRE_MESSAGE(train.ok(), train.error().message);
  TSR_COMPARE(words(*train), (std::vector<std::string>{"/bin/tessera", "train", "/p", "--steps", "20", "--set",
                                                       "train.lr=3e-4", "--set", "model.sizes=[16, 8, 4]"}));
  TSR_COMPARE(train->display(), std::string("TESSERA_CPU_DEVICES=8 /bin/tessera train /p --steps 20 --set train.lr=3e-4 "
                                            "--set 'model.sizes=[16, 8, 4]'"));
  auto resume = launchCommand(local, RunAction::Resume, "/p", "tessera", 3);
  TSR_COMPARE(words(*resume).at(3), std::string("--resume"));
  TSR_COMPARE(words(*resume).at(4), std::string("3"));
  auto eval = launchCommand(local, RunAction::Eval, "/p", "tessera", 2);
  TSR_COMPARE(words(*eval), (std::vector<std::string>{"tessera", "eval", "/p", "--run", "2", "--set", "train.lr=3e-4",
                                                      "--set", "model.sizes=[16, 8, 4]"}));
  RunConfiguration profiled;
  profiled.profile = true;
  TSR_COMPARE(words(*launchCommand(profiled, RunAction::Train, "/p", "tessera")),
              (std::vector<std::string>{"tessera", "profile", "/p", "--steps", "3"}));

  RunConfiguration mpi;
  mpi.launcher = "mpirun";
  mpi.processes = 4;
  mpi.device = "cuda";
  auto m = launchCommand(mpi, RunAction::Train, "/p", "tessera");
  TSR_COMPARE(words(*m), (std::vector<std::string>{"mpirun", "-n", "4", "--oversubscribe", "tessera", "train", "/p",
                                                   "--device", "cuda"}));
  test::TempDir dir;
  const std::string hosts = dir.filePath("hosts");
  std::ofstream(hosts) << "node1 slots=4\nnode2 slots=4\n";
  mpi.hostfile = hosts;
  TSR_COMPARE(words(*launchCommand(mpi, RunAction::Train, "/p", "tessera")).at(3), std::string("--hostfile"));
  RunConfiguration slurm;
  slurm.launcher = "slurm";
  slurm.processes = 16;
  TSR_COMPARE(words(*launchCommand(slurm, RunAction::Train, "/p", "tessera")),
              (std::vector<std::string>{"srun", "--ntasks", "16", "--mpi=pmix", "tessera", "train", "/p"}));

  // What cannot launch says why.
  auto error = [](RunConfiguration c) {
    auto r = launchCommand(c, RunAction::Train, "/p", "tessera");
    return r.ok() ? std::string("(launched)") : r.error().message;
  };
  RunConfiguration bad = mpi;
  bad.hostfile = dir.filePath("absent");
  TSR_COMPARE(error(bad).find("hostfile") != std::string::npos, true);
  bad = local;
  bad.overrides = {"lr=1"};
  TSR_COMPARE(error(bad), std::string("--set lr=1: expected SECTION.KEY=VALUE, e.g. train.lr=3e-4"));
  bad = local;
  bad.cpuDevices = 0;
  TSR_COMPARE(error(bad).find("0 CPU devices") != std::string::npos, true);
  bad = local;
  bad.launcher = "ssh";
  TSR_COMPARE(error(bad).find("not local, mpirun or slurm") != std::string::npos, true);
}

TEST_CASE("mesh projects get a configuration with enough devices, and configurations round-trip") {
  auto sharded = project::loadProject(std::string(TSR_SAMPLES) + "/mlp_sharding");
  REQUIRE_MESSAGE(sharded.ok(), sharded.error().message);
  auto defaults = defaultConfigurations(*sharded);
  REQUIRE(defaults.size() == 2);
  TSR_COMPARE(defaults[0].name, std::string("Local (8 CPU devices)"));
  TSR_COMPARE(defaults[0].cpuDevices, 8);
  TSR_COMPARE(defaults[1].launcher, std::string("mpirun"));
  TSR_COMPARE(defaults[1].processes, 8);

  test::TempDir dir;
  std::ofstream(dir.filePath("project.toml")) << kTiny;
  auto p = project::loadProject(dir.path());
  REQUIRE(p.ok());
  TSR_COMPARE(*loadConfigurations(*p), defaultConfigurations(*p));  // no file yet
  std::vector<RunConfiguration> mine = defaultConfigurations(*p);
  mine[0].overrides = {"train.lr=1e-3"};
  mine[0].steps = 7;
  mine[1].hostfile = "hosts.txt";
  mine.push_back(RunConfiguration{"GPU", "local", 1, 2, "", "cuda", {}, -1, true});
  REQUIRE(saveConfigurations(dir.path(), mine).ok());
  TSR_COMPARE(*loadConfigurations(*p), mine);
  std::ofstream(configurationsPath(dir.path())) << "{\"configurations\": [{\"name\": 3}]}";
  auto damaged = loadConfigurations(*p);
  REQUIRE(!damaged.ok());
  REQUIRE_MESSAGE(damaged.error().message.find("run_configurations.json") != std::string::npos, damaged.error().message);
}

TEST_CASE("a run left running by a dead process is recorded as crashed") {
  test::TempDir dir;
  const std::string db = dir.filePath("runs.db");
  {
    auto s = store::RunStore::open(db);
    REQUIRE(s.ok());
    REQUIRE(s->createRun("killed", "p", "").ok());
    REQUIRE(s->createRun("finished", "p", "").ok());
    REQUIRE(s->finishRun(2, store::RunStatus::Finished).ok());
  }
  REQUIRE(markRunCrashed(db, 1, "the run crashed (exit status 137): Killed").ok());
  REQUIRE(markRunCrashed(db, 2, "not this one").ok());
  auto s = store::RunStore::openReadOnly(db);
  TSR_COMPARE(s->run(1)->status, store::RunStatus::Crashed);
  TSR_COMPARE(s->run(1)->message, std::string("the run crashed (exit status 137): Killed"));
  TSR_COMPARE(s->run(2)->status, store::RunStatus::Finished);
  REQUIRE(!markRunCrashed(db, 9, "x").ok());
}

TEST_CASE("the default configuration trains a mesh project, and mpirun with 2 ranks does too") {
  test::TempDir dir;
  std::ofstream(dir.filePath("project.toml")) << kTiny;
  auto p = project::loadProject(dir.path());
  REQUIRE(p.ok());
  auto configs = defaultConfigurations(*p);
  // Local, 2 virtual devices: the mesh fits.
  auto local = launchCommand(configs[0], RunAction::Train, dir.path(), TESSERA_BIN);
  REQUIRE(local.ok());
  TSR_COMPARE(runCommand(*local, dir.filePath("local.log")), 0);
#ifdef TSR_HAVE_MPIRUN
  // mpirun -n 2: one device per rank; rank 0 records the run.
  auto mpi = launchCommand(configs[1], RunAction::Train, dir.path(), TESSERA_BIN);
  REQUIRE(mpi.ok());
  const int rc = runCommand(*mpi, dir.filePath("mpi.log"));
  REQUIRE_MESSAGE(rc == 0, readFile(dir.filePath("mpi.log")));
#endif
  auto s = store::RunStore::openReadOnly(dir.filePath("runs.db"));
  REQUIRE(s.ok());
  auto runs = s->runs();
  for (const auto& r : *runs) TSR_COMPARE(r.status, store::RunStatus::Finished);
  TSR_COMPARE(s->params(1)->at("run.cpu_devices"), std::string("2"));
#ifdef TSR_HAVE_MPIRUN
  TSR_COMPARE(runs->size(), size_t(2));
  TSR_COMPARE(s->params(2)->at("run.processes"), std::string("2"));
  // The two ways of running the same mesh train the same model: the same losses.
  auto a = s->metrics(1, "loss"), b = s->metrics(2, "loss");
  REQUIRE(a->size() == b->size());
  for (size_t i = 0; i < a->size(); ++i) TSR_COMPARE(static_cast<float>(a->at(i).value), static_cast<float>(b->at(i).value));
#else
  TSR_SKIP("no mpirun: the mpirun configuration was not launched");
#endif
}
