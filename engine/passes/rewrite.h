#pragma once
// Graph rewriting for passes. A Graph keeps its nodes in topological order and its ids are indices, so a pass
// does not edit the node list directly: it records replacements, erasures and insertions on a GraphRewriter
// and commits once, which rebuilds the graph in order, compact, with every node's provenance kept.
//
//   GraphRewriter rw(g);
//   rw.forEachNode([&](ir::NodeId n) {                  // operands of n are already resolved
//     if (matches(rw.node(n))) rw.replaceNode(n, {x});  // uses of n's result now read x; n is erased
//   });
//   bool changed = rw.commit();
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/passes/pass.h"

namespace tsr::passes {

class GraphRewriter {
 public:
  explicit GraphRewriter(ir::Graph& g);
  GraphRewriter(const GraphRewriter&) = delete;
  GraphRewriter& operator=(const GraphRewriter&) = delete;

  const ir::Graph& graph() const { return m_g; }
  // Nodes of the graph as given; nodes inserted since have ids from numOriginalNodes() on.
  int numOriginalNodes() const { return m_numOriginal; }
  // A node by id (original or inserted). The reference is invalidated by insert*(): copy what you need first.
  const ir::Node& node(ir::NodeId n) const { return m_g.nodes()[static_cast<size_t>(n)]; }
  const Aval& aval(ir::ValueId v) const { return m_g.aval(v); }

  // The value that now stands for v, after the replacements so far.
  ir::ValueId resolve(ir::ValueId v) const;
  // The node that defines resolve(v), or kNone for a graph input.
  ir::NodeId producerOf(ir::ValueId v) const;

  // Visits the original nodes in order, skipping erased ones; just before a node is visited its operands are
  // resolved in place, so f sees them through every replacement made earlier in the walk.
  void forEachNode(const std::function<void(ir::NodeId)>& f);

  // Every use of `from` (operands, graph outputs) reads `to` instead; the avals must be equal. Every use means
  // inserted nodes too: to wrap a value (x -> f(x)), rewire the chosen uses with setOperand instead.
  void replaceAllUses(ir::ValueId from, ir::ValueId to);
  // Rewires one use: operand i of node n, or graph output i, reads v (same aval as before).
  void setOperand(ir::NodeId n, size_t i, ir::ValueId v);
  void setOutput(size_t i, ir::ValueId v);
  // Replaces each result of n by the matching value in `with` and erases n.
  void replaceNode(ir::NodeId n, std::span<const ir::ValueId> with);
  void replaceNode(ir::NodeId n, ir::ValueId with) { replaceNode(n, std::span<const ir::ValueId>(&with, 1)); }
  // Drops n from the committed graph; nothing may still use its results by then.
  void eraseNode(ir::NodeId n);
  bool isErased(ir::NodeId n) const { return m_erased[static_cast<size_t>(n)]; }

  // Adds a node that the committed graph places just before node `before` (kNone: at the end), with avals
  // from the op's infer rule. The new values can be used at once (as operands of later inserts or replacements).
  Result<std::vector<ir::ValueId>> insertBefore(ir::NodeId before, const ir::OpRegistry& reg, ir::OpCode op,
                                                std::vector<ir::ValueId> operands, ir::Attrs attrs,
                                                ir::Provenance prov);
  ir::ValueId insertConstant(ir::NodeId before, ir::Literal value, ir::Provenance prov);

  bool changed() const { return m_changed; }
  // Rebuilds the graph: inputs first, then nodes in order with insertions placed and erased nodes dropped,
  // operands and outputs resolved, values renumbered densely. Returns changed(). The rewriter is spent after.
  bool commit();

 private:
  ir::Graph& m_g;
  int m_numOriginal = 0;
  std::vector<ir::ValueId> m_replacement;  // value -> replacement, kNone: itself
  std::vector<bool> m_erased;              // per node, original and inserted
  std::vector<ir::NodeId> m_anchor;        // per inserted node: the original node it goes before (kNone: end)
  bool m_changed = false;
  bool m_committed = false;
};

// Renumbers values densely in definition order (inputs, then node results); drops nothing.
void compact(ir::Graph& g);

// Core ops have no side effects; an op the core list does not know (a plugin's) is assumed to have some, so
// passes neither remove, merge nor evaluate it.
bool isPureOp(ir::OpCode op);
// A node without side effects: a pure op, not an effectful host callback (jax.debug.print, io_callback), and no
// such node in the graphs it holds (a scan whose body prints is an effect too).
bool isPureNode(const ir::Node& n);

// The op's name from the registry ("add"), or "op#N" for an unregistered code: for messages.
std::string opName(const ir::OpRegistry& reg, ir::OpCode op);

// Uses of each value: one per operand slot that reads it and one per graph output slot.
std::vector<int> useCounts(const ir::Graph& g);

// Per node: whether some output depends on it, or it is impure.
std::vector<bool> liveNodes(const ir::Graph& g);

// ---- matchers over values

// The literal of v when a constant node defines it.
const ir::Literal* constantLiteral(const ir::Graph& g, ir::ValueId v);
// When every element of v is the same: v is a constant whose elements all have the same bits, or a
// broadcast_in_dim (any depth) of such a constant, as fullLike and `x * 2.0` produce. The element as a rank-0
// literal, or as a double.
std::optional<ir::Literal> splatScalar(const ir::Graph& g, ir::ValueId v);
std::optional<double> splatValue(const ir::Graph& g, ir::ValueId v);
bool isSplatOf(const ir::Graph& g, ir::ValueId v, double value);
// Element 0 of a literal as the IR text spells it ("0.083333336", "-0", "nan"), for messages and labels.
std::string firstElementText(const ir::Literal& lit);

// ---- nested graphs (a scan's body, a cond's branches)

// The graphs nested in a node's attrs, in field order.
std::vector<std::shared_ptr<const ir::Graph>> nestedGraphsOf(const ir::Attrs& attrs);

// Calls f on a private copy of every graph nested in g's nodes (one level; f recurses if it wants), with the
// id of the node that holds it, and installs the copy where f reports a change. Returns whether any changed.
Result<bool> rewriteNestedGraphs(ir::Graph& g, const std::function<Result<bool>(ir::Graph& body, ir::NodeId owner)>& f);

// Runs `pass` on every graph nested in g (recursively, as pass.run recurses) when the options allow it, with
// its decisions tagged by region. Passes call this first, then rewrite g itself.
Result<bool> runOnNestedGraphs(Pass& pass, ir::Graph& g, PassContext& ctx);

}  // namespace tsr::passes
