#include "engine/passes/inline_calls.h"

#include <fmt/format.h>

#include "engine/passes/rewrite.h"

namespace tsr::passes {

namespace {

// The graph that runs in the call's place, or null for any other op.
const ir::Graph* inlinedBody(const ir::Node& n) {
  if (n.op == ir::OpCode::CustomVjpCall) return std::get<ir::CustomVjpAttrs>(n.attrs).primal.get();
  if (n.op == ir::OpCode::RematCall) return std::get<ir::RematAttrs>(n.attrs).body.get();
  return nullptr;
}

// One sweep over g's own nodes: each call's body nodes are inserted before it, wired to its operands, and the
// call's results read the body's outputs. Returns whether any call was inlined.
Result<bool> inlineCalls(ir::Graph& g, PassContext& ctx) {
  GraphRewriter rw(g);
  Decision d;
  Status failed;
  int customVjp = 0, remat = 0;
  rw.forEachNode([&](ir::NodeId id) {
    if (!failed.ok() || !inlinedBody(rw.node(id))) return;
    const ir::Node call = rw.node(id);  // a copy: inserting invalidates the reference
    const ir::Graph& primal = *inlinedBody(call);
    ++(call.op == ir::OpCode::RematCall ? remat : customVjp);
    std::vector<ir::ValueId> map(static_cast<size_t>(primal.numValues()), ir::kNone);
    for (size_t i = 0; i < primal.inputs().size(); ++i) map[static_cast<size_t>(primal.inputs()[i])] = call.operands[i];
    auto mapped = [&](const std::vector<ir::ValueId>& ids) {
      std::vector<ir::ValueId> out;
      for (ir::ValueId v : ids) out.push_back(map[static_cast<size_t>(v)]);
      return out;
    };
    for (const ir::Node& n : primal.nodes()) {
      auto results = rw.insertBefore(id, ctx.registry(), n.op, mapped(n.operands), n.attrs, n.prov);
      if (!results.ok()) {
        failed = makeError("inline_calls: node {}: {}", id, results.error().message);
        return;
      }
      for (size_t r = 0; r < n.results.size(); ++r) map[static_cast<size_t>(n.results[r])] = (*results)[r];
    }
    rw.replaceNode(id, mapped(primal.outputs()));
    d.nodes.push_back(id);
  });
  if (!failed.ok()) return failed.takeError();
  if (d.nodes.empty()) return false;
  rw.commit();
  std::string what;
  if (customVjp)
    what = fmt::format("{} custom_vjp_call{} (the primal function runs, fwd and bwd served the gradient)", customVjp,
                       customVjp == 1 ? "" : "s");
  if (remat)
    what += fmt::format("{}{} remat_call{} (the body runs; the gradient recomputes it)", what.empty() ? "" : " and ",
                        remat, remat == 1 ? "" : "s");
  d.message = "inlined " + what;
  ctx.record(std::move(d));
  return true;
}

}  // namespace

Result<bool> InlineCalls::run(ir::Graph& g, PassContext& ctx) {
  TSR_ASSIGN(bool changed, runOnNestedGraphs(*this, g, ctx));
  for (;;) {
    TSR_ASSIGN(bool inlined, inlineCalls(g, ctx));
    if (!inlined) return changed;
    changed = true;
  }
}

}  // namespace tsr::passes
