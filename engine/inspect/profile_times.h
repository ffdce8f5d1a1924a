#pragma once
// Measured time per node from a project's latest profile (`tessera profile`, or the IDE's Profile action).
// A profile's kernel table names, for each kernel of the compiled training step, the node ids it runs in the
// graph the CPU backend compiled: the fusion stage's graph. A kernel's time over the profiled steps is split
// evenly among its member nodes, so that the nodes' times add up to the profile's kernel time.
// The store is only read: a project that was never profiled has no runs.db, and none is created.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/ir/graph.h"
#include "engine/runtime/kernel_summary.h"
#include "engine/store/run_store.h"

namespace tsr::inspect {

// One kernel of the profiled executable (fusion id, nodes) with its launches summed over the profiled steps.
using KernelTime = runtime::KernelSummary;

struct ProfileTimes {
  store::ProfileInfo profile;
  std::string executable;  // "train_step"
  int64_t steps = 1;       // profiled steps (lastStep - firstStep + 1)
  std::vector<KernelTime> kernels;  // by fusion id
  std::vector<int> kernelOfNode;    // node id -> index into kernels; -1: no kernel of its own
  std::vector<double> nodeNs;       // node id -> its kernel's total time / the kernel's node count
  int64_t totalNs = 0;              // every launch of the executable's kernels

  const KernelTime* kernelOf(ir::NodeId node) const;
};

// Reads the latest profile of the store at `dbPath` and maps its kernels' times onto `graph`, which must be
// the graph the profile's executable was compiled from: every node id of the kernel table exists there with
// the same op ("profile N is for another graph: ..." otherwise, naming the first node that differs).
// Fails when the store or a profile does not exist yet.
Result<ProfileTimes> loadProfileTimes(const std::string& dbPath, const ir::Graph& graph,
                                      const std::string& executable = "train_step");

// The same from a kernel table and its events (read from a store, or built by a test).
Result<ProfileTimes> profileTimes(const store::ProfileInfo& profile, const std::vector<store::KernelInfo>& kernels,
                                  const std::vector<store::KernelEvent>& events, const ir::Graph& graph,
                                  const std::string& executable = "train_step");

}  // namespace tsr::inspect
