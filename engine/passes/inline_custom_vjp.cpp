#include "engine/passes/inline_custom_vjp.h"

#include <fmt/format.h>

#include "engine/passes/rewrite.h"

namespace tsr::passes {

namespace {

// One sweep over g's own nodes: each call's primal nodes are inserted before it, wired to its operands, and the
// call's results read the primal's outputs. Returns whether any call was inlined.
Result<bool> inlineCalls(ir::Graph& g, PassContext& ctx) {
  GraphRewriter rw(g);
  Decision d;
  Status failed;
  rw.forEachNode([&](ir::NodeId id) {
    if (!failed.ok() || rw.node(id).op != ir::OpCode::CustomVjpCall) return;
    const ir::Node call = rw.node(id);  // a copy: inserting invalidates the reference
    const ir::Graph& primal = *std::get<ir::CustomVjpAttrs>(call.attrs).primal;
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
        failed = makeError("inline_custom_vjp: node {}: {}", id, results.error().message);
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
  d.message = fmt::format("inlined {} custom_vjp_call{}: the primal function runs, fwd and bwd served the gradient",
                          d.nodes.size(), d.nodes.size() == 1 ? "" : "s");
  ctx.record(std::move(d));
  return true;
}

}  // namespace

Result<bool> InlineCustomVjp::run(ir::Graph& g, PassContext& ctx) {
  TSR_ASSIGN(bool changed, runOnNestedGraphs(*this, g, ctx));
  for (;;) {
    TSR_ASSIGN(bool inlined, inlineCalls(g, ctx));
    if (!inlined) return changed;
    changed = true;
  }
}

}  // namespace tsr::passes
