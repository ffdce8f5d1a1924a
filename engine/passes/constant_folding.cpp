#include "engine/passes/constant_folding.h"

#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "engine/passes/rewrite.h"
#include "engine/runtime/buffer.h"

namespace tsr::passes {

using ir::NodeId;
using ir::OpCode;
using ir::ValueId;

Result<std::vector<ir::Literal>> evaluateOp(const ir::OpDef& def, std::span<const ir::Literal> operands,
                                            const ir::Attrs& attrs) {
  if (!def.cpu) return makeError("{} has no CPU kernel", def.name);
  std::vector<runtime::BufferPtr> inputs;
  std::vector<Aval> avals;
  for (const ir::Literal& lit : operands) {
    TSR_ASSIGN(runtime::BufferPtr b, runtime::Buffer::allocate(lit.aval.bytes()));
    if (lit.aval.bytes() > 0) std::memcpy(b->data(), lit.bytes(), static_cast<size_t>(lit.aval.bytes()));
    inputs.push_back(std::move(b));
    avals.push_back(lit.aval);
  }
  std::vector<Aval> resultAvals;
  TSR_ASSIGN(auto outs, runtime::runCpuOp(def, inputs, avals, attrs, &resultAvals));
  std::vector<ir::Literal> results;
  for (size_t i = 0; i < outs.size(); ++i) results.push_back(ir::Literal::fromBytes(resultAvals[i], outs[i]->data()));
  return results;
}

namespace {

// Ops that are never evaluated: sources that are already the compact form of their value (constant, iota,
// broadcast_in_dim), control flow (a body may be arbitrarily expensive, a while_loop may never end), collectives
// (their value depends on the device and on the other devices' operands), host callbacks (the user's code runs
// when the program runs, not when it compiles) and ops that may have side effects.
bool mayFold(OpCode op) {
  switch (op) {
    case OpCode::Constant: case OpCode::Iota: case OpCode::BroadcastInDim: case OpCode::Scan: case OpCode::Cond:
    case OpCode::WhileLoop:
    case OpCode::AllReduce: case OpCode::AllGather: case OpCode::ReduceScatter: case OpCode::AllToAll:
    case OpCode::CollectivePermute: case OpCode::DeviceTable: case OpCode::HostCallback:
      return false;
    default:
      return isPureOp(op);
  }
}

std::string bytesText(int64_t b) {
  if (b >= 1024 * 1024) return fmt::format("{:.1f} MiB", b / 1048576.0);
  if (b >= 1024) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}

class Folder {
 public:
  Folder(ir::Graph& g, PassContext& ctx) : m_g(g), m_rw(g), m_ctx(ctx), m_limit(ctx.options().maxFoldBytes) {}

  bool run() {
    m_rw.forEachNode([&](NodeId n) {
      ir::Node node = m_rw.node(n);  // a copy: inserting nodes invalidates references into the graph
      const ir::OpDef* def = m_ctx.registry().find(node.op);
      if (node.operands.empty() || !mayFold(node.op) || !def || !def->cpu) return;
      if (def->fusion == ir::FusionKind::Elementwise && foldSplats(n, node, *def)) return;
      foldLiterals(n, node, *def);
    });
    return m_rw.commit();
  }

 private:
  // op(splat a, splat b, ...) -> broadcast(op(a, b, ...)) for an elementwise op with a non-scalar result.
  bool foldSplats(NodeId n, const ir::Node& node, const ir::OpDef& def) {
    if (node.results.size() != 1) return false;
    const Aval out = m_g.aval(node.results[0]);  // a copy: inserting the constant below grows the value table
    if (out.rank() == 0) return false;
    std::vector<ir::Literal> scalars;
    for (ValueId v : node.operands) {
      auto s = splatScalar(m_g, v);
      if (!s) return false;
      scalars.push_back(std::move(*s));
    }
    auto r = evaluateOp(def, scalars, node.attrs);
    if (!r.ok() || r->size() != 1 || !((*r)[0].aval == Aval{Shape{}, out.dtype})) return false;
    std::string value = firstElementText((*r)[0]);
    ValueId c = m_rw.insertConstant(n, std::move((*r)[0]), node.prov);
    auto b = m_rw.insertBefore(n, m_ctx.registry(), OpCode::BroadcastInDim, {c},
                               ir::BroadcastInDimAttrs{out.shape.dims(), {}}, node.prov);
    if (!b.ok()) return false;
    m_rw.replaceNode(n, (*b)[0]);
    m_ctx.record(m_g, n, fmt::format("{} of splats -> broadcast of {} to {}", def.name, value, out.toString()));
    return true;
  }

  // The literal value of v: a constant, or a broadcast of a constant materialised when it fits the limit.
  std::optional<ir::Literal> literalOf(ValueId v) {
    if (const ir::Literal* lit = constantLiteral(m_g, v)) return *lit;
    NodeId p = m_g.value(v).producer;
    if (p == ir::kNone) return std::nullopt;
    ir::Node b = m_rw.node(p);
    if (b.op != OpCode::BroadcastInDim || m_g.aval(v).bytes() > m_limit) return std::nullopt;
    auto inner = literalOf(b.operands[0]);
    if (!inner) return std::nullopt;
    auto r = evaluateOp(m_ctx.registry().get(b.op), std::span<const ir::Literal>(&*inner, 1), b.attrs);
    if (!r.ok()) return std::nullopt;
    return std::move((*r)[0]);
  }

  void foldLiterals(NodeId n, const ir::Node& node, const ir::OpDef& def) {
    std::vector<ir::Literal> operands;
    for (ValueId v : node.operands) {
      auto lit = literalOf(v);
      if (!lit) return;
      operands.push_back(std::move(*lit));
    }
    int64_t bytes = 0;
    for (ValueId r : node.results) bytes += m_g.aval(r).bytes();
    if (bytes > m_limit) {
      m_ctx.record(m_g, n, fmt::format("not folded: {} result of {} exceeds the {} limit", def.name, bytesText(bytes),
                                       bytesText(m_limit)),
                   Decision::Kind::Rejected);
      return;
    }
    auto r = evaluateOp(def, operands, node.attrs);
    if (!r.ok()) {
      m_ctx.record(m_g, n, fmt::format("not folded: {}", r.error().message), Decision::Kind::Rejected);
      return;
    }
    std::vector<ValueId> replacements;
    for (ir::Literal& lit : *r) replacements.push_back(m_rw.insertConstant(n, std::move(lit), node.prov));
    m_rw.replaceNode(n, replacements);
    m_ctx.record(m_g, n, fmt::format("{} folded to a constant {}", def.name, m_g.aval(node.results[0]).toString()));
  }

  ir::Graph& m_g;
  GraphRewriter m_rw;
  PassContext& m_ctx;
  int64_t m_limit;
};

}  // namespace

Result<bool> ConstantFolding::run(ir::Graph& g, PassContext& ctx) {
  TSR_ASSIGN(bool changed, runOnNestedGraphs(*this, g, ctx));
  return Folder(g, ctx).run() || changed;
}

}  // namespace tsr::passes
