#include "engine/sharding/partitioner.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "engine/ir/host_callback.h"

namespace tsr::sharding {

std::string CollectiveInfo::toString() const {
  return fmt::format("{} over {} ({} bytes per device): {}", opName, axisNames, bytes, reason);
}

namespace {

int64_t axesSize(const Mesh& mesh, const std::vector<int>& axes) {
  int64_t n = 1;
  for (int a : axes) n *= mesh.shape[static_cast<size_t>(a)];
  return n;
}

// The linear index of mesh position p's coordinates along `axes` (major to minor).
int64_t indexAlong(const Mesh& mesh, int p, const std::vector<int>& axes) {
  std::vector<int64_t> c = mesh.coordinates(p);
  int64_t i = 0;
  for (int a : axes) i = i * mesh.shape[static_cast<size_t>(a)] + c[static_cast<size_t>(a)];
  return i;
}

// Mesh position p's coordinates along the axes not in `axes`, as a key.
std::vector<int64_t> otherCoordinates(const Mesh& mesh, int p, const std::vector<int>& axes) {
  std::vector<int64_t> c = mesh.coordinates(p);
  std::vector<int64_t> key;
  for (size_t a = 0; a < c.size(); ++a)
    if (std::find(axes.begin(), axes.end(), static_cast<int>(a)) == axes.end()) key.push_back(c[a]);
  return key;
}

std::string axisNames(const Mesh& mesh, const std::vector<int>& axes) {
  if (axes.size() == 1) return fmt::format("'{}'", mesh.axes[static_cast<size_t>(axes[0])]);
  std::string s = "(";
  for (size_t i = 0; i < axes.size(); ++i) s += fmt::format("{}'{}'", i ? ", " : "", mesh.axes[static_cast<size_t>(axes[i])]);
  return s + ")";
}

bool isPrefix(const std::vector<int>& a, const std::vector<int>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

std::vector<int64_t> deviceGroups(const Mesh& mesh, const std::vector<int>& axes) {
  const int64_t size = axesSize(mesh, axes);
  std::map<std::vector<int64_t>, size_t> groupOf;
  std::vector<std::vector<int64_t>> groups;
  for (int p = 0; p < mesh.size(); ++p) {
    auto key = otherCoordinates(mesh, p, axes);
    auto [it, added] = groupOf.emplace(key, groups.size());
    if (added) groups.emplace_back(static_cast<size_t>(size));
    groups[it->second][static_cast<size_t>(indexAlong(mesh, p, axes))] = mesh.devices[static_cast<size_t>(p)];
  }
  std::vector<int64_t> flat;
  for (const auto& g : groups) flat.insert(flat.end(), g.begin(), g.end());
  return flat;
}

namespace {

class Partitioner {
 public:
  // partialOutputs: per output, whether it may leave as a partial sum (a scan body's ys: the stacked partial
  // sums are completed once, after the loop); outputShardings then carry the partial axes. partialInputs: per
  // input, the axes it arrives as a partial sum over (a scan body's accumulator carry), or none.
  Partitioner(const ir::Graph& g, const ir::OpRegistry& reg, const ShardingPlan& plan,
              std::vector<bool> partialOutputs = {}, std::vector<std::vector<int>> partialInputs = {})
      : m_g(g), m_reg(reg), m_plan(plan), m_mesh(plan.mesh), m_partialOutputs(std::move(partialOutputs)),
        m_partialInputs(std::move(partialInputs)) {}

  Result<PartitionResult> run() {
    m_out.local.name = m_g.name;
    m_localOf.assign(static_cast<size_t>(m_g.numValues()), ir::kNone);
    for (size_t i = 0; i < m_g.inputs().size(); ++i) {
      const ir::ValueId v = m_g.inputs()[i];
      TensorSharding s = sharding(v);
      m_localOf[static_cast<size_t>(v)] = m_out.local.addInput(localAval(v, s));
      if (i < m_partialInputs.size() && !m_partialInputs[i].empty()) {
        s.partial = m_partialInputs[i];
        m_pending[v] = Pending{s, fmt::format("input {}", i), ir::kNone};
      }
      m_out.inputShardings.push_back(std::move(s));
    }
    for (size_t i = 0; i < m_g.nodes().size(); ++i) TSR_TRY(partitionNode(static_cast<ir::NodeId>(i)));
    std::vector<ir::ValueId> outs;
    const auto& gOuts = m_g.outputs();
    for (size_t i = 0; i < gOuts.size(); ++i)
      if (i >= m_partialOutputs.size() || !m_partialOutputs[i]) TSR_TRY(complete(gOuts[i]));
    for (ir::ValueId v : gOuts) {
      outs.push_back(m_localOf[static_cast<size_t>(v)]);
      auto it = m_pending.find(v);
      m_out.outputShardings.push_back(it == m_pending.end() ? sharding(v) : it->second.sharding);
    }
    m_out.local.setOutputs(std::move(outs));
    return std::move(m_out);
  }

 private:
  const TensorSharding& sharding(ir::ValueId v) const { return m_plan.values[static_cast<size_t>(v)]; }
  Aval localAval(ir::ValueId v, const TensorSharding& s) const {
    return Aval{s.localShape(m_mesh, m_g.aval(v).shape), m_g.aval(v).dtype};
  }
  std::string opName(ir::OpCode op) const {
    const ir::OpDef* d = m_reg.find(op);
    return d ? d->name : "?";
  }

  Result<ir::ValueId> emit(ir::OpCode op, std::vector<ir::ValueId> operands, ir::Attrs attrs) {
    TSR_ASSIGN(auto r, m_out.local.addNode(m_reg, op, std::move(operands), std::move(attrs), m_prov));
    return r[0];
  }

  // Records a collective and emits it.
  Result<ir::ValueId> collective(ir::OpCode op, ir::ValueId x, ir::Attrs attrs, const std::vector<int>& axes,
                                 const std::string& why) {
    // Over an axis of size 1 every collective is the identity (a (1, N) mesh is model parallelism only).
    if (axesSize(m_mesh, axes) == 1) return x;
    CollectiveInfo c;
    c.op = op;
    c.opName = opName(op);
    c.axes = axes;
    c.axisNames = axisNames(m_mesh, axes);
    c.bytes = m_out.local.aval(x).bytes();
    c.globalNode = m_node;
    c.reason = why;
    if (!m_whole.empty())  // a scan or cond left whole: why
      c.reason += fmt::format(" ({} runs whole on every device: {})", opName(m_g.nodes()[static_cast<size_t>(m_node)].op), m_whole);
    m_out.collectives.push_back(std::move(c));
    return emit(op, {x}, std::move(attrs));
  }

  Result<ir::ValueId> scalarI32(int64_t v) {
    ir::ConstantAttrs c{ir::Literal::scalar(DType::I32, static_cast<double>(v))};
    return emit(ir::OpCode::Constant, {}, c);
  }

  // A per-device table indexed by device id.
  Result<ir::ValueId> deviceTable(const std::function<int64_t(int position)>& value) {
    int maxId = 0;
    for (int d : m_mesh.devices) maxId = std::max(maxId, d);
    ir::DeviceTableAttrs t;
    t.table.assign(static_cast<size_t>(maxId) + 1, 0);
    t.dtype = DType::I32;
    for (int p = 0; p < m_mesh.size(); ++p) t.table[static_cast<size_t>(m_mesh.devices[static_cast<size_t>(p)])] = value(p);
    return emit(ir::OpCode::DeviceTable, {}, t);
  }

  // Reshards local value x (a shard of global value `global` split as `from`) to `to`. `what` names the
  // operand or result for the collectives' reasons.
  Result<ir::ValueId> reshard(ir::ValueId x, ir::ValueId global, TensorSharding from, const TensorSharding& to,
                              const std::string& what) {
    if (from == to) return x;
    const int rank = static_cast<int>(to.dims.size());
    // 1. Partial sums: a reduce_scatter where the target splits a dim further over the partial axes, else an
    //    all_reduce.
    if (!from.partial.empty()) {
      for (int d = 0; d < rank && !from.partial.empty(); ++d) {
        auto& have = from.dims[static_cast<size_t>(d)];
        const auto& want = to.dims[static_cast<size_t>(d)];
        if (!isPrefix(have, want)) continue;
        std::vector<int> axes;
        for (size_t k = have.size(); k < want.size(); ++k) {
          auto it = std::find(from.partial.begin(), from.partial.end(), want[k]);
          if (it == from.partial.end()) break;
          axes.push_back(want[k]);
        }
        if (axes.empty()) continue;
        ir::AllGatherAttrs a{deviceGroups(m_mesh, axes), axesSize(m_mesh, axes), d};
        TSR_ASSIGN(x, collective(ir::OpCode::ReduceScatter, x, a, axes, "complete the partial sum of " + what + " (and split it)"));
        for (int ax : axes) {
          have.push_back(ax);
          from.partial.erase(std::find(from.partial.begin(), from.partial.end(), ax));
        }
      }
      if (!from.partial.empty()) {
        std::vector<int> axes = from.partial;
        std::sort(axes.begin(), axes.end());
        ir::AllReduceAttrs a{deviceGroups(m_mesh, axes), axesSize(m_mesh, axes)};
        TSR_ASSIGN(x, collective(ir::OpCode::AllReduce, x, a, axes, "complete the partial sum of " + what));
        from.partial.clear();
      }
    }
    // 2. A dim split over the same axes in another order: the same pieces on other devices.
    for (int d = 0; d < rank; ++d) {
      const auto& have = from.dims[static_cast<size_t>(d)];
      const auto& want = to.dims[static_cast<size_t>(d)];
      if (have.size() < 2 || have == want || !std::is_permutation(have.begin(), have.end(), want.begin(), want.end()))
        continue;
      TSR_ASSIGN(x, permute(x, have, want, what));
      from.dims[static_cast<size_t>(d)] = want;
    }
    // 3. A split that moves from one dim to another: all_to_all over its axis.
    for (int d1 = 0; d1 < rank; ++d1) {
      auto& src = from.dims[static_cast<size_t>(d1)];
      if (src.empty() || isPrefix(src, to.dims[static_cast<size_t>(d1)])) continue;
      int axis = src.back();
      std::vector<int> rest(src.begin(), src.end() - 1);
      if (!isPrefix(rest, to.dims[static_cast<size_t>(d1)])) continue;
      for (int d2 = 0; d2 < rank; ++d2) {
        auto& dst = from.dims[static_cast<size_t>(d2)];
        const auto& want = to.dims[static_cast<size_t>(d2)];
        if (d2 == d1 || !isPrefix(dst, want) || want.size() <= dst.size() || want[dst.size()] != axis) continue;
        ir::AllToAllAttrs a{deviceGroups(m_mesh, {axis}), axesSize(m_mesh, {axis}), d2, d1};
        TSR_ASSIGN(x, collective(ir::OpCode::AllToAll, x, a, {axis}, "move the split of " + what + " to another dim"));
        src = rest;
        dst.push_back(axis);
        break;
      }
    }
    // 4. Local slices first where the axes are free (less to gather), then gathers, then the remaining slices.
    TSR_ASSIGN(x, slices(x, global, from, to));
    for (int d = 0; d < rank; ++d) {
      auto& have = from.dims[static_cast<size_t>(d)];
      const auto& want = to.dims[static_cast<size_t>(d)];
      if (isPrefix(have, want)) continue;
      size_t k = 0;
      while (k < have.size() && k < want.size() && have[k] == want[k]) ++k;
      std::vector<int> axes(have.begin() + static_cast<std::ptrdiff_t>(k), have.end());
      ir::AllGatherAttrs a{deviceGroups(m_mesh, axes), axesSize(m_mesh, axes), d};
      TSR_ASSIGN(x, collective(ir::OpCode::AllGather, x, a, axes, "make dim " + std::to_string(d) + " of " + what + " whole"));
      have.resize(k);
    }
    TSR_ASSIGN(x, slices(x, global, from, to));
    if (!(from == to))
      return makeError("partitioner: cannot reshard {} from {} to {}", what, from.toString(m_mesh), to.toString(m_mesh));
    return x;
  }

  // Splits dims further where `to` extends `from` with axes no dim of `from` uses: each device keeps its piece
  // with a dynamic_slice at an offset from a per-device table. No communication.
  Result<ir::ValueId> slices(ir::ValueId x, ir::ValueId global, TensorSharding& from, const TensorSharding& to) {
    const int rank = static_cast<int>(to.dims.size());
    std::vector<std::vector<int>> extra(static_cast<size_t>(rank));
    bool any = false;
    for (int d = 0; d < rank; ++d) {
      const auto& have = from.dims[static_cast<size_t>(d)];
      const auto& want = to.dims[static_cast<size_t>(d)];
      if (!isPrefix(have, want)) continue;
      std::vector<int> axes(want.begin() + static_cast<std::ptrdiff_t>(have.size()), want.end());
      if (std::any_of(axes.begin(), axes.end(), [&](int a) { return from.usesAxis(a); })) continue;
      extra[static_cast<size_t>(d)] = axes;
      any = any || !axes.empty();
    }
    if (!any) return x;
    TensorSharding next = from;
    for (int d = 0; d < rank; ++d)
      for (int a : extra[static_cast<size_t>(d)]) next.dims[static_cast<size_t>(d)].push_back(a);
    Aval out = localAval(global, next);
    std::vector<ir::ValueId> operands{x};
    for (int d = 0; d < rank; ++d) {
      const auto& axes = extra[static_cast<size_t>(d)];
      if (axes.empty()) {
        TSR_ASSIGN(ir::ValueId zero, scalarI32(0));
        operands.push_back(zero);
        continue;
      }
      int64_t piece = out.shape[d];
      TSR_ASSIGN(ir::ValueId start,
                 deviceTable([&](int p) { return indexAlong(m_mesh, p, axes) * piece; }));
      operands.push_back(start);
    }
    TSR_ASSIGN(x, emit(ir::OpCode::DynamicSlice, std::move(operands), ir::DynamicSliceAttrs{out.shape.dims()}));
    from = std::move(next);
    return x;
  }

  // Dim split over `have` becomes split over `want` (the same axes, reordered): device p's piece moves to the
  // device that holds the same piece under `want`.
  Result<ir::ValueId> permute(ir::ValueId x, const std::vector<int>& have, const std::vector<int>& want,
                              const std::string& what) {
    std::map<std::pair<std::vector<int64_t>, int64_t>, int> holder;  // (other coords, piece) -> position
    for (int p = 0; p < m_mesh.size(); ++p) holder[{otherCoordinates(m_mesh, p, want), indexAlong(m_mesh, p, want)}] = p;
    ir::CollectivePermuteAttrs a;
    for (int p = 0; p < m_mesh.size(); ++p) {
      int q = holder.at({otherCoordinates(m_mesh, p, have), indexAlong(m_mesh, p, have)});
      a.pairs.push_back(m_mesh.devices[static_cast<size_t>(p)]);
      a.pairs.push_back(m_mesh.devices[static_cast<size_t>(q)]);
    }
    return collective(ir::OpCode::CollectivePermute, x, a, have, "reorder the pieces of " + what);
  }

  // Whether global value v is all zeros: a zero constant, or one broadcast.
  bool isZeros(ir::ValueId v) const {
    ir::NodeId p = m_g.value(v).producer;
    if (p == ir::kNone) return false;
    const ir::Node* n = &m_g.nodes()[static_cast<size_t>(p)];
    if (n->op == ir::OpCode::BroadcastInDim) {
      ir::NodeId q = m_g.value(n->operands[0]).producer;
      if (q == ir::kNone) return false;
      n = &m_g.nodes()[static_cast<size_t>(q)];
    }
    if (n->op != ir::OpCode::Constant) return false;
    const ir::Literal& lit = std::get<ir::ConstantAttrs>(n->attrs).value;
    for (int64_t i = 0; i < lit.aval.numel(); ++i)
      if (lit.elementAsDouble(i) != 0.0) return false;
    return true;
  }

  // Completes v's partial sum if it is still pending: its local value becomes the planned sharding.
  Status complete(ir::ValueId v) {
    auto it = m_pending.find(v);
    if (it == m_pending.end()) return {};
    Pending p = std::move(it->second);
    m_pending.erase(it);
    // The collective belongs to the op that made the partial sum (its reason and source location).
    const ir::NodeId node = m_node;
    ir::Provenance prov = m_prov;
    std::string whole = std::move(m_whole);
    if (p.node != ir::kNone) {  // else an input that arrived partial: the collective belongs to the current op
      m_node = p.node;
      m_prov = m_g.nodes()[static_cast<size_t>(p.node)].prov;
    }
    m_whole.clear();
    auto done = reshard(m_localOf[static_cast<size_t>(v)], v, p.sharding, sharding(v), p.what);
    m_node = node;
    m_prov = std::move(prov);
    m_whole = std::move(whole);
    if (!done.ok()) return done.takeError();
    m_localOf[static_cast<size_t>(v)] = *done;
    return {};
  }

  // A sum of partial sums stays partial: add(a, b) and subtract(a, b) of two pending partial sums split alike
  // add the local pieces, and one collective completes the result, as the analytic count has it (a gradient
  // accumulated from several uses, such as a tied embedding's, is all-reduced once). A scalar that is complete
  // joins a scalar partial sum on one member of each group only (the rest add zero), so that a chain of scalar
  // sums (a global gradient norm over split and replicated gradients) costs one collective, not one per term.
  Result<bool> addPartials(const ir::Node& n) {
    if ((n.op != ir::OpCode::Add && n.op != ir::OpCode::Sub) || n.operands.size() != 2) return false;
    const ir::ValueId res = n.results[0];
    const TensorSharding* partial = nullptr;
    for (ir::ValueId v : n.operands) {
      auto it = m_pending.find(v);
      if (it == m_pending.end()) continue;
      if (partial && !(it->second.sharding == *partial)) return false;
      partial = &it->second.sharding;
    }
    if (!partial) return false;
    TensorSharding planned = *partial;
    planned.partial.clear();
    if (!(planned == sharding(res))) return false;
    const bool scalar = m_g.aval(res).rank() == 0;
    std::vector<ir::ValueId> operands;
    for (ir::ValueId v : n.operands) {
      if (m_pending.count(v)) {
        operands.push_back(m_localOf[static_cast<size_t>(v)]);
        continue;
      }
      if (!scalar) return false;
      // Kept on the group's first member only: x * (1 there, else 0).
      const std::vector<int> axes = partial->partial;
      ir::DeviceTableAttrs t;
      int maxId = 0;
      for (int d : m_mesh.devices) maxId = std::max(maxId, d);
      t.table.assign(static_cast<size_t>(maxId) + 1, 0);
      t.dtype = m_g.aval(v).dtype;
      for (int p = 0; p < m_mesh.size(); ++p)
        t.table[static_cast<size_t>(m_mesh.devices[static_cast<size_t>(p)])] = indexAlong(m_mesh, p, axes) == 0;
      TSR_ASSIGN(ir::ValueId x, localOperand(v, sharding(v), "scalar operand"));
      TSR_ASSIGN(ir::ValueId one, emit(ir::OpCode::DeviceTable, {}, t));
      TSR_ASSIGN(x, emit(ir::OpCode::Mul, {x, one}, ir::NoAttrs{}));
      operands.push_back(x);
    }
    TensorSharding kept = *partial;
    TSR_ASSIGN(ir::ValueId local, emit(n.op, std::move(operands), n.attrs));
    m_localOf[static_cast<size_t>(res)] = local;
    m_pending[res] = Pending{kept, opName(n.op), m_node};
    return true;
  }

  Result<ir::ValueId> localOperand(ir::ValueId v, const TensorSharding& want, const std::string& what) {
    TSR_TRY(complete(v));
    const TensorSharding& have = sharding(v);
    if (!(have == want) && isFreeToMake(m_g, v)) {
      // Made anew in the sharding wanted: a broadcast scalar, or a constant or iota sliced locally.
      ir::NodeId p = m_g.value(v).producer;
      const ir::Node& n = m_g.nodes()[static_cast<size_t>(p)];
      if (n.op == ir::OpCode::BroadcastInDim) {
        Aval local = localAval(v, want);
        return emit(ir::OpCode::BroadcastInDim, {m_localOf[static_cast<size_t>(n.operands[0])]},
                    ir::BroadcastInDimAttrs{local.shape.dims(), {}});
      }
    }
    return reshard(m_localOf[static_cast<size_t>(v)], v, have, want, what);
  }

  Status partitionNode(ir::NodeId id) {
    const ir::Node& n = m_g.nodes()[static_cast<size_t>(id)];
    m_node = id;
    m_prov = n.prov;
    m_whole.clear();
    const std::string op = opName(n.op);
    if (n.op == ir::OpCode::Scan || n.op == ir::OpCode::Cond) {
      TSR_ASSIGN(bool done, partitionRegions(id, n));
      if (done) return {};
    }
    if (n.op == ir::OpCode::ShardingConstraint) {  // the identity: only the reshard it asks for
      TSR_ASSIGN(m_localOf[static_cast<size_t>(n.results[0])],
                 localOperand(n.operands[0], sharding(n.results[0]), "sharding_constraint operand"));
      return {};
    }
    if (n.op == ir::OpCode::HostCallback) {
      ir::HostCallbackPtr cb = ir::hostCallbackOf(std::get<ir::HostCallbackAttrs>(n.attrs));
      if (cb && cb->manual) return partitionManual(id, n, *cb);
    }
    TSR_ASSIGN(bool deferred, addPartials(n));
    if (deferred) return {};
    TSR_ASSIGN(ir::ShardingRule rule, shardingRuleOf(m_g, n, m_reg));

    // Each factor's split. (1) A pass-through factor that some operand already splits as the result was
    // planned (or leaves whole, as planned) keeps that: the result needs no reshard. (2) The others follow the
    // data: as the operands hold them, in operand order (reduction factors included: a partial sum then
    // costs one collective on the result instead of moving operands). (3) Factors still whole take the
    // results' plan (the operands are sliced locally, which costs nothing). An axis serves one factor; a split
    // must divide every dim it applies to. The results are resharded to their plan afterwards (a partial sum
    // completed by reduce_scatter where the plan splits the result over the reduced axes).
    std::vector<std::vector<int>> split(rule.factors.size());
    std::vector<bool> decided(rule.factors.size(), false);
    std::vector<bool> used(m_mesh.shape.size(), false);
    auto take = [&](size_t f, const std::vector<int>& axes) {
      if (decided[f] || axes.empty()) return;
      for (int a : axes)
        if (used[static_cast<size_t>(a)]) return;
      split[f] = axes;
      decided[f] = true;
      for (int a : axes) used[static_cast<size_t>(a)] = true;
    };
    for (size_t r = 0; r < n.results.size(); ++r)
      for (size_t d = 0; d < rule.resultDims[r].size(); ++d) {
        int f = rule.resultDims[r][d];
        if (f < 0 || decided[static_cast<size_t>(f)]) continue;
        const auto& planned = sharding(n.results[r]).dims[d];
        bool matched = false;
        for (size_t i = 0; i < n.operands.size() && !matched; ++i)
          for (size_t od = 0; od < rule.operandDims[i].size(); ++od)
            matched = matched || (rule.operandDims[i][od] == f && sharding(n.operands[i]).dims[od] == planned);
        if (!matched) continue;
        if (planned.empty()) decided[static_cast<size_t>(f)] = true;
        else take(static_cast<size_t>(f), planned);
      }
    for (size_t i = 0; i < n.operands.size(); ++i)
      for (size_t d = 0; d < rule.operandDims[i].size(); ++d)
        if (rule.operandDims[i][d] >= 0) take(static_cast<size_t>(rule.operandDims[i][d]), sharding(n.operands[i]).dims[d]);
    for (size_t r = 0; r < n.results.size(); ++r)
      for (size_t d = 0; d < rule.resultDims[r].size(); ++d)
        if (rule.resultDims[r][d] >= 0) take(static_cast<size_t>(rule.resultDims[r][d]), sharding(n.results[r]).dims[d]);
    auto checkDivides = [&](const std::vector<int>& dims, const Shape& s) {
      for (size_t d = 0; d < dims.size(); ++d)
        if (dims[d] >= 0 && s[static_cast<int>(d)] % axesSize(m_mesh, split[static_cast<size_t>(dims[d])]) != 0)
          split[static_cast<size_t>(dims[d])].clear();
    };
    for (size_t i = 0; i < n.operands.size(); ++i) checkDivides(rule.operandDims[i], m_g.aval(n.operands[i]).shape);
    for (size_t r = 0; r < n.results.size(); ++r) checkDivides(rule.resultDims[r], m_g.aval(n.results[r]).shape);

    auto shardingFor = [&](const std::vector<int>& dims) {
      TensorSharding t = TensorSharding::replicated(static_cast<int>(dims.size()));
      for (size_t d = 0; d < dims.size(); ++d)
        if (dims[d] >= 0) t.dims[d] = split[static_cast<size_t>(dims[d])];
      return t;
    };
    std::vector<int> partialAxes;
    for (size_t f = 0; f < rule.factors.size(); ++f)
      if (rule.factors[f] == ir::FactorKind::Reduction)
        partialAxes.insert(partialAxes.end(), split[f].begin(), split[f].end());
    std::sort(partialAxes.begin(), partialAxes.end());

    // scatter_add(x, idx, updates) with its update positions split: each device scatters its updates into
    // zeros; x is added once the sums are complete.
    const bool scatterIntoZeros = n.op == ir::OpCode::ScatterAdd && !partialAxes.empty();

    std::vector<ir::ValueId> operands;
    std::vector<Aval> localIn;
    for (size_t i = 0; i < n.operands.size(); ++i) {
      TensorSharding want = shardingFor(rule.operandDims[i]);
      ir::ValueId local;
      if (scatterIntoZeros && i == 0) {
        Aval a = localAval(n.operands[0], want);
        TSR_ASSIGN(ir::ValueId zero, emit(ir::OpCode::Constant, {}, ir::ConstantAttrs{ir::Literal::scalar(a.dtype, 0)}));
        TSR_ASSIGN(local, emit(ir::OpCode::BroadcastInDim, {zero}, ir::BroadcastInDimAttrs{a.shape.dims(), {}}));
      } else {
        TSR_ASSIGN(local, localOperand(n.operands[i], want, fmt::format("{} operand {}", op, i)));
      }
      operands.push_back(local);
      localIn.push_back(m_out.local.aval(local));
    }
    std::vector<Aval> localOut;
    std::vector<TensorSharding> produced;
    for (size_t r = 0; r < n.results.size(); ++r) {
      TensorSharding t = shardingFor(rule.resultDims[r]);
      t.partial = partialAxes;
      localOut.push_back(localAval(n.results[r], t));
      produced.push_back(std::move(t));
    }
    ir::Attrs attrs = rule.localAttrs ? rule.localAttrs(n.attrs, localIn, localOut) : n.attrs;
    auto added = m_out.local.addNode(m_reg, n.op, operands, std::move(attrs), n.prov);
    if (!added.ok()) return makeError("partitioner: the per-device {} does not type-check: {}", op, added.error().message);
    const auto& results = added.value();
    for (size_t r = 0; r < results.size(); ++r) {
      if (!(m_out.local.aval(results[r]) == localOut[r]))
        return makeError("partitioner: the per-device {} gives {}, expected {}", op,
                         m_out.local.aval(results[r]).toString(), localOut[r].toString());
      std::string what = n.results.size() > 1 ? fmt::format("{} result {}", op, r) : op;
      ir::ValueId local = results[r];
      if (scatterIntoZeros && isZeros(n.operands[0])) {
        // Into zeros (a gather's gradient): the partial sums are the result, completed at their first use.
      } else if (scatterIntoZeros) {
        TensorSharding whole = produced[r];
        whole.partial.clear();
        TSR_ASSIGN(local, reshard(local, n.results[r], produced[r], whole, what));
        TSR_ASSIGN(ir::ValueId x, localOperand(n.operands[0], whole, op + " operand 0"));
        TSR_ASSIGN(local, emit(ir::OpCode::Add, {x, local}, ir::NoAttrs{}));
        produced[r] = whole;
      }
      TSR_TRY(setResult(id, n.results[r], local, produced[r], what));
    }
    return {};
  }

  // shard_map's program (ir::ManualSharding): its operands resharded to the blocks it takes, its per-device call,
  // its results split as it gives them.
  Status partitionManual(ir::NodeId id, const ir::Node& n, const ir::HostCallback& cb) {
    const ir::ManualSharding& manual = *cb.manual;
    if (manual.operands.size() != n.operands.size() || manual.results.size() != n.results.size() || !manual.perDevice)
      return makeError("partitioner: {} names the splits of {} operands and {} results, it has {} and {}", cb.name,
                       manual.operands.size(), manual.results.size(), n.operands.size(), n.results.size());
    std::vector<ir::ValueId> operands;
    for (size_t i = 0; i < n.operands.size(); ++i) {
      std::string what = fmt::format("{} operand {}", cb.name, i);
      TSR_ASSIGN(TensorSharding want, manualSharding(manual.operands[i], m_mesh, m_g.aval(n.operands[i]).shape, what));
      TSR_ASSIGN(ir::ValueId local, localOperand(n.operands[i], want, what));
      operands.push_back(local);
    }
    auto added = m_out.local.addNode(m_reg, n.op, operands, ir::HostCallbackAttrs{manual.perDevice->id, manual.perDevice},
                                     n.prov);
    if (!added.ok()) return makeError("partitioner: {} on each device: {}", cb.name, added.error().message);
    for (size_t r = 0; r < n.results.size(); ++r) {
      std::string what = fmt::format("{} result {}", cb.name, r);
      TSR_ASSIGN(TensorSharding produced, manualSharding(manual.results[r], m_mesh, m_g.aval(n.results[r]).shape, what));
      TSR_TRY(setResult(id, n.results[r], (*added)[r], produced, what));
    }
    return {};
  }

  // Global result v is local value `local`, split as `produced`: resharded to its plan, except that a partial
  // sum which only loses its partial axes waits for its first use (see addPartials).
  Status setResult(ir::NodeId id, ir::ValueId v, ir::ValueId local, const TensorSharding& produced,
                   const std::string& what) {
    TensorSharding completed = produced;
    completed.partial.clear();
    if (!produced.partial.empty() && completed == sharding(v)) {
      m_localOf[static_cast<size_t>(v)] = local;
      m_pending[v] = Pending{produced, what, id};
      return {};
    }
    TSR_ASSIGN(m_localOf[static_cast<size_t>(v)], reshard(local, v, produced, sharding(v), what));
    return {};
  }

  // A scan or cond whose nested graphs were planned (ShardingPlan::regions) runs them per device: each nested
  // graph is partitioned with its own plan, the operands are resharded to its inputs' shardings (an x with its
  // scanned dim whole), and the results come out as its outputs are split. A scan body's ys may stay partial
  // sums: stacked, they are completed once after the loop (a gradient accumulated over layers). Collectives
  // inside run once per step; they are listed with the op. False (m_whole says why): the op runs whole.
  Result<bool> partitionRegions(ir::NodeId id, const ir::Node& n) {
    const auto i = static_cast<size_t>(id);
    if (i >= m_plan.regions.size() || m_plan.regions[i].plans.empty()) {
      m_whole = i < m_plan.regions.size() && !m_plan.regions[i].whole.empty() ? m_plan.regions[i].whole
                                                                              : "its nested graphs were not planned";
      return false;
    }
    const RegionPlans& rp = m_plan.regions[i];
    const std::string op = opName(n.op);
    std::vector<const ir::Graph*> graphs;
    size_t nC = 0, nH = 0;
    if (n.op == ir::OpCode::Scan) {
      const auto& a = std::get<ir::ScanAttrs>(n.attrs);
      graphs = {a.body.get()};
      nC = static_cast<size_t>(a.numConsts);
      nH = static_cast<size_t>(a.numCarry);
    } else {
      const auto& a = std::get<ir::CondAttrs>(n.attrs);
      graphs = {a.trueBranch.get(), a.falseBranch.get()};
    }
    // 1. The nested graphs, per device (nothing is emitted here until all of them partition).
    std::vector<PartitionResult> parts;
    for (size_t k = 0; k < graphs.size(); ++k) {
      std::vector<bool> partialOk(graphs[k]->outputs().size(), false);
      if (n.op == ir::OpCode::Scan)
        for (size_t j = nH; j < partialOk.size(); ++j) partialOk[j] = true;
      Partitioner sub(*graphs[k], m_reg, rp.plans[k], std::move(partialOk));
      auto r = sub.run();
      if (!r.ok()) {
        m_whole = r.error().message;
        return false;
      }
      parts.push_back(std::move(r).value());
    }
    if (n.op == ir::OpCode::Scan) accumulatePartials(n, rp.plans[0], nC, nH, parts[0]);
    const std::vector<TensorSharding>& ins = parts[0].inputShardings;
    const std::vector<TensorSharding>& outs = parts[0].outputShardings;
    for (size_t k = 0; k < nH; ++k)
      if (!(outs[k] == ins[nC + k])) {
        m_whole = fmt::format("carry {} enters the body {} and leaves it {}", k, ins[nC + k].toString(m_mesh),
                              outs[k].toString(m_mesh));
        return false;
      }
    if (parts.size() == 2 && (parts[1].outputShardings != outs || parts[1].inputShardings != ins)) {
      m_whole = "its branches are split differently";
      return false;
    }
    // 2. The operands, as the nested graphs take them.
    std::vector<ir::ValueId> operands;
    const size_t first = n.op == ir::OpCode::Cond ? 1 : 0;
    if (first) {
      TSR_ASSIGN(ir::ValueId pred, localOperand(n.operands[0], sharding(n.operands[0]), op + " predicate"));
      operands.push_back(pred);
    }
    for (size_t k = 0; k < ins.size(); ++k) {
      TensorSharding want = ins[k];
      want.partial.clear();  // an accumulator's zeros are a partial sum as they are
      if (n.op == ir::OpCode::Scan && k >= nC + nH) want.dims.insert(want.dims.begin(), std::vector<int>{});
      TSR_ASSIGN(ir::ValueId local, localOperand(n.operands[first + k], want, fmt::format("{} operand {}", op, first + k)));
      operands.push_back(local);
    }
    // 3. The op over the per-device graphs; their collectives are listed with it.
    ir::Attrs attrs;
    std::string where;
    if (n.op == ir::OpCode::Scan) {
      ir::ScanAttrs a = std::get<ir::ScanAttrs>(n.attrs);
      a.body = std::make_shared<const ir::Graph>(std::move(parts[0].local));
      where = fmt::format("in the body of scan, {} times", a.length);
      attrs = std::move(a);
    } else {
      ir::CondAttrs a;
      a.trueBranch = std::make_shared<const ir::Graph>(std::move(parts[0].local));
      a.falseBranch = std::make_shared<const ir::Graph>(std::move(parts[1].local));
      where = "in a branch of cond";
      attrs = std::move(a);
    }
    for (PartitionResult& part : parts)
      for (CollectiveInfo& c : part.collectives) {
        c.globalNode = id;
        c.reason = fmt::format("{} ({})", c.reason, where);
        m_out.collectives.push_back(std::move(c));
      }
    auto added = m_out.local.addNode(m_reg, n.op, operands, std::move(attrs), n.prov);
    if (!added.ok()) return makeError("partitioner: the per-device {} does not type-check: {}", op, added.error().message);
    for (size_t r = 0; r < n.results.size(); ++r) {
      TensorSharding produced = outs[r];
      if (n.op == ir::OpCode::Scan && r >= nH) produced.dims.insert(produced.dims.begin(), std::vector<int>{});
      std::string what = n.results.size() > 1 ? fmt::format("{} result {}", op, r) : op;
      TSR_TRY(setResult(id, n.results[r], (*added)[r], produced, what));
    }
    return true;
  }

  // Gradient accumulation: a carry that starts as zeros and only adds partial sums to itself (a gradient summed
  // over microbatches split on the batch) stays a partial sum through the loop, completed once after it, not
  // once per step. Tried with such carries entering partial over the mesh axes they are not split over (all of
  // them, then each alone); a carry that does not leave as it entered is dropped and the body partitioned
  // again. Kept where some carry stays partial and every carry leaves as it entered.
  void accumulatePartials(const ir::Node& n, const ShardingPlan& bodyPlan, size_t nC, size_t nH, PartitionResult& part) {
    const ir::Graph& body = *std::get<ir::ScanAttrs>(n.attrs).body;
    std::vector<std::vector<int>> unused(nH);
    bool any = false;
    for (size_t k = 0; k < nH; ++k) {
      if (!isZeros(n.operands[nC + k])) continue;
      const TensorSharding& t = bodyPlan.values[static_cast<size_t>(body.inputs()[nC + k])];
      for (int a = 0; a < static_cast<int>(m_mesh.shape.size()); ++a)
        if (!t.usesAxis(a) && m_mesh.shape[static_cast<size_t>(a)] > 1) unused[k].push_back(a);
      any = any || !unused[k].empty();
    }
    if (!any) return;
    std::vector<std::vector<int>> candidates{{}};  // empty: every unused axis
    if (m_mesh.shape.size() > 1)
      for (int a = 0; a < static_cast<int>(m_mesh.shape.size()); ++a) candidates.push_back({a});
    for (const std::vector<int>& only : candidates) {
      std::vector<std::vector<int>> partialIn(body.inputs().size());
      std::vector<bool> partialOk(body.outputs().size(), false);
      for (size_t j = nH; j < partialOk.size(); ++j) partialOk[j] = true;
      for (size_t k = 0; k < nH; ++k) {
        for (int a : unused[k])
          if (only.empty() || a == only[0]) partialIn[nC + k].push_back(a);
        partialOk[k] = !partialIn[nC + k].empty();
      }
      for (size_t round = 0; round <= nH; ++round) {
        if (std::none_of(partialOk.begin(), partialOk.begin() + static_cast<std::ptrdiff_t>(nH), [](bool b) { return b; }))
          break;
        auto r = Partitioner(body, m_reg, bodyPlan, partialOk, partialIn).run();
        if (!r.ok()) break;
        bool same = true;
        for (size_t k = 0; k < nH; ++k)
          if (!(r->outputShardings[k] == r->inputShardings[nC + k])) {
            same = false;
            partialIn[nC + k].clear();
            partialOk[k] = false;
          }
        if (same) {
          part = std::move(r).value();
          return;
        }
      }
    }
  }

  const ir::Graph& m_g;
  const ir::OpRegistry& m_reg;
  const ShardingPlan& m_plan;
  const Mesh& m_mesh;
  PartitionResult m_out;
  std::vector<ir::ValueId> m_localOf;
  // Results whose local value is still a partial sum (m_localOf holds it), completed at their first use.
  struct Pending {
    TensorSharding sharding;  // as produced: the planned dims, with partial axes
    std::string what;
    ir::NodeId node;  // the global op that made it
  };
  std::map<ir::ValueId, Pending> m_pending;
  std::vector<bool> m_partialOutputs;
  std::vector<std::vector<int>> m_partialInputs;
  std::string m_whole;  // why the op being partitioned runs whole on every device (a scan not planned), or empty
  ir::NodeId m_node = ir::kNone;
  ir::Provenance m_prov;
};

}  // namespace

Result<PartitionResult> partition(const ir::Graph& global, const ir::OpRegistry& reg, const ShardingPlan& plan) {
  if (static_cast<int>(plan.values.size()) != global.numValues())
    return makeError("partitioner: the sharding plan covers {} values, the graph has {}", plan.values.size(),
                     global.numValues());
  Partitioner p(global, reg, plan);
  return p.run();
}

}  // namespace tsr::sharding
