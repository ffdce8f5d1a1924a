#pragma once
// The one IR: a graph of values and nodes in topological order, each node with typed attributes and
// provenance (module path + source location of the user call that created it).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/core/shape.h"
#include "engine/ir/attrs.h"
#include "engine/ir/op_def.h"

namespace tsr::ir {

struct Provenance {
  std::string modulePath;  // "blocks.3.attn"
  std::string file;        // user's source file
  int line = 0;

  bool empty() const { return modulePath.empty() && file.empty(); }
  bool operator==(const Provenance&) const = default;
  std::string toString() const;  // "blocks.3.attn @ model.cpp:42"
};

using ValueId = int32_t;
using NodeId = int32_t;
inline constexpr int32_t kNone = -1;

struct ValueInfo {
  Aval aval;
  NodeId producer = kNone;  // kNone: graph input
  int resultIndex = 0;
};

struct Node {
  OpCode op{};
  Attrs attrs;
  std::vector<ValueId> operands;
  std::vector<ValueId> results;
  Provenance prov;
};

class Graph {
 public:
  std::string name = "main";

  ValueId addInput(const Aval& aval);
  // Infers result avals with the op's rule; a shape/dtype error names the op, the operand avals and the provenance.
  Result<std::vector<ValueId>> addNode(const OpRegistry& reg, OpCode op, std::vector<ValueId> operands, Attrs attrs,
                                       Provenance prov = {});
  // Adds a node with given result avals (the parser and passes use this; verify() checks it).
  std::vector<ValueId> addNodeWithAvals(OpCode op, std::vector<ValueId> operands, Attrs attrs,
                                        std::vector<Aval> resultAvals, Provenance prov = {});
  void setOutputs(std::vector<ValueId> outs) { m_outputs = std::move(outs); }

  const std::vector<ValueInfo>& values() const { return m_values; }
  const std::vector<Node>& nodes() const { return m_nodes; }
  std::vector<Node>& mutableNodes() { return m_nodes; }
  const std::vector<ValueId>& inputs() const { return m_inputs; }
  const std::vector<ValueId>& outputs() const { return m_outputs; }
  const Aval& aval(ValueId v) const { return m_values[static_cast<size_t>(v)].aval; }
  const ValueInfo& value(ValueId v) const { return m_values[static_cast<size_t>(v)]; }
  int numValues() const { return static_cast<int>(m_values.size()); }

  // Number of nodes with the given op.
  int count(OpCode op) const;

 private:
  std::vector<ValueInfo> m_values;
  std::vector<Node> m_nodes;
  std::vector<ValueId> m_inputs;
  std::vector<ValueId> m_outputs;
};

// A node's cost by its op's rule (zero when the op has none or is unknown); a graph's is the sum over its nodes
// (a scan's or cond's rule counts its own bodies).
Cost nodeCost(const Graph& g, const Node& n, const OpRegistry& reg);
Cost graphCost(const Graph& g, const OpRegistry& reg);
// "dot_general f32[64,784],f32[784,1024]": the op and its operands' avals, as profiles name one-node kernels.
std::string nodeSignature(const Graph& g, const Node& n, const OpRegistry& reg);

// The nested graphs (regions) an op's attrs hold, in field order: a scan's body, a cond's two branches.
std::vector<GraphPtr> nestedGraphs(const Attrs& attrs);

// Checks structure (ids in range, defined before use, each value defined once), op arity, attribute kind,
// and that each node's result avals equal what its infer rule gives; recurses into nested graphs (a scan's
// body, a cond's branches). The message names the node, and for a nested graph the path to it.
Status verify(const Graph& g, const OpRegistry& reg);

// Text form (jaxpr-like); print -> parse -> print is identical. nodeLines, when given, gets each top-level node's
// 0-based line in the text (node id -> line), for views that map between the two.
std::string print(const Graph& g, const OpRegistry& reg, std::vector<int>* nodeLines = nullptr);
// Parses the text form; errors carry line and column.
Result<Graph> parse(std::string_view text, const OpRegistry& reg);

}  // namespace tsr::ir
