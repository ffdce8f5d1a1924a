#include "engine/passes/conv_epilogue.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <queue>

#include <fmt/format.h>

#include "engine/passes/fusion.h"

namespace tsr::passes {

using ir::NodeId;
using ir::OpCode;
using ir::ValueId;

const char* postOpKindName(PostOpKind k) {
  switch (k) {
    case PostOpKind::Relu: return "relu";
    case PostOpKind::Tanh: return "tanh";
    case PostOpKind::Logistic: return "logistic";
    case PostOpKind::GeluTanh: return "gelu_tanh";
    case PostOpKind::GeluErf: return "gelu_erf";
    case PostOpKind::Add: return "add";
    case PostOpKind::Sub: return "sub";
    case PostOpKind::Mul: return "mul";
    case PostOpKind::Div: return "div";
    case PostOpKind::Max: return "max";
    case PostOpKind::Min: return "min";
  }
  return "?";
}

ValueReaders::ValueReaders(const ir::Graph& g)
    : readers(static_cast<size_t>(g.numValues())), isOutput(static_cast<size_t>(g.numValues()), false) {
  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes().size()); ++n)
    for (ValueId v : g.nodes()[static_cast<size_t>(n)].operands) {
      auto& r = readers[static_cast<size_t>(v)];
      if (r.empty() || r.back() != n) r.push_back(n);
    }
  for (ValueId v : g.outputs()) isOutput[static_cast<size_t>(v)] = true;
}

namespace {

std::optional<PostOpKind> binaryKind(OpCode op) {
  switch (op) {
    case OpCode::Add: return PostOpKind::Add;
    case OpCode::Sub: return PostOpKind::Sub;
    case OpCode::Mul: return PostOpKind::Mul;
    case OpCode::Div: return PostOpKind::Div;
    case OpCode::Max: return PostOpKind::Max;
    case OpCode::Min: return PostOpKind::Min;
    default: return std::nullopt;
  }
}

std::optional<PostOpKind> unaryKind(OpCode op) {
  switch (op) {
    case OpCode::Relu: return PostOpKind::Relu;
    case OpCode::Tanh: return PostOpKind::Tanh;
    case OpCode::Logistic: return PostOpKind::Logistic;
    default: return std::nullopt;
  }
}

// The value of v where it is a scalar constant (a constant of one element, possibly broadcast).
std::optional<double> scalarConstant(const ir::Graph& g, ValueId v) {
  auto map = resolveView(g, v);
  if (!map) return std::nullopt;
  NodeId p = g.value(map->source).producer;
  if (p == ir::kNone || g.aval(map->source).numel() != 1) return std::nullopt;
  const ir::Node& nd = g.nodes()[static_cast<size_t>(p)];
  if (nd.op != OpCode::Constant) return std::nullopt;
  return std::get<ir::ConstantAttrs>(nd.attrs).value.elementAsDouble(0);
}

// The region's exit as a function of x: the region's ops evaluated in double precision.
std::optional<double> evaluate(const ir::Graph& g, const std::vector<NodeId>& region, ValueId x, double xv) {
  std::vector<std::pair<ValueId, double>> known{{x, xv}};
  auto get = [&](ValueId v) -> std::optional<double> {
    for (auto& [k, val] : known)
      if (k == v) return val;
    return scalarConstant(g, v);
  };
  double last = 0;
  for (NodeId m : region) {
    const ir::Node& nd = g.nodes()[static_cast<size_t>(m)];
    std::vector<double> a;
    for (ValueId v : nd.operands) {
      auto val = get(v);
      if (!val) return std::nullopt;
      a.push_back(*val);
    }
    double r = 0;
    switch (nd.op) {
      case OpCode::Add: r = a[0] + a[1]; break;
      case OpCode::Sub: r = a[0] - a[1]; break;
      case OpCode::Mul: r = a[0] * a[1]; break;
      case OpCode::Div: r = a[0] / a[1]; break;
      case OpCode::Neg: r = -a[0]; break;
      case OpCode::Square: r = a[0] * a[0]; break;
      case OpCode::Tanh: r = std::tanh(a[0]); break;
      case OpCode::Erf: r = std::erf(a[0]); break;
      case OpCode::IntegerPow: r = std::pow(a[0], static_cast<double>(std::get<ir::IntegerPowAttrs>(nd.attrs).exponent)); break;
      default: return std::nullopt;
    }
    known.push_back({nd.results[0], r});
    last = r;
  }
  return last;
}

bool regionOp(OpCode op) {
  switch (op) {
    case OpCode::Add:
    case OpCode::Sub:
    case OpCode::Mul:
    case OpCode::Div:
    case OpCode::Neg:
    case OpCode::Square:
    case OpCode::Tanh:
    case OpCode::Erf:
    case OpCode::IntegerPow: return true;
    default: return false;
  }
}

// A gelu of tail: the smallest set of ops, from tail's readers on in graph order, whose values (but the last) and
// tail itself are read only inside it, that computes gelu of tail with only scalar constants besides. The ops are
// checked by value at a few points (the simplifier may have reordered or folded them), against both forms, which
// differ by up to 1e-3 while f32 constants are off by about 1e-7.
std::optional<PostOp> matchGelu(const ir::Graph& g, const ValueReaders& rd, ValueId tail) {
  constexpr size_t kMaxOps = 16;
  std::vector<NodeId> region;
  std::vector<ValueId> values{tail};
  std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> next;
  auto push = [&](ValueId v) {
    for (NodeId r : rd.readers[static_cast<size_t>(v)]) next.push(r);
  };
  auto inRegion = [&](NodeId m) { return std::find(region.begin(), region.end(), m) != region.end(); };
  auto readOnlyInside = [&](ValueId v) {
    if (rd.isOutput[static_cast<size_t>(v)]) return false;
    for (NodeId r : rd.readers[static_cast<size_t>(v)])
      if (!inRegion(r)) return false;
    return true;
  };
  push(tail);
  while (!next.empty() && region.size() < kMaxOps) {
    NodeId m = next.top();
    next.pop();
    if (inRegion(m)) continue;
    const ir::Node& nd = g.nodes()[static_cast<size_t>(m)];
    if (!regionOp(nd.op) || nd.results.size() != 1 || g.aval(nd.results[0]).dtype != DType::F32) return std::nullopt;
    for (ValueId v : nd.operands)
      if (std::find(values.begin(), values.end(), v) == values.end() && !scalarConstant(g, v)) return std::nullopt;
    region.push_back(m);
    values.push_back(nd.results[0]);
    push(nd.results[0]);
    bool closed = readOnlyInside(tail);
    for (size_t i = 0; closed && i + 1 < region.size(); ++i)
      closed = readOnlyInside(g.nodes()[static_cast<size_t>(region[i])].results[0]);
    if (!closed) continue;
    const double c = std::sqrt(2.0 / std::numbers::pi);
    bool tanhForm = true, erfForm = true;
    for (double x : {-3.1, -1.3, -0.4, 0.2, 0.9, 2.6}) {
      auto y = evaluate(g, region, tail, x);
      if (!y) return std::nullopt;
      const double gt = 0.5 * x * (1 + std::tanh(c * (x + 0.044715 * x * x * x)));
      const double ge = 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
      tanhForm &= std::fabs(*y - gt) <= 1e-6 * (1 + std::fabs(gt));
      erfForm &= std::fabs(*y - ge) <= 1e-6 * (1 + std::fabs(ge));
    }
    if (!tanhForm && !erfForm) continue;
    PostOp op;
    op.kind = tanhForm ? PostOpKind::GeluTanh : PostOpKind::GeluErf;
    op.nodes = region;
    op.result = nd.results[0];
    return op;
  }
  return std::nullopt;
}

PostOpMatch fail(FusionReason reason, std::string why) {
  PostOpMatch m;
  m.reason = reason;
  m.why = std::move(why);
  return m;
}

}  // namespace

PostOpMatch matchConvPostOp(const ir::Graph& g, const ir::OpRegistry& reg, const ValueReaders& rd, ValueId tail,
                            NodeId n, const std::vector<int64_t>& outSpec) {
  const ir::Node& nd = g.nodes()[static_cast<size_t>(n)];
  const std::string name = reg.get(nd.op).name;
  const auto& tailReaders = rd.readers[static_cast<size_t>(tail)];
  const bool onlyReader = tailReaders.size() == 1 && tailReaders[0] == n && !rd.isOutput[static_cast<size_t>(tail)];
  const int uses = static_cast<int>(std::count(nd.operands.begin(), nd.operands.end(), tail));
  if (uses == 0)
    return fail(FusionReason::NoPostOp, fmt::format("{} does not read the epilogue's last value (post-ops form a chain)", name));
  if (!onlyReader) {
    // Several ops read the value: a gelu is traced so; anything else needs the value itself, which the chain
    // never writes.
    if (auto gelu = matchGelu(g, rd, tail); gelu && std::find(gelu->nodes.begin(), gelu->nodes.end(), n) != gelu->nodes.end()) {
      PostOpMatch m;
      m.ok = true;
      m.op = std::move(*gelu);
      return m;
    }
    return fail(FusionReason::NoPostOp,
                rd.isOutput[static_cast<size_t>(tail)]
                    ? fmt::format("the value {} reads leaves the graph; a post-op chain writes only its last value", name)
                    : fmt::format("the value {} reads is read by other ops too; a post-op chain writes only its last "
                                  "value", name));
  }
  PostOp op;
  op.nodes = {n};
  op.result = nd.results[0];
  if (auto k = unaryKind(nd.op)) {
    op.kind = *k;
    PostOpMatch m;
    m.ok = true;
    m.op = std::move(op);
    return m;
  }
  auto k = binaryKind(nd.op);
  if (!k) return fail(FusionReason::NoPostOp, fmt::format("{} has no oneDNN post-op", name));
  if (uses != 1) return fail(FusionReason::NoPostOp, fmt::format("{} reads the epilogue's value twice", name));
  op.kind = *k;
  const size_t side = nd.operands[0] == tail ? 0 : 1;
  if (side == 1 && (*k == PostOpKind::Sub || *k == PostOpKind::Div))
    return fail(FusionReason::NoPostOp,
                fmt::format("{} has the epilogue's value on its right; oneDNN's binary post-op takes it on the left", name));
  const ValueId other = nd.operands[1 - side];
  auto map = resolveView(g, other);
  const Shape& shape = g.aval(tail).shape;
  if (!map || g.aval(map->source).dtype != DType::F32)
    return fail(FusionReason::NoPostOp, fmt::format("{}'s other operand is not an f32 array oneDNN can read", name));
  const int feature = static_cast<int>(outSpec[1]);
  bool scalar = map->offset == 0, perChannel = map->offset == 0, full = map->offset == 0;
  const std::vector<int64_t> rowMajor = shape.strides();
  for (int d = 0; d < shape.rank(); ++d) {
    const int64_t s = map->strides[static_cast<size_t>(d)];
    scalar &= s == 0 || shape[d] == 1;
    perChannel &= d == feature ? (s == 1 || shape[d] == 1) : (s == 0 || shape[d] == 1);
    full &= s == rowMajor[static_cast<size_t>(d)] || shape[d] == 1;
  }
  const int64_t sourceSize = g.aval(map->source).numel();
  if (scalar && sourceSize >= 1) {
    op.operand = PostOpOperand::Scalar;
  } else if (perChannel && sourceSize == shape[feature]) {
    op.operand = PostOpOperand::PerChannel;
  } else if (full && sourceSize == shape.numel()) {
    op.operand = PostOpOperand::Full;
  } else {
    return fail(FusionReason::NoPostOp,
                fmt::format("{}'s other operand is neither a scalar, a per-channel vector nor a tensor of the "
                            "result's layout", name));
  }
  op.value = map->source;
  PostOpMatch m;
  m.ok = true;
  m.op = std::move(op);
  return m;
}

}  // namespace tsr::passes
