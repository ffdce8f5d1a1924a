#include "engine/passes/cse.h"

#include <algorithm>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include <fmt/format.h>

#include "engine/passes/rewrite.h"

namespace tsr::passes {

namespace {

struct Hasher {
  size_t h = 0;
  void mix(size_t x) { h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); }
};

struct AttrHasher : Hasher {
  template <class T>
  void operator()(std::string_view, const T& v) {
    if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, bool>) {
      mix(std::hash<int64_t>{}(static_cast<int64_t>(v)));
    } else if constexpr (std::is_same_v<T, ir::Ints>) {
      mix(v.size());
      for (int64_t x : v) mix(std::hash<int64_t>{}(x));
    } else if constexpr (std::is_same_v<T, DType>) {
      mix(static_cast<size_t>(v));
    } else if constexpr (std::is_same_v<T, std::string>) {
      mix(std::hash<std::string>{}(v));
    } else if constexpr (std::is_same_v<T, ir::Literal>) {
      mix(static_cast<size_t>(v.aval.dtype));
      for (int64_t d : v.aval.shape.dims()) mix(std::hash<int64_t>{}(d));
      if (v.data)
        mix(std::hash<std::string_view>{}(
            std::string_view(reinterpret_cast<const char*>(v.data->data()), v.data->size())));
    }
  }
};

bool isCommutative(ir::OpCode op) {
  using ir::OpCode;
  switch (op) {
    case OpCode::Add: case OpCode::Mul: case OpCode::Max: case OpCode::Min: case OpCode::And:
    case OpCode::Or: case OpCode::Xor: case OpCode::Eq: case OpCode::Ne:
      return true;
    default:
      return false;
  }
}

// Operands in the order that identifies the computation: sorted for a commutative binary op.
std::vector<ir::ValueId> canonicalOperands(const ir::Node& n) {
  std::vector<ir::ValueId> ops = n.operands;
  if (isCommutative(n.op) && ops.size() == 2 && ops[1] < ops[0]) std::swap(ops[0], ops[1]);
  return ops;
}

size_t hashNode(const ir::Node& n) {
  Hasher h;
  h.mix(static_cast<size_t>(n.op));
  for (ir::ValueId v : canonicalOperands(n)) h.mix(static_cast<size_t>(v));
  h.mix(hashAttrs(n.attrs));
  return h.h;
}

bool sameComputation(const ir::Graph& g, const ir::Node& a, const ir::Node& b) {
  if (a.op != b.op || a.results.size() != b.results.size()) return false;
  if (canonicalOperands(a) != canonicalOperands(b) || !(a.attrs == b.attrs)) return false;
  for (size_t i = 0; i < a.results.size(); ++i)
    if (!(g.aval(a.results[i]) == g.aval(b.results[i]))) return false;
  return true;
}

}  // namespace

size_t hashAttrs(const ir::Attrs& attrs) {
  AttrHasher h;
  h.mix(attrs.index());
  ir::Attrs copy = attrs;  // fields() is not const; the copy shares literal bytes and nested graphs
  std::visit([&](auto& a) { a.fields(h); }, copy);
  return h.h;
}

Result<bool> CommonSubexpressionElimination::run(ir::Graph& g, PassContext& ctx) {
  TSR_ASSIGN(bool changed, runOnNestedGraphs(*this, g, ctx));
  GraphRewriter rw(g);
  std::unordered_map<size_t, std::vector<ir::NodeId>> seen;
  rw.forEachNode([&](ir::NodeId n) {
    const ir::Node& node = rw.node(n);
    if (!isPureNode(node)) return;
    auto& bucket = seen[hashNode(node)];
    for (ir::NodeId m : bucket) {
      const ir::Node& earlier = rw.node(m);
      if (!sameComputation(g, earlier, node)) continue;
      ctx.record(g, n, fmt::format("{}: same as node {}", opName(ctx.registry(), node.op), m));
      rw.replaceNode(n, earlier.results);
      return;
    }
    bucket.push_back(n);
  });
  return rw.commit() || changed;
}

}  // namespace tsr::passes
