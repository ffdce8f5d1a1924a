#include "engine/inspect/run_configuration.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/data/file_io.h"
#include "engine/store/run_store.h"
#include "engine/train/checkpoints.h"
#include "engine/train/run_process.h"

namespace tsr::inspect {

namespace {

namespace fs = std::filesystem;

// A word as a POSIX shell reads it back: quoted when it holds anything but safe characters.
std::string shellWord(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
                        std::string::npos)
    return w;
  std::string out = "'";
  for (char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int64_t meshSize(const project::Project& p) {
  int64_t n = 1;
  for (int64_t d : p.mesh.shape) n *= d;
  return n;
}

}  // namespace

std::string LaunchCommand::display() const {
  std::string s;
  for (const auto& [k, v] : env) s += k + "=" + shellWord(v) + " ";
  s += shellWord(program);
  for (const std::string& a : args) s += " " + shellWord(a);
  return s;
}

Result<LaunchCommand> launchCommand(const RunConfiguration& c, RunAction action, const std::string& projectDir,
                                    const std::string& tesseraBin, int64_t run) {
  if (c.launcher != "local" && c.launcher != "mpirun" && c.launcher != "slurm")
    return makeError("configuration '{}': launcher '{}' is not local, mpirun or slurm", c.name, c.launcher);
  if (c.device != "cpu" && c.device != "cuda")
    return makeError("configuration '{}': device '{}' is not cpu or cuda", c.name, c.device);
  if (c.launcher == "local" && (c.cpuDevices < 1 || c.cpuDevices > 256))
    return makeError("configuration '{}': {} CPU devices; 1 to 256", c.name, c.cpuDevices);
  if (c.launcher != "local" && c.processes < 1)
    return makeError("configuration '{}': {} processes; at least 1", c.name, c.processes);
  std::error_code ec;
  if (c.launcher == "mpirun" && !c.hostfile.empty() && !fs::is_regular_file(c.hostfile, ec))
    return makeError("configuration '{}': hostfile {} does not exist", c.name, c.hostfile);
  for (const std::string& o : c.overrides) TSR_TRY(project::parseOverride(o));

  std::vector<std::string> tessera = {tesseraBin};
  const bool profile = action == RunAction::Profile || (action == RunAction::Train && c.profile);
  switch (action) {
    case RunAction::Train:
    case RunAction::Resume:
    case RunAction::Profile:
      tessera.push_back(profile ? "profile" : "train");
      tessera.push_back(projectDir);
      if (action == RunAction::Resume) {
        tessera.push_back("--resume");
        if (run > 0) tessera.push_back(std::to_string(run));
      }
      if (c.steps >= 0) tessera.insert(tessera.end(), {"--steps", std::to_string(c.steps)});
      else if (profile) tessera.insert(tessera.end(), {"--steps", "3"});
      if (!profile && c.device != "cpu") tessera.insert(tessera.end(), {"--device", c.device});
      break;
    case RunAction::Eval:
      tessera.insert(tessera.end(), {"eval", projectDir});
      if (run > 0) tessera.insert(tessera.end(), {"--run", std::to_string(run)});
      break;
  }
  for (const std::string& o : c.overrides) tessera.insert(tessera.end(), {"--set", o});

  LaunchCommand cmd;
  if (c.device != "cpu") cmd.env.emplace_back("TESSERA_DEVICE", c.device);
  if (c.launcher == "local") {
    if (c.cpuDevices > 1) cmd.env.emplace_back("TESSERA_CPU_DEVICES", std::to_string(c.cpuDevices));
    cmd.program = tessera.front();
    cmd.args.assign(tessera.begin() + 1, tessera.end());
    return cmd;
  }
  if (c.launcher == "mpirun") {
    // One rank per device; the ranks learn their number and count from mpirun's environment.
    cmd.program = "mpirun";
    cmd.args = {"-n", std::to_string(c.processes)};
    if (!c.hostfile.empty()) cmd.args.insert(cmd.args.end(), {"--hostfile", c.hostfile});
    else cmd.args.push_back("--oversubscribe");  // one machine: more ranks than cores is fine for a test
  } else {
    // Inside a Slurm allocation (salloc/sbatch): srun starts the ranks; MPI reads them from Slurm's PMIx.
    cmd.program = "srun";
    cmd.args = {"--ntasks", std::to_string(c.processes), "--mpi=pmix"};
  }
  cmd.args.insert(cmd.args.end(), tessera.begin(), tessera.end());
  return cmd;
}

std::vector<RunConfiguration> defaultConfigurations(const project::Project& p) {
  RunConfiguration local;
  const int64_t devices = meshSize(p);
  local.cpuDevices = static_cast<int>(std::clamp<int64_t>(devices, 1, 256));
  local.name = devices > 1 ? fmt::format("Local ({} CPU devices)", devices) : "Local";
  std::vector<RunConfiguration> out = {local};
  if (devices > 1) {
    RunConfiguration mpi;
    mpi.name = fmt::format("mpirun ({} processes)", devices);
    mpi.launcher = "mpirun";
    mpi.processes = static_cast<int>(std::clamp<int64_t>(devices, 1, 256));
    out.push_back(mpi);
  }
  return out;
}

std::string configurationsPath(const std::string& projectDir) {
  return (fs::path(projectDir) / ".tessera" / "run_configurations.json").string();
}

Result<std::vector<RunConfiguration>> loadConfigurations(const project::Project& p) {
  const std::string path = configurationsPath(p.dir);
  std::error_code ec;
  if (!fs::exists(path, ec)) return defaultConfigurations(p);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<RunConfiguration> out;
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    for (const auto& e : j.at("configurations")) {
      RunConfiguration c;
      c.name = e.at("name").get<std::string>();
      c.launcher = e.value("launcher", c.launcher);
      c.cpuDevices = e.value("cpu_devices", c.cpuDevices);
      c.processes = e.value("processes", c.processes);
      c.hostfile = e.value("hostfile", c.hostfile);
      c.device = e.value("device", c.device);
      c.overrides = e.value("overrides", c.overrides);
      c.steps = e.value("steps", c.steps);
      c.profile = e.value("profile", c.profile);
      out.push_back(std::move(c));
    }
  } catch (const nlohmann::json::exception& e) {
    return makeError("{}: {} (delete the file to get the default configurations back)", path, e.what());
  }
  if (out.empty()) return defaultConfigurations(p);
  return out;
}

Status saveConfigurations(const std::string& projectDir, const std::vector<RunConfiguration>& configurations) {
  nlohmann::json list = nlohmann::json::array();
  for (const RunConfiguration& c : configurations)
    list.push_back({{"name", c.name},
                    {"launcher", c.launcher},
                    {"cpu_devices", c.cpuDevices},
                    {"processes", c.processes},
                    {"hostfile", c.hostfile},
                    {"device", c.device},
                    {"overrides", c.overrides},
                    {"steps", c.steps},
                    {"profile", c.profile}});
  const std::string path = configurationsPath(projectDir);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return makeError("cannot create {}: {}", fs::path(path).parent_path().string(), ec.message());
  return data::writeFileAtomically(path, nlohmann::json{{"configurations", list}}.dump(2) + "\n");
}

Status checkResumable(const LaunchCommand& command, const std::string& dbPath) {
  // launchCommand writes a resume as "... train PROJECT --resume [RUN] ...", after any launcher's own arguments.
  const auto& args = command.args;
  const auto at = std::find(args.begin(), args.end(), "--resume");
  if (at == args.end() || at == args.begin()) return {};
  const std::string& projectDir = *(at - 1);
  int64_t run = 0;
  if (at + 1 != args.end() && !(at + 1)->empty() &&
      (at + 1)->find_first_not_of("0123456789") == std::string::npos && (at + 1)->size() < 19)
    run = std::stoll(*(at + 1));
  if (run == 0) {  // the latest run with a checkpoint, as `tessera train --resume` takes it
    auto project = project::loadProject(projectDir);
    if (!project.ok()) return {};
    auto found = train::findRunCheckpoint(*project, 0, "latest", dbPath);
    if (!found.ok() || found->run <= 0) return {};
    run = found->run;
  }
  return train::checkRunNotTrainedElsewhere(dbPath, run);
}

Status markRunCrashed(const std::string& dbPath, int64_t run, const std::string& message) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::open(dbPath));
  TSR_ASSIGN(store::RunInfo info, db.run(run));
  if (info.status != store::RunStatus::Running) return {};
  return db.finishRun(run, store::RunStatus::Crashed, message);
}

}  // namespace tsr::inspect
