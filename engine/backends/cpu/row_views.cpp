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
      if (nd.op == OpCode::Slice) r.elided[gi] = sliceInPlace(nd, r.views);
      if (nd.op == OpCode::Concatenate) r.elided[gi] = concatenateInPlace(nd, r.views);
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

  // Elements of x's dims after `axis`.
  int64_t inner(ValueId x, int axis) const {
    int64_t n = 1;
    for (int d = axis + 1; d < shape(x).rank(); ++d) n *= shape(x)[d];
    return n;
  }

  // A slice of one axis, every other dim whole: for each index of the dims before it, `width` x inner elements
  // in a row, the rows the axis's full extent apart.
  bool sliceInPlace(const ir::Node& nd, std::vector<RowView>& views) const {
    const auto& at = std::get<ir::SliceAttrs>(nd.attrs);
    const ValueId x = nd.operands[0];
    const Shape& xs = shape(x);
    if (isView(x, views)) return false;
    int axis = -1;
    for (int d = 0; d < xs.rank(); ++d) {
      const size_t i = static_cast<size_t>(d);
      if (at.strides[i] != 1) return false;
      if (at.starts[i] == 0 && at.limits[i] == xs[d]) continue;
      if (axis >= 0) return false;  // a second cut axis
      axis = d;
    }
    if (axis < 0) return false;  // the whole of x
    const size_t a = static_cast<size_t>(axis);
    const int64_t in = inner(x, axis), width = (at.limits[a] - at.starts[a]) * in;
    if (width <= 0 || !readAsRows(nd.results[0], width)) return false;
    views.push_back({nd.results[0], x, at.starts[a] * in, xs[axis] * in});
    return true;
  }

  // A concatenate whose parts are all results of one row-view op that writes them whole: each part's rows are
  // its extent along the axis x inner elements, lying the concatenate's extent x inner apart.
  bool concatenateInPlace(const ir::Node& nd, std::vector<RowView>& views) const {
    const ValueId c = nd.results[0];
    const int axis = static_cast<int>(std::get<ir::ConcatenateAttrs>(nd.attrs).axis);
    const int64_t in = inner(c, axis);
    std::vector<RowView> parts;
    NodeId writer = ir::kNone;
    int64_t column = 0;
    for (ValueId o : nd.operands) {
      const int64_t width = shape(o)[axis] * in;
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
      parts.push_back({v, c, column, shape(c)[axis] * in});
      column += width;
    }
    if (writer == ir::kNone) return false;
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
