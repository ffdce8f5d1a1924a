#include "engine/train/sharding_plan.h"

#include <regex>

#include <fmt/format.h>

#include "engine/compile/compile.h"
#include "engine/ops/registry.h"
#include "engine/runtime/executable.h"
#include "engine/spmd/spmd.h"
#include "engine/train/run.h"

namespace tsr::train {

namespace {

struct CompiledRule {
  std::regex re;
  std::string pattern;
  sharding::PartitionSpec spec;
};

// Each rule's regex and spec, its spec checked against the mesh: a rule naming an axis the mesh lacks is an
// error that names the rule (the mesh may have been edited after the rules were written).
Result<std::vector<CompiledRule>> compileRules(const std::vector<std::pair<std::string, std::string>>& rules,
                                               const sharding::Mesh& mesh, const std::string& file) {
  std::vector<CompiledRule> out;
  for (const auto& [pattern, spec] : rules) {
    CompiledRule r;
    r.pattern = pattern;
    try {
      r.re = std::regex(pattern);
    } catch (const std::regex_error& e) {
      return makeError("{}: [sharding] rule '{}': not a regular expression ({})", file, pattern, e.what());
    }
    auto p = sharding::PartitionSpec::parse(spec);
    if (!p.ok()) return makeError("{}: [sharding] rule '{}': {}", file, pattern, p.error().message);
    if (auto ns = sharding::NamedSharding::create(mesh, *p); !ns.ok())
      return makeError("{}: [sharding] rule '{}': {}", file, pattern, ns.error().message);
    r.spec = std::move(*p);
    out.push_back(std::move(r));
  }
  return out;
}

// The path an argument's rules are matched against ("params.layers.0.weight" -> "layers.0.weight"), as
// Trainer::place sees the parameter and optimizer-state trees.
std::string rulePath(const std::string& path, ArgumentKind kind) {
  if (kind == ArgumentKind::Parameter) return path.substr(7);
  if (kind == ArgumentKind::OptimizerState) return path.substr(4);
  return path;
}

ArgumentKind kindOf(const std::string& path) {
  if (path.rfind("params.", 0) == 0) return ArgumentKind::Parameter;
  if (path.rfind("opt.", 0) == 0) return ArgumentKind::OptimizerState;
  if (path == "inputs" || path == "targets") return ArgumentKind::Batch;
  return ArgumentKind::Other;
}

// The override that names this argument: its parameter path, the end of an optimizer-state path after a dot
// ("0.mu.layers.0.weight" follows "layers.0.weight"), or the batch's name.
const std::string* overrideFor(const std::map<std::string, std::string>& overrides, const std::string& rel,
                               ArgumentKind kind) {
  for (const auto& [key, spec] : overrides) {
    if (rel == key) return &spec;
    if (kind == ArgumentKind::OptimizerState && rel.size() > key.size() &&
        rel.compare(rel.size() - key.size(), key.size(), key) == 0 && rel[rel.size() - key.size() - 1] == '.')
      return &spec;
  }
  return nullptr;
}

// The step with a sharding_constraint after each constrained value (its uses read the constrained one).
Result<std::pair<ir::Graph, std::vector<ir::ValueId>>> withConstraints(const ir::Graph& g, const sharding::Mesh& mesh,
                                                                       const std::map<ir::ValueId, std::string>& constraints) {
  ir::Graph out;
  out.name = g.name;
  std::vector<ir::ValueId> map(static_cast<size_t>(g.numValues()), ir::kNone);
  std::string axes;
  for (size_t i = 0; i < mesh.axes.size(); ++i) axes += (i ? "," : "") + mesh.axes[i];
  auto constrain = [&](ir::ValueId v, const ir::Provenance& prov) -> Status {
    auto it = constraints.find(v);
    if (it == constraints.end()) return {};
    TSR_ASSIGN(sharding::PartitionSpec spec, sharding::PartitionSpec::parse(it->second));
    TSR_ASSIGN(sharding::NamedSharding ns, sharding::NamedSharding::create(mesh, spec));
    if (auto st = ns.check(g.aval(v).shape); !st.ok()) return makeError("%{}: {}", v, st.error().message);
    ir::ShardingConstraintAttrs a;
    a.meshShape = mesh.shape;
    a.meshAxes = axes;
    a.devices.assign(mesh.devices.begin(), mesh.devices.end());
    a.spec = spec.toString();
    map[static_cast<size_t>(v)] =
        out.addNodeWithAvals(ir::OpCode::ShardingConstraint, {map[static_cast<size_t>(v)]}, a, {g.aval(v)}, prov)[0];
    return {};
  };
  for (ir::ValueId v : g.inputs()) map[static_cast<size_t>(v)] = out.addInput(g.aval(v));
  for (ir::ValueId v : g.inputs()) TSR_TRY(constrain(v, {}));
  for (const ir::Node& n : g.nodes()) {
    std::vector<ir::ValueId> operands;
    for (ir::ValueId o : n.operands) operands.push_back(map[static_cast<size_t>(o)]);
    std::vector<Aval> avals;
    for (ir::ValueId r : n.results) avals.push_back(g.aval(r));
    auto results = out.addNodeWithAvals(n.op, std::move(operands), n.attrs, std::move(avals), n.prov);
    for (size_t i = 0; i < results.size(); ++i) map[static_cast<size_t>(n.results[i])] = results[i];
    for (ir::ValueId r : n.results) TSR_TRY(constrain(r, n.prov));
  }
  std::vector<ir::ValueId> outs;
  for (ir::ValueId o : g.outputs()) outs.push_back(map[static_cast<size_t>(o)]);
  out.setOutputs(std::move(outs));
  return std::make_pair(std::move(out), std::move(map));
}

}  // namespace

double collectiveSeconds(const sharding::CollectiveInfo& c, const sharding::Mesh& mesh, double bw) {
  int64_t n = 1;
  for (int a : c.axes) n *= mesh.shape[static_cast<size_t>(a)];
  const double b = static_cast<double>(c.bytes), f = n > 1 ? static_cast<double>(n - 1) / static_cast<double>(n) : 0.0;
  if (c.op == ir::OpCode::AllReduce) return 2 * f * b / bw;
  if (c.op == ir::OpCode::AllGather) return f * b * static_cast<double>(n) / bw;
  if (c.op == ir::OpCode::CollectivePermute) return b / bw;
  return f * b / bw;  // reduce_scatter (its operand is the whole), all_to_all
}

Result<sharding::Mesh> projectMesh(const project::Project& p) {
  auto mesh = sharding::Mesh::create(p.mesh.shape, p.mesh.axes);
  if (!mesh.ok()) return makeError("{}: [mesh]: {}", p.file, mesh.error().message);
  return mesh;
}

Result<PlannableStep> traceStepForPlan(const project::Project& p) {
  TSR_ASSIGN(ClosedGraph cg, traceTrainingStep(p));
  // The cleanup passes, as jit runs them before it partitions a step.
  if (auto st = compile::optimize(cg.graph); !st.ok()) return makeError("{}: {}", p.file, st.error().message);
  std::vector<Aval> avals;
  for (ir::ValueId v : cg.graph.inputs()) avals.push_back(cg.graph.aval(v));
  avals.resize(static_cast<size_t>(cg.inputTree.numLeaves()));
  TSR_ASSIGN(TreeOf<Aval> tree, TreeOf<Aval>::unflatten(cg.inputTree, std::move(avals)));
  PlannableStep s;
  s.paths = tree.paths();
  s.paths.resize(cg.graph.inputs().size());  // captured constants follow the arguments, unnamed
  s.graph = std::make_shared<const ir::Graph>(std::move(cg.graph));
  return s;
}

Result<StepShardingPlan> planStepSharding(const project::Project& p, const ShardPlanOptions& o) {
  TSR_ASSIGN(PlannableStep step, traceStepForPlan(p));
  return planStepSharding(p, step, o);
}

Result<PlacedArguments> placeArguments(const project::Project& p, const PlannableStep& step, const ShardPlanOptions& o) {
  PlacedArguments out;
  if (o.mesh) {
    out.mesh = *o.mesh;
  } else {
    TSR_ASSIGN(out.mesh, projectMesh(p));
  }
  const sharding::Mesh& mesh = out.mesh;
  std::vector<std::pair<std::string, std::string>> ruleText;
  if (o.rules) {
    ruleText = *o.rules;
  } else {
    for (const auto& r : p.sharding) ruleText.emplace_back(r.pattern, r.spec);
  }
  out.numRules = ruleText.size();
  TSR_ASSIGN(std::vector<CompiledRule> rules, compileRules(ruleText, mesh, p.file));
  const ir::Graph& g = *step.graph;

  // Each argument's sharding: an override, else the first rule whose regex occurs in its path (when the spec
  // fits its shape), else replicated; the batch is split over the mesh's first axis where it divides.
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    PlannedArgument a;
    a.path = i < step.paths.size() ? step.paths[i] : "";
    a.kind = kindOf(a.path);
    a.value = g.inputs()[i];
    const Shape& shape = g.aval(a.value).shape;
    const std::string rel = rulePath(a.path, a.kind);
    std::optional<sharding::PartitionSpec> spec;
    if (const std::string* s = overrideFor(o.overrides, rel, a.kind)) {
      auto parsed = sharding::PartitionSpec::parse(*s);
      if (!parsed.ok()) return makeError("{}: {}", a.path, parsed.error().message);
      spec = std::move(*parsed);
      a.source = "set here";
    } else if (a.kind == ArgumentKind::Parameter || a.kind == ArgumentKind::OptimizerState) {
      a.source = "no rule";
      for (const auto& r : rules)
        if (std::regex_search(rel, r.re)) {
          // A spec of more dims than the array cannot be meant for it (JAX refuses it too); one that does not
          // divide its dims leaves it replicated, and says so.
          if (r.spec.dims.size() > static_cast<size_t>(shape.rank()))
            return makeError("{}: [sharding] rule '{}' matches {} {}, but its spec {} has {} dims", p.file, r.pattern,
                             a.path, shape.toString(), r.spec.toString(), r.spec.dims.size());
          sharding::NamedSharding ns{mesh, r.spec};
          if (ns.check(shape).ok()) {
            spec = r.spec;
            a.source = fmt::format("rule '{}'", r.pattern);
          } else {
            a.source = fmt::format("rule '{}' does not fit {}", r.pattern, shape.toString());
          }
          break;
        }
    } else if (a.kind == ArgumentKind::Batch && !mesh.axes.empty()) {
      sharding::PartitionSpec split{{{mesh.axes[0]}}};
      if (shape.rank() > 0 && sharding::NamedSharding{mesh, split}.check(shape).ok()) {
        spec = split;
        a.source = fmt::format("the batch, over '{}'", mesh.axes[0]);
      } else {
        a.source = "the batch, whole";
      }
    }
    if (spec) {
      auto named = sharding::NamedSharding::create(mesh, *spec);
      if (!named.ok()) return makeError("{}: {}", a.path, named.error().message);
      if (auto st = named->check(shape); !st.ok()) return makeError("{}: {}", a.path, st.error().message);
      TSR_ASSIGN(a.sharding, sharding::TensorSharding::fromSpec(mesh, *spec, shape));
    } else {
      a.sharding = sharding::TensorSharding::replicated(shape.rank());
    }
    a.local = a.sharding.localShape(mesh, shape);
    a.bytes = a.local.numel() * dtypeSize(g.aval(a.value).dtype);
    out.arguments.push_back(std::move(a));
  }
  return out;
}

Result<StepShardingPlan> planStepSharding(const project::Project& p, const PlannableStep& step, const ShardPlanOptions& o) {
  if (!o.constraints.empty()) {
    // Plan the step with its constraints, then remember which value each of the step's became.
    sharding::Mesh mesh;
    if (o.mesh) {
      mesh = *o.mesh;
    } else {
      TSR_ASSIGN(mesh, projectMesh(p));
    }
    TSR_ASSIGN(auto rebuilt, withConstraints(*step.graph, mesh, o.constraints));
    PlannableStep constrained{std::make_shared<const ir::Graph>(std::move(rebuilt.first)), step.paths};
    ShardPlanOptions rest = o;
    rest.constraints.clear();
    TSR_ASSIGN(StepShardingPlan out, planStepSharding(p, constrained, rest));
    out.step = step.graph;
    out.fromStep = std::move(rebuilt.second);
    return out;
  }
  const ir::OpRegistry& reg = ops::registry();
  StepShardingPlan out;
  out.name = p.name;
  TSR_ASSIGN(PlacedArguments placed, placeArguments(p, step, o));
  out.mesh = std::move(placed.mesh);
  out.numRules = placed.numRules;
  out.arguments = std::move(placed.arguments);
  out.global = step.graph;
  out.step = step.graph;
  out.fromStep.resize(static_cast<size_t>(step.graph->numValues()));
  for (size_t v = 0; v < out.fromStep.size(); ++v) out.fromStep[v] = static_cast<ir::ValueId>(v);
  const ir::Graph& g = *step.graph;
  const sharding::Mesh& mesh = out.mesh;
  sharding::ShardingAnnotations ann;
  for (const auto& a : out.arguments) {
    ann.inputs.push_back(a.sharding);
    ann.inputNames.push_back(a.path);
  }
  // Planned as SpmdExecutable::compile plans it: the same propagation, partition and per-device pipeline.
  TSR_ASSIGN(spmd::SpmdPlan planned, spmd::planSpmd(g, mesh, ann, "train_step"));
  out.plan = std::move(planned.plan);
  const sharding::PartitionResult& part = planned.partitioned;
  // Names as the plan's origins give them (an argument's annotation), batch and other arguments by kind.
  for (const auto& a : out.arguments) {
    if (a.kind == ArgumentKind::Parameter) out.paramBytes += a.bytes;
    else if (a.kind == ArgumentKind::OptimizerState) out.optBytes += a.bytes;
    else out.batchBytes += a.bytes;
  }
  out.bandwidthGBs = o.bandwidthGBs;
  for (const auto& c : part.collectives) {
    PlannedCollective pc{c, collectiveSeconds(c, mesh, o.bandwidthGBs * 1e9), ""};
    if (c.globalNode >= 0) {
      const ir::Node& n = g.nodes()[static_cast<size_t>(c.globalNode)];
      if (!n.prov.empty()) pc.where = n.prov.toString();
    }
    out.commSeconds += pc.seconds;
    out.collectives.push_back(std::move(pc));
  }
  // The per-device program compiled by the backend a run uses, for its arena (no native code: only the memory
  // plan is read).
  if (o.compile) {
    runtime::CompileOptions co;
    co.name = "train_step";
    co.native = false;
    TSR_ASSIGN(auto exe, runtime::compileOn("cpu", planned.program, reg, co));
    out.arenaBytes = exe->arenaBytes();
  }
  out.program = std::make_shared<const ir::Graph>(std::move(planned.program));
  return out;
}

}  // namespace tsr::train
