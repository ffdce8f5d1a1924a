#pragma once
// A profiled run of a project's training step, as `tessera profile` and the IDE's Profile action start it:
// warm-up steps first (the first one compiles), then steps with the kernel profiler on, each marked as a span
// ("step 3"). The kernel events, the kernel table and the marks go to the run store (a run with one profile)
// and, on request, to a Chrome/Perfetto trace file.
#include <functional>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/project/project.h"
#include "engine/runtime/kernel_summary.h"
#include "engine/runtime/trace_export.h"
#include "engine/store/collective_instances.h"

namespace tsr::store {
class RunStore;
}

namespace tsr::train {

struct ProfileOptions {
  int64_t steps = 3;    // profiled steps
  int64_t warmup = 1;   // unprofiled steps first; compilation happens there
  int64_t batch = 0;    // <= 0: [train] batch_size
  int64_t seq = 0;      // <= 0: [train] seq_len
  std::string tracePath;  // empty: no trace file
  std::string storePath;  // default: <project>/runs.db
  std::string runName;    // default: "profile <project name>"
};

// One row of the top-kernels table: every launch of kernels with the same name.
using runtime::KernelSummary;

struct ProfileReport {
  bool primary = true;  // false on the ranks after rank 0 under mpirun: nothing written, their own trace only
  int64_t runId = 0;
  int64_t profileId = 0;
  std::string storePath;
  std::string tracePath;
  int64_t firstStep = 0, lastStep = 0;  // the profiled steps, counted from 1
  runtime::Trace trace;
};

Result<ProfileReport> profileTraining(const project::Project& project, const ProfileOptions& options,
                                      const std::function<void(const std::string&)>& info = {});

// Kernels grouped by name, longest total time first.
std::vector<KernelSummary> summarizeKernels(const runtime::Trace& trace);
// The duration of each of rank 0's marks, in seconds, in start order (the per-step times of a profile).
std::vector<double> markSeconds(const runtime::Trace& trace);

// The collectives' launches of a trace (events with a collective number), as the store keeps them.
std::vector<store::CollectiveLaunch> collectiveLaunches(const runtime::Trace& trace);

// A trace into a store profile, and back (for `tessera runs export-trace` and the IDE's timeline).
Status saveTrace(store::RunStore& db, int64_t profile, const runtime::Trace& trace);
Result<runtime::Trace> loadTrace(const store::RunStore& db, int64_t profile);
// A profile of the store written as Chrome/Perfetto trace JSON without holding its launches: they are read and
// written one at a time (a profile of tens of millions exports in bounded memory). Returns how many.
struct ExportedTrace {
  size_t events = 0, marks = 0;
};
Result<ExportedTrace> exportTrace(const store::RunStore& db, int64_t profile, const std::string& path);

}  // namespace tsr::train
