// custom_vjp_call: a function whose gradient the user gives (jax.custom_vjp). Its attrs hold three graphs
// (CustomVjpAttrs in attrs.h): primal, which is what runs (the compile pipeline inlines it, engine/passes/
// inline_calls.h, so a compiled program pays nothing for the call), and fwd and bwd, which only its vjp rule
// reads: fwd gives the residuals, bwd maps them and the output cotangents to the primals' cotangents. Batching
// vmaps all three graphs.
#include <fmt/format.h>

#include "engine/ops/nested_graphs.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/control_flow.h"
#include "engine/transform/custom_vjp.h"
#include "engine/transform/vmap.h"

namespace tsr::ops {
namespace {

using ir::CustomVjpAttrs;

constexpr const char* kOp = "custom_vjp_call";

Result<std::vector<Aval>> graphOutputs(const ir::Graph& g) {
  std::vector<Aval> out;
  for (ir::ValueId v : g.outputs()) {
    TSR_ASSIGN(Aval a, ioAval(kOp, g, v));
    out.push_back(std::move(a));
  }
  return out;
}

// Operands: primals (numPrimals), then what the graphs closed over. primal and fwd take the operands; fwd returns
// primal's outputs, then the residuals; bwd takes (operands, residuals, output cotangents) and returns one
// cotangent per primal, of its aval.
Result<std::vector<Aval>> inferCustomVjp(std::span<const Aval> ops, const ir::Attrs& attrs) {
  const auto& a = attrsAs<CustomVjpAttrs>(attrs);
  if (!a.primal || !a.fwd || !a.bwd) return opError(kOp, ops, "needs the primal, fwd and bwd graphs");
  if (a.numPrimals < 0 || a.numPrimals > static_cast<int64_t>(ops.size()))
    return opError(kOp, ops, fmt::format("num_primals {} does not fit the {} operands", a.numPrimals, ops.size()));
  TSR_TRY(checkGraphInputs(kOp, ops, ops, *a.primal, "the primal function"));
  TSR_TRY(checkGraphInputs(kOp, ops, ops, *a.fwd, "fwd"));
  TSR_ASSIGN(std::vector<Aval> outs, graphOutputs(*a.primal));
  TSR_ASSIGN(std::vector<Aval> fwdOuts, graphOutputs(*a.fwd));
  if (fwdOuts.size() < outs.size())
    return opError(kOp, ops, fmt::format("fwd returns {} values but the function has {} outputs", fwdOuts.size(),
                                         outs.size()));
  for (size_t i = 0; i < outs.size(); ++i)
    if (!(fwdOuts[i] == outs[i]))
      return opError(kOp, ops, fmt::format("fwd returns output {} as {} but the function returns {}", i,
                                           fwdOuts[i].toString(), outs[i].toString()));
  std::vector<Aval> bwdIn(ops.begin(), ops.end());
  bwdIn.insert(bwdIn.end(), fwdOuts.begin() + static_cast<std::ptrdiff_t>(outs.size()), fwdOuts.end());
  bwdIn.insert(bwdIn.end(), outs.begin(), outs.end());
  TSR_TRY(checkGraphInputs(kOp, ops, bwdIn, *a.bwd, "bwd"));
  TSR_ASSIGN(std::vector<Aval> cts, graphOutputs(*a.bwd));
  if (cts.size() != static_cast<size_t>(a.numPrimals))
    return opError(kOp, ops, fmt::format("bwd returns {} cotangents for {} primals", cts.size(), a.numPrimals));
  for (size_t i = 0; i < cts.size(); ++i)
    if (!(cts[i] == ops[i]))
      return opError(kOp, ops, fmt::format("bwd returns a cotangent {} for primal {}, which is {}", cts[i].toString(),
                                           i, ops[i].toString()));
  return outs;
}

// What runs is the primal function.
ir::Cost costCustomVjp(std::span<const Aval>, std::span<const Aval>, const ir::Attrs& attrs) {
  const auto& a = attrsAs<CustomVjpAttrs>(attrs);
  return a.primal ? ir::graphCost(*a.primal, registry()) : ir::Cost{};
}

void customVjpKernel(const ir::CpuKernelArgs& args) {
  runGraphKernel(kOp, *attrsAs<CustomVjpAttrs>(args.attrs).primal, args, 0);
}

// The user's rule in place of autodiff of primal: fwd replayed on the operands gives the residuals (the forward
// pass ran primal, which need not compute them), and bwd maps them and the result cotangents to the primals'
// cotangents. What the graphs closed over gets none, as in JAX.
std::vector<Array> customVjpVjp(const ir::VjpArgs& args) {
  const auto& a = attrsAs<CustomVjpAttrs>(args.attrs);
  size_t nOut = args.results.size();
  std::vector<Array> fwd = bindGraph(*a.fwd, args.operands);
  std::vector<Array> in = args.operands;
  in.insert(in.end(), fwd.begin() + static_cast<std::ptrdiff_t>(nOut), fwd.end());
  for (size_t j = 0; j < nOut; ++j) in.push_back(cotangentOrZeros(args, j));
  std::vector<Array> primalCts = bindGraph(*a.bwd, in);
  std::vector<Array> cts(args.operands.size());
  for (size_t i = 0; i < primalCts.size(); ++i) cts[i] = primalCts[i];
  return cts;
}

// vmap of the three graphs. Every operand is batched (broadcast where it is not), so that bwd's cotangents, which
// come out batched, have their primals' avals; the broadcast's own vjp sums them back for an unbatched primal.
ir::BatchResult customVjpBatch(const ir::BatchArgs& args) {
  const auto& a = attrsAs<CustomVjpAttrs>(args.attrs);
  std::vector<Array> ops;
  for (size_t i = 0; i < args.operands.size(); ++i)
    ops.push_back(moveBatchDim(args.operands[i], args.batchDims[i], 0, args.batchSize));
  ir::BatchResult r;
  r.results = customVjpCall(vmap(graphFn(a.primal)), vmap(graphFn(a.fwd)), vmap(graphFn(a.bwd)), ops,
                            static_cast<size_t>(a.numPrimals));
  r.batchDims.assign(r.results.size(), 0);
  return r;
}

}  // namespace

void registerCustomVjpOps(ir::OpRegistry& reg) {
  ir::OpDef call = coreOp(ir::OpCode::CustomVjpCall, "control_flow", ir::FusionKind::Opaque, -1, -1);
  call.minOperands = 0;
  call.infer = inferCustomVjp;
  call.cost = costCustomVjp;
  call.cpu = customVjpKernel;
  call.vjp = customVjpVjp;
  call.batch = customVjpBatch;
  addCoreOp(reg, std::move(call));
}

}  // namespace tsr::ops
