#include "engine/passes/simplify.h"

#include <map>

namespace tsr::passes {

RuleContext::RuleContext(GraphRewriter& rw, const ir::OpRegistry& reg, ir::NodeId n)
    : m_rw(rw), m_reg(reg), m_n(n), m_node(rw.node(n)) {}

const ir::Node* RuleContext::producerOf(ir::ValueId v, ir::OpCode op) const {
  ir::NodeId p = m_rw.producerOf(v);
  if (p == ir::kNone || m_rw.isErased(p)) return nullptr;
  const ir::Node& n = m_rw.node(p);
  return n.op == op ? &n : nullptr;
}

int RuleContext::numUses(ir::ValueId v) const {
  int n = 0;
  for (const auto& node : m_rw.graph().nodes())
    for (ir::ValueId x : node.operands) n += x == v;
  for (ir::ValueId x : m_rw.graph().outputs()) n += x == v;
  return n;
}

ir::ValueId RuleContext::insert(ir::OpCode op, std::vector<ir::ValueId> operands, ir::Attrs attrs) {
  auto r = m_rw.insertBefore(m_n, m_reg, op, std::move(operands), std::move(attrs), m_node.prov);
  return r.ok() && r->size() == 1 ? (*r)[0] : ir::kNone;
}

Result<bool> Simplify::run(ir::Graph& g, PassContext& ctx) {
  TSR_ASSIGN(bool changed, runOnNestedGraphs(*this, g, ctx));
  std::map<ir::OpCode, std::vector<const SimplifyRule*>> byOp;
  for (const auto& r : simplifyRules()) byOp[r.op].push_back(&r);

  GraphRewriter rw(g);
  rw.forEachNode([&](ir::NodeId n) {
    auto it = byOp.find(rw.node(n).op);
    if (it == byOp.end() || rw.node(n).results.size() != 1) return;
    RuleContext c(rw, ctx.registry(), n);
    for (const SimplifyRule* rule : it->second) {
      ir::ValueId v = rule->apply(c);
      if (v == ir::kNone) continue;
      ctx.record(g, n, rule->name);
      rw.replaceNode(n, v);
      return;
    }
  });
  return rw.commit() || changed;
}

}  // namespace tsr::passes
