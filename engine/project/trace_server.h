#pragma once
// The warm tracer: one `python3 -m tessera.trace_server` per process (app/python/tessera/trace_server.py), started
// on first use, which forks a child per trace instead of starting Python anew. A save in the IDE re-traces
// model.py without paying for Python's start and tessera's import (most of a fresh tracer's time).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/subprocess.h"

namespace tsr::project {

struct TraceServerRequest {
  std::string interpreter;  // the Python the server runs
  std::vector<std::pair<std::string, std::string>> env;  // its environment's additions (PYTHONPATH, ...)
  std::vector<std::string> args;  // project_trace's arguments
  std::string log;  // the child's stdout and stderr
  double timeoutSeconds = 0;  // <= 0: no limit; past it the child is stopped and the exit says timedOut
};

// Runs project_trace in a child of the warm server (started, or started again, as needed) and waits for it.
// nullopt when no server can take the request (it cannot start, has died, or is busy with another thread's
// trace): the caller starts a fresh interpreter instead.
std::optional<ProcessExit> traceWithServer(const TraceServerRequest& request);

}  // namespace tsr::project
