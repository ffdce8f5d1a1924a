#include "engine/train/profile_run.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "engine/core/interrupt.h"
#include "engine/dist/rank_clocks.h"
#include "engine/runtime/profiler.h"
#include "engine/runtime/trace_merge.h"
#include "engine/spmd/spmd.h"
#include "engine/store/collective_instances.h"
#include "engine/store/run_store.h"
#include "engine/train/checkpoints.h"
#include "engine/train/run_process.h"
#include "engine/train/run.h"
#include "engine/train/setup.h"
#include "engine/train/trainer.h"

namespace tsr::train {

namespace {

namespace fs = std::filesystem;

std::map<std::string, std::string> profileParams(const project::Project& p, const ProfileOptions& o,
                                                 int64_t numParams) {
  return {{"model.family", p.model.family},
          {"model.params", std::to_string(numParams)},
          {"train.batch_size", std::to_string(p.train.batchSize)},
          {"train.seq_len", std::to_string(p.train.seqLen)},
          {"train.optimizer", p.train.optimizer},
          {"train.seed", std::to_string(p.train.seed)},
          {"profile.steps", std::to_string(o.steps)},
          {"profile.warmup", std::to_string(o.warmup)}};
}

// Steps [warmup + 1, warmup + steps] with the profiler on. Each batch is read just before its step, as training
// reads them (no more than one batch is held, whatever --steps is), with the profiler off: the profile holds the
// steps alone.
Result<runtime::Trace> runProfiledSteps(const project::Project& p, const ProfileOptions& o, int64_t& numParams,
                                        const std::function<void(const std::string&)>& info) {
  const auto& t = p.train;
  SetupOverrides overrides;
  overrides.scheduleSteps = std::max(t.steps, o.warmup + o.steps);
  overrides.info = info;
  TSR_ASSIGN(TrainingSetup setup, makeTrainingSetup(p, overrides));
  Trainer& trainer = *setup.trainer;
  TrainState& state = setup.state;
  numParams = setup.model.numParams;

  for (int64_t i = 0; i < o.warmup; ++i) {
    TSR_TRY(checkInterrupt());
    TSR_ASSIGN(Batch b, setup.next());
    TSR_ASSIGN(StepMetrics m, trainer.step(state, b));
    info(fmt::format("warm-up step {}: {:.1f} ms, loss {:.4f}", state.step, m.seconds * 1e3, m.loss));
  }
  // Under mpirun every rank profiles its own device: the clocks are aligned with rank 0's first (rank_clocks.h),
  // and rank 0 receives the other ranks' traces afterwards.
  TSR_ASSIGN(std::shared_ptr<dist::Communicator> comm, spmd::devices());
  const bool ranks = comm->kind() == "mpi" && comm->numDevices() > 1;
  std::vector<dist::ClockOffset> clocks;
  if (ranks) {
    TSR_ASSIGN(clocks, dist::alignClocks(*comm, 16, &runtime::Profiler::nowNs));
    for (size_t r = 1; r < clocks.size(); ++r)
      info(fmt::format("rank {} clock: {:+.3f} us from rank 0's, within {:.3f} us", r, clocks[r].offsetNs * 1e-3,
                       clocks[r].errorNs * 1e-3));
  }
  runtime::Profiler profiler;
  for (int64_t i = 0; i < o.steps; ++i) {
    TSR_TRY(checkInterrupt());
    TSR_ASSIGN(Batch b, setup.next());
    runtime::ProfilerScope scope(profiler);  // its memory track resumes from the bytes live now, the batch's too
    int64_t start = runtime::Profiler::nowNs();
    TSR_ASSIGN(StepMetrics m, trainer.step(state, b));
    profiler.mark({fmt::format("step {}", state.step), start, runtime::Profiler::nowNs() - start});
    info(fmt::format("profiled step {}: {:.1f} ms, loss {:.4f}", state.step, m.seconds * 1e3, m.loss));
  }
  runtime::Trace trace = runtime::Trace::from(profiler);
  if (!ranks) {
    runtime::setDeviceClocks(trace, 0, 0, 0);  // one process, one clock
    return trace;
  }
  const int self = comm->localDevices().front();
  std::vector<std::string> mine(static_cast<size_t>(comm->numDevices()));
  mine[static_cast<size_t>(self)] = runtime::encodeTrace(trace);
  TSR_ASSIGN(std::vector<std::string> all, dist::gatherToFirst(*comm, mine));
  if (self != 0) return trace;
  runtime::setDeviceClocks(trace, 0, 0, 0);
  for (size_t r = 1; r < all.size(); ++r) {
    TSR_ASSIGN(runtime::Trace part, runtime::decodeTrace(all[r]));
    runtime::mergeRankTrace(trace, std::move(part), static_cast<int>(r), clocks[r].offsetNs, clocks[r].errorNs);
  }
  return trace;
}

}  // namespace

Result<ProfileReport> profileTraining(const project::Project& project, const ProfileOptions& o,
                                      const std::function<void(const std::string&)>& infoFn) {
  auto info = [&](const std::string& line) {
    if (infoFn) infoFn(line);
  };
  if (o.steps < 1) return makeError("profile: --steps must be at least 1, got {}", o.steps);
  if (o.warmup < 0) return makeError("profile: --warmup must be at least 0, got {}", o.warmup);
  project::Project p = project;
  if (o.batch > 0) p.train.batchSize = o.batch;
  if (o.seq > 0) p.train.seqLen = o.seq;

  ProfileReport r;
  // Under mpirun rank 0 alone prints and writes the store, with every rank's launches.
  TSR_ASSIGN(r.primary, spmd::isPrimaryProcess());
  r.storePath = o.storePath.empty() ? (fs::path(p.dir) / "runs.db").string() : o.storePath;
  auto primaryInfo = [&](const std::string& line) {
    if (r.primary) info(line);
  };
  r.firstStep = o.warmup + 1;
  r.lastStep = o.warmup + o.steps;
  int64_t numParams = 0;
  if (!r.primary) {
    TSR_ASSIGN(r.trace, runProfiledSteps(p, o, numParams, primaryInfo));
    return r;
  }
  if (!o.tracePath.empty()) {
    TSR_TRY(checkOutputFile(o.tracePath, r.storePath));
    std::error_code ec;
    const fs::path folder = fs::absolute(o.tracePath, ec).parent_path();
    if (!fs::is_directory(folder, ec))
      return makeError("cannot write the trace {}: {} is not a folder", o.tracePath, folder.string());
  }
  TSR_ASSIGN(store::RunStore db, store::RunStore::open(r.storePath));
  TSR_ASSIGN(r.runId, db.createRun(o.runName.empty() ? "profile " + p.name : o.runName, absoluteDir(p), p.text));
  // From here an error leaves the run failed, not running. The run's lease, held until it is closed, tells
  // readers it is not orphaned (run_process.h).
  std::optional<store::RunLease> lease;
  auto record = [&]() -> Status {
    TSR_ASSIGN(lease, takeRunLease(r.storePath, r.runId));  // a new number: no other process holds it
    TSR_TRY(db.putArtifact(r.runId, thisProcessArtifact()));  // readers tell a killed run from a running one
    TSR_ASSIGN(r.trace, runProfiledSteps(p, o, numParams, primaryInfo));
    TSR_TRY(db.setParams(r.runId, profileParams(p, o, numParams)));
    std::vector<double> seconds = markSeconds(r.trace);
    for (size_t i = 0; i < seconds.size(); ++i)
      TSR_TRY(db.logMetrics(r.runId, r.firstStep + static_cast<int64_t>(i), {{"step_time", seconds[i]}}));
    TSR_ASSIGN(r.profileId, db.createProfile(r.runId, fmt::format("steps {}-{}", r.firstStep, r.lastStep),
                                             r.firstStep, r.lastStep));
    TSR_TRY(saveTrace(db, r.profileId, r.trace));
    if (!o.tracePath.empty()) {
      TSR_TRY(runtime::writeChromeTrace(o.tracePath, r.trace));
      r.tracePath = o.tracePath;
    }
    return {};
  };
  if (Status st = record(); !st.ok()) {
    // Ctrl-C (the engine stops between kernels and steps): the run stopped, as an interrupted training run does;
    // a profile of fewer steps than asked is not stored.
    if (interruptRequested()) {
      (void)db.finishRun(r.runId, store::RunStatus::Stopped, "interrupted before the profile was complete");
      return makeError("{}: run {} is marked stopped, with no profile stored", kInterruptedMessage, r.runId);
    }
    (void)db.finishRun(r.runId, store::RunStatus::Failed, st.error().message);
    return st.takeError();
  }
  TSR_TRY(db.finishRun(r.runId, store::RunStatus::Finished,
                       fmt::format("profile {}: {} kernel launches", r.profileId, r.trace.events.size())));
  return r;
}

std::vector<KernelSummary> summarizeKernels(const runtime::Trace& trace) {
  std::map<std::string, KernelSummary> byName;
  for (const auto& e : trace.events) {
    KernelSummary& s = byName[e.name];
    if (s.count == 0) {
      s.name = e.name;
      const runtime::FusionInfo* k = trace.kernel(e.fusion);
      s.kind = k ? k->kind : "";
    }
    ++s.count;
    s.totalNs += e.durationNs;
    s.flops += e.flops;
    s.bytes += e.bytes;
  }
  std::vector<KernelSummary> out;
  for (auto& [name, s] : byName) out.push_back(std::move(s));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.totalNs > b.totalNs; });
  return out;
}

std::vector<double> markSeconds(const runtime::Trace& trace) {
  // The steps as rank 0 timed them (every rank runs the same steps; the others' marks say when theirs ran).
  std::vector<runtime::ProfileMark> marks;
  for (const auto& m : trace.marks)
    if (m.rank == 0) marks.push_back(m);
  std::stable_sort(marks.begin(), marks.end(), [](const auto& a, const auto& b) { return a.startNs < b.startNs; });
  std::vector<double> out;
  for (const auto& m : marks) out.push_back(static_cast<double>(m.durationNs) * 1e-9);
  return out;
}

std::vector<store::CollectiveLaunch> collectiveLaunches(const runtime::Trace& trace) {
  std::vector<store::CollectiveLaunch> out;
  for (const auto& e : trace.events)
    if (e.collective >= 0)
      out.push_back({e.device, e.collective, store::groupText(e.group), e.name, e.fusion, e.startNs, e.durationNs});
  return out;
}

Status saveTrace(store::RunStore& db, int64_t profile, const runtime::Trace& trace) {
  std::vector<store::KernelEvent> events;
  events.reserve(trace.events.size());
  for (const auto& e : trace.events)
    events.push_back({e.device, e.stream, e.name, e.fusion, e.startNs, e.durationNs, e.flops, e.bytes});
  std::vector<store::KernelInfo> kernels;
  for (const auto& k : trace.kernels)
    kernels.push_back({k.id, k.executable, k.name, k.kind, k.nodes, k.ops, k.modulePath});
  std::vector<store::ProfileMarkInfo> marks;
  for (const auto& m : trace.marks) marks.push_back({m.name, m.startNs, m.durationNs, m.rank});
  std::vector<store::MemorySampleInfo> memory;
  for (const auto& m : trace.memory) memory.push_back({m.tNs, m.bytes, m.rank});
  std::vector<store::ProfileDeviceInfo> devices;
  for (const auto& d : trace.devices) devices.push_back({d.device, d.rank, d.offsetNs, d.errorNs});
  std::vector<store::CollectiveLaunch> collectives = collectiveLaunches(trace);
  TSR_TRY(db.addKernelEvents(profile, events));
  TSR_TRY(db.buildProfileLevels(profile));
  TSR_TRY(db.addProfileKernels(profile, kernels));
  TSR_TRY(db.addProfileMemory(profile, memory));
  TSR_TRY(db.addProfileDevices(profile, devices));
  TSR_TRY(db.addProfileCollectives(profile, collectives));
  return db.addProfileMarks(profile, marks);
}

namespace {

// A stored launch as the profiler recorded it (its collective number and group come from CollectiveTagger).
runtime::ProfileEvent profileEvent(const store::KernelEvent& e) {
  return {e.device, e.stream, e.name, e.fusion, e.startNs, e.durationNs, e.flops, e.bytes, -1, {}};
}

// A stored profile's collective launches, each found again as the kernel event of the same device, start and
// kernel (the store keeps them in a table of their own): tag() gives an event its call number and group.
class CollectiveTagger {
 public:
  static Result<CollectiveTagger> of(const store::RunStore& db, int64_t profile) {
    CollectiveTagger t;
    TSR_ASSIGN(std::vector<store::CollectiveLaunch> launches, db.profileCollectives(profile));
    for (auto& c : launches) t.m_byEvent.emplace(std::tuple{c.device, c.startNs, c.fusion}, std::move(c));
    return t;
  }
  void tag(runtime::ProfileEvent& e) const {
    if (m_byEvent.empty()) return;
    auto it = m_byEvent.find({e.device, e.startNs, e.fusion});
    if (it == m_byEvent.end()) return;
    e.collective = it->second.seq;
    e.group = store::parseGroup(it->second.group);
  }

 private:
  std::map<std::tuple<std::string, int64_t, int64_t>, store::CollectiveLaunch> m_byEvent;
};

}  // namespace

Result<runtime::Trace> loadTrace(const store::RunStore& db, int64_t profile) {
  runtime::Trace t;
  TSR_ASSIGN(std::vector<store::KernelEvent> events, db.kernelEvents(profile));
  TSR_ASSIGN(std::vector<store::KernelInfo> kernels, db.profileKernels(profile));
  TSR_ASSIGN(std::vector<store::ProfileMarkInfo> marks, db.profileMarks(profile));
  for (const auto& e : events)
    t.events.push_back(profileEvent(e));
  for (const auto& k : kernels) t.kernels.push_back({k.fusion, k.executable, k.name, k.kind, k.nodes, k.ops, k.modulePath});
  for (const auto& m : marks) t.marks.push_back({m.name, m.startNs, m.durationNs, m.rank});
  TSR_ASSIGN(std::vector<store::MemorySampleInfo> memory, db.profileMemory(profile));
  for (const auto& m : memory) t.memory.push_back({m.tNs, m.bytes, m.rank});
  TSR_ASSIGN(std::vector<store::ProfileDeviceInfo> devices, db.profileDevices(profile));
  for (const auto& d : devices) t.devices.push_back({d.device, d.rank, d.offsetNs, d.errorNs});
  TSR_ASSIGN(CollectiveTagger tagger, CollectiveTagger::of(db, profile));
  for (auto& e : t.events) tagger.tag(e);
  return t;
}

Result<ExportedTrace> exportTrace(const store::RunStore& db, int64_t profile, const std::string& path) {
  TSR_ASSIGN(std::vector<store::KernelInfo> kernels, db.profileKernels(profile));
  TSR_ASSIGN(std::vector<store::ProfileMarkInfo> marks, db.profileMarks(profile));
  TSR_ASSIGN(std::vector<store::MemorySampleInfo> memory, db.profileMemory(profile));
  TSR_ASSIGN(std::optional<int64_t> first, db.firstKernelStart(profile));
  int64_t t0 = first.value_or(marks.empty() ? 0 : marks.front().startNs);
  for (const auto& m : marks) t0 = std::min(t0, m.startNs);
  std::vector<runtime::FusionInfo> table;
  for (const auto& k : kernels) table.push_back({k.fusion, k.executable, k.name, k.kind, k.nodes, k.ops, k.modulePath});
  std::vector<runtime::ProfileMark> traceMarks;
  for (const auto& m : marks) traceMarks.push_back({m.name, m.startNs, m.durationNs, m.rank});
  std::vector<runtime::MemorySample> traceMemory;
  for (const auto& m : memory) traceMemory.push_back({m.tNs, m.bytes, m.rank});
  // The collective launches, so that the trace links each call's members.
  TSR_ASSIGN(CollectiveTagger tagger, CollectiveTagger::of(db, profile));
  ExportedTrace out;
  out.marks = marks.size();
  TSR_TRY(runtime::writeChromeTraceWith(path, t0, std::move(table), [&](runtime::ChromeTraceWriter& w) -> Status {
    w.marksAndMemory(traceMarks, traceMemory);
    runtime::ProfileEvent pe;
    TSR_TRY(db.eachKernelEvent(profile, [&](const store::KernelEvent& e) -> Status {
      pe = profileEvent(e);
      tagger.tag(pe);
      w.event(pe);
      return {};
    }));
    out.events = w.events();
    return {};
  }));
  return out;
}

}  // namespace tsr::train
