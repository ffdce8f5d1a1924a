#pragma once
// Two profiles compared by graph node and by kernel: where a step's time went, A against B, sorted by change.
// Kernels are matched through the graph nodes they ran, not by name (names change when fusion does): each
// node is known by its module path, its op and its place among the nodes of that module and op (the k-th
// dot_general of h.0.attn), which stays the same between two compiles of the same model even when node ids,
// fusion ids and kernel names do not. Times are per profiled step.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/store/run_store.h"

namespace tsr::train {

struct ProfileSide {
  int64_t run = 0, profile = 0;
  int64_t steps = 1;
  double stepNs = 0;  // kernel time per step
};

struct NodeTimeDiff {
  std::string module, op;  // "h.0.attn", "dot_general"
  int occurrence = 0;      // among the nodes of that module and op, by node id
  int nodeA = -1, nodeB = -1;
  double nsA = 0, nsB = 0;  // per step: its kernel's time split evenly among the kernel's nodes
};

struct KernelTimeDiff {
  std::string nameA, nameB;  // "" where the kernel is in one profile only
  std::string kind;
  int64_t fusionA = -1, fusionB = -1;
  int sharedNodes = 0;
  double nsA = 0, nsB = 0;  // per step
};

struct ProfileDiff {
  ProfileSide a, b;
  bool sameGraph = false;  // the kernel tables name the same node ids with the same ops (shapes may differ)
  std::vector<KernelTimeDiff> kernels;  // by |nsB - nsA|, largest first
  std::vector<NodeTimeDiff> nodes;      // the same
};

// The latest profile of each run (`executable`'s kernels), compared.
Result<ProfileDiff> diffProfiles(const store::RunStore& storeA, int64_t runA, const store::RunStore& storeB,
                                 int64_t runB, const std::string& executable = "train_step");

std::string profileDiffJson(const ProfileDiff& d);

}  // namespace tsr::train
