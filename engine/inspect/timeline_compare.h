#pragma once
// Two profiles on one timeline (profile diff, A against B): one step of each, A's rows above B's and both steps
// starting at 0, each kernel paired with the other profile's kernel that ran the same graph nodes
// (train::diffProfiles matches them by node, not by name), so that the canvas colours every launch by how its
// kernel's time per step changed from A to B and the panel lists the kernels by change.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/inspect/timeline.h"
#include "engine/train/profile_diff.h"

namespace tsr::inspect {

struct ComparedProfiles {
  Timeline timeline;        // rows "A · cpu:0", ..., then "B · cpu:0", ...; span tracks "A" and "B"
  train::ProfileDiff diff;  // the kernel and node tables of the whole profiles, per step
  int64_t stepA = 0, stepB = 0;  // the step shown of each (its number, from its mark "step N")
};

// The latest profile of run A and of run B in the store at dbPath; the step shown of each is its last
// profiled step (warm), as rank 0 marked it.
Result<ComparedProfiles> compareProfiles(const std::string& dbPath, int64_t runA, int64_t runB);

// The runs of the store at dbPath with a profile, other than exceptRun, newest last: what Compare… offers. Each
// with a label: "run 3: profile gpt2_mini (profile 4, steps 2-4)".
struct ProfiledRun {
  int64_t run = 0;
  std::string label;
};
Result<std::vector<ProfiledRun>> profiledRuns(const std::string& dbPath, int64_t exceptRun);

// The change of a kernel paired in a comparison, B against A: nsB / nsA (1: the same; 0 when A took no time).
double kernelChange(const TimelineKernel& k);

}  // namespace tsr::inspect
