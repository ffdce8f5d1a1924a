#include "engine/ir/graph.h"

#include "engine/core/check.h"

namespace tsr::ir {

std::string Provenance::toString() const {
  std::string s = modulePath;
  if (!file.empty()) {
    if (!s.empty()) s += " @ ";
    s += file + ":" + std::to_string(line);
  }
  return s;
}

ValueId Graph::addInput(const Aval& aval) {
  auto id = static_cast<ValueId>(m_values.size());
  m_values.push_back(ValueInfo{aval, kNone, static_cast<int>(m_inputs.size())});
  m_inputs.push_back(id);
  return id;
}

std::vector<ValueId> Graph::addNodeWithAvals(OpCode op, std::vector<ValueId> operands, Attrs attrs,
                                             std::vector<Aval> resultAvals, Provenance prov) {
  auto nodeId = static_cast<NodeId>(m_nodes.size());
  Node n;
  n.op = op;
  n.attrs = std::move(attrs);
  n.operands = std::move(operands);
  n.prov = std::move(prov);
  for (size_t i = 0; i < resultAvals.size(); ++i) {
    auto id = static_cast<ValueId>(m_values.size());
    m_values.push_back(ValueInfo{std::move(resultAvals[i]), nodeId, static_cast<int>(i)});
    n.results.push_back(id);
  }
  m_nodes.push_back(std::move(n));
  return m_nodes.back().results;
}

Result<std::vector<ValueId>> Graph::addNode(const OpRegistry& reg, OpCode op, std::vector<ValueId> operands,
                                            Attrs attrs, Provenance prov) {
  const OpDef* def = reg.find(op);
  if (!def) return makeError("unknown op code {}", static_cast<uint32_t>(op));
  std::vector<Aval> in;
  for (ValueId v : operands) {
    if (v < 0 || v >= numValues()) return makeError("{}: operand %{} is not a value of this graph", def->name, v);
    in.push_back(aval(v));
  }
  TSR_TRY(checkSignature(*def, in.size(), attrs));
  auto avals = def->infer(in, attrs);
  if (!avals.ok()) {
    std::string where = prov.empty() ? "" : " (at " + prov.toString() + ")";
    return Error{avals.error().message + where};
  }
  return addNodeWithAvals(op, std::move(operands), std::move(attrs), std::move(avals).value(), std::move(prov));
}

int Graph::count(OpCode op) const {
  int n = 0;
  for (const auto& node : m_nodes) n += node.op == op;
  return n;
}

}  // namespace tsr::ir
