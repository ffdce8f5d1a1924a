#include "engine/transform/remat.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "engine/transform/control_flow.h"
#include "engine/transform/trace.h"

namespace tsr {

namespace {

struct PolicyName {
  RematPolicy policy;
  const char* name;
};
constexpr PolicyName kPolicies[] = {{RematPolicy::None, "none"},
                                    {RematPolicy::NothingSaveable, "nothing_saveable"},
                                    {RematPolicy::DotsSaveable, "dots_saveable"},
                                    {RematPolicy::EverythingSaveable, "everything_saveable"}};

}  // namespace

const char* rematPolicyName(RematPolicy policy) {
  for (const auto& p : kPolicies)
    if (p.policy == policy) return p.name;
  return "?";
}

Result<RematPolicy> parseRematPolicy(std::string_view name) {
  std::string names;
  for (const auto& p : kPolicies) {
    if (name == p.name) return p.policy;
    names += fmt::format("{}'{}'", names.empty() ? "" : ", ", p.name);
  }
  return makeError("unknown remat policy '{}' (one of {})", name, names);
}

std::vector<Array> rematCall(const ArrayFn& f, const std::vector<Array>& operands, RematPolicy policy,
                             std::source_location loc) {
  if (policy == RematPolicy::None || policy == RematPolicy::EverythingSaveable) return f(operands);
  std::vector<Aval> avals;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i].valid()) raiseAt(loc, makeError("remat: argument {} is an empty Array", i));
    avals.push_back(operands[i].aval());
  }
  auto traced = makeGraph(f, avals, "remat");
  if (!traced.ok()) raiseAt(loc, Error{fmt::format("in a function under remat: {}", traced.error().message)});
  ClosedGraph cg = std::move(traced).value();
  const size_t numOutputs = cg.graph.outputs().size();
  // The policy's saved values become further outputs, which the recomputation reads instead of recomputing.
  int64_t numSaved = 0;
  if (policy == RematPolicy::DotsSaveable) {
    std::vector<ir::ValueId> outs = cg.graph.outputs();
    for (const ir::Node& n : cg.graph.nodes()) {
      if (n.op != ir::OpCode::DotGeneral) continue;
      if (std::find(outs.begin(), outs.end(), n.results[0]) != outs.end()) continue;
      outs.push_back(n.results[0]);
      ++numSaved;
    }
    cg.graph.setOutputs(std::move(outs));
  }
  std::vector<Array> results = bindRematCall(std::move(cg), operands, numSaved, policy, 0, loc);
  results.resize(numOutputs);
  return results;
}

std::vector<Array> bindRematCall(ClosedGraph g, const std::vector<Array>& operands, int64_t numSaved,
                                 RematPolicy policy, int64_t numConstOperands, std::source_location loc) {
  ir::RematAttrs attrs;
  attrs.policy = rematPolicyName(policy);
  attrs.numSaved = numSaved;
  attrs.numConsts = numConstOperands + static_cast<int64_t>(g.consts.size());
  attrs.body = std::make_shared<const ir::Graph>(std::move(g.graph));
  std::vector<Array> all = operands;
  all.insert(all.end(), g.consts.begin(), g.consts.end());
  return bind(ir::OpCode::RematCall, all, std::move(attrs), loc);
}

std::function<Tree(const Tree&)> remat(std::function<Tree(const Tree&)> f, RematPolicy policy,
                                       std::source_location loc) {
  return [f = std::move(f), policy, loc](const Tree& args) {
    TreeDef inDef = args.def(), outDef;
    ArrayFn flat = [&](const std::vector<Array>& in) {
      Tree out = f(unflattenOrRaise(inDef, in));
      outDef = out.def();
      return out.leaves();
    };
    std::vector<Array> outs = rematCall(flat, args.leaves(), policy, loc);
    return unflattenOrRaise(outDef, std::move(outs));
  };
}

std::vector<Array> optimizationBarrier(const std::vector<Array>& values, std::source_location loc) {
  for (size_t i = 0; i < values.size(); ++i)
    if (!values[i].valid()) raiseAt(loc, makeError("optimization_barrier: value {} is an empty Array", i));
  if (values.empty()) return {};
  return bind(ir::OpCode::OptimizationBarrier, values, ir::NoAttrs{}, loc);
}

}  // namespace tsr
