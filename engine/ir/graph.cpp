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
  auto avals = inferSafely(*def, in, attrs);
  if (!avals.ok()) {
    std::string where = prov.empty() ? "" : " (at " + prov.toString() + ")";
    return Error{avals.error().message + where};
  }
  return addNodeWithAvals(op, std::move(operands), std::move(attrs), std::move(avals).value(), std::move(prov));
}

namespace {

// Collects the GraphPtr fields of an attrs struct.
struct NestedCollector {
  std::vector<GraphPtr> graphs;
  void operator()(std::string_view, const GraphPtr& g) { graphs.push_back(g); }
  template <class T>
  void operator()(std::string_view, const T&) {}
};

// Value id -> its number in definition order (inputs, then node results), as the printer numbers values.
std::vector<int64_t> canonicalNumbers(const Graph& g) {
  std::vector<int64_t> num(static_cast<size_t>(g.numValues()), -1);
  int64_t next = 0;
  auto assign = [&](ValueId v) {
    if (v >= 0 && v < g.numValues() && num[static_cast<size_t>(v)] < 0) num[static_cast<size_t>(v)] = next++;
  };
  for (ValueId v : g.inputs()) assign(v);
  for (const Node& n : g.nodes())
    for (ValueId v : n.results) assign(v);
  return num;
}

bool sameGraphs(const Graph& a, const Graph& b) {
  if (a.name != b.name || a.inputs().size() != b.inputs().size() || a.nodes().size() != b.nodes().size() ||
      a.outputs().size() != b.outputs().size())
    return false;
  auto na = canonicalNumbers(a), nb = canonicalNumbers(b);
  auto aval = [](const Graph& g, ValueId v) { return v >= 0 && v < g.numValues() ? g.aval(v) : Aval{}; };
  // Same canonical number, or both undefined with the same raw id (a malformed graph compares as itself).
  auto same = [&](ValueId x, ValueId y) {
    int64_t cx = x >= 0 && x < a.numValues() ? na[static_cast<size_t>(x)] : -1;
    int64_t cy = y >= 0 && y < b.numValues() ? nb[static_cast<size_t>(y)] : -1;
    return cx == cy && (cx >= 0 || x == y);
  };
  auto sameList = [&](const std::vector<ValueId>& x, const std::vector<ValueId>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!same(x[i], y[i]) || !(aval(a, x[i]) == aval(b, y[i]))) return false;
    return true;
  };
  if (!sameList(a.inputs(), b.inputs()) || !sameList(a.outputs(), b.outputs())) return false;
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const Node &x = a.nodes()[i], &y = b.nodes()[i];
    if (x.op != y.op || !(x.prov == y.prov) || !sameList(x.operands, y.operands) || !sameList(x.results, y.results) ||
        !(x.attrs == y.attrs))
      return false;
  }
  return true;
}

}  // namespace

bool sameGraph(const GraphPtr& a, const GraphPtr& b) {
  if (a == b) return true;
  if (!a || !b) return false;
  return sameGraphs(*a, *b);
}

Cost nodeCost(const Graph& g, const Node& n, const OpRegistry& reg) {
  const OpDef* def = reg.find(n.op);
  if (!def || !def->cost) return {};
  std::vector<Aval> in, out;
  for (ValueId v : n.operands) in.push_back(g.aval(v));
  for (ValueId v : n.results) out.push_back(g.aval(v));
  return def->cost(in, out, n.attrs);
}

Cost graphCost(const Graph& g, const OpRegistry& reg) {
  Cost total;
  for (const Node& n : g.nodes()) {
    Cost c = nodeCost(g, n, reg);
    total.flops += c.flops;
    total.bytesRead += c.bytesRead;
    total.bytesWritten += c.bytesWritten;
  }
  return total;
}

std::string nodeSignature(const Graph& g, const Node& n, const OpRegistry& reg) {
  const OpDef* def = reg.find(n.op);
  std::string s = def ? def->name : "?";
  for (size_t i = 0; i < n.operands.size(); ++i) s += (i ? "," : " ") + g.aval(n.operands[i]).toString();
  return s;
}

std::vector<GraphPtr> nestedGraphs(const Attrs& attrs) {
  NestedCollector c;
  Attrs copy = attrs;  // fields() is not const; the copy shares the graphs
  std::visit([&](auto& a) { a.fields(c); }, copy);
  return std::move(c.graphs);
}

int Graph::count(OpCode op) const {
  int n = 0;
  for (const auto& node : m_nodes) n += node.op == op;
  return n;
}

}  // namespace tsr::ir
