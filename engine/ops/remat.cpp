// remat_call (jax.checkpoint) and optimization_barrier (jax.lax.optimization_barrier).
//
// remat_call holds its function as a nested graph (RematAttrs in attrs.h). Run, it is that graph: the compile
// pipelines and the SPMD planner inline it first (engine/passes/inline_calls.h), so a forward pass costs what the
// function costs and its intermediates die where the function's last use of them is. Differentiated, its vjp
// rule runs the function again in the backward pass and differentiates that replay, so nothing inside it is
// kept alive from the forward pass but the values its policy saved (its last numSaved results).
//
// The replay reads its arguments through an optimization_barrier that also takes the output cotangents. Without
// it CSE would merge the replay with the forward pass (the same ops on the same values), undoing the remat, and a
// memory-aware scheduler could run the replay long before its cotangents exist. The barrier's results exist only
// once all of its operands do, and no pass looks through it; it copies its operands, so a kernel after it never
// aliases the forward pass's buffers.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "engine/ops/nested_graphs.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/control_flow.h"
#include "engine/transform/remat.h"
#include "engine/transform/trace.h"
#include "engine/transform/vmap.h"

namespace tsr::ops {
namespace {

using ir::RematAttrs;

constexpr const char* kRemat = "remat_call";
constexpr const char* kBarrier = "optimization_barrier";

Result<std::vector<Aval>> inferRemat(std::span<const Aval> ops, const ir::Attrs& attrs) {
  const auto& a = attrsAs<RematAttrs>(attrs);
  if (!a.body) return opError(kRemat, ops, "needs its body graph");
  if (a.numConsts < 0 || a.numConsts > static_cast<int64_t>(ops.size()))
    return opError(kRemat, ops, fmt::format("num_consts {} does not fit the {} operands", a.numConsts, ops.size()));
  TSR_TRY(checkGraphInputs(kRemat, ops, ops, *a.body, "the body"));
  std::vector<Aval> outs;
  for (ir::ValueId v : a.body->outputs()) {
    TSR_ASSIGN(Aval out, ioAval(kRemat, *a.body, v));
    outs.push_back(std::move(out));
  }
  if (a.numSaved < 0 || a.numSaved > static_cast<int64_t>(outs.size()))
    return opError(kRemat, ops, fmt::format("num_saved {} does not fit the body's {} outputs", a.numSaved, outs.size()));
  return outs;
}

ir::Cost costRemat(std::span<const Aval>, std::span<const Aval>, const ir::Attrs& attrs) {
  const auto& a = attrsAs<RematAttrs>(attrs);
  return a.body ? ir::graphCost(*a.body, registry()) : ir::Cost{};
}

void rematKernel(const ir::CpuKernelArgs& args) { runGraphKernel(kRemat, *attrsAs<RematAttrs>(args.attrs).body, args, 0); }

// The body replayed behind a barrier that also holds the output cotangents, and differentiated. The values the
// forward pass already has (the call's results, saved ones among them) are taken, not recomputed.
// Every operand gets its cotangent, the closed-over ones (a layer's weights) included.
std::vector<Array> rematVjp(const ir::VjpArgs& args) {
  const auto& a = attrsAs<RematAttrs>(args.attrs);
  const ir::Graph& body = *a.body;
  const size_t numArgs = args.operands.size() - static_cast<size_t>(a.numConsts);
  // Behind the barrier: the arguments, the saved values (else the ops after them would be merged with the forward
  // pass's, whose results would then stay alive) and the cotangents.
  const size_t numOutputs = args.results.size() - static_cast<size_t>(a.numSaved);
  std::vector<Array> tied(args.operands.begin(), args.operands.begin() + static_cast<std::ptrdiff_t>(numArgs));
  tied.insert(tied.end(), args.results.begin() + static_cast<std::ptrdiff_t>(numOutputs), args.results.end());
  std::vector<size_t> withCotangent;
  for (size_t j = 0; j < args.results.size(); ++j) {  // a saved result read elsewhere has a cotangent too
    if (!args.cotangents[j].valid()) continue;
    tied.push_back(args.cotangents[j]);
    withCotangent.push_back(j);
  }
  std::vector<Array> barrier = optimizationBarrier(tied);
  std::vector<Array> primals(barrier.begin(), barrier.begin() + static_cast<std::ptrdiff_t>(numArgs));
  primals.insert(primals.end(), args.operands.begin() + static_cast<std::ptrdiff_t>(numArgs), args.operands.end());

  std::vector<Array> known(static_cast<size_t>(body.numValues()));
  for (size_t j = 0; j < body.outputs().size(); ++j) {
    ir::ValueId v = body.outputs()[j];
    if (body.value(v).producer == ir::kNone) continue;  // an argument passed through
    known[static_cast<size_t>(v)] = j < numOutputs ? args.results[j] : barrier[numArgs + (j - numOutputs)];
  }
  auto closed = std::make_shared<ClosedGraph>();
  closed->graph = body;
  VjpOutput replay = vjpOfGraph(std::move(closed), primals, std::move(known));
  std::vector<Array> cts(args.results.size());
  const size_t firstCotangent = numArgs + static_cast<size_t>(a.numSaved);
  for (size_t k = 0; k < withCotangent.size(); ++k) cts[withCotangent[k]] = barrier[firstCotangent + k];
  return replay.pullback(cts);
}

// vmap of the body, as a remat_call of the same policy whose saved results stay where they were.
ir::BatchResult rematBatch(const ir::BatchArgs& args) {
  const auto& a = attrsAs<RematAttrs>(args.attrs);
  std::vector<Array> ops;
  for (size_t i = 0; i < args.operands.size(); ++i)
    ops.push_back(moveBatchDim(args.operands[i], args.batchDims[i], 0, args.batchSize));
  std::vector<Aval> avals;
  for (const Array& x : ops) avals.push_back(x.aval());
  auto traced = makeGraph(vmap(graphFn(a.body)), avals, "remat");
  if (!traced.ok()) raise(traced.takeError());
  auto policy = parseRematPolicy(a.policy);
  ir::BatchResult r;
  r.results = bindRematCall(std::move(traced).value(), ops, a.numSaved,
                            policy.ok() ? *policy : RematPolicy::NothingSaveable, a.numConsts);
  r.batchDims.assign(r.results.size(), 0);
  return r;
}

// ---- optimization_barrier ----

Result<std::vector<Aval>> inferBarrier(std::span<const Aval> ops, const ir::Attrs&) {
  if (ops.empty()) return opError(kBarrier, ops, "needs at least one operand");
  return std::vector<Aval>(ops.begin(), ops.end());
}

void barrierKernel(const ir::CpuKernelArgs& args) {
  for (size_t i = 0; i < args.outputs.size(); ++i) {
    const int64_t bytes = args.outputs[i].aval.bytes();
    if (bytes > 0 && args.outputs[i].data != args.inputs[i].data)
      std::memcpy(args.outputs[i].data, args.inputs[i].data, static_cast<size_t>(bytes));
  }
}

// The identity's rules: cotangents pass back through a barrier of their own (as JAX transposes it), batch dims
// stay, and each result is sharded as its operand.
std::vector<Array> barrierVjp(const ir::VjpArgs& args) {
  std::vector<Array> present;
  for (const Array& ct : args.cotangents)
    if (ct.valid()) present.push_back(ct);
  std::vector<Array> through = optimizationBarrier(present);
  std::vector<Array> cts(args.cotangents.size());
  for (size_t i = 0, k = 0; i < cts.size(); ++i)
    if (args.cotangents[i].valid()) cts[i] = through[k++];
  return cts;
}

ir::BatchResult barrierBatch(const ir::BatchArgs& args) {
  return {bind(ir::OpCode::OptimizationBarrier, args.operands, ir::NoAttrs{}, std::source_location::current()),
          args.batchDims};
}

Result<ir::ShardingRule> barrierShardRule(std::span<const Aval> in, std::span<const Aval>, const ir::Attrs&) {
  ir::ShardingRule r;
  for (size_t i = 0; i < in.size(); ++i) {
    std::vector<int> dims;
    for (int d = 0; d < in[i].rank(); ++d) dims.push_back(r.addFactor(ir::FactorKind::PassThrough));
    r.operandDims.push_back(dims);
    r.resultDims.push_back(dims);
  }
  return r;
}

}  // namespace

void registerRematOps(ir::OpRegistry& reg) {
  ir::OpDef call = coreOp(ir::OpCode::RematCall, "control_flow", ir::FusionKind::Opaque, -1, -1);
  call.minOperands = 0;
  call.infer = inferRemat;
  call.cost = costRemat;
  call.cpu = rematKernel;
  call.vjp = rematVjp;
  call.batch = rematBatch;
  addCoreOp(reg, std::move(call));

  ir::OpDef barrier = coreOp(ir::OpCode::OptimizationBarrier, "control_flow", ir::FusionKind::Opaque, -1, -1);
  barrier.minOperands = 1;
  barrier.infer = inferBarrier;
  barrier.cost = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) { return movementCost(in, out); };
  barrier.cpu = barrierKernel;
  barrier.vjp = barrierVjp;
  barrier.batch = barrierBatch;
  barrier.shard = barrierShardRule;
  addCoreOp(reg, std::move(barrier));
}

}  // namespace tsr::ops
