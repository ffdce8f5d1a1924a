#include "engine/train/sharding_plan.h"

#include <fmt/format.h>

#include "engine/compile/compile.h"
#include "engine/ops/registry.h"
#include "engine/runtime/executable.h"
#include "engine/spmd/spmd.h"
#include "engine/train/run.h"

namespace tsr::train {

namespace {

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
  std::vector<std::string> paths = tree.paths();
  paths.resize(cg.graph.inputs().size());  // captured constants follow the arguments, unnamed
  PlannableStep s;
  s.paths = argumentPaths(paths);
  std::vector<Aval> outAvals;
  for (ir::ValueId v : cg.graph.outputs()) outAvals.push_back(cg.graph.aval(v));
  TSR_ASSIGN(TreeOf<Aval> outTree, TreeOf<Aval>::unflatten(cg.outputTree, std::move(outAvals)));
  s.outputPaths = outTree.paths();
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
  std::vector<std::pair<std::string, std::string>> rules;
  if (o.rules) {
    rules = *o.rules;
  } else {
    for (const auto& r : p.sharding) rules.emplace_back(r.pattern, r.spec);
  }
  out.numRules = rules.size();
  TSR_ASSIGN(PlacementPolicy policy, PlacementPolicy::create(out.mesh, rules, o.overrides, p.file + ": [sharding]"));
  const sharding::Mesh& mesh = out.mesh;
  const ir::Graph& g = *step.graph;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    PlannedArgument a;
    if (i < step.paths.size()) a.path = step.paths[i];
    a.value = g.inputs()[i];
    const Shape& shape = g.aval(a.value).shape;
    TSR_ASSIGN(Placement placed, policy.place(a.path, shape));
    a.source = std::move(placed.source);
    if (placed.spec) {
      TSR_ASSIGN(a.sharding, sharding::TensorSharding::fromSpec(mesh, *placed.spec, shape));
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
    PlannableStep constrained{std::make_shared<const ir::Graph>(std::move(rebuilt.first)), step.paths, step.outputPaths};
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
    ann.inputNames.push_back(a.path.toString());
  }
  // Planned as SpmdExecutable::compile plans it: the same propagation, partition and per-device pipeline.
  TSR_ASSIGN(spmd::SpmdPlan planned, spmd::planSpmd(g, mesh, ann, "train_step"));
  out.plan = std::move(planned.plan);
  const sharding::PartitionResult& part = planned.partitioned;
  // Names as the plan's origins give them (an argument's annotation), batch and other arguments by kind.
  for (const auto& a : out.arguments) {
    if (a.path.as<ArgumentPath::Param>()) out.paramBytes += a.bytes;
    else if (a.path.as<ArgumentPath::OptState>()) out.optBytes += a.bytes;
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
