#include "engine/backends/cpu/row_views.h"

#include <algorithm>

namespace tsr::cpu {

using ir::NodeId;
using ir::OpCode;
using ir::ValueId;
using passes::GroupKind;

namespace {

class Planner {
 public:
  Planner(const ir::Graph& g, const ir::OpRegistry& reg, const passes::FusionPlan& plan)
      : m_g(g), m_reg(reg), m_plan(plan), m_uses(static_cast<size_t>(g.numValues())),
        m_output(static_cast<size_t>(g.numValues()), false) {
    for (NodeId n = 0; n < static_cast<NodeId>(g.nodes().size()); ++n)
      for (ValueId v : node(n).operands) m_uses[static_cast<size_t>(v)].push_back(n);
    for (ValueId v : g.outputs()) m_output[static_cast<size_t>(v)] = true;
  }

  RowViewPlan run() {
    RowViewPlan r;
    r.elided.assign(m_plan.groups.size(), false);
    for (size_t gi = 0; gi < m_plan.groups.size(); ++gi) {
      const passes::FusionGroup& gr = m_plan.groups[gi];
      if (gr.kind != GroupKind::Opaque || gr.nodes.size() != 1) continue;
      const ir::Node& nd = node(gr.nodes[0]);
      const bool planned = nd.op == OpCode::Slice ? sliceInPlace(nd, r.views) : nd.op == OpCode::Concatenate &&
                                                                                     concatenateInPlace(nd, r.views);
      r.elided[gi] = planned;
    }
    return r;
  }

 private:
  const ir::Node& node(NodeId n) const { return m_g.nodes()[static_cast<size_t>(n)]; }
  const Shape& shape(ValueId v) const { return m_g.aval(v).shape; }

  // n is the only member of a group of this kind.
  bool lone(NodeId n, GroupKind kind) const {
    const int gi = m_plan.groupOfNode[static_cast<size_t>(n)];
    return gi >= 0 && m_plan.groups[static_cast<size_t>(gi)].kind == kind &&
           m_plan.groups[static_cast<size_t>(gi)].nodes.size() == 1;
  }
  // A reshape the executable runs as an alias of its operand.
  bool aliasReshape(NodeId n) const {
    return node(n).op == OpCode::Reshape && lone(n, GroupKind::Alias) &&
           m_plan.effectiveOperands[static_cast<size_t>(n)][0] == node(n).operands[0];
  }
  // An op whose kernel takes rows `width` elements long, a stride apart, for value v.
  const ir::OpDef* rowViewOp(NodeId n, ValueId v, int64_t width) const {
    const ir::OpDef* def = m_reg.find(node(n).op);
    if (!def || def->cpuRowViewDims <= 0 || !lone(n, GroupKind::Opaque)) return nullptr;
    const Shape& s = shape(v);
    if (s.rank() < def->cpuRowViewDims) return nullptr;
    int64_t row = 1;
    for (int d = s.rank() - def->cpuRowViewDims; d < s.rank(); ++d) row *= s[d];
    return row == width ? def : nullptr;
  }

  // Every reader of v, through alias reshapes, takes it as rows of `width` elements.
  bool readAsRows(ValueId v, int64_t width) const {
    const auto& uses = m_uses[static_cast<size_t>(v)];
    if (m_output[static_cast<size_t>(v)] || uses.empty()) return false;
    for (NodeId n : uses) {
      if (aliasReshape(n)) {
        if (!readAsRows(node(n).results[0], width)) return false;
      } else if (!rowViewOp(n, v, width)) {
        return false;
      }
    }
    return true;
  }

  bool sliceInPlace(const ir::Node& nd, std::vector<RowView>& views) const {
    const auto& at = std::get<ir::SliceAttrs>(nd.attrs);
    const ValueId x = nd.operands[0];
    const Shape& xs = shape(x);
    const int r = xs.rank();
    if (r < 1 || isView(x, views)) return false;
    for (int d = 0; d < r; ++d) {
      if (at.strides[static_cast<size_t>(d)] != 1) return false;
      if (d + 1 < r && (at.starts[static_cast<size_t>(d)] != 0 || at.limits[static_cast<size_t>(d)] != xs[d]))
        return false;
    }
    const int64_t first = at.starts.back(), width = at.limits.back() - first;
    if (width <= 0 || !readAsRows(nd.results[0], width)) return false;
    views.push_back({nd.results[0], x, first, xs[r - 1]});
    return true;
  }

  bool concatenateInPlace(const ir::Node& nd, std::vector<RowView>& views) const {
    const ValueId c = nd.results[0];
    const int r = shape(c).rank();
    if (std::get<ir::ConcatenateAttrs>(nd.attrs).axis != r - 1) return false;
    std::vector<RowView> parts;
    NodeId writer = ir::kNone;
    int64_t column = 0;
    for (ValueId o : nd.operands) {
      const int64_t width = shape(o)[r - 1];
      // Back through alias reshapes to the result that becomes the view: each value on the way read once.
      ValueId v = o;
      while (true) {
        if (m_output[static_cast<size_t>(v)] || m_uses[static_cast<size_t>(v)].size() != 1) return false;
        const NodeId p = m_g.value(v).producer;
        if (p == ir::kNone) return false;
        if (!aliasReshape(p)) break;
        v = node(p).operands[0];
      }
      const NodeId p = m_g.value(v).producer;
      const ir::OpDef* def = rowViewOp(p, v, width);
      if (!def || !def->cpuWritesWholeResult || (writer != ir::kNone && writer != p)) return false;
      writer = p;
      parts.push_back({v, c, column, shape(c)[r - 1]});
      column += width;
    }
    views.insert(views.end(), parts.begin(), parts.end());
    return true;
  }

  static bool isView(ValueId v, const std::vector<RowView>& views) {
    return std::any_of(views.begin(), views.end(), [&](const RowView& w) { return w.value == v; });
  }

  const ir::Graph& m_g;
  const ir::OpRegistry& m_reg;
  const passes::FusionPlan& m_plan;
  std::vector<std::vector<NodeId>> m_uses;
  std::vector<bool> m_output;
};

}  // namespace

RowViewPlan planRowViews(const ir::Graph& g, const ir::OpRegistry& reg, const passes::FusionPlan& plan) {
  return Planner(g, reg, plan).run();
}

}  // namespace tsr::cpu
