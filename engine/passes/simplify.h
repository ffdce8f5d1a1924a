#pragma once
// Algebraic simplification as a table of small rules (simplify_rules.cpp), each a line or two that either
// returns the value replacing a node's result or kNone. The pass walks the graph once in order; a rule sees
// operands through the replacements made before it, so chains (neg(neg(neg(x)))) collapse in one walk.
// Nodes a rule bypasses are left for DCE. Every rewrite names its rule in the decision log.
//
// Float semantics follow XLA's algebraic simplifier: rules that are exact for every input are applied to
// floats (x * 1, x / 1, x - 0, neg(neg(x))); x + 0 -> x too, although it turns -0.0 + 0.0 = +0.0 into -0.0
// (equal as numbers; XLA and JAX do the same). x * 0 -> 0 only for integers and bool: for floats it is NaN
// for x = NaN or ±inf, and -0.0 for negative x.
#include <vector>

#include "engine/passes/pass.h"
#include "engine/passes/rewrite.h"

namespace tsr::passes {

// What a rule sees: the node being simplified, its operands and a way to emit replacement nodes.
class RuleContext {
 public:
  RuleContext(GraphRewriter& rw, const ir::OpRegistry& reg, ir::NodeId n);

  const ir::Node& node() const { return m_node; }
  ir::ValueId operand(size_t i) const { return m_node.operands[i]; }
  size_t numOperands() const { return m_node.operands.size(); }
  const Aval& aval(ir::ValueId v) const { return m_rw.aval(v); }
  const Aval& result() const { return m_rw.aval(m_node.results[0]); }
  template <class A>
  const A& attrs() const { return std::get<A>(m_node.attrs); }

  // Operand i is a splat (constant or broadcast of one) whose elements equal value.
  bool isSplat(size_t i, double value) const { return isSplatOf(m_rw.graph(), operand(i), value); }
  // Value v is a splat whose elements equal value.
  bool isSplatValue(ir::ValueId v, double value) const { return isSplatOf(m_rw.graph(), v, value); }
  // The node defining operand i, when it is `op`; nullptr otherwise (or for a graph input). Valid until insert().
  const ir::Node* producer(size_t i, ir::OpCode op) const { return producerOf(operand(i), op); }
  // The same for any value.
  const ir::Node* producerOf(ir::ValueId v, ir::OpCode op) const;

  // How many nodes (and graph outputs) read v in the graph as the pass found it.
  int numUses(ir::ValueId v) const;

  // Inserts op(operands){attrs} before the node, with its provenance; kNone when the op rejects them.
  ir::ValueId insert(ir::OpCode op, std::vector<ir::ValueId> operands, ir::Attrs attrs);

 private:
  GraphRewriter& m_rw;
  const ir::OpRegistry& m_reg;
  ir::NodeId m_n;
  ir::Node m_node;  // a copy: insert() may move the graph's nodes
};

struct SimplifyRule {
  ir::OpCode op;
  const char* name;  // "add(x, 0) -> x": what the decision log shows
  ir::ValueId (*apply)(RuleContext& c);
};

// The rule table, in the order rules are tried for an op.
const std::vector<SimplifyRule>& simplifyRules();

class Simplify : public Pass {
 public:
  std::string_view name() const override { return "simplify"; }
  Result<bool> run(ir::Graph& g, PassContext& ctx) override;
};

}  // namespace tsr::passes
