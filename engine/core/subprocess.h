#pragma once
// Child processes: the native CPU tier's compiler, the sweep's training runs, and the Python interpreter that
// traces a project's model.py all start and wait the same way. A child's output goes to a log file, so a
// failure can quote it; a child that outlives its timeout is stopped.
#include <sys/types.h>

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/result.h"

namespace tsr {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up on the PATH when it has no '/'
  std::string log;                // stdout and stderr go here (truncated first); empty: this process's
  // A descriptor the child reads as its stdin and writes as its stdout (a socket to talk to it); -1: none.
  int channel = -1;
  // Variables set (or replaced) in the child's environment.
  std::vector<std::pair<std::string, std::string>> setEnv;
};

// Starts the child; the error says which program could not be run and why.
Result<pid_t> spawnProcess(const SpawnOptions& options);

struct ProcessExit {
  bool exited = false;  // by exit(); `code` is its status
  int code = 0;
  int signal = 0;       // the signal that ended it (when !exited and !timedOut)
  bool timedOut = false;
  bool cancelled = false;
  bool ok() const { return exited && code == 0; }
  // "exit status 2", "killed by signal 6 (Aborted)", "no result within 60 s".
  std::string describe(double timeoutSeconds = 0) const;
};

// What a wait status (waitpid's) says.
ProcessExit processExit(int waitStatus);

// Waits for the child. timeoutSeconds <= 0: no limit. When the time runs out or `cancel` becomes true, the child
// (its process group, when it leads one) gets SIGTERM, then SIGKILL a second later, and is reaped.
ProcessExit waitProcess(pid_t pid, double timeoutSeconds = 0, const std::atomic<bool>* cancel = nullptr);

// The last `maxBytes` of a log file, from a line start where one is near: what a failure message quotes.
std::string logTail(const std::string& path, size_t maxBytes = 4000);

}  // namespace tsr
