#include "engine/passes/recompute.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "engine/core/env_options.h"
#include "engine/passes/conv_epilogue.h"
#include "engine/passes/rewrite.h"

namespace tsr::passes {

using ir::NodeId;
using ir::OpCode;
using ir::ValueId;

namespace {

// Ops cheaper to repeat than to read back: a few instructions each (XLA's "not expensive" elementwise ops).
bool cheap(OpCode op) {
  switch (op) {
    case OpCode::Neg: case OpCode::Abs: case OpCode::Sign: case OpCode::Relu: case OpCode::Square:
    case OpCode::Add: case OpCode::Sub: case OpCode::Mul: case OpCode::Max: case OpCode::Min: case OpCode::Clamp:
      return true;
    default:
      return false;
  }
}

// Values smaller than this fraction of the recomputed one (biases, scalars, per-row statistics) cost nothing
// worth counting to read again.
constexpr int64_t kSmallRatio = 16;
// Below this many elements a value is not worth the pass's trouble.
constexpr int64_t kMinElements = 4096;
// At most this many ops copied for one value.
constexpr size_t kMaxCone = 24;

// One value a kernel reads from another kernel, and the uses (member, operand slot) that read it directly.
struct Candidate {
  ValueId v = ir::kNone;
  std::vector<std::pair<NodeId, size_t>> uses;
  // Filled per policy: the ops to copy (operands first) and the full-size values the copies read.
  std::vector<NodeId> cone;
  std::set<ValueId> leaves;
  bool ok = false;
};

class Planner {
 public:
  Planner(const ir::Graph& g, const ir::OpRegistry& reg, const FusionPlan& plan)
      : m_g(g), m_reg(reg), m_plan(plan), m_readers(g) {
    m_materialised.assign(static_cast<size_t>(g.numValues()), false);
    for (ValueId v : g.inputs()) m_materialised[static_cast<size_t>(v)] = true;
    for (const auto& gr : plan.groups)
      for (ValueId v : gr.outputs) m_materialised[static_cast<size_t>(v)] = true;
    for (const auto& n : g.nodes())
      if (n.op == OpCode::Constant)
        for (ValueId v : n.results) m_materialised[static_cast<size_t>(v)] = true;
  }

  int64_t elements(ValueId v) const { return m_g.aval(v).shape.numel(); }
  int groupOf(NodeId n) const { return n == ir::kNone ? -1 : m_plan.groupOfNode[static_cast<size_t>(n)]; }
  const ir::Node& node(NodeId n) const { return m_g.nodes()[static_cast<size_t>(n)]; }
  NodeId producer(ValueId v) const { return m_g.value(v).producer; }
  bool materialised(ValueId v) const { return m_materialised[static_cast<size_t>(v)]; }

  bool copyable(NodeId p) const {
    if (p == ir::kNone || !cheap(node(p).op) || groupOf(p) < 0) return false;
    const ir::Node& n = node(p);
    if (n.results.size() != 1 || m_g.aval(n.results[0]).dtype != DType::F32) return false;
    for (ValueId x : n.operands)
      if (m_g.aval(x).dtype != DType::F32) return false;
    const GroupKind k = m_plan.groups[static_cast<size_t>(groupOf(p))].kind;
    return k == GroupKind::Loop || k == GroupKind::Gemm || k == GroupKind::Reduction;
  }
  // A convolution's epilogue runs as a chain of oneDNN post-ops (or cuDNN pointwise steps) that writes only its
  // last value: reading a value inside the chain would cut it.
  bool insideConvChain(ValueId v) const {
    const NodeId p = producer(v);
    return p != ir::kNone && groupOf(p) >= 0 && m_plan.groups[static_cast<size_t>(groupOf(p))].kind == GroupKind::Conv &&
           !materialised(v);
  }

  // The value a kernel reads for operand value u (a view's source where it reads through one).
  ValueId source(ValueId u) const {
    NodeId p = producer(u);
    if (p == ir::kNone || !isViewNode(m_g, node(p))) return u;
    auto map = resolveView(m_g, u);
    return map ? map->source : u;
  }

  // The values kernel c reads directly through its members' operands and the candidates among them.
  std::vector<Candidate> candidates(int c) const {
    std::map<ValueId, Candidate> byValue;
    for (NodeId m : m_plan.groups[static_cast<size_t>(c)].nodes) {
      const ir::Node& nd = node(m);
      if (m_reg.get(nd.op).fusion != ir::FusionKind::Elementwise) continue;  // a product reads memory
      for (size_t k = 0; k < nd.operands.size(); ++k) {
        ValueId v = nd.operands[k];
        NodeId p = producer(v);
        if (!copyable(p) || groupOf(p) == c || elements(v) < kMinElements) continue;
        Candidate& cand = byValue[v];
        cand.v = v;
        cand.uses.push_back({m, k});
      }
    }
    std::vector<Candidate> out;
    for (auto& [v, cand] : byValue) out.push_back(std::move(cand));
    return out;
  }

  // Follows cand.v's producers through copyable ops outside kernel c. stopAtStored: a value some kernel stores
  // already is read rather than recomputed.
  void expand(Candidate& cand, int c, const std::set<ValueId>& reads, bool stopAtStored) const {
    cand.cone.clear();
    cand.leaves.clear();
    cand.ok = true;
    const int64_t size = elements(cand.v);
    std::set<NodeId> seen;
    // Depth first, operands before the op that reads them.
    auto visit = [&](auto&& self, ValueId u, bool top) -> void {
      if (!cand.ok) return;
      if (!top) {
        const ValueId s = source(u);
        if (elements(s) * kSmallRatio <= size) return;  // small: free to read again
        NodeId p = producer(u);
        const bool more = copyable(p) && groupOf(p) != c && elements(u) == size && !(stopAtStored && materialised(u));
        // Where the copies start. One the kernel reads already costs no new traffic (traffic() knows), but stays
        // read, so it saves nothing either.
        if (!more) {
          if (insideConvChain(s)) cand.ok = false;
          cand.leaves.insert(s);
          return;
        }
      }
      NodeId p = producer(u);
      if (!seen.insert(p).second) return;
      for (ValueId x : node(p).operands) self(self, x, false);
      cand.cone.push_back(p);
      if (cand.cone.size() > kMaxCone) cand.ok = false;
    };
    visit(visit, cand.v, true);
  }

  // The last kernel (in the plan's order) that reads v, -1 for none; a graph output counts as read at the end.
  int lastReader(ValueId v) const {
    if (m_readers.isOutput[static_cast<size_t>(v)]) return static_cast<int>(m_plan.groups.size());
    int last = -1;
    for (NodeId r : m_readers.readers[static_cast<size_t>(v)]) {
      int gr = groupOf(r);
      if (gr < 0) {  // a view read through: its readers read v
        for (ValueId x : node(r).results) last = std::max(last, lastReader(x));
        continue;
      }
      last = std::max(last, gr);
    }
    return last;
  }

  // Whether value v is still read outside its own kernel once the uses in `dropped` read copies (so still written).
  bool readElsewhere(ValueId v, const std::set<std::pair<NodeId, size_t>>& dropped) const {
    if (m_readers.isOutput[static_cast<size_t>(v)]) return true;
    const NodeId p = producer(v);
    for (NodeId r : m_readers.readers[static_cast<size_t>(v)]) {
      if (groupOf(r) == groupOf(p) && groupOf(r) >= 0) continue;  // inside its own kernel
      const ir::Node& rn = node(r);
      for (size_t k = 0; k < rn.operands.size(); ++k)
        if (rn.operands[k] == v && !dropped.count({r, k})) return true;
    }
    return false;
  }

  // Elements moved by kernel c and its producers for the candidates `chosen` (indices into cands), before
  // (reads and writes of the values themselves) and after (reads of the leaves, writes of those not stored).
  std::pair<int64_t, int64_t> traffic(const std::vector<Candidate>& cands, const std::vector<size_t>& chosen, int c,
                                      const std::set<ValueId>& reads) const {
    std::set<std::pair<NodeId, size_t>> dropped;
    std::set<ValueId> leaves;
    for (size_t i : chosen) {
      for (const auto& u : cands[i].uses) dropped.insert(u);
      leaves.insert(cands[i].leaves.begin(), cands[i].leaves.end());
    }
    int64_t before = 0, after = 0;
    // Stored values that go: each was alive from its kernel to c, and that room is free now.
    std::vector<std::pair<int, int64_t>> freed;  // (the kernel that stored it, elements)
    for (size_t i : chosen) {
      const ValueId v = cands[i].v;
      if (leaves.count(v)) continue;  // still read, as another copy's start
      bool stillReadHere = false;
      for (NodeId m : m_plan.groups[static_cast<size_t>(c)].nodes) {
        const ir::Node& nd = node(m);
        for (size_t k = 0; k < nd.operands.size(); ++k)
          if (source(nd.operands[k]) == v && !dropped.count({m, k})) stillReadHere = true;
      }
      if (!stillReadHere) before += elements(v);
      if (!stillReadHere && !readElsewhere(v, dropped)) {  // its write
        before += elements(v);
        freed.push_back({groupOf(producer(v)), elements(v)});
      }
    }
    // The step's peak memory may not grow: a value kept alive longer for the copies (a stored value that no kernel
    // at or after c reads otherwise, or one stored anew, alive from its kernel to c) needs a value at least as big
    // that goes and was alive over the same stretch.
    auto covered = [&](int from, int64_t size) {
      for (auto& [at, room] : freed)
        if (room >= size && at <= from) {
          room = 0;
          return true;
        }
      return false;
    };
    for (ValueId l : leaves) {
      const NodeId pl = producer(l);
      const bool fixed = pl == ir::kNone || node(pl).op == OpCode::Constant;  // alive throughout anyway
      if (materialised(l)) {
        const int last = lastReader(l);
        if (!fixed && !reads.count(l) && last < c && !covered(last, elements(l))) return {0, 1};
      } else if (!covered(groupOf(pl), elements(l))) {
        return {0, 1};
      }
      if (!reads.count(l)) after += elements(l);
      if (!materialised(l)) after += elements(l);  // stored anew
    }
    return {before, after};
  }

  const ir::Graph& m_g;
  const ir::OpRegistry& m_reg;
  const FusionPlan& m_plan;
  ValueReaders m_readers;
  std::vector<bool> m_materialised;
};

}  // namespace

Result<bool> Recompute::run(ir::Graph& g, PassContext& ctx) {
  if (!envOptions().recompute || !m_options.fuse) return false;
  TSR_ASSIGN(FusionPlan plan, planFusion(g, ctx.registry(), nullptr, m_options));
  Planner pl(g, ctx.registry(), plan);
  struct Copy {
    int group;
    Candidate cand;
  };
  std::vector<Copy> copies;
  for (size_t c = 0; c < plan.groups.size(); ++c) {
    const FusionGroup& C = plan.groups[c];
    if (C.kind != GroupKind::Loop && C.kind != GroupKind::Gemm && C.kind != GroupKind::Reduction) continue;
    std::vector<Candidate> cands = pl.candidates(static_cast<int>(c));
    if (cands.empty()) continue;
    const std::set<ValueId> reads(C.inputs.begin(), C.inputs.end());
    // Two policies (start from the values some kernel stores already, or follow the cheap ops as far as they
    // go); then drop, one at a time, the candidates whose copy does not pay.
    std::vector<size_t> best;
    int64_t bestGain = 0;
    std::vector<Candidate> bestCands;
    for (bool stopAtStored : {true, false}) {
      std::vector<Candidate> cs = cands;
      std::vector<size_t> chosen;
      for (size_t i = 0; i < cs.size(); ++i) {
        pl.expand(cs[i], static_cast<int>(c), reads, stopAtStored);
        if (cs[i].ok && !cs[i].cone.empty()) chosen.push_back(i);
      }
      auto gain = [&](const std::vector<size_t>& ch) {
        auto [before, after] = pl.traffic(cs, ch, static_cast<int>(c), reads);
        return before - after;
      };
      int64_t g0 = chosen.empty() ? 0 : gain(chosen);
      for (bool improved = true; improved && !chosen.empty();) {
        improved = false;
        for (size_t j = 0; j < chosen.size(); ++j) {
          std::vector<size_t> fewer = chosen;
          fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(j));
          const int64_t g1 = fewer.empty() ? 0 : gain(fewer);
          if (g1 > g0) {
            chosen = std::move(fewer);
            g0 = g1;
            improved = true;
            break;
          }
        }
      }
      if (g0 > bestGain) {
        bestGain = g0;
        best = chosen;
        bestCands = cs;
      }
    }
    for (size_t i : best) copies.push_back({static_cast<int>(c), std::move(bestCands[i])});
  }
  if (copies.empty()) return false;

  // Each value's copies go just before the first member of its kernel that reads it (after everything they read),
  // a kernel's values in that order, so that a copy one value needs and an earlier one made already is shared.
  auto anchorOf = [](const Candidate& cand) {
    NodeId anchor = INT32_MAX;
    for (const auto& [m, k] : cand.uses) anchor = std::min(anchor, m);
    return anchor;
  };
  std::stable_sort(copies.begin(), copies.end(), [&](const Copy& a, const Copy& b) {
    return std::make_pair(a.group, anchorOf(a.cand)) < std::make_pair(b.group, anchorOf(b.cand));
  });
  GraphRewriter rw(g);
  std::map<ValueId, ValueId> copyOf;  // within the current kernel: original value -> its copy
  int group = -1;
  for (Copy& cp : copies) {
    const Candidate& cand = cp.cand;
    const NodeId anchor = anchorOf(cand);
    if (cp.group != group) {
      copyOf.clear();
      group = cp.group;
    }
    for (NodeId p : cand.cone) {
      const ir::Node n = rw.node(p);
      if (copyOf.count(n.results[0])) continue;  // made for an earlier value of this kernel
      std::vector<ValueId> ops;
      for (ValueId x : n.operands) {
        auto it = copyOf.find(x);
        ops.push_back(it != copyOf.end() ? it->second : x);
      }
      TSR_ASSIGN(std::vector<ValueId> r, rw.insertBefore(anchor, ctx.registry(), n.op, std::move(ops), n.attrs, n.prov));
      copyOf[n.results[0]] = r[0];
    }
    for (const auto& [m, k] : cand.uses) rw.setOperand(m, k, copyOf.at(cand.v));
    const NodeId top = g.value(cand.v).producer;
    std::string from;
    for (ValueId l : cand.leaves) from += fmt::format("{}%{}", from.empty() ? "" : ", ", l);
    ctx.record(g, {anchor, top},
               fmt::format("recomputed {} ({} op{}) in {} from {} instead of reading it", g.aval(cand.v).toString(),
                           cand.cone.size(), cand.cone.size() == 1 ? "" : "s", plan.groups[static_cast<size_t>(cp.group)].name,
                           from.empty() ? "values it reads already" : from),
               Decision::Kind::Applied, FusionReason::Recomputed);
  }
  return rw.commit();
}

}  // namespace tsr::passes
