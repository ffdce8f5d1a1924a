#include "engine/passes/rewrite.h"

#include <cstring>
#include <memory>
#include <type_traits>

#include "engine/core/check.h"
#include "engine/ir/host_callback.h"
#include "engine/ir/text_format.h"

namespace tsr::passes {

using ir::kNone;
using ir::NodeId;
using ir::ValueId;

// ---- GraphRewriter

GraphRewriter::GraphRewriter(ir::Graph& g)
    : m_g(g),
      m_numOriginal(static_cast<int>(g.nodes().size())),
      m_replacement(static_cast<size_t>(g.numValues()), kNone),
      m_erased(g.nodes().size(), false) {}

ValueId GraphRewriter::resolve(ValueId v) const {
  while (v >= 0 && static_cast<size_t>(v) < m_replacement.size() && m_replacement[static_cast<size_t>(v)] != kNone)
    v = m_replacement[static_cast<size_t>(v)];
  return v;
}

NodeId GraphRewriter::producerOf(ValueId v) const { return m_g.value(resolve(v)).producer; }

void GraphRewriter::forEachNode(const std::function<void(NodeId)>& f) {
  for (NodeId n = 0; n < m_numOriginal; ++n) {
    if (isErased(n)) continue;
    for (ValueId& v : m_g.mutableNodes()[static_cast<size_t>(n)].operands) v = resolve(v);
    f(n);
  }
}

void GraphRewriter::replaceAllUses(ValueId from, ValueId to) {
  from = resolve(from);
  to = resolve(to);
  if (from == to) return;
  TSR_CHECK_MSG(m_g.aval(from) == m_g.aval(to), "a replacement must keep the aval");
  m_replacement[static_cast<size_t>(from)] = to;
  m_changed = true;
}

void GraphRewriter::setOperand(NodeId n, size_t i, ValueId v) {
  ValueId& slot = m_g.mutableNodes()[static_cast<size_t>(n)].operands[i];
  v = resolve(v);
  if (resolve(slot) == v) return;
  TSR_CHECK_MSG(m_g.aval(slot) == m_g.aval(v), "a rewired operand must keep the aval");
  slot = v;
  m_changed = true;
}

void GraphRewriter::setOutput(size_t i, ValueId v) {
  std::vector<ValueId> outs = m_g.outputs();
  v = resolve(v);
  if (resolve(outs[i]) == v) return;
  TSR_CHECK_MSG(m_g.aval(outs[i]) == m_g.aval(v), "a rewired output must keep the aval");
  outs[i] = v;
  m_g.setOutputs(std::move(outs));
  m_changed = true;
}

void GraphRewriter::replaceNode(NodeId n, std::span<const ValueId> with) {
  const auto& results = node(n).results;
  TSR_CHECK(results.size() == with.size());
  for (size_t i = 0; i < with.size(); ++i) replaceAllUses(results[i], with[i]);
  eraseNode(n);
}

void GraphRewriter::eraseNode(NodeId n) {
  if (!m_erased[static_cast<size_t>(n)]) m_changed = true;
  m_erased[static_cast<size_t>(n)] = true;
}

Result<std::vector<ValueId>> GraphRewriter::insertBefore(NodeId before, const ir::OpRegistry& reg, ir::OpCode op,
                                                         std::vector<ValueId> operands, ir::Attrs attrs,
                                                         ir::Provenance prov) {
  for (ValueId& v : operands) v = resolve(v);
  TSR_ASSIGN(auto results, m_g.addNode(reg, op, std::move(operands), std::move(attrs), std::move(prov)));
  m_replacement.resize(static_cast<size_t>(m_g.numValues()), kNone);
  m_erased.push_back(false);
  m_anchor.push_back(before);
  m_changed = true;
  return results;
}

ValueId GraphRewriter::insertConstant(NodeId before, ir::Literal value, ir::Provenance prov) {
  Aval a = value.aval;
  auto results = m_g.addNodeWithAvals(ir::OpCode::Constant, {}, ir::ConstantAttrs{std::move(value)}, {a},
                                      std::move(prov));
  m_replacement.resize(static_cast<size_t>(m_g.numValues()), kNone);
  m_erased.push_back(false);
  m_anchor.push_back(before);
  m_changed = true;
  return results[0];
}

bool GraphRewriter::commit() {
  TSR_CHECK_MSG(!m_committed, "a GraphRewriter commits once");
  m_committed = true;
  ir::Graph out;
  out.name = m_g.name;
  std::vector<ValueId> map(static_cast<size_t>(m_g.numValues()), kNone);
  auto mapped = [&](ValueId v) {
    ValueId r = resolve(v);
    TSR_CHECK_MSG(r >= 0 && r < m_g.numValues() && map[static_cast<size_t>(r)] != kNone,
                  "a rewrite left a use of an erased or later value");
    return map[static_cast<size_t>(r)];
  };
  for (ValueId v : m_g.inputs()) map[static_cast<size_t>(v)] = out.addInput(m_g.aval(v));

  // Inserted nodes grouped by the original node they precede; the last bucket holds those placed at the end.
  std::vector<std::vector<NodeId>> before(static_cast<size_t>(m_numOriginal) + 1);
  for (size_t k = 0; k < m_anchor.size(); ++k) {
    NodeId at = m_anchor[k] == kNone ? m_numOriginal : m_anchor[k];
    before[static_cast<size_t>(at)].push_back(m_numOriginal + static_cast<NodeId>(k));
  }
  auto emit = [&](NodeId n) {
    if (isErased(n)) return;
    ir::Node& node = m_g.mutableNodes()[static_cast<size_t>(n)];
    std::vector<ValueId> operands;
    for (ValueId v : node.operands) operands.push_back(mapped(v));
    std::vector<Aval> avals;
    for (ValueId v : node.results) avals.push_back(m_g.aval(v));
    auto results = out.addNodeWithAvals(node.op, std::move(operands), std::move(node.attrs), std::move(avals),
                                        std::move(node.prov));
    for (size_t i = 0; i < results.size(); ++i) map[static_cast<size_t>(node.results[i])] = results[i];
  };
  for (NodeId n = 0; n <= m_numOriginal; ++n) {
    for (NodeId k : before[static_cast<size_t>(n)]) emit(k);
    if (n < m_numOriginal) emit(n);
  }
  std::vector<ValueId> outputs;
  for (ValueId v : m_g.outputs()) outputs.push_back(mapped(v));
  out.setOutputs(std::move(outputs));
  m_g = std::move(out);
  return m_changed;
}

void compact(ir::Graph& g) {
  GraphRewriter rw(g);
  rw.commit();
}

// ---- queries

bool isPureOp(ir::OpCode op) { return static_cast<uint32_t>(op) < ir::kNumCoreOps; }

bool isPureNode(const ir::Node& n) {
  if (!isPureOp(n.op)) return false;
  if (const auto* a = std::get_if<ir::HostCallbackAttrs>(&n.attrs)) {
    ir::HostCallbackPtr cb = ir::hostCallbackOf(*a);
    return cb && !cb->effectful;  // one that is gone is kept: what it did is unknown
  }
  for (const ir::GraphPtr& body : ir::nestedGraphs(n.attrs))
    for (const ir::Node& m : body->nodes())
      if (!isPureNode(m)) return false;
  return true;
}

std::string opName(const ir::OpRegistry& reg, ir::OpCode op) {
  if (const ir::OpDef* def = reg.find(op)) return def->name;
  return "op#" + std::to_string(static_cast<uint32_t>(op));
}

std::vector<int> useCounts(const ir::Graph& g) {
  std::vector<int> uses(static_cast<size_t>(g.numValues()), 0);
  for (const auto& n : g.nodes())
    for (ValueId v : n.operands) ++uses[static_cast<size_t>(v)];
  for (ValueId v : g.outputs()) ++uses[static_cast<size_t>(v)];
  return uses;
}

std::vector<bool> liveNodes(const ir::Graph& g) {
  const auto& nodes = g.nodes();
  std::vector<bool> liveValue(static_cast<size_t>(g.numValues()), false);
  std::vector<bool> live(nodes.size(), false);
  for (ValueId v : g.outputs()) liveValue[static_cast<size_t>(v)] = true;
  for (size_t i = nodes.size(); i-- > 0;) {
    const ir::Node& n = nodes[i];
    bool used = !isPureNode(n);
    for (ValueId r : n.results) used = used || liveValue[static_cast<size_t>(r)];
    if (!used) continue;
    live[i] = true;
    for (ValueId v : n.operands) liveValue[static_cast<size_t>(v)] = true;
  }
  return live;
}

const ir::Literal* constantLiteral(const ir::Graph& g, ValueId v) {
  NodeId p = g.value(v).producer;
  if (p == kNone) return nullptr;
  const ir::Node& n = g.nodes()[static_cast<size_t>(p)];
  if (n.op != ir::OpCode::Constant) return nullptr;
  const auto* a = std::get_if<ir::ConstantAttrs>(&n.attrs);
  return a && a->value.data ? &a->value : nullptr;
}

std::optional<ir::Literal> splatScalar(const ir::Graph& g, ValueId v) {
  NodeId p = g.value(v).producer;
  if (p == kNone) return std::nullopt;
  const ir::Node& n = g.nodes()[static_cast<size_t>(p)];
  if (n.op == ir::OpCode::BroadcastInDim) return splatScalar(g, n.operands[0]);
  const ir::Literal* lit = constantLiteral(g, v);
  if (!lit || lit->aval.numel() == 0) return std::nullopt;
  if (lit->aval.rank() == 0) return *lit;
  auto size = static_cast<size_t>(dtypeSize(lit->aval.dtype));
  const auto* bytes = static_cast<const uint8_t*>(lit->bytes());
  for (int64_t i = 1; i < lit->aval.numel(); ++i)
    if (std::memcmp(bytes, bytes + static_cast<size_t>(i) * size, size) != 0) return std::nullopt;
  return ir::Literal::fromBytes(Aval{Shape{}, lit->aval.dtype}, bytes);
}

std::optional<double> splatValue(const ir::Graph& g, ValueId v) {
  auto s = splatScalar(g, v);
  if (!s) return std::nullopt;
  return s->elementAsDouble(0);
}

bool isSplatOf(const ir::Graph& g, ValueId v, double value) {
  auto s = splatValue(g, v);
  return s && *s == value;
}

std::string firstElementText(const ir::Literal& lit) {
  if (!lit.data || lit.aval.numel() == 0) return "?";
  uint64_t bits = 0;
  std::memcpy(&bits, lit.bytes(), static_cast<size_t>(dtypeSize(lit.aval.dtype)));
  return ir::formatElement(lit.aval.dtype, bits);
}

// ---- nested graphs

namespace {

// Visits the nested-graph fields of an attrs struct. Written against shared_ptr<const Graph> rather than a
// field-type list so that it keeps working as attrs gain field types.
struct NestedRewriter {
  const std::function<Result<bool>(ir::Graph&, ir::NodeId)>& f;
  ir::NodeId owner;
  bool changed = false;
  std::optional<Error> error;

  template <class T>
  void operator()(std::string_view, T& field) {
    if constexpr (std::is_same_v<T, std::shared_ptr<const ir::Graph>>) {
      if (!field || error) return;
      ir::Graph copy = *field;
      auto r = f(copy, owner);
      if (!r.ok()) {
        error = r.takeError();
        return;
      }
      if (*r) {
        field = std::make_shared<const ir::Graph>(std::move(copy));
        changed = true;
      }
    }
  }
};

struct NestedCollector {
  std::vector<std::shared_ptr<const ir::Graph>> graphs;
  template <class T>
  void operator()(std::string_view, const T& field) {
    if constexpr (std::is_same_v<T, std::shared_ptr<const ir::Graph>>)
      if (field) graphs.push_back(field);
  }
};

}  // namespace

std::vector<std::shared_ptr<const ir::Graph>> nestedGraphsOf(const ir::Attrs& attrs) {
  NestedCollector c;
  ir::Attrs copy = attrs;  // fields() is not const; the copy shares the graphs
  std::visit([&](auto& a) { a.fields(c); }, copy);
  return std::move(c.graphs);
}

Result<bool> rewriteNestedGraphs(ir::Graph& g,
                                 const std::function<Result<bool>(ir::Graph&, ir::NodeId)>& f) {
  bool changed = false;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    NestedRewriter v{f, static_cast<ir::NodeId>(i), false, std::nullopt};
    std::visit([&](auto& a) { a.fields(v); }, g.mutableNodes()[i].attrs);
    if (v.error) return std::move(*v.error);
    changed |= v.changed;
  }
  return changed;
}

Result<bool> runOnNestedGraphs(Pass& pass, ir::Graph& g, PassContext& ctx) {
  if (!ctx.options().rewriteRegions) return false;
  return rewriteNestedGraphs(g, [&](ir::Graph& body, ir::NodeId owner) -> Result<bool> {
    ctx.enterRegion(owner);
    auto r = pass.run(body, ctx);
    ctx.exitRegion();
    return r;
  });
}

}  // namespace tsr::passes
