#include "engine/passes/dce.h"

#include <fmt/format.h>

#include "engine/passes/rewrite.h"

namespace tsr::passes {

Result<bool> DeadCodeElimination::run(ir::Graph& g, PassContext& ctx) {
  TSR_ASSIGN(bool changed, runOnNestedGraphs(*this, g, ctx));
  std::vector<bool> live = liveNodes(g);
  GraphRewriter rw(g);
  Decision d;
  for (ir::NodeId n = 0; n < rw.numOriginalNodes(); ++n) {
    if (live[static_cast<size_t>(n)]) continue;
    rw.eraseNode(n);
    d.nodes.push_back(n);
  }
  if (d.nodes.empty()) return changed;
  rw.commit();
  auto removed = d.nodes.size();
  d.message = fmt::format("removed {} dead node{}", removed, removed == 1 ? "" : "s");
  ctx.record(std::move(d));
  return true;
}

}  // namespace tsr::passes
