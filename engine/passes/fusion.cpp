#include "engine/passes/fusion.h"

#include <algorithm>
#include <numeric>
#include <queue>
#include <string_view>

#include <fmt/format.h>

#include "engine/ops/conv_geometry.h"
#include "engine/ops/conv_onednn.h"

namespace tsr::passes {

using ir::NodeId;
using ir::OpCode;
using ir::ValueId;

const char* groupKindName(GroupKind k) {
  switch (k) {
    case GroupKind::Loop: return "loop";
    case GroupKind::Reduction: return "reduction";
    case GroupKind::Gemm: return "gemm";
    case GroupKind::Opaque: return "opaque";
    case GroupKind::Alias: return "alias";
    case GroupKind::Constant: return "constant";
    case GroupKind::Conv: return "conv";
  }
  return "?";
}

namespace {

// bf16 fuses as f32 does: kernels widen it on load, round each bf16 result, and narrow it on store.
bool fusibleDType(DType t) { return t == DType::F32 || t == DType::Bool || t == DType::BF16; }

std::vector<int64_t> rowMajor(const Shape& s) { return s.strides(); }

bool contiguous(const Shape& s, const std::vector<int64_t>& strides) {
  int64_t expect = 1;
  for (int d = s.rank() - 1; d >= 0; --d) {
    if (s[d] == 1) continue;
    if (strides[static_cast<size_t>(d)] != expect) return false;
    expect *= s[d];
  }
  return true;
}

bool axesContiguousRange(const std::vector<int64_t>& axes) {
  if (axes.empty()) return false;
  std::vector<int64_t> a = axes;
  std::sort(a.begin(), a.end());
  for (size_t i = 1; i < a.size(); ++i)
    if (a[i] != a[i - 1] + 1) return false;
  return true;
}


// oneDNN applies post-ops on its forward primitive only: the other convolutions (most gradients) run as kernels
// of their own, so their consumers keep fusing as loops.
bool forwardConvolution(const ir::Graph& g, const ir::Node& n) {
  const auto& at = std::get<ir::ConvAttrs>(n.attrs);
  const ops::ConvGeometry geo = ops::convGeometry(g.aval(n.operands[0]).shape, g.aval(n.operands[1]).shape, at);
  return std::string_view(ops::oneDnnConvolutionKind(geo)) == "forward";
}

}  // namespace

bool isViewNode(const ir::Graph& g, const ir::Node& n) {
  if (n.op != OpCode::BroadcastInDim && n.op != OpCode::Transpose && n.op != OpCode::Reshape) return false;
  return fusibleDType(g.aval(n.results[0]).dtype);
}

std::optional<ViewMap> resolveView(const ir::Graph& g, ValueId v, bool views, ValueId stopAt) {
  std::vector<const ir::Node*> chain;
  ValueId src = v;
  while (views && src != stopAt) {
    NodeId p = g.value(src).producer;
    if (p == ir::kNone) break;
    const ir::Node& n = g.nodes()[static_cast<size_t>(p)];
    if (!isViewNode(g, n)) break;
    chain.push_back(&n);
    src = n.operands[0];
  }
  ViewMap m;
  m.source = src;
  Shape shape = g.aval(src).shape;
  m.strides = rowMajor(shape);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const ir::Node& n = **it;
    Shape out = g.aval(n.results[0]).shape;
    std::vector<int64_t> s(static_cast<size_t>(out.rank()), 0);
    if (n.op == OpCode::Reshape) {
      if (!contiguous(shape, m.strides)) return std::nullopt;
      s = rowMajor(out);
    } else if (n.op == OpCode::Transpose) {
      const auto& perm = std::get<ir::TransposeAttrs>(n.attrs).perm;
      for (size_t i = 0; i < perm.size(); ++i) s[i] = m.strides[static_cast<size_t>(perm[i])];
    } else {
      const auto& bd = std::get<ir::BroadcastInDimAttrs>(n.attrs).broadcastDims;
      for (size_t j = 0; j < bd.size(); ++j)
        if (shape[static_cast<int>(j)] == out[static_cast<int>(bd[j])]) s[static_cast<size_t>(bd[j])] = m.strides[j];
    }
    for (int d = 0; d < out.rank(); ++d)
      if (out[d] == 1) s[static_cast<size_t>(d)] = 0;
    m.strides = std::move(s);
    shape = out;
  }
  return m;
}

int FusionPlan::numKernels() const {
  int n = 0;
  for (const auto& gr : groups) n += gr.kind != GroupKind::Alias && gr.kind != GroupKind::Constant;
  return n;
}

std::string FusionPlan::describe(const ir::Graph& g, const ir::OpRegistry& reg) const {
  std::string out;
  for (const auto& gr : groups) {
    std::string ops;
    for (size_t i = 0; i < gr.nodes.size() && i < 8; ++i)
      ops += (i ? ", " : "") + reg.get(g.nodes()[static_cast<size_t>(gr.nodes[i])].op).name;
    if (gr.nodes.size() > 8) ops += ", ...";
    out += fmt::format("{} {} {} {} op{} ({}) in {} out {}{}\n", gr.name, groupKindName(gr.kind),
                       Aval{gr.shape, DType::F32}.toString(), gr.nodes.size(), gr.nodes.size() == 1 ? "" : "s", ops,
                       gr.inputs.size(), gr.outputs.size(), gr.reason.empty() ? "" : ": " + gr.reason);
  }
  return out;
}

namespace {

// The planner's working state: groups grow as nodes are visited in graph order; merged groups point to the
// survivor (union-find).
class Planner {
 public:
  Planner(const ir::Graph& g, const ir::OpRegistry& reg, PassContext* ctx, const FusionOptions& o)
      : m_g(g), m_reg(reg), m_ctx(ctx), m_opt(o), m_readers(g) {
    size_t n = g.nodes().size();
    m_groupOf.assign(n, -1);
    m_visit.assign(n, 0);
    m_eff.resize(n);
    m_materialize.assign(n, false);
    m_isView.resize(n);
    for (size_t i = 0; i < n; ++i) m_isView[i] = isViewNode(g, g.nodes()[i]);
  }

  Result<FusionPlan> run();

 private:
  struct Group {
    GroupKind kind = GroupKind::Opaque;
    std::vector<NodeId> nodes;
    Shape shape;
    std::vector<int64_t> axes;
    int parent = -1;  // merged into
    NodeId first = 0;
    std::string reason;
    // conv groups: the chain's value so far, its post-ops, the ops of a matched gelu still to join, and where the
    // result keeps its feature dim.
    ValueId tail = ir::kNone;
    std::vector<PostOp> postOps;
    std::vector<NodeId> pending;
    std::vector<int64_t> outSpec;
  };

  int find(int gid) const {
    while (m_groups[static_cast<size_t>(gid)].parent >= 0) gid = m_groups[static_cast<size_t>(gid)].parent;
    return gid;
  }
  int groupOfNode(NodeId n) const {
    int gid = m_groupOf[static_cast<size_t>(n)];
    return gid < 0 ? -1 : find(gid);
  }
  int groupOfValue(ValueId v) const {
    NodeId p = m_g.value(v).producer;
    return p == ir::kNone ? -1 : groupOfNode(p);
  }
  const ir::Node& node(NodeId n) const { return m_g.nodes()[static_cast<size_t>(n)]; }
  std::string opName(NodeId n) const { return m_reg.get(node(n).op).name; }

  int newGroup(GroupKind kind, NodeId n, Shape shape, std::string reason) {
    Group gr;
    gr.kind = kind;
    gr.nodes = {n};
    gr.shape = std::move(shape);
    gr.first = n;
    gr.reason = std::move(reason);
    m_groups.push_back(std::move(gr));
    m_groupOf[static_cast<size_t>(n)] = static_cast<int>(m_groups.size()) - 1;
    return static_cast<int>(m_groups.size()) - 1;
  }
  void addTo(int gid, NodeId n) {
    m_groups[static_cast<size_t>(gid)].nodes.push_back(n);
    m_groupOf[static_cast<size_t>(n)] = gid;
  }
  void merge(int into, int from) {
    Group& a = m_groups[static_cast<size_t>(into)];
    Group& b = m_groups[static_cast<size_t>(from)];
    a.nodes.insert(a.nodes.end(), b.nodes.begin(), b.nodes.end());
    std::sort(a.nodes.begin(), a.nodes.end());
    a.first = std::min(a.first, b.first);
    b.parent = into;
    b.nodes.clear();
  }

  // The operands node n's kernel would read: view sources where the views resolve.
  void resolveOperands(NodeId n, bool throughViews) {
    auto& eff = m_eff[static_cast<size_t>(n)];
    eff.clear();
    for (ValueId v : node(n).operands) {
      NodeId p = m_g.value(v).producer;
      if (throughViews && p != ir::kNone && m_isView[static_cast<size_t>(p)]) {
        auto map = resolveView(m_g, v);
        if (map) {
          eff.push_back(map->source);
          continue;
        }
        m_materialize[static_cast<size_t>(p)] = true;
      } else if (p != ir::kNone && m_isView[static_cast<size_t>(p)]) {
        m_materialize[static_cast<size_t>(p)] = true;
      }
      eff.push_back(v);
    }
  }

  // Whether value v depends on a node of one of the groups `targets`, when every group runs as one kernel.
  bool dependsOn(ValueId v, const std::vector<int>& targets) {
    NodeId minFirst = INT32_MAX;
    for (int t : targets) minFirst = std::min(minFirst, m_groups[static_cast<size_t>(t)].first);
    ++m_stamp;
    std::vector<NodeId>& stack = m_stack;
    stack.clear();
    auto push = [&](ValueId x) {
      NodeId p = m_g.value(x).producer;
      if (p == ir::kNone || p < minFirst || m_visit[static_cast<size_t>(p)] == m_stamp) return;
      m_visit[static_cast<size_t>(p)] = m_stamp;
      stack.push_back(p);
    };
    push(v);
    while (!stack.empty()) {
      NodeId u = stack.back();
      stack.pop_back();
      int gu = groupOfNode(u);
      if (gu >= 0 && std::find(targets.begin(), targets.end(), gu) != targets.end()) return true;
      if (gu >= 0) {
        // The whole group runs at once: it waits for the inputs of all its members.
        for (NodeId m : m_groups[static_cast<size_t>(gu)].nodes) {
          if (m != u && m_visit[static_cast<size_t>(m)] != m_stamp && m >= minFirst) {
            m_visit[static_cast<size_t>(m)] = m_stamp;
            stack.push_back(m);
          }
          for (ValueId x : m_eff[static_cast<size_t>(m)]) push(x);
        }
      } else {
        for (ValueId x : node(u).operands) push(x);
      }
    }
    return false;
  }

  // Whether the groups `gs` and node n (when n >= 0) can run as one kernel: no input of any of them depends on
  // any of them through a node outside.
  bool canCombine(const std::vector<int>& gs, NodeId n) {
    auto external = [&](NodeId m, auto&& fn) {
      for (ValueId x : m_eff[static_cast<size_t>(m)]) {
        int gx = groupOfValue(x);
        if (gx >= 0 && std::find(gs.begin(), gs.end(), gx) != gs.end()) continue;
        if (!fn(x)) return false;
      }
      return true;
    };
    auto ok = [&](ValueId x) { return !dependsOn(x, gs); };
    for (int gid : gs)
      for (NodeId m : m_groups[static_cast<size_t>(gid)].nodes)
        if (!external(m, ok)) return false;
    if (n >= 0 && !external(n, ok)) return false;
    return true;
  }

  // Whether node m reads a value of group g through a view (kernels evaluate their members element for
  // element, so such a read cannot happen inside one kernel).
  bool readsThroughView(NodeId m, int g) const {
    const auto& eff = m_eff[static_cast<size_t>(m)];
    for (size_t i = 0; i < eff.size(); ++i)
      if (eff[i] != node(m).operands[i] && groupOfValue(eff[i]) == g) return true;
    return false;
  }

  // A fusion decision about node n (and the producers `with` it concerns), as a value with its reason.
  void decide(NodeId n, std::vector<NodeId> with, FusionReason reason, std::string msg,
              Decision::Kind kind = Decision::Kind::Applied) {
    if (!m_ctx) return;
    std::vector<NodeId> nodes = {n};
    for (NodeId m : with)
      if (std::find(nodes.begin(), nodes.end(), m) == nodes.end()) nodes.push_back(m);
    m_ctx->record(m_g, std::move(nodes), std::move(msg), kind, reason);
  }
  void reject(NodeId n, std::vector<NodeId> with, FusionReason reason, std::string msg) {
    decide(n, std::move(with), reason, std::move(msg), Decision::Kind::Rejected);
  }

  // The producers of n's operands that are members of group g (the pair a decision about g concerns).
  std::vector<NodeId> producersIn(NodeId n, int g) const {
    std::vector<NodeId> out;
    for (ValueId v : m_eff[static_cast<size_t>(n)]) {
      NodeId p = m_g.value(v).producer;
      if (p != ir::kNone && groupOfNode(p) == g && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
    return out;
  }

  // Whether an earlier node computes what node n computes (n's op and operands): n is then a copy that the
  // recompute pass made for a later kernel, which joining its producers' kernel would only store again. It
  // starts a kernel of its own, which its reader takes in (onlyFeeds).
  bool isCopy(NodeId n) const {
    const ir::Node& nd = node(n);
    if (nd.operands.empty() || !std::holds_alternative<ir::NoAttrs>(nd.attrs)) return false;
    for (NodeId m : m_readers.readers[static_cast<size_t>(nd.operands[0])])
      if (m < n && node(m).op == nd.op && node(m).operands == nd.operands) return true;
    return false;
  }
  // Whether every reader of every member of loop group c is a member of c or of `into`, or is n: c then only
  // feeds that kernel, which can compute its values itself instead of reading them.
  bool onlyFeeds(int c, int into, NodeId n) const {
    for (NodeId m : m_groups[static_cast<size_t>(c)].nodes)
      for (ValueId r : node(m).results) {
        if (m_readers.isOutput[static_cast<size_t>(r)]) return false;
        for (NodeId u : m_readers.readers[static_cast<size_t>(r)]) {
          if (u == n) continue;
          int gu = groupOfNode(u);
          if (gu != c && gu != into) return false;
        }
      }
    return true;
  }

  void visitElementwise(NodeId n);
  PostOpMatch convPostOp(int gid, NodeId n) const;
  void extendConv(int gid, NodeId n, const PostOp& op);
  void visitReduction(NodeId n);
  void mergeSiblingReductions(int gid, NodeId n);
  Result<FusionPlan> finish();

  const ir::Graph& m_g;
  const ir::OpRegistry& m_reg;
  PassContext* m_ctx;
  FusionOptions m_opt;
  ValueReaders m_readers;
  std::vector<Group> m_groups;
  std::vector<int> m_groupOf;
  std::vector<uint32_t> m_visit;
  uint32_t m_stamp = 0;
  std::vector<NodeId> m_stack;
  std::vector<std::vector<ValueId>> m_eff;
  std::vector<bool> m_materialize;
  std::vector<bool> m_isView;
};

// Whether n extends conv group gid's chain: an op of a gelu already matched, or a post-op of its own.
PostOpMatch Planner::convPostOp(int gid, NodeId n) const {
  const Group& G = m_groups[static_cast<size_t>(gid)];
  if (std::find(G.pending.begin(), G.pending.end(), n) != G.pending.end()) {
    PostOpMatch m;
    m.ok = true;
    m.op = G.postOps.back();  // the gelu, the group's already
    return m;
  }
  if (!G.pending.empty()) {
    PostOpMatch m;
    m.reason = FusionReason::NoPostOp;
    m.why = "the group's gelu is not complete";
    return m;
  }
  return matchConvPostOp(m_g, m_reg, m_readers, G.tail, n, G.outSpec);
}

void Planner::extendConv(int gid, NodeId n, const PostOp& op) {
  Group& G = m_groups[static_cast<size_t>(gid)];
  auto it = std::find(G.pending.begin(), G.pending.end(), n);
  if (it != G.pending.end()) {
    G.pending.erase(it);
    return;
  }
  G.postOps.push_back(op);
  G.tail = op.result;
  for (NodeId m : op.nodes)
    if (m != n) G.pending.push_back(m);
}

void Planner::visitElementwise(NodeId n) {
  const ir::Node& nd = node(n);
  const Shape& shape = m_g.aval(nd.results[0]).shape;
  resolveOperands(n, true);
  if (!m_opt.fuse) {
    newGroup(GroupKind::Loop, n, shape, "fusion off");
    return;
  }
  // Candidate groups: those that produce an operand directly in the same iteration space.
  const bool copy = isCopy(n);
  std::vector<int> cands;
  std::vector<std::pair<int, PostOp>> convOps;  // the post-op n would be in each conv candidate
  for (size_t k = 0; k < nd.operands.size(); ++k) {
    NodeId p = m_g.value(nd.operands[k]).producer;
    if (p == ir::kNone) continue;
    if (m_isView[static_cast<size_t>(p)]) {
      // Read through a view: the source's kernel is no candidate. Say why, for "why not fused?".
      NodeId src = m_g.value(m_eff[static_cast<size_t>(n)][k]).producer;
      int gs = src == ir::kNone || m_isView[static_cast<size_t>(src)] ? -1 : groupOfNode(src);
      if (gs < 0) continue;
      const Group& S = m_groups[static_cast<size_t>(gs)];
      if (S.kind != GroupKind::Loop && S.kind != GroupKind::Gemm && S.kind != GroupKind::Conv) continue;
      if (S.shape != shape)
        reject(n, {src}, FusionReason::DifferentSpaces,
               fmt::format("not fused with {} ({}), read through {}: iteration spaces differ ({} vs {})", opName(src),
                           groupKindName(S.kind), opName(p), Aval{S.shape, DType::F32}.toString(),
                           Aval{shape, DType::F32}.toString()));
      else
        reject(n, {src}, FusionReason::ReadsThroughView,
               fmt::format("not fused with {}: it is read through {}", opName(src), opName(p)));
      continue;
    }
    int gp = groupOfNode(p);
    if (gp < 0 || std::find(cands.begin(), cands.end(), gp) != cands.end()) continue;
    const Group& G = m_groups[static_cast<size_t>(gp)];
    bool sameSpace = G.shape == shape;
    if (copy) {
      reject(n, {p}, FusionReason::Recomputed,
             fmt::format("not fused into fusion.{}: a copy of a value computed earlier, recomputed for the kernel "
                         "that reads it, which then need not read the original",
                         gp));
      continue;
    }
    if (G.kind == GroupKind::Loop && sameSpace) {
      cands.push_back(gp);
    } else if (G.kind == GroupKind::Gemm && sameSpace && m_opt.gemmEpilogues) {
      cands.push_back(gp);
    } else if (G.kind == GroupKind::Conv && sameSpace) {
      PostOpMatch pm = convPostOp(gp, n);
      if (pm.ok) {
        cands.push_back(gp);
        convOps.emplace_back(gp, std::move(pm.op));
      } else {
        reject(n, {p}, pm.reason, fmt::format("not fused into fusion.{} (conv): {}", gp, pm.why));
      }
    } else if (G.kind == GroupKind::Loop || G.kind == GroupKind::Gemm || G.kind == GroupKind::Conv) {
      reject(n, {p}, FusionReason::DifferentSpaces,
             fmt::format("not fused with {} ({}): iteration spaces differ ({} vs {})", opName(p),
                         groupKindName(G.kind), Aval{G.shape, DType::F32}.toString(), Aval{shape, DType::F32}.toString()));
    } else if (G.kind == GroupKind::Reduction) {
      reject(n, {p}, FusionReason::AfterReduction,
             fmt::format("not fused with {}: a reduction's result is complete only after its kernel", opName(p)));
    } else if (G.kind == GroupKind::Opaque) {
      reject(n, {p}, FusionReason::OpaqueProducer, fmt::format("not fused with {}: it has no fusible kernel", opName(p)));
    }
  }
  // A gemm or conv group takes the epilogue; otherwise the first loop group that stays acyclic.
  auto anchored = [&](int gid) {
    GroupKind k = m_groups[static_cast<size_t>(gid)].kind;
    return k == GroupKind::Gemm || k == GroupKind::Conv;
  };
  std::stable_sort(cands.begin(), cands.end(), [&](int a, int b) { return anchored(a) > anchored(b); });
  // A member may not read another member through a view (a transpose of a square tile, say): tiles are
  // evaluated element for element.
  int chosen = -1;
  for (int c : cands) {
    if (readsThroughView(n, c)) {
      reject(n, producersIn(n, c), FusionReason::ReadsThroughView,
             fmt::format("not fused into fusion.{}: it reads a value of that kernel through a view", c));
      continue;
    }
    if (canCombine({c}, n)) {
      chosen = c;
      break;
    }
    reject(n, producersIn(n, c), FusionReason::WouldCycle,
           fmt::format("not fused into fusion.{}: an input of the fused kernel would depend on its output", c));
  }
  if (chosen < 0) {
    newGroup(GroupKind::Loop, n, shape, "");
    return;
  }
  addTo(chosen, n);
  Group& G = m_groups[static_cast<size_t>(chosen)];
  std::string as;
  if (G.kind == GroupKind::Conv)
    for (const auto& [gid, op] : convOps)
      if (gid == chosen) {
        extendConv(chosen, n, op);
        as = fmt::format(" as oneDNN post-op {}", postOpKindName(op.kind));
      }
  decide(n, producersIn(n, chosen), FusionReason::Fused,
         fmt::format("fused into fusion.{} ({}){} over {}", chosen, groupKindName(G.kind), as,
                     Aval{shape, DType::F32}.toString()));
  // Other producers' loop groups join too where that stays acyclic (multi-output: one pass instead of several).
  for (int c : cands) {
    if (c == chosen || find(c) != c) continue;
    // Loops merge. A gemm's members must all follow its product (they are its epilogue): a loop joins a gemm
    // only where it comes after the product and feeds nothing but the epilogue (values recomputed there).
    const Group& C = m_groups[static_cast<size_t>(c)];
    const Group& H = m_groups[static_cast<size_t>(chosen)];
    if (C.kind != GroupKind::Loop) continue;
    if (H.kind == GroupKind::Gemm && !(C.first > H.first && onlyFeeds(c, chosen, n))) continue;
    if (H.kind != GroupKind::Loop && H.kind != GroupKind::Gemm) continue;
    auto anyReads = [&](int readers, int group) {
      const auto& members = m_groups[static_cast<size_t>(readers)].nodes;
      return std::any_of(members.begin(), members.end(), [&](NodeId m) { return readsThroughView(m, group); });
    };
    bool viaView = anyReads(c, chosen) || anyReads(chosen, c);
    if (!viaView && canCombine({chosen, c}, -1)) {
      std::vector<NodeId> with = producersIn(n, c);
      merge(chosen, c);
      decide(n, with, FusionReason::Merged,
             fmt::format("merged fusion.{} into fusion.{}: both feed {} in the same iteration space", c, chosen, opName(n)));
    } else {
      reject(n, producersIn(n, c), viaView ? FusionReason::ReadsThroughView : FusionReason::WouldCycle,
             viaView ? fmt::format("fusion.{} not merged into fusion.{}: a member reads the other through a view", c, chosen)
                     : fmt::format("fusion.{} not merged into fusion.{}: it would create a cycle", c, chosen));
    }
  }
}

// Reductions over the same space that read a common input share one pass over it (sum(x) and sum(x * x)).
// The input must be read as it is, not through a view: sum(x, 1) and sum(transpose(x), 1) of a square x have
// the same shapes and axes but reduce different dims of it.
void Planner::mergeSiblingReductions(int gid, NodeId n) {
  const Group& G = m_groups[static_cast<size_t>(gid)];
  std::vector<ValueId> reads;
  for (NodeId m : G.nodes)
    for (ValueId x : node(m).operands)
      if (groupOfValue(x) != gid) reads.push_back(x);
  for (size_t i = 0; i < m_groups.size(); ++i) {
    const Group& S = m_groups[i];
    if (static_cast<int>(i) == gid || S.parent >= 0 || S.nodes.empty() || S.kind != GroupKind::Reduction ||
        S.shape != G.shape || S.axes != G.axes)
      continue;
    bool shares = false;
    for (NodeId m : S.nodes)
      for (ValueId x : node(m).operands)
        shares |= std::find(reads.begin(), reads.end(), x) != reads.end();
    // A prologue may not read a reduction of the same kernel (softmax's max feeds exp(x - max)).
    auto readsReductionOf = [&](const Group& A, int other) {
      for (NodeId m : A.nodes)
        for (ValueId x : m_eff[static_cast<size_t>(m)]) {
          NodeId p = m_g.value(x).producer;
          if (p == ir::kNone || groupOfNode(p) != other) continue;
          OpCode op = node(p).op;
          if (op == OpCode::ReduceSum || op == OpCode::ReduceMax || op == OpCode::ReduceMin) return true;
        }
      return false;
    };
    if (!shares || readsReductionOf(G, static_cast<int>(i)) || readsReductionOf(S, gid) ||
        !canCombine({gid, static_cast<int>(i)}, -1))
      continue;
    std::vector<NodeId> with = m_groups[i].nodes;
    merge(gid, static_cast<int>(i));
    decide(n, with, FusionReason::Merged,
           fmt::format("merged sibling reduction fusion.{} into fusion.{}: they read the same input", i, gid));
    return;
  }
}

void Planner::visitReduction(NodeId n) {
  const ir::Node& nd = node(n);
  ValueId v = nd.operands[0];
  const Shape& shape = m_g.aval(v).shape;
  std::vector<int64_t> axes = std::get<ir::ReduceAttrs>(nd.attrs).axes;
  std::sort(axes.begin(), axes.end());
  resolveOperands(n, true);
  NodeId p = m_g.value(v).producer;
  int gp = (p == ir::kNone || m_isView[static_cast<size_t>(p)]) ? -1 : groupOfNode(p);
  if (m_opt.fuse && m_opt.reductionPrologues && gp >= 0) {
    Group& G = m_groups[static_cast<size_t>(gp)];
    if (G.kind == GroupKind::Loop && G.shape == shape) {
      G.kind = GroupKind::Reduction;
      G.axes = axes;
      addTo(gp, n);
      decide(n, {p}, FusionReason::Fused,
             fmt::format("fused with its prologue fusion.{} ({} ops): the operand is computed as it is reduced", gp,
                         G.nodes.size() - 1));
      mergeSiblingReductions(gp, n);
      return;
    }
    if (G.kind == GroupKind::Reduction && G.shape == shape && G.axes == axes) {
      addTo(gp, n);
      decide(n, {p}, FusionReason::Fused, fmt::format("fused into fusion.{}: a sibling reduction of the same values", gp));
      return;
    }
    reject(n, {p}, G.kind == GroupKind::Reduction ? FusionReason::AfterReduction
                   : G.kind == GroupKind::Loop     ? FusionReason::DifferentSpaces
                                                   : FusionReason::OpaqueProducer,
           fmt::format("prologue not fused: the producer {} is a {} kernel", opName(p), groupKindName(G.kind)));
  }
  // Siblings that reduce the same input over the same axes share one pass over it (the input itself, not a
  // view of it, which would index it differently).
  if (m_opt.fuse) {
    for (size_t i = 0; i < m_groups.size(); ++i) {
      Group& G = m_groups[i];
      if (G.parent >= 0 || G.kind != GroupKind::Reduction || G.shape != shape || G.axes != axes) continue;
      bool readsSame = false;
      for (NodeId m : G.nodes)
        for (ValueId x : node(m).operands) readsSame |= x == v;
      if (!readsSame || !canCombine({static_cast<int>(i)}, n)) continue;
      addTo(static_cast<int>(i), n);
      decide(n, m_groups[i].nodes, FusionReason::Fused,
             fmt::format("fused into fusion.{}: reads the same input over the same axes", i));
      return;
    }
  }
  int gid = newGroup(GroupKind::Reduction, n, shape, "");
  m_groups[static_cast<size_t>(gid)].axes = axes;
}

Result<FusionPlan> Planner::run() {
  const auto& nodes = m_g.nodes();
  for (NodeId n = 0; n < static_cast<NodeId>(nodes.size()); ++n) {
    const ir::Node& nd = nodes[static_cast<size_t>(n)];
    if (m_isView[static_cast<size_t>(n)]) continue;  // decided by its consumers
    const ir::OpDef& def = m_reg.get(nd.op);
    bool floatsOnly = true;
    for (ValueId v : nd.operands) floatsOnly &= fusibleDType(m_g.aval(v).dtype);
    for (ValueId v : nd.results) floatsOnly &= fusibleDType(m_g.aval(v).dtype);
    if (nd.op == OpCode::Constant) {
      m_eff[static_cast<size_t>(n)] = {};
      newGroup(GroupKind::Constant, n, m_g.aval(nd.results[0]).shape, "");
    } else if (def.fusion == ir::FusionKind::Elementwise && def.loop.valid() && floatsOnly) {
      visitElementwise(n);
    } else if ((nd.op == OpCode::ReduceSum || nd.op == OpCode::ReduceMax || nd.op == OpCode::ReduceMin) &&
               (m_g.aval(nd.operands[0]).dtype == DType::F32 || m_g.aval(nd.operands[0]).dtype == DType::BF16) &&
               axesContiguousRange(std::get<ir::ReduceAttrs>(nd.attrs).axes)) {
      visitReduction(n);
    } else if (nd.op == OpCode::DotGeneral &&
               (m_g.aval(nd.results[0]).dtype == DType::F32 || m_g.aval(nd.results[0]).dtype == DType::BF16)) {
      // A bf16 product (autocast) is a GEMM too (cuBLASLt writes bf16); its epilogue stays f32-only, as loops do.
      resolveOperands(n, false);
      newGroup(GroupKind::Gemm, n, m_g.aval(nd.results[0]).shape, "");
    } else if (nd.op == OpCode::ConvGeneralDilated && m_opt.convEpilogues && floatsOnly &&
               m_g.aval(nd.results[0]).dtype == DType::F32 && forwardConvolution(m_g, nd)) {
      resolveOperands(n, false);
      int gid = newGroup(GroupKind::Conv, n, m_g.aval(nd.results[0]).shape, "");
      Group& G = m_groups[static_cast<size_t>(gid)];
      G.tail = nd.results[0];
      G.outSpec = std::get<ir::ConvAttrs>(nd.attrs).outSpec;
    } else if (nd.op == OpCode::Reshape) {
      // A reshape of a dtype loops do not read (f64, integers): an alias of its operand all the same, since a
      // dense row-major value keeps its bytes (its operand is never a view: layout ops of such dtypes are not).
      resolveOperands(n, false);
      newGroup(GroupKind::Alias, n, m_g.aval(nd.results[0]).shape, "");
    } else {
      resolveOperands(n, false);
      const bool elementwise = def.fusion == ir::FusionKind::Elementwise;
      if (elementwise && !floatsOnly)
        reject(n, {}, FusionReason::UnsupportedDType,
               fmt::format("not fused: {} works on {}", def.name,
                           m_g.aval(nd.results[0]).dtype == DType::F32 ? dtypeName(m_g.aval(nd.operands[0]).dtype)
                                                                       : dtypeName(m_g.aval(nd.results[0]).dtype)));
      else if (elementwise)
        reject(n, {}, FusionReason::NoLoopLowering, fmt::format("not fused: {} has no loop lowering (OpDef::loop)", def.name));
      else
        reject(n, {}, FusionReason::OwnKernel, fmt::format("not fused: {} runs its own kernel", def.name));
      // A node with no results (a host callback run for its effect) has a scalar's empty shape.
      newGroup(GroupKind::Opaque, n, nd.results.empty() ? Shape{} : m_g.aval(nd.results[0]).shape, "");
    }
  }
  // Graph outputs that are views are materialised.
  for (ValueId v : m_g.outputs()) {
    NodeId p = m_g.value(v).producer;
    if (p != ir::kNone && m_isView[static_cast<size_t>(p)]) m_materialize[static_cast<size_t>(p)] = true;
  }
  // Views that some consumer cannot read through become kernels of their own (a reshape is an alias), and
  // their operands must exist as values: a materialised reshape whose operand is a view materialises that too,
  // and so does a materialised broadcast or transpose whose chain of views cannot be read as strides of its
  // source (a transpose of a reshape of a broadcast: nearest upsampling's gradient).
  for (NodeId n = static_cast<NodeId>(nodes.size()) - 1; n >= 0; --n) {
    if (!m_isView[static_cast<size_t>(n)] || !m_materialize[static_cast<size_t>(n)]) continue;
    const ir::Node& nd = nodes[static_cast<size_t>(n)];
    if (nd.op == OpCode::Reshape || !resolveView(m_g, nd.results[0])) {
      NodeId p = m_g.value(nd.operands[0]).producer;
      if (p != ir::kNone && m_isView[static_cast<size_t>(p)]) m_materialize[static_cast<size_t>(p)] = true;
    }
  }
  for (NodeId n = 0; n < static_cast<NodeId>(nodes.size()); ++n) {
    if (!m_isView[static_cast<size_t>(n)] || !m_materialize[static_cast<size_t>(n)]) continue;
    const ir::Node& nd = nodes[static_cast<size_t>(n)];
    if (nd.op == OpCode::Reshape) {
      m_eff[static_cast<size_t>(n)] = {nd.operands[0]};
      newGroup(GroupKind::Alias, n, m_g.aval(nd.results[0]).shape, "");
    } else {
      auto map = resolveView(m_g, nd.results[0]);
      if (map) {
        m_eff[static_cast<size_t>(n)] = {map->source};
      } else {
        m_eff[static_cast<size_t>(n)] = {nd.operands[0]};
        NodeId p = m_g.value(nd.operands[0]).producer;
        if (p != ir::kNone && m_isView[static_cast<size_t>(p)] && !m_materialize[static_cast<size_t>(p)])
          return makeError("fusion: view chain at node {} cannot be materialised", n);
      }
      newGroup(GroupKind::Loop, n, m_g.aval(nd.results[0]).shape, "a materialised view");
      decide(n, {}, FusionReason::Materialised, fmt::format("{} materialised: a consumer cannot read through it", opName(n)),
             Decision::Kind::Note);
    }
  }
  return finish();
}

Result<FusionPlan> Planner::finish() {
  const auto& nodes = m_g.nodes();
  // Surviving groups, ordered topologically (Kahn's algorithm, earliest last-member first, which keeps the
  // graph's order wherever fusion did not change it).
  std::vector<int> live;
  for (size_t i = 0; i < m_groups.size(); ++i)
    if (m_groups[i].parent < 0 && !m_groups[i].nodes.empty()) live.push_back(static_cast<int>(i));
  std::vector<int> index(m_groups.size(), -1);
  for (size_t i = 0; i < live.size(); ++i) index[static_cast<size_t>(live[i])] = static_cast<int>(i);
  std::vector<std::vector<int>> succ(live.size());
  std::vector<int> indeg(live.size(), 0);
  std::vector<NodeId> lastNode(live.size(), 0);
  for (size_t i = 0; i < live.size(); ++i) {
    Group& G = m_groups[static_cast<size_t>(live[i])];
    std::sort(G.nodes.begin(), G.nodes.end());
    lastNode[i] = G.nodes.back();
    for (NodeId m : G.nodes)
      for (ValueId x : m_eff[static_cast<size_t>(m)]) {
        int gx = groupOfValue(x);
        if (gx < 0) continue;
        int j = index[static_cast<size_t>(gx)];
        if (j < 0 || j == static_cast<int>(i)) continue;
        succ[static_cast<size_t>(j)].push_back(static_cast<int>(i));
      }
  }
  for (auto& s : succ) {
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    for (int t : s) ++indeg[static_cast<size_t>(t)];
  }
  using Item = std::pair<NodeId, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (size_t i = 0; i < live.size(); ++i)
    if (indeg[i] == 0) ready.push({lastNode[i], static_cast<int>(i)});
  std::vector<int> order;
  while (!ready.empty()) {
    int i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (int t : succ[static_cast<size_t>(i)])
      if (--indeg[static_cast<size_t>(t)] == 0) ready.push({lastNode[static_cast<size_t>(t)], t});
  }
  if (order.size() != live.size()) return makeError("fusion: the kernel graph has a cycle (a planner bug)");

  // Which values are read outside their group (or leave the graph).
  std::vector<int> readBy(static_cast<size_t>(m_g.numValues()), -2);  // -2 none, -1 several/outside
  std::vector<bool> needed(static_cast<size_t>(m_g.numValues()), false);
  for (ValueId v : m_g.outputs()) needed[static_cast<size_t>(v)] = true;

  FusionPlan plan;
  plan.groupOfNode.assign(nodes.size(), -1);
  plan.effectiveOperands = m_eff;
  for (size_t k = 0; k < order.size(); ++k) {
    const Group& G = m_groups[static_cast<size_t>(live[static_cast<size_t>(order[k])])];
    for (NodeId m : G.nodes) plan.groupOfNode[static_cast<size_t>(m)] = static_cast<int>(k);
  }
  for (NodeId m = 0; m < static_cast<NodeId>(nodes.size()); ++m) {
    int gm = plan.groupOfNode[static_cast<size_t>(m)];
    if (gm < 0) continue;
    for (ValueId x : m_eff[static_cast<size_t>(m)]) {
      NodeId p = m_g.value(x).producer;
      if (p == ir::kNone || plan.groupOfNode[static_cast<size_t>(p)] != gm) needed[static_cast<size_t>(x)] = true;
    }
  }
  for (size_t k = 0; k < order.size(); ++k) {
    const Group& G = m_groups[static_cast<size_t>(live[static_cast<size_t>(order[k])])];
    FusionGroup fg;
    fg.id = static_cast<int>(k);
    fg.kind = G.kind;
    fg.nodes = G.nodes;
    fg.shape = G.shape;
    fg.reduceAxes = G.axes;
    fg.reason = G.reason;
    // A gelu whose ops did not all join leaves the chain incomplete: the backend then runs the epilogue as a loop.
    if (G.kind == GroupKind::Conv && G.pending.empty()) fg.postOps = G.postOps;
    if (!fg.postOps.empty()) {
      std::string ops;
      for (const PostOp& op : fg.postOps) ops += (ops.empty() ? "" : ", ") + std::string(postOpKindName(op.kind));
      fg.reason = fmt::format("a convolution with its epilogue as oneDNN post-ops ({})", ops);
    }
    bool fused = G.nodes.size() > 1 || G.kind == GroupKind::Loop || G.kind == GroupKind::Reduction;
    int pid = live[static_cast<size_t>(order[k])];  // the planner's id, which the decisions name
    fg.name = fused ? fmt::format("fusion.{}", pid)
                    : fmt::format("{}.{}", m_reg.get(nodes[static_cast<size_t>(G.nodes[0])].op).name, pid);
    for (NodeId m : G.nodes) {
      for (ValueId x : m_eff[static_cast<size_t>(m)]) {
        NodeId p = m_g.value(x).producer;
        bool internal = p != ir::kNone && plan.groupOfNode[static_cast<size_t>(p)] == static_cast<int>(k);
        if (!internal && std::find(fg.inputs.begin(), fg.inputs.end(), x) == fg.inputs.end()) fg.inputs.push_back(x);
      }
      for (ValueId r : nodes[static_cast<size_t>(m)].results)
        if (needed[static_cast<size_t>(r)]) fg.outputs.push_back(r);
    }
    if (fg.reason.empty() && G.nodes.size() > 1) {
      std::string ops;
      for (size_t i = 0; i < G.nodes.size() && i < 6; ++i)
        ops += (i ? ", " : "") + opName(G.nodes[i]);
      if (G.nodes.size() > 6) ops += ", ...";
      fg.reason = fmt::format("{} ops ({}) in one pass over {}; {} input{}, {} output{}", G.nodes.size(), ops,
                              Aval{G.shape, DType::F32}.toString(), fg.inputs.size(), fg.inputs.size() == 1 ? "" : "s",
                              fg.outputs.size(), fg.outputs.size() == 1 ? "" : "s");
    }
    if (m_ctx && G.nodes.size() > 1) {
      Decision d;
      d.kind = Decision::Kind::Note;
      d.nodes = G.nodes;
      d.values = fg.outputs;
      d.prov = nodes[static_cast<size_t>(G.nodes[0])].prov;
      d.message = fmt::format("{} ({}): {}", fg.name, groupKindName(fg.kind), fg.reason);
      m_ctx->record(std::move(d));
    }
    plan.groups.push_back(std::move(fg));
  }
  return plan;
}

}  // namespace

Result<FusionPlan> planFusion(const ir::Graph& g, const ir::OpRegistry& reg, PassContext* ctx,
                              const FusionOptions& options) {
  Planner p(g, reg, ctx, options);
  return p.run();
}

Result<bool> Fusion::run(ir::Graph& g, PassContext& ctx) {
  TSR_ASSIGN(FusionPlan plan, planFusion(g, ctx.registry(), &ctx, m_options));
  ctx.setFusionPlan(std::make_shared<const FusionPlan>(std::move(plan)));
  return false;
}

namespace {

const char* hintFor(FusionReason r) {
  switch (r) {
    case FusionReason::DifferentSpaces:
      return "the two run over different shapes (a broadcast or a reduction lies between them); only ops over one "
             "iteration space share a loop";
    case FusionReason::AfterReduction:
      return "a reduction's result is complete only after its kernel, so its consumers start the next kernel";
    case FusionReason::OpaqueProducer:
    case FusionReason::OwnKernel:
      return "only elementwise ops with a loop lowering, reductions (with their prologue) and gemm epilogues fuse";
    case FusionReason::NoLoopLowering:
      return "give the op a loop lowering: def.loop = TSR_LOOP_LOWERING(arity, expression) (engine/ops/loop_lowering.h)";
    case FusionReason::UnsupportedDType: return "fused loops take f32 (and bool masks): compute in f32";
    case FusionReason::WouldCycle:
      return "another path between them runs through a kernel outside the fusion; fusing would make the kernel wait "
             "for itself";
    case FusionReason::ReadsThroughView:
      return "the consumer reads the value through a transpose or another view; kernels evaluate element for element";
    case FusionReason::Unrelated: return "neither reads the other's result: fusion joins producers and consumers";
    case FusionReason::Recomputed:
      return "the recompute pass copied this cheap value into the kernel that reads it, so that the producer's kernel "
             "need not store it (TESSERA_RECOMPUTE=off keeps one copy)";
    case FusionReason::NoPostOp:
      return "a convolution's epilogue runs as oneDNN post-ops: a chain of relu, tanh, logistic, gelu, and add, sub, "
             "mul, div, max or min with a scalar, a per-channel vector or a tensor of the result's shape, each op "
             "reading the value before it, which nothing else reads";
    default: return "";
  }
}

bool contains(const std::vector<NodeId>& v, NodeId n) { return std::find(v.begin(), v.end(), n) != v.end(); }

// The plan's group of node n; -1 for a view read through, or an id outside the plan.
int groupOf(const FusionPlan& plan, NodeId n) {
  return n >= 0 && static_cast<size_t>(n) < plan.groupOfNode.size() ? plan.groupOfNode[static_cast<size_t>(n)] : -1;
}

// The values node n's kernel reads for its operands (view sources where it reads through), or its operands where
// the plan has no such table for this graph.
const std::vector<ValueId>& effectiveOperandsOf(const ir::Graph& g, const FusionPlan& plan, NodeId n) {
  return plan.effectiveOperands.size() == g.nodes().size() ? plan.effectiveOperands[static_cast<size_t>(n)]
                                                           : g.nodes()[static_cast<size_t>(n)].operands;
}

}  // namespace

FusionVerdict whyNotFused(const ir::Graph& g, const FusionPlan& plan, std::span<const Decision> decisions, NodeId a,
                          NodeId b) {
  FusionVerdict v;
  if (groupOf(plan, a) >= 0 && groupOf(plan, a) == groupOf(plan, b)) {
    v.fused = true;
    v.reason = FusionReason::Fused;
    v.detail = fmt::format("both run in {}", plan.groups[static_cast<size_t>(groupOf(plan, a))].name);
  }
  // A decision about the pair itself, the latest first (fusion decisions are those with a reason).
  for (auto it = decisions.rbegin(); it != decisions.rend(); ++it)
    if (it->reason != FusionReason::None && it->region.empty() && contains(it->nodes, a) &&
        contains(it->nodes, b) && (it->kind == Decision::Kind::Rejected) != v.fused) {
      v.reason = it->reason;
      v.detail = it->message;
      v.hint = v.fused ? "" : hintFor(v.reason);
      return v;
    }
  if (v.fused) return v;
  // Otherwise: whether one reads the other at all, then what kept either one out of every loop.
  auto reads = [&](NodeId consumer, NodeId producer) {
    if (consumer < 0 || producer < 0 || consumer >= static_cast<NodeId>(g.nodes().size()) ||
        producer >= static_cast<NodeId>(g.nodes().size()))
      return false;
    for (ValueId x : effectiveOperandsOf(g, plan, consumer))
      if (g.value(x).producer == producer) return true;
    for (ValueId x : g.nodes()[static_cast<size_t>(consumer)].operands)
      if (g.value(x).producer == producer) return true;
    return false;
  };
  if (!reads(a, b) && !reads(b, a)) {
    v.reason = FusionReason::Unrelated;
    v.detail = fmt::format("node {} and node {} do not read each other's results", a, b);
    v.hint = hintFor(v.reason);
    return v;
  }
  for (NodeId n : {a, b})
    for (const Decision& d : decisions)
      if (d.reason != FusionReason::None && d.region.empty() && d.nodes.size() == 1 && d.nodes[0] == n &&
          d.kind == Decision::Kind::Rejected) {
        v.reason = d.reason;
        v.detail = d.message;
        v.hint = hintFor(v.reason);
        return v;
      }
  v.detail = "no fusion decision was recorded for these nodes";
  return v;
}

std::vector<UnfusedBoundary> costliestUnfusedBoundaries(const ir::Graph& g, const FusionPlan& plan,
                                                        std::span<const Decision> decisions, size_t count) {
  std::vector<UnfusedBoundary> all;
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const FusionGroup& group = plan.groups[gi];
    if (group.kind == GroupKind::Alias || group.kind == GroupKind::Constant) continue;
    for (ValueId v : group.inputs) {
      const NodeId producer = g.value(v).producer;
      const int pg = groupOf(plan, producer);
      if (pg < 0 || pg == static_cast<int>(gi)) continue;
      const GroupKind pk = plan.groups[static_cast<size_t>(pg)].kind;
      if (pk == GroupKind::Constant) continue;
      // The first member that reads it (directly or through a view).
      NodeId consumer = ir::kNone;
      for (NodeId n : group.nodes) {
        if (contains(effectiveOperandsOf(g, plan, n), v) || contains(g.nodes()[static_cast<size_t>(n)].operands, v)) {
          consumer = n;
          break;
        }
      }
      if (consumer == ir::kNone) consumer = group.nodes.empty() ? ir::kNone : group.nodes.front();
      UnfusedBoundary b;
      b.producer = producer;
      b.consumer = consumer;
      b.value = v;
      b.producerGroup = pg;
      b.consumerGroup = static_cast<int>(gi);
      b.bytes = 2 * g.aval(v).bytes();
      all.push_back(std::move(b));
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const UnfusedBoundary& a, const UnfusedBoundary& b) { return a.bytes > b.bytes; });
  if (all.size() > count) all.resize(count);
  for (UnfusedBoundary& b : all) b.verdict = whyNotFused(g, plan, decisions, b.producer, b.consumer);
  return all;
}

}  // namespace tsr::passes
