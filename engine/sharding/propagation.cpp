#include "engine/sharding/propagation.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/ir/host_callback.h"

namespace tsr::sharding {

// ---- TensorSharding ----

Result<TensorSharding> TensorSharding::fromSpec(const Mesh& mesh, const PartitionSpec& spec, const Shape& shape) {
  TSR_ASSIGN(NamedSharding named, NamedSharding::create(mesh, spec));
  TSR_TRY(named.check(shape));
  TensorSharding t = replicated(shape.rank());
  for (size_t d = 0; d < spec.dims.size(); ++d)
    for (const std::string& axis : spec.dims[d]) t.dims[d].push_back(mesh.axisIndex(axis));
  return t;
}

PartitionSpec TensorSharding::toSpec(const Mesh& mesh) const {
  PartitionSpec spec;
  for (const auto& axes : dims) {
    std::vector<std::string> names;
    for (int a : axes) names.push_back(mesh.axes[static_cast<size_t>(a)]);
    spec.dims.push_back(std::move(names));
  }
  return spec;
}

bool TensorSharding::isReplicated() const {
  return partial.empty() && std::all_of(dims.begin(), dims.end(), [](const auto& d) { return d.empty(); });
}

bool TensorSharding::usesAxis(int axis) const {
  for (const auto& d : dims)
    if (std::find(d.begin(), d.end(), axis) != d.end()) return true;
  return std::find(partial.begin(), partial.end(), axis) != partial.end();
}

int64_t TensorSharding::shards(const Mesh& mesh, int dim) const {
  int64_t n = 1;
  for (int a : dims[static_cast<size_t>(dim)]) n *= mesh.shape[static_cast<size_t>(a)];
  return n;
}

Shape TensorSharding::localShape(const Mesh& mesh, const Shape& global) const {
  std::vector<int64_t> s = global.dims();
  for (int d = 0; d < global.rank(); ++d) s[static_cast<size_t>(d)] /= shards(mesh, d);
  return Shape(std::move(s));
}

std::string TensorSharding::toString(const Mesh& mesh) const {
  std::string s = toSpec(mesh).toString();
  if (!partial.empty()) {
    s += " partial(";
    for (size_t i = 0; i < partial.size(); ++i)
      s += fmt::format("{}'{}'", i ? ", " : "", mesh.axes[static_cast<size_t>(partial[i])]);
    s += ")";
  }
  return s;
}

std::string ShardingOrigin::toString(const ir::Graph& g, const ir::OpRegistry& reg) const {
  auto opName = [&] {
    const ir::Node& n = g.nodes()[static_cast<size_t>(node)];
    const ir::OpDef* def = reg.find(n.op);
    std::string s = fmt::format("{} (node {}", def ? def->name : "?", node);
    if (!n.prov.empty()) s += ", " + n.prov.toString();
    return s + ")";
  };
  switch (kind) {
    case Kind::Default: return "replicated (nothing splits it)";
    case Kind::Annotation: return "annotation: " + annotation;
    case Kind::Forward: return "propagated forward from " + opName();
    case Kind::Backward: return "propagated backward from " + opName();
  }
  return "";
}

std::string describePlan(const ir::Graph& g, const ir::OpRegistry& reg, const ShardingPlan& plan) {
  std::string out;
  auto line = [&](ir::ValueId v, const std::string& def) {
    auto vi = static_cast<size_t>(v);
    out += fmt::format("%{} = {} {} {}  {}\n", v, def, g.aval(v).toString(), plan.values[vi].toString(plan.mesh),
                       plan.origins[vi].toString(g, reg));
  };
  for (size_t i = 0; i < g.inputs().size(); ++i) line(g.inputs()[i], fmt::format("input {}", i));
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    const ir::Node& n = g.nodes()[k];
    const ir::OpDef* def = reg.find(n.op);
    std::string args;
    for (size_t i = 0; i < n.operands.size(); ++i) args += fmt::format("{}%{}", i ? ", " : "", n.operands[i]);
    for (ir::ValueId r : n.results) line(r, fmt::format("{}({})", def ? def->name : "?", args));
    if (k >= plan.regions.size() || (n.op != ir::OpCode::Scan && n.op != ir::OpCode::Cond)) continue;
    // A scan's body or a cond's branches, indented under it, or why the op runs whole.
    const RegionPlans& rp = plan.regions[k];
    if (rp.plans.empty()) {
      out += fmt::format("  runs whole on every device: {}\n", rp.whole);
      continue;
    }
    for (size_t b = 0; b < rp.plans.size(); ++b) {
      const ir::Graph* nested = n.op == ir::OpCode::Scan ? std::get<ir::ScanAttrs>(n.attrs).body.get()
                                : b == 0 ? std::get<ir::CondAttrs>(n.attrs).trueBranch.get()
                                         : std::get<ir::CondAttrs>(n.attrs).falseBranch.get();
      out += n.op == ir::OpCode::Scan ? "  body:\n" : b == 0 ? "  true branch:\n" : "  false branch:\n";
      std::string inner = describePlan(*nested, reg, rp.plans[b]);
      size_t start = 0;
      while (start < inner.size()) {
        size_t end = inner.find('\n', start);
        if (end == std::string::npos) end = inner.size();
        out += "    " + inner.substr(start, end - start) + "\n";
        start = end + 1;
      }
    }
  }
  return out;
}

bool isFreeToMake(const ir::Graph& g, ir::ValueId v) {
  ir::NodeId p = g.value(v).producer;
  if (p == ir::kNone) return false;
  const ir::Node& n = g.nodes()[static_cast<size_t>(p)];
  if (n.op == ir::OpCode::Constant || n.op == ir::OpCode::Iota) return true;
  return n.op == ir::OpCode::BroadcastInDim && g.aval(n.operands[0]).rank() == 0;
}

// ---- propagation ----

Result<Mesh> constraintMesh(const ir::ShardingConstraintAttrs& attrs) {
  std::vector<std::string> axes;
  size_t start = 0;
  while (start <= attrs.meshAxes.size()) {
    size_t comma = attrs.meshAxes.find(',', start);
    if (comma == std::string::npos) comma = attrs.meshAxes.size();
    axes.push_back(attrs.meshAxes.substr(start, comma - start));
    start = comma + 1;
  }
  std::vector<int> devices(attrs.devices.begin(), attrs.devices.end());
  return Mesh::create(attrs.meshShape, std::move(axes), std::move(devices));
}

Result<TensorSharding> constraintSharding(const ir::ShardingConstraintAttrs& attrs, const Shape& shape) {
  TSR_ASSIGN(Mesh mesh, constraintMesh(attrs));
  TSR_ASSIGN(PartitionSpec spec, PartitionSpec::parse(attrs.spec));
  return TensorSharding::fromSpec(mesh, spec, shape);
}

Result<TensorSharding> manualSharding(const ir::ShardingConstraintAttrs& attrs, const Mesh& mesh, const Shape& shape,
                                      const std::string& what) {
  TSR_ASSIGN(Mesh own, constraintMesh(attrs));
  if (!(own == mesh))
    return makeError("{}: the call runs on {} inside a program on {}: put the program's arguments on {} (or call it "
                     "on one-device arrays)", what, own.toString(), mesh.toString(), own.toString());
  auto t = constraintSharding(attrs, shape);
  if (!t.ok()) return makeError("{}: {}", what, t.error().message);
  return t;
}

Result<ir::ShardingRule> shardingRuleOf(const ir::Graph& g, const ir::Node& n, const ir::OpRegistry& reg) {
  std::vector<Aval> in, out;
  for (ir::ValueId v : n.operands) in.push_back(g.aval(v));
  for (ir::ValueId v : n.results) out.push_back(g.aval(v));
  const ir::OpDef* def = reg.find(n.op);
  if (def && def->shard) return def->shard(in, out, n.attrs);
  ir::ShardingRule r;
  for (const Aval& a : in) r.operandDims.emplace_back(static_cast<size_t>(a.rank()), -1);
  for (const Aval& a : out) r.resultDims.emplace_back(static_cast<size_t>(a.rank()), -1);
  return r;
}

namespace {

// One operand or result of a node, as the sweep sees it.
struct Slot {
  ir::ValueId value;
  const std::vector<int>* dims;  // factor per dim
  bool isResult;
  int index;
};

class Propagator {
 public:
  Propagator(const ir::Graph& g, const ir::OpRegistry& reg, ShardingPlan& plan) : m_g(g), m_reg(reg), m_plan(plan) {}

  Status run() {
    m_decided = m_plan.annotated;
    m_free.resize(m_plan.values.size());
    for (size_t v = 0; v < m_free.size(); ++v) m_free[v] = isFreeToMake(m_g, static_cast<ir::ValueId>(v));
    for (const ir::Node& n : m_g.nodes()) {
      TSR_ASSIGN(ir::ShardingRule r, shardingRuleOf(m_g, n, m_reg));
      m_rules.push_back(std::move(r));
    }
    const auto& nodes = m_g.nodes();
    m_plan.regions.assign(nodes.size(), {});
    m_regionKeys.assign(nodes.size(), std::nullopt);
    const int maxSweeps = 64;
    for (int sweep = 0; sweep < maxSweeps; ++sweep) {
      m_changed = false;
      bool forward = sweep % 2 == 0;
      for (size_t k = 0; k < nodes.size(); ++k) {
        size_t i = forward ? k : nodes.size() - 1 - k;
        TSR_TRY(visit(static_cast<ir::NodeId>(i), forward));
      }
      m_plan.sweeps = sweep + 1;
      // Stop after a forward and a backward sweep that changed nothing.
      if (!m_changed && sweep > 0) {
        if (m_quiet) break;
        m_quiet = true;
      } else {
        m_quiet = false;
      }
    }
    return {};
  }

 private:
  std::string describe(const ir::Node& n) const {
    const ir::OpDef* def = m_reg.find(n.op);
    std::string s = def ? def->name : "op";
    if (!n.prov.empty()) s += " at " + n.prov.toString();
    return s;
  }

  // The slots of node n, annotated ones first, then operands before results going forward (results before
  // operands going backward): the first split a factor finds is the one it spreads.
  std::vector<Slot> slots(const ir::Node& n, const ir::ShardingRule& r, bool forward) const {
    std::vector<Slot> ops, res;
    for (size_t i = 0; i < n.operands.size(); ++i)
      ops.push_back({n.operands[i], &r.operandDims[i], false, static_cast<int>(i)});
    for (size_t i = 0; i < n.results.size(); ++i)
      res.push_back({n.results[i], &r.resultDims[i], true, static_cast<int>(i)});
    std::vector<Slot> all = forward ? ops : res;
    const auto& rest = forward ? res : ops;
    all.insert(all.end(), rest.begin(), rest.end());
    std::stable_partition(all.begin(), all.end(),
                          [&](const Slot& s) { return m_plan.annotated[static_cast<size_t>(s.value)]; });
    return all;
  }

  Status visit(ir::NodeId id, bool forward) {
    const ir::Node& n = m_g.nodes()[static_cast<size_t>(id)];
    if (n.op == ir::OpCode::Scan || n.op == ir::OpCode::Cond) {
      if (forward) visitRegions(id);
      return {};
    }
    const ir::ShardingRule& r = m_rules[static_cast<size_t>(id)];
    std::vector<Slot> order = slots(n, r, forward);
    for (size_t f = 0; f < r.factors.size(); ++f) {
      // The split this factor takes: the first slot's that has one; two annotated slots must agree. When the
      // annotated slots that have this factor all leave it whole, it stays whole: an explicit replication
      // (a replicated parameter and its update) wins over a split propagated from elsewhere.
      const std::vector<int>* chosen = nullptr;
      const Slot* chosenSlot = nullptr;
      bool annotatedWhole = false;
      for (const Slot& s : order) {
        const bool annotated = m_plan.annotated[static_cast<size_t>(s.value)];
        for (size_t d = 0; d < s.dims->size(); ++d) {
          if ((*s.dims)[d] != static_cast<int>(f)) continue;
          const auto& axes = m_plan.values[static_cast<size_t>(s.value)].dims[d];
          if (!annotated && m_free[static_cast<size_t>(s.value)]) continue;  // a split of a shared zero says nothing
          if (axes.empty()) {
            annotatedWhole = annotatedWhole || annotated;
            continue;
          }
          if (!annotated && annotatedWhole && !chosen) continue;
          if (!chosen) {
            chosen = &axes;
            chosenSlot = &s;
          } else if (axes != *chosen && !s.isResult && !chosenSlot->isResult &&
                     m_plan.annotated[static_cast<size_t>(s.value)] &&
                     m_plan.annotated[static_cast<size_t>(chosenSlot->value)]) {
            // Two annotated operands that split one factor differently. (An annotated result that differs
            // from its operands is a reshard the user asked for.)
            return conflict(n, *chosenSlot, s);
          }
        }
      }
      if (!chosen) continue;
      const std::vector<int> axes = *chosen;  // copied: assigning below may touch the vector it points into
      for (const Slot& s : order) {
        for (size_t d = 0; d < s.dims->size(); ++d)
          if ((*s.dims)[d] == static_cast<int>(f)) assign(s.value, static_cast<int>(d), axes, id, s.isResult);
      }
    }
    // Going forward, the results of an op with a decided operand are decided as they now are (split or not),
    // as GSPMD's forward pass decides them: later sweeps only fill values nothing had reached, so a consumer
    // far downstream cannot split an activation its producer left whole (which would cost a collective).
    if (forward && std::any_of(n.operands.begin(), n.operands.end(), [&](ir::ValueId v) { return m_decided[static_cast<size_t>(v)]; }))
      for (ir::ValueId v : n.results) m_decided[static_cast<size_t>(v)] = true;
    return {};
  }

  // scan and cond, going forward: their nested graphs are planned with the operands' shardings (again whenever
  // those change), and the results take the shardings the nested graphs give them. A nested graph that cannot
  // be planned leaves the op whole on every device, with the reason.
  void visitRegions(ir::NodeId id) {
    const ir::Node& n = m_g.nodes()[static_cast<size_t>(id)];
    const auto i = static_cast<size_t>(id);
    std::vector<TensorSharding> key;
    for (ir::ValueId v : n.operands) key.push_back(m_plan.values[static_cast<size_t>(v)]);
    if (!m_regionKeys[i] || *m_regionKeys[i] != key) {
      m_regionKeys[i] = key;
      auto planned = n.op == ir::OpCode::Scan ? planScan(n) : planCond(n);
      if (planned.ok()) m_plan.regions[i] = std::move(planned).value();
      else m_plan.regions[i] = RegionPlans{{}, planned.error().message};
    }
    const RegionPlans& rp = m_plan.regions[i];
    if (rp.plans.empty()) return;
    const ir::Graph& g0 = regionGraph(n, 0);
    const auto nCarry = n.op == ir::OpCode::Scan ? static_cast<size_t>(std::get<ir::ScanAttrs>(n.attrs).numCarry) : 0;
    for (size_t r = 0; r < n.results.size(); ++r) {
      TensorSharding t = rp.plans[0].values[static_cast<size_t>(g0.outputs()[r])];
      if (n.op == ir::OpCode::Scan && r >= nCarry) t.dims.insert(t.dims.begin(), std::vector<int>{});  // ys: [length, ...]
      for (size_t d = 0; d < t.dims.size(); ++d)
        if (!t.dims[d].empty()) assign(n.results[r], static_cast<int>(d), t.dims[d], id, true);
    }
    if (std::any_of(n.operands.begin(), n.operands.end(), [&](ir::ValueId v) { return m_decided[static_cast<size_t>(v)]; }))
      for (ir::ValueId v : n.results) m_decided[static_cast<size_t>(v)] = true;
  }

  static const ir::Graph& regionGraph(const ir::Node& n, int which) {
    if (n.op == ir::OpCode::Scan) return *std::get<ir::ScanAttrs>(n.attrs).body;
    const auto& a = std::get<ir::CondAttrs>(n.attrs);
    return which == 0 ? *a.trueBranch : *a.falseBranch;
  }

  // Per dim, the axes both split it over (the common prefix): a sharding both can reach by gathers alone.
  static TensorSharding meet(const TensorSharding& a, const TensorSharding& b) {
    TensorSharding t = TensorSharding::replicated(static_cast<int>(a.dims.size()));
    for (size_t d = 0; d < a.dims.size(); ++d) {
      size_t k = 0;
      while (k < a.dims[d].size() && k < b.dims[d].size() && a.dims[d][k] == b.dims[d][k]) ++k;
      t.dims[d].assign(a.dims[d].begin(), a.dims[d].begin() + static_cast<std::ptrdiff_t>(k));
    }
    return t;
  }

  // The body, planned with the consts and carries as the operands hold them and each x slice as its x without
  // the scanned dim (a split there is gathered first). The carries are iterated to a fixed point: a carry that
  // leaves the body split otherwise than it entered enters next time split as both agree (the common prefix);
  // a carry made from nothing (zeros) enters split as it leaves; failing that, the body's carry outputs are
  // annotated as the carries enter, and the partitioner reshards them inside the body.
  Result<RegionPlans> planScan(const ir::Node& n) {
    const auto& a = std::get<ir::ScanAttrs>(n.attrs);
    const ir::Graph& body = *a.body;
    const auto nC = static_cast<size_t>(a.numConsts), nH = static_cast<size_t>(a.numCarry);
    std::vector<TensorSharding> in;
    for (size_t i = 0; i < n.operands.size(); ++i) {
      TensorSharding t = m_plan.values[static_cast<size_t>(n.operands[i])];
      if (i >= nC + nH) t.dims.erase(t.dims.begin());
      in.push_back(std::move(t));
    }
    const int maxRounds = 4 + 2 * static_cast<int>(nH);
    bool force = false;
    for (int round = 0; round < maxRounds; ++round) {
      force = force || round + 1 == maxRounds;
      ShardingAnnotations ann;
      for (const TensorSharding& t : in) ann.inputs.emplace_back(t);
      if (force) {
        ann.outputs.resize(body.outputs().size());
        for (size_t k = 0; k < nH; ++k) ann.outputs[k] = in[nC + k];
      }
      TSR_ASSIGN(ShardingPlan p, propagateShardings(body, m_reg, m_plan.mesh, ann));
      bool fixed = true;
      for (size_t k = 0; k < nH; ++k) {
        const TensorSharding& out = p.values[static_cast<size_t>(body.outputs()[k])];
        TensorSharding& carry = in[nC + k];
        if (out == carry) continue;
        fixed = false;
        TensorSharding common = meet(carry, out);
        if (!(common == carry)) carry = std::move(common);
        else if (m_free[static_cast<size_t>(n.operands[nC + k])]) carry = out;
        else force = true;
      }
      if (fixed) return RegionPlans{{std::move(p)}, {}};
    }
    return makeError("the carries' shardings reach no fixed point");
  }

  // Both branches, planned with the operands' shardings; where their results differ, both are annotated with
  // what they agree on (the partitioner reshards inside the branches).
  Result<RegionPlans> planCond(const ir::Node& n) {
    const auto& a = std::get<ir::CondAttrs>(n.attrs);
    ShardingAnnotations ann;
    for (size_t i = 1; i < n.operands.size(); ++i) ann.inputs.emplace_back(m_plan.values[static_cast<size_t>(n.operands[i])]);
    RegionPlans rp;
    for (const ir::GraphPtr& g : {a.trueBranch, a.falseBranch}) {
      TSR_ASSIGN(ShardingPlan p, propagateShardings(*g, m_reg, m_plan.mesh, ann));
      rp.plans.push_back(std::move(p));
    }
    bool agree = true;
    for (size_t r = 0; r < n.results.size(); ++r) {
      const TensorSharding& t = rp.plans[0].values[static_cast<size_t>(a.trueBranch->outputs()[r])];
      const TensorSharding& f = rp.plans[1].values[static_cast<size_t>(a.falseBranch->outputs()[r])];
      ann.outputs.emplace_back(meet(t, f));
      agree = agree && t == f;
    }
    if (agree) return rp;
    rp.plans.clear();
    for (const ir::GraphPtr& g : {a.trueBranch, a.falseBranch}) {
      TSR_ASSIGN(ShardingPlan p, propagateShardings(*g, m_reg, m_plan.mesh, ann));
      rp.plans.push_back(std::move(p));
    }
    return rp;
  }

  // Splits dim d of v over `axes` when v is free there: not annotated, not split yet, the axes unused by v's
  // other dims, and the dim divisible.
  void assign(ir::ValueId v, int d, const std::vector<int>& axes, ir::NodeId node, bool isResult) {
    auto vi = static_cast<size_t>(v);
    if (m_decided[vi]) return;
    TensorSharding& t = m_plan.values[vi];
    if (!t.dims[static_cast<size_t>(d)].empty()) return;
    for (int a : axes)
      if (t.usesAxis(a)) return;
    int64_t n = 1;
    for (int a : axes) n *= m_plan.mesh.shape[static_cast<size_t>(a)];
    if (m_g.aval(v).shape[d] % n != 0) return;
    t.dims[static_cast<size_t>(d)] = axes;
    m_changed = true;
    ShardingOrigin& o = m_plan.origins[vi];
    if (o.kind == ShardingOrigin::Kind::Default) {
      // A result learns from its op (forward); an operand learns from its consumer (backward).
      o.kind = isResult ? ShardingOrigin::Kind::Forward : ShardingOrigin::Kind::Backward;
      o.node = node;
    }
  }

  Error conflict(const ir::Node& n, const Slot& a, const Slot& b) const {
    auto name = [&](const Slot& s) {
      return fmt::format("{} {} {}", s.isResult ? "result" : "operand", s.index,
                         m_plan.values[static_cast<size_t>(s.value)].toString(m_plan.mesh));
    };
    auto why = [&](const Slot& s) {
      return m_plan.origins[static_cast<size_t>(s.value)].annotation;
    };
    return makeError("{}: conflicting explicit shardings: {} ({}) and {} ({}); reshard one of them with "
                     "devicePut or withShardingConstraint",
                     describe(n), name(a), why(a), name(b), why(b));
  }

  const ir::Graph& m_g;
  const ir::OpRegistry& m_reg;
  ShardingPlan& m_plan;
  std::vector<ir::ShardingRule> m_rules;
  std::vector<bool> m_decided;  // annotated, or fixed by the forward pass
  std::vector<bool> m_free;     // isFreeToMake
  // By NodeId: the operands' shardings a scan's or cond's nested graphs were last planned with.
  std::vector<std::optional<std::vector<TensorSharding>>> m_regionKeys;
  bool m_changed = false;
  bool m_quiet = false;
};

}  // namespace

Result<ShardingPlan> propagateShardings(const ir::Graph& g, const ir::OpRegistry& reg, const Mesh& mesh,
                                        const ShardingAnnotations& annotations) {
  ShardingPlan plan;
  plan.mesh = mesh;
  const auto numValues = static_cast<size_t>(g.numValues());
  plan.values.resize(numValues);
  plan.origins.resize(numValues);
  plan.annotated.assign(numValues, false);
  for (size_t v = 0; v < numValues; ++v) plan.values[v] = TensorSharding::replicated(g.aval(static_cast<ir::ValueId>(v)).rank());

  auto annotate = [&](ir::ValueId v, const TensorSharding& t, std::string why) -> Status {
    auto vi = static_cast<size_t>(v);
    const Shape& shape = g.aval(v).shape;
    if (static_cast<int>(t.dims.size()) != shape.rank())
      return makeError("{}: sharding {} has {} dims, the value {} has {}", why, t.toString(mesh), t.dims.size(),
                       g.aval(v).toString(), shape.rank());
    // A user's sharding must divide its dims (NamedSharding::check names the dim and the mesh axes); only the
    // splits propagation picks itself may leave a dim whole where they would not divide it.
    if (auto st = NamedSharding{mesh, t.toSpec(mesh)}.check(shape); !st.ok())
      return makeError("{}: {}", why, st.error().message);
    if (plan.annotated[vi] && !(plan.values[vi] == t))
      return makeError("{}: conflicting explicit shardings {} ({}) and {}", why, plan.values[vi].toString(mesh),
                       plan.origins[vi].annotation, t.toString(mesh));
    plan.values[vi] = t;
    plan.annotated[vi] = true;
    plan.origins[vi] = {ShardingOrigin::Kind::Annotation, ir::kNone, std::move(why)};
    return {};
  };
  for (size_t i = 0; i < annotations.inputs.size() && i < g.inputs().size(); ++i) {
    if (!annotations.inputs[i]) continue;
    std::string name = i < annotations.inputNames.size() && !annotations.inputNames[i].empty()
                           ? "argument " + annotations.inputNames[i]
                           : fmt::format("argument {}", i);
    TSR_TRY(annotate(g.inputs()[i], *annotations.inputs[i], name));
  }
  for (size_t i = 0; i < annotations.outputs.size() && i < g.outputs().size(); ++i)
    if (annotations.outputs[i]) TSR_TRY(annotate(g.outputs()[i], *annotations.outputs[i], fmt::format("output {}", i)));

  for (const ir::Node& n : g.nodes()) {
    if (n.op != ir::OpCode::ShardingConstraint) continue;
    const auto& attrs = std::get<ir::ShardingConstraintAttrs>(n.attrs);
    std::string where = "sharding_constraint" + (n.prov.empty() ? std::string() : " at " + n.prov.toString());
    auto m = constraintMesh(attrs);
    if (!m.ok()) return makeError("{}: {}", where, m.error().message);
    if (!(*m == mesh))
      return makeError("{}: its mesh {} differs from the arguments' mesh {}", where, m->toString(), mesh.toString());
    auto t = constraintSharding(attrs, g.aval(n.results[0]).shape);
    if (!t.ok()) return makeError("{}: {}", where, t.error().message);
    TSR_TRY(annotate(n.results[0], *t, where));
  }
  // shard_map's calls give their results split as their out_specs say (ir::ManualSharding).
  for (const ir::Node& n : g.nodes()) {
    if (n.op != ir::OpCode::HostCallback) continue;
    ir::HostCallbackPtr cb = ir::hostCallbackOf(std::get<ir::HostCallbackAttrs>(n.attrs));
    if (!cb || !cb->manual) continue;
    for (size_t r = 0; r < n.results.size() && r < cb->manual->results.size(); ++r) {
      std::string what = fmt::format("{} result {}", cb->name, r);
      TSR_ASSIGN(TensorSharding t, manualSharding(cb->manual->results[r], mesh, g.aval(n.results[r]).shape, what));
      TSR_TRY(annotate(n.results[r], t, what));
    }
  }
  Propagator p(g, reg, plan);
  TSR_TRY(p.run());
  return plan;
}

}  // namespace tsr::sharding
