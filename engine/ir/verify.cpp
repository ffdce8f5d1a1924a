// The IR checker (like JAX's check_jaxpr): structure first (ids in range, each value defined exactly once
// and before use, producer links consistent), then each node against its OpDef (arity, attrs kind, and the
// infer rule reproducing the recorded result avals). Messages name the node, the op and its provenance.
#include <exception>
#include <string>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/ir/text_format.h"

namespace tsr::ir {

namespace {

// Literal attributes must hold exactly the bytes their aval needs: kernels read them without checking.
struct LiteralChecker {
  std::string error;
  void operator()(std::string_view key, const Literal& lit) {
    if (!error.empty()) return;
    auto need = checkedBytes(lit.aval);
    size_t have = lit.data ? lit.data->size() : 0;
    if (!need.ok()) error = fmt::format("attribute '{}': {}", key, need.error().message);
    else if (static_cast<uint64_t>(*need) != have)
      error = fmt::format("attribute '{}': literal {} holds {} bytes, expected {}", key, lit.aval.toString(), have,
                          *need);
  }
  template <class T>
  void operator()(std::string_view, const T&) {}
};

Status verifyGraph(const Graph& g, const OpRegistry& reg);

// Nested graphs (a scan's body, a cond's branches) must exist and verify on their own: they are closed.
struct RegionChecker {
  const OpRegistry& reg;
  std::string error;
  void operator()(std::string_view key, const GraphPtr& g) {
    if (!error.empty()) return;
    if (!g) error = fmt::format("attribute '{}': no graph", key);
    else if (Status st = verifyGraph(*g, reg); !st.ok()) error = fmt::format("in {}: {}", key, st.error().message);
  }
  template <class T>
  void operator()(std::string_view, const T&) {}
};

class Verifier {
 public:
  Verifier(const Graph& g, const OpRegistry& reg)
      : m_g(g), m_reg(reg), m_defined(static_cast<size_t>(g.numValues()), false) {}

  Status run() {
    TSR_TRY(checkInputs());
    for (size_t i = 0; i < m_g.nodes().size(); ++i) TSR_TRY(checkNode(static_cast<NodeId>(i)));
    TSR_TRY(checkOutputs());
    for (ValueId v = 0; v < m_g.numValues(); ++v)
      if (!m_defined[static_cast<size_t>(v)])
        return makeError("value %{} is never defined (neither a graph input nor a node result)", v);
    return {};
  }

 private:
  bool inRange(ValueId v) const { return v >= 0 && v < m_g.numValues(); }
  std::string outOfRange(ValueId v) const {
    return fmt::format("%{}, out of range (the graph has {} values)", v, m_g.numValues());
  }

  Status checkInputs() {
    const auto& inputs = m_g.inputs();
    for (size_t k = 0; k < inputs.size(); ++k) {
      ValueId v = inputs[k];
      if (!inRange(v)) return makeError("input {} is {}", k, outOfRange(v));
      if (m_defined[static_cast<size_t>(v)]) return makeError("input {} (%{}) is defined twice", k, v);
      const ValueInfo& info = m_g.value(v);
      if (info.producer != kNone)
        return makeError("input {} (%{}) records producer node {}; graph inputs have none", k, v, info.producer);
      if (info.resultIndex != static_cast<int>(k))
        return makeError("input {} (%{}) records input position {}", k, v, info.resultIndex);
      if (auto bytes = checkedBytes(info.aval); !bytes.ok())
        return makeError("input {} (%{}): {}", k, v, bytes.error().message);
      m_defined[static_cast<size_t>(v)] = true;
    }
    return {};
  }

  // "node 3 (add @ blocks.0.mlp, model.cpp:42)"
  std::string describeNode(NodeId i, std::string_view opName) const {
    const Provenance& p = m_g.nodes()[static_cast<size_t>(i)].prov;
    std::string where = p.modulePath;
    if (!p.file.empty()) where += (where.empty() ? "" : ", ") + p.file + ":" + std::to_string(p.line);
    if (where.empty()) return fmt::format("node {} ({})", i, opName);
    return fmt::format("node {} ({} @ {})", i, opName, where);
  }

  // A node as errors name it, built only when one is reported (verification runs after every pass in builds
  // with assertions).
  struct NodeAt {
    const Verifier* verifier;
    NodeId node;
    std::string_view op;
    std::string str() const { return verifier->describeNode(node, op); }
  };

  Status checkOperands(NodeId i, const Node& n, const NodeAt& at) {
    for (size_t j = 0; j < n.operands.size(); ++j) {
      ValueId v = n.operands[j];
      if (!inRange(v)) return makeError("{}: operand {} is {}", at.str(), j, outOfRange(v));
      if (m_defined[static_cast<size_t>(v)]) continue;
      NodeId producer = m_g.value(v).producer;
      if (producer > i && static_cast<size_t>(producer) < m_g.nodes().size())
        return makeError("{}: operand {} %{} is used before its definition by node {}", at.str(), j, v, producer);
      return makeError("{}: operand {} %{} is used before definition", at.str(), j, v);
    }
    return {};
  }

  Status checkResults(NodeId i, const Node& n, const NodeAt& at) {
    for (size_t r = 0; r < n.results.size(); ++r) {
      ValueId v = n.results[r];
      if (!inRange(v)) return makeError("{}: result {} is {}", at.str(), r, outOfRange(v));
      if (m_defined[static_cast<size_t>(v)]) return makeError("{}: result {} %{} is already defined", at.str(), r, v);
      const ValueInfo& info = m_g.value(v);
      if (info.producer != i || info.resultIndex != static_cast<int>(r))
        return makeError("{}: result {} %{} records producer node {} result {}", at.str(), r, v, info.producer,
                         info.resultIndex);
      m_defined[static_cast<size_t>(v)] = true;
    }
    return {};
  }

  Status checkNode(NodeId i) {
    const Node& n = m_g.nodes()[static_cast<size_t>(i)];
    const OpDef* def = m_reg.find(n.op);
    auto code = static_cast<uint32_t>(n.op);
    if (!def) {
      std::string name = code < kNumCoreOps ? coreOpName(n.op) : "op code " + std::to_string(code);
      return makeError("{}: op is not registered", describeNode(i, name));
    }
    const NodeAt at{this, i, def->name};  // named only in an error
    TSR_TRY(checkOperands(i, n, at));
    bool arityOk = def->numOperands < 0 ? static_cast<int>(n.operands.size()) >= def->minOperands
                                        : static_cast<int>(n.operands.size()) == def->numOperands;
    if (!arityOk) {
      std::string want = def->numOperands < 0 ? fmt::format("at least {}", def->minOperands)
                                              : std::to_string(def->numOperands);
      return makeError("{}: {} expects {} operands, got {}", at.str(), def->name, want, n.operands.size());
    }
    if (def->numResults >= 0 && n.results.size() != static_cast<size_t>(def->numResults))
      return makeError("{}: node has {} results but {} has {}", at.str(), n.results.size(), def->name, def->numResults);
    TSR_TRY(checkResults(i, n, at));
    if (n.attrs.index() != def->attrsIndex)
      return makeError("{}: attributes are {} but {} takes {}", at.str(), attrsTypeName(n.attrs), def->name,
                       attrsTypeNameAt(def->attrsIndex));
    LiteralChecker literals;
    Attrs attrs = n.attrs;  // fields() is not const; the copy shares literal bytes and nested graphs
    std::visit([&](auto& a) { a.fields(literals); }, attrs);
    if (!literals.error.empty()) return makeError("{}: {}", at.str(), literals.error);
    // Nested graphs first, so that the infer rule, which reads their signatures, sees well-formed ones.
    RegionChecker regions{m_reg, {}};
    std::visit([&](auto& a) { a.fields(regions); }, attrs);
    if (!regions.error.empty()) return makeError("{}: {}", at.str(), regions.error);

    std::vector<Aval> in;
    for (ValueId v : n.operands) in.push_back(m_g.aval(v));
    auto inferred = inferSafely(*def, in, n.attrs);
    if (!inferred.ok()) return makeError("{}: {}", at.str(), inferred.error().message);
    if (inferred->size() != n.results.size())
      return makeError("{}: {} infers {} results but the node has {}", at.str(), def->name, inferred->size(),
                       n.results.size());
    for (size_t r = 0; r < n.results.size(); ++r) {
      const Aval& have = m_g.aval(n.results[r]);
      if (!(have == (*inferred)[r]))
        return makeError("{}: result {} has aval {} but {} infers {}", at.str(), r, have.toString(), def->name,
                         (*inferred)[r].toString());
    }
    return {};
  }

  Status checkOutputs() {
    const auto& outs = m_g.outputs();
    for (size_t k = 0; k < outs.size(); ++k) {
      ValueId v = outs[k];
      if (!inRange(v)) return makeError("output {} is {}", k, outOfRange(v));
      if (!m_defined[static_cast<size_t>(v)]) return makeError("output {} %{} is never defined", k, v);
    }
    return {};
  }

  const Graph& m_g;
  const OpRegistry& m_reg;
  std::vector<bool> m_defined;  // value id -> defined by an input or an earlier node
};

}  // namespace

namespace {
Status verifyGraph(const Graph& g, const OpRegistry& reg) { return Verifier(g, reg).run(); }
}  // namespace

Status verify(const Graph& g, const OpRegistry& reg) { return verifyGraph(g, reg); }

}  // namespace tsr::ir
