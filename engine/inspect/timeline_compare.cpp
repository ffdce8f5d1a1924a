#include "engine/inspect/timeline_compare.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "engine/store/run_store.h"
#include "engine/train/profile_run.h"

namespace tsr::inspect {

namespace {

struct Side {
  const char* tag;     // "A", "B"
  int64_t run = 0, profile = 0;
  int64_t fusionBase = 0;  // added to its fusion ids (B's come after A's)
};

// The last step rank 0 marked in a profile.
Result<store::ProfileMarkInfo> lastStep(const store::RunStore& db, int64_t profile) {
  TSR_ASSIGN(std::vector<store::ProfileMarkInfo> marks, db.profileMarks(profile));
  std::optional<store::ProfileMarkInfo> last;
  for (auto& m : marks)
    if (m.rank == 0 && (!last || m.startNs >= last->startNs)) last = std::move(m);
  if (!last) return makeError("profile {} has no steps to compare", profile);
  return *last;
}

// A profile's launches within the step [mark.start, mark.end) (every device: the steps of all ranks run on
// one clock), moved so that the step starts at 0, on rows of the side ("A · cpu:0").
Status addStep(TimelineBuilder& b, const store::RunStore& db, const Side& side, int order,
               const store::ProfileMarkInfo& step) {
  TSR_ASSIGN(std::vector<store::KernelInfo> kernels, db.profileKernels(side.profile));
  for (const store::KernelInfo& k : kernels)
    b.addKernel({k.fusion + side.fusionBase, k.executable, k.name, k.kind, k.nodes, k.ops, k.modulePath, {}});
  const int64_t end = step.startNs + step.durationNs;
  std::map<std::pair<std::string, int64_t>, int> rows;
  TSR_TRY(db.eachKernelEvent(side.profile, [&](const store::KernelEvent& e) -> Status {
    if (e.startNs < step.startNs || e.startNs >= end) return {};
    auto [it, added] = rows.try_emplace({e.device, e.stream}, 0);
    if (added)
      it->second = b.row(fmt::format("{} · {}", side.tag, e.device), e.stream, "", order);
    b.addEvent(it->second, e.name, e.startNs - step.startNs, e.durationNs, e.flops, e.bytes,
               e.fusion < 0 ? e.fusion : e.fusion + side.fusionBase);
    return {};
  }));
  b.addSpan({fmt::format("{}: run {} {}", side.tag, side.run, step.name), 0, step.durationNs, order});
  return {};
}

int64_t stepNumber(const std::string& mark) {
  long long n = 0;
  return std::sscanf(mark.c_str(), "step %lld", &n) == 1 ? n : 0;
}

}  // namespace

Result<std::vector<ProfiledRun>> profiledRuns(const std::string& dbPath, int64_t exceptRun) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::openReadOnly(dbPath));
  TSR_ASSIGN(std::vector<store::RunInfo> runs, db.runs());
  std::vector<ProfiledRun> out;
  for (const store::RunInfo& r : runs) {
    if (r.id == exceptRun) continue;
    TSR_ASSIGN(std::vector<store::ProfileInfo> profiles, db.profiles(r.id));
    if (profiles.empty()) continue;
    out.push_back({r.id, fmt::format("run {}: {} (profile {}, {})", r.id, r.name, profiles.back().id, profiles.back().name)});
  }
  return out;
}

double kernelChange(const TimelineKernel& k) {
  if (k.pairNsA < 0 || k.pairNsB < 0) return 1;
  return k.pairNsA > 0 ? k.pairNsB / k.pairNsA : 0;
}

Result<ComparedProfiles> compareProfiles(const std::string& dbPath, int64_t runA, int64_t runB) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::openReadOnly(dbPath));
  ComparedProfiles out;
  TSR_ASSIGN(out.diff, train::diffProfiles(db, runA, db, runB));
  Side a{"A", runA, out.diff.a.profile, 0};
  Side b{"B", runB, out.diff.b.profile, 0};
  TSR_ASSIGN(std::vector<store::KernelInfo> kernelsA, db.profileKernels(a.profile));
  for (const store::KernelInfo& k : kernelsA) b.fusionBase = std::max(b.fusionBase, k.fusion + 1);
  TSR_ASSIGN(store::ProfileMarkInfo stepA, lastStep(db, a.profile));
  TSR_ASSIGN(store::ProfileMarkInfo stepB, lastStep(db, b.profile));
  TimelineBuilder builder;
  TSR_TRY(addStep(builder, db, a, 0, stepA));
  TSR_TRY(addStep(builder, db, b, 1, stepB));
  out.timeline = builder.finish(fmt::format("run {} (A, profile {}) against run {} (B, profile {}) of {}", runA,
                                            a.profile, runB, b.profile, dbPath),
                                0);
  out.timeline.spanTrackNames = {"A", "B"};
  out.timeline.runId = runA;  // A's: what a comparison is compared from
  out.timeline.storePath = dbPath;
  out.timeline.comparison = true;
  out.stepA = stepNumber(stepA.name);
  out.stepB = stepNumber(stepB.name);
  // Each pair's times on both of its kernels.
  std::map<int64_t, size_t> kernelOf;
  for (size_t i = 0; i < out.timeline.kernels.size(); ++i) kernelOf[out.timeline.kernels[i].fusion] = i;
  for (const train::KernelTimeDiff& k : out.diff.kernels) {
    if (k.fusionA < 0 || k.fusionB < 0) continue;
    for (int64_t fusion : {k.fusionA, k.fusionB + b.fusionBase})
      if (auto it = kernelOf.find(fusion); it != kernelOf.end()) {
        out.timeline.kernels[it->second].pairNsA = k.nsA;
        out.timeline.kernels[it->second].pairNsB = k.nsB;
      }
  }
  return out;
}

}  // namespace tsr::inspect
