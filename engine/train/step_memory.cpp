#include "engine/train/step_memory.h"

#include <algorithm>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/bytes.h"
#include "engine/ops/registry.h"
#include "engine/passes/fusion.h"

namespace tsr::train {

const char* memoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::Parameters: return "parameters";
    case MemoryKind::OptimizerState: return "optimizer state";
    case MemoryKind::Gradients: return "gradients";
    case MemoryKind::Activations: return "activations";
    case MemoryKind::Temporaries: return "temporaries";
    case MemoryKind::Inputs: return "inputs";
  }
  return "?";
}

int64_t StepMemory::liveAt(int kernel) const {
  int64_t sum = 0;
  for (int64_t b : live[static_cast<size_t>(kernel)]) sum += b;
  return sum;
}

namespace {

// Which nodes the forward pass is (what the loss depends on; every node without a loss), and which read the
// optimizer state (through any chain of nodes).
struct Dataflow {
  std::vector<char> forward, readsOptState;
  std::vector<char> readOutsideForward;  // per value: a node outside the forward pass reads it
};

Dataflow dataflow(const ir::Graph& g, std::span<const MemoryKind> inputKinds, int lossOutput) {
  const auto& nodes = g.nodes();
  Dataflow d;
  d.forward.assign(nodes.size(), lossOutput < 0);
  if (lossOutput >= 0 && static_cast<size_t>(lossOutput) < g.outputs().size()) {
    std::vector<ir::NodeId> stack;
    auto visit = [&](ir::ValueId v) {
      ir::NodeId p = g.value(v).producer;
      if (p != ir::kNone && !d.forward[static_cast<size_t>(p)]) d.forward[static_cast<size_t>(p)] = 1, stack.push_back(p);
    };
    visit(g.outputs()[static_cast<size_t>(lossOutput)]);
    while (!stack.empty()) {
      ir::NodeId n = stack.back();
      stack.pop_back();
      for (ir::ValueId v : nodes[static_cast<size_t>(n)].operands) visit(v);
    }
  }
  std::vector<char> valueReadsOpt(static_cast<size_t>(g.numValues()), 0);
  for (size_t i = 0; i < g.inputs().size() && i < inputKinds.size(); ++i)
    valueReadsOpt[static_cast<size_t>(g.inputs()[i])] = inputKinds[i] == MemoryKind::OptimizerState;
  d.readsOptState.assign(nodes.size(), 0);
  d.readOutsideForward.assign(static_cast<size_t>(g.numValues()), 0);
  for (size_t n = 0; n < nodes.size(); ++n) {  // nodes are in definition order
    for (ir::ValueId v : nodes[n].operands) {
      d.readsOptState[n] |= valueReadsOpt[static_cast<size_t>(v)];
      if (!d.forward[n]) d.readOutsideForward[static_cast<size_t>(v)] = 1;
    }
    for (ir::ValueId r : nodes[n].results) valueReadsOpt[static_cast<size_t>(r)] = d.readsOptState[n];
  }
  return d;
}

MemoryKind intermediateKind(const Dataflow& d, ir::NodeId node, ir::ValueId value) {
  const auto n = static_cast<size_t>(node);
  if (d.readsOptState[n]) return MemoryKind::Temporaries;
  if (!d.forward[n]) return MemoryKind::Gradients;
  return d.readOutsideForward[static_cast<size_t>(value)] ? MemoryKind::Activations : MemoryKind::Temporaries;
}

}  // namespace

StepMemory analyzeStepMemory(const cpu::Executable& exe, std::span<const MemoryKind> inputKinds,
                             std::span<const std::string> inputNames, std::span<const MemoryKind> outputKinds,
                             std::span<const std::string> outputNames, int lossOutput) {
  const ir::Graph& g = exe.graph();
  const auto& reg = ops::registry();
  const auto& slots = exe.valueSlots();
  StepMemory m;
  for (const auto& k : exe.kernels()) m.kernels.push_back(k.name);
  const int numKernels = static_cast<int>(m.kernels.size());
  const int last = std::max(numKernels - 1, 0);
  const Dataflow d = dataflow(g, inputKinds, lossOutput);

  auto describeNode = [&](MemoryBuffer& b) {
    b.node = g.value(b.value).producer;
    if (b.node == ir::kNone) return;
    const ir::Node& n = g.nodes()[static_cast<size_t>(b.node)];
    const ir::OpDef* def = reg.find(n.op);
    b.op = def ? def->name : "?";
    if (!n.prov.empty()) b.where = n.prov.toString();
  };
  // The step's arguments: held by the caller from before the first kernel to after the last (a donated one's
  // buffer then holds the output planned into it).
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    MemoryBuffer b;
    b.value = g.inputs()[i];
    b.bytes = g.aval(b.value).bytes();
    b.kind = i < inputKinds.size() ? inputKinds[i] : MemoryKind::Inputs;
    b.storage = MemoryStorage::Argument;
    b.def = -1, b.lastUse = last;
    b.op = "argument";
    if (i < inputNames.size()) b.what = inputNames[i];
    m.buffers.push_back(std::move(b));
  }
  std::vector<int> outputIndex(static_cast<size_t>(g.numValues()), -1);
  for (size_t j = g.outputs().size(); j-- > 0;) outputIndex[static_cast<size_t>(g.outputs()[j])] = static_cast<int>(j);
  for (size_t v = 0; v < slots.size(); ++v) {
    const cpu::ValueSlot& s = slots[v];
    MemoryBuffer b;
    b.value = static_cast<ir::ValueId>(v);
    b.bytes = g.aval(b.value).bytes();
    if (s.loc == cpu::Loc::Const) {
      b.kind = MemoryKind::Inputs;
      b.storage = MemoryStorage::Constant;
      b.def = -1, b.lastUse = last;
      describeNode(b);
      b.op = "constant";
    } else if (s.loc == cpu::Loc::Fresh) {
      if (s.donor >= 0) continue;  // written into a donated argument's buffer, counted there
      const int j = outputIndex[v];
      b.kind = j >= 0 && static_cast<size_t>(j) < outputKinds.size() ? outputKinds[static_cast<size_t>(j)]
                                                                      : MemoryKind::Temporaries;
      if (j >= 0 && static_cast<size_t>(j) < outputNames.size()) b.what = outputNames[static_cast<size_t>(j)];
      b.storage = MemoryStorage::Output;
      b.def = s.def, b.lastUse = std::min(s.lastUse, last);
      describeNode(b);
    } else {
      continue;  // arguments (above), arena values (below), aliases (no bytes of their own)
    }
    m.buffers.push_back(std::move(b));
  }
  const cpu::MemoryPlan& plan = exe.memory();
  for (const auto& iv : plan.intervals) {
    MemoryBuffer b;
    b.value = iv.value;
    b.bytes = iv.bytes;
    b.storage = MemoryStorage::Arena;
    b.def = iv.def, b.lastUse = std::min(iv.lastUse, last);
    describeNode(b);
    b.kind = b.node == ir::kNone ? MemoryKind::Temporaries : intermediateKind(d, b.node, b.value);
    m.buffers.push_back(std::move(b));
  }
  std::stable_sort(m.buffers.begin(), m.buffers.end(),
                   [](const MemoryBuffer& a, const MemoryBuffer& b) { return a.bytes > b.bytes; });

  m.live.assign(static_cast<size_t>(std::max(numKernels, 1)), {});
  std::vector<int64_t> arenaLive(m.live.size(), 0);
  for (const auto& b : m.buffers)
    for (int k = std::max(b.def, 0); k <= b.lastUse; ++k) {
      m.live[static_cast<size_t>(k)][static_cast<size_t>(b.kind)] += b.bytes;
      if (b.storage == MemoryStorage::Arena) arenaLive[static_cast<size_t>(k)] += b.bytes;
    }
  for (int k = 0; k < static_cast<int>(m.live.size()); ++k) {
    const int64_t total = m.liveAt(k);
    if (total > m.peakBytes) m.peakBytes = total, m.peakKernel = k;
  }
  for (int i = 0; i < static_cast<int>(m.buffers.size()); ++i) {
    const MemoryBuffer& b = m.buffers[static_cast<size_t>(i)];
    if (std::max(b.def, 0) <= m.peakKernel && m.peakKernel <= b.lastUse) m.atPeak.push_back(i);
  }
  m.arenaBytes = plan.arenaBytes;
  m.arenaPeakLiveBytes = arenaLive.empty() ? 0 : *std::max_element(arenaLive.begin(), arenaLive.end());
  m.intermediateBytes = plan.intermediateBytes;
  return m;
}

namespace {

MemoryKind kindOfPath(const std::string& path) {
  if (path.starts_with("params.")) return MemoryKind::Parameters;
  if (path.starts_with("opt.")) return MemoryKind::OptimizerState;
  return MemoryKind::Inputs;
}

}  // namespace

Result<StepMemory> stepMemory(const ir::Graph& program, const passes::FusionPlan* fusion,
                              std::span<const std::string> inputPaths, std::span<const std::string> outputPaths) {
  const auto& reg = ops::registry();
  std::vector<MemoryKind> inputKinds, outputKinds;
  std::vector<std::string> inputNames;
  cpu::CompileOptions co;
  co.name = "train_step";
  co.native = false;
  for (size_t i = 0; i < program.inputs().size(); ++i) {
    inputNames.push_back(i < inputPaths.size() ? inputPaths[i] : std::string());
    inputKinds.push_back(kindOfPath(inputNames.back()));
    // The training loop donates the parameters and the optimizer state (Trainer: setDonatedArgs).
    co.donatable.push_back(inputKinds.back() != MemoryKind::Inputs);
  }
  int loss = -1;
  for (size_t j = 0; j < outputPaths.size(); ++j) {
    const MemoryKind kind = kindOfPath(outputPaths[j]);
    outputKinds.push_back(kind == MemoryKind::Inputs ? MemoryKind::Temporaries : kind);
    if (outputPaths[j] == "loss") loss = static_cast<int>(j);
  }
  std::optional<passes::FusionPlan> planned;
  if (!fusion) {
    TSR_ASSIGN(planned, passes::planFusion(program, reg));
    fusion = &*planned;
  }
  auto exe = cpu::Executable::compile(program, reg, *fusion, co);
  if (!exe.ok()) return makeError("the training step's memory plan: {}", exe.error().message);
  StepMemory m = analyzeStepMemory(**exe, inputKinds, inputNames, outputKinds, outputPaths, loss);
  m.device = "one device";
  return m;
}

Result<StepMemory> projectStepMemory(const project::Project& p, const ShardPlanOptions& options) {
  TSR_ASSIGN(PlannableStep step, traceStepForPlan(p));
  std::vector<std::string> inputPaths;
  for (const ArgumentPath& path : step.paths) inputPaths.push_back(path.toString());
  ShardPlanOptions o = options;
  o.compile = false;
  TSR_ASSIGN(sharding::Mesh mesh, o.mesh ? Result<sharding::Mesh>(*o.mesh) : projectMesh(p));
  // One device: the cleaned-up step goes to the backend as jit sends it. A mesh: the per-device program of the
  // plan, as SpmdExecutable compiles it.
  std::shared_ptr<const ir::Graph> program = step.graph;
  if (mesh.size() > 1) {
    TSR_ASSIGN(StepShardingPlan plan, planStepSharding(p, step, o));
    program = plan.program;
  }
  auto m = stepMemory(*program, nullptr, inputPaths, step.outputPaths);
  if (!m.ok()) return makeError("{}: {}", p.file, m.error().message);
  m->device = mesh.size() <= 1 ? std::string("one device")
                               : fmt::format("each of {} devices ({})", mesh.size(), mesh.toString());
  m->program = program;
  return m;
}

namespace {

// The step of one rank whose memory peaked: marks and samples of that rank, both in time order.
struct StepPeak {
  bool found = false;
  std::string step;
  int64_t peak = 0, atStart = 0;
};

StepPeak peakStep(const std::vector<store::ProfileMarkInfo>& marks, const std::vector<store::MemorySampleInfo>& samples) {
  StepPeak out;
  size_t i = 0;
  for (const auto& mark : marks) {
    const int64_t end = mark.startNs + mark.durationNs;
    while (i < samples.size() && samples[i].tNs <= mark.startNs) ++i;
    const int64_t atStart = i > 0 ? samples[i - 1].bytes : 0;
    int64_t peak = atStart;
    for (size_t j = i; j < samples.size() && samples[j].tNs <= end; ++j) peak = std::max(peak, samples[j].bytes);
    if (!out.found || peak > out.peak) out = {true, mark.name, peak, atStart};
  }
  return out;
}

}  // namespace

Result<MeasuredMemory> measuredStepMemory(const store::RunStore& db, int64_t profile) {
  TSR_ASSIGN(std::vector<store::MemorySampleInfo> samples, db.profileMemory(profile));
  if (samples.empty()) return makeError("profile {} recorded no memory (profile again to measure it)", profile);
  TSR_ASSIGN(std::vector<store::ProfileMarkInfo> marks, db.profileMarks(profile));
  if (marks.empty()) return makeError("profile {} has no steps", profile);
  // Each rank's process against its own steps.
  std::map<int, std::pair<std::vector<store::ProfileMarkInfo>, std::vector<store::MemorySampleInfo>>> byRank;
  for (auto& m : marks) byRank[m.rank].first.push_back(std::move(m));
  for (const auto& m : samples) byRank[m.rank].second.push_back(m);
  MeasuredMemory out;
  out.profile = profile;
  bool first = true;
  for (const auto& [rank, rs] : byRank) {
    StepPeak p = peakStep(rs.first, rs.second);
    if (!p.found) continue;
    if (first) {  // the lowest rank: 0 unless it recorded nothing
      first = false;
      out.step = p.step;
      out.peakBytes = p.peak;
      out.atStartBytes = p.atStart;
      out.riseBytes = p.peak - p.atStart;
      out.samples = static_cast<int64_t>(rs.second.size());
    }
    if (byRank.size() > 1) out.ranks.push_back({rank, p.step, p.peak});
  }
  if (first) return makeError("profile {} has no steps", profile);
  return out;
}

Result<MeasuredMemory> latestMeasuredMemory(const std::string& dbPath) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::openReadOnly(dbPath));
  TSR_ASSIGN(std::optional<store::ProfileInfo> latest, db.latestProfile());
  if (!latest) return makeError("{} holds no profile (tessera profile PROJECT makes one)", dbPath);
  return measuredStepMemory(db, latest->id);
}

int64_t staticFootprint(const StepMemory& m) {
  int64_t held = m.arenaBytes;  // the arena is one block, whatever its values' live bytes
  for (const auto& b : m.buffers)
    if (b.storage != MemoryStorage::Arena) held += b.bytes;
  return held;
}

std::string explainMeasured(const StepMemory& s, const MeasuredMemory& m) {
  const int64_t footprint = staticFootprint(s);
  const int64_t difference = m.peakBytes - footprint;
  std::string out = fmt::format(
      "measured (profile {}, {}): at most {} of buffers live in the process; {} were held when the step began{} "
      "and {} more were allocated during it.\n"
      "the plan holds {}: the arguments, the constants, the outputs not written into donated arguments, and the "
      "arena of {} as one block (its values' live bytes peak at {}). {} {}{}",
      m.profile, m.step, formatBytes(m.peakBytes), formatBytes(m.atStartBytes),
      m.atStartBytes >= s.arenaBytes && s.arenaBytes > 0 ? " (the executable keeps its arena between steps)" : "",
      formatBytes(m.riseBytes), formatBytes(footprint), formatBytes(s.arenaBytes), formatBytes(s.arenaPeakLiveBytes),
      difference >= 0 ? "measured - planned:" : "planned - measured:", formatBytes(difference >= 0 ? difference : -difference),
      difference > 0 ? " (buffers held outside the step: the data pipeline's batches, metrics, results kept by the caller)"
      : difference < 0 ? " (the profiled step's shapes or configuration differ from the project's now, or outputs were released before the peak)"
                       : "");
  if (!m.ranks.empty()) {
    out += "\nper rank, the peak of each process:";
    for (const auto& r : m.ranks) out += fmt::format(" rank {} {} ({});", r.rank, formatBytes(r.peakBytes), r.step);
    out.back() = '.';
  }
  return out;
}

std::string stepMemoryJson(const StepMemory& m) {
  using nlohmann::json;
  json kinds = json::array();
  for (int k = 0; k < kNumMemoryKinds; ++k) kinds.push_back(memoryKindName(static_cast<MemoryKind>(k)));
  json live = json::array();
  for (const auto& row : m.live) live.push_back(std::vector<int64_t>(row.begin(), row.end()));
  json buffers = json::array();
  for (const auto& b : m.buffers)
    buffers.push_back({{"value", b.value}, {"bytes", b.bytes}, {"kind", memoryKindName(b.kind)}, {"def", b.def},
                       {"last_use", b.lastUse}, {"node", b.node}, {"op", b.op}, {"what", b.what}, {"where", b.where}});
  json out = {{"device", m.device},
              {"kernels", m.kernels},
              {"kinds", kinds},
              {"live", live},
              {"peak", {{"kernel", m.peakKernel},
                        {"name", m.kernels.empty() ? std::string() : m.kernels[static_cast<size_t>(m.peakKernel)]},
                        {"bytes", m.peakBytes}}},
              {"arena", {{"bytes", m.arenaBytes}, {"peak_live", m.arenaPeakLiveBytes}, {"without_reuse", m.intermediateBytes}}},
              {"buffers", buffers},
              {"at_peak", m.atPeak}};
  // Kernel and op names are ASCII; provenance may hold any file name: never throw on bytes that are not UTF-8.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tsr::train
