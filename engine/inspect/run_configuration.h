#pragma once
// Run configurations, as VS Code's launch.json and Qt Creator's run settings: named ways to launch a project's
// training. A configuration says where the run goes (this machine with N virtual CPU devices, mpirun with N
// processes, optionally over a hostfile's machines, or a Slurm allocation through srun), on which device, with
// which --set overrides and steps, and whether Run ▶ Train records a profile instead. The IDE keeps them in
// <project>/.tessera/run_configurations.json and turns the selected one into a command line here, so that what
// the IDE launches is a command a user can copy into a shell.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/result.h"
#include "engine/project/project.h"

namespace tsr::inspect {

struct RunConfiguration {
  std::string name = "Local";
  std::string launcher = "local";  // local | mpirun | slurm
  int cpuDevices = 1;              // local: virtual CPU devices (TESSERA_CPU_DEVICES)
  int processes = 2;               // mpirun, slurm: ranks, one device each
  std::string hostfile;            // mpirun: --hostfile (empty: this machine)
  std::string device = "cpu";      // cpu | cuda
  std::vector<std::string> overrides;  // --set SECTION.KEY=VALUE
  int64_t steps = -1;              // -1: the project's [train] steps
  bool profile = false;            // Run ▶ Train profiles (tessera profile) instead of training
  bool operator==(const RunConfiguration&) const = default;
};

// What Run ▶ does with the selected configuration.
enum class RunAction { Train, Resume, Profile, Eval };

struct LaunchCommand {
  std::string program;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;  // set for the child, over the IDE's environment
  std::string display() const;  // "TESSERA_CPU_DEVICES=8 tessera train PROJECT", as a shell would take it
};

// The command for an action: `run` is the run to resume or evaluate (0: the latest). Errors name what is wrong
// with the configuration (no processes, a hostfile that does not exist, an override that is not KEY=VALUE).
Result<LaunchCommand> launchCommand(const RunConfiguration& c, RunAction action, const std::string& projectDir,
                                    const std::string& tesseraBin, int64_t run = 0);

// A project's configurations when it has none saved: "Local", with as many CPU devices as its [mesh] has, so
// that a mesh project trains as shipped; and "mpirun (N processes)" for a mesh project.
std::vector<RunConfiguration> defaultConfigurations(const project::Project& p);

std::string configurationsPath(const std::string& projectDir);  // <project>/.tessera/run_configurations.json
// The saved configurations, or the defaults when there is no file. A damaged file is an error naming it.
Result<std::vector<RunConfiguration>> loadConfigurations(const project::Project& p);
Status saveConfigurations(const std::string& projectDir, const std::vector<RunConfiguration>& configurations);

// Run ▶ Resume, before it launches `command` (a resume made by launchCommand): an error, said in the IDE, when
// another process trains the run it resumes (the run's lease: train::checkRunNotTrainedElsewhere). None for any
// other command, or when the run cannot be found: the launched command says why.
Status checkResumable(const LaunchCommand& command, const std::string& dbPath);

// A run the training process left as "running" when it died (a signal, the OOM killer): recorded as crashed
// with `message` (its last lines of stderr). Runs that recorded their own end are left as they are.
Status markRunCrashed(const std::string& dbPath, int64_t run, const std::string& message);

}  // namespace tsr::inspect
