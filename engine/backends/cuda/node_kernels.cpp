#include "engine/backends/cuda/node_kernels.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/hash.h"
#include "engine/ops/conv_geometry.h"
#include "engine/ops/op_helpers.h"

namespace tsr::cuda {

using ir::OpCode;

namespace {

const char* storageType(DType t) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::BF16: return "u16";
    case DType::I32: return "int";
    case DType::I64: return "long long";
    case DType::U8: return "u8";
    case DType::U32: return "u32";
    case DType::Bool: return "u8";
    default: return nullptr;
  }
}

// The same bytes as an unsigned type of the element's size (gather copies elements without looking at them).
const char* bitsType(int64_t size) {
  switch (size) {
    case 1: return "u8";
    case 2: return "u16";
    case 4: return "u32";
    case 8: return "u64";
    default: return nullptr;
  }
}

bool isIntType(DType t) { return t == DType::I32 || t == DType::I64 || t == DType::U8 || t == DType::U32; }
bool isFloatType(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16; }

// An expression converting the loaded value `x` of type `s` to type `d`'s storage.
std::string convertExpr(DType s, DType d, const std::string& x) {
  std::string v = s == DType::BF16 ? fmt::format("tsr_bf16_to_f32({})", x)
                  : s == DType::Bool ? fmt::format("({} != 0)", x)
                                     : x;
  if (d == DType::Bool) return fmt::format("(u8)({} != 0)", v);
  if (d == DType::BF16) return fmt::format("tsr_f32_to_bf16((float)({}))", v);
  if (isIntType(d) && isFloatType(s)) {
    const char* lo = d == DType::I32 ? "-2147483648.0" : d == DType::I64 ? "-9223372036854775808.0" : "0.0";
    const char* hi = d == DType::I32 ? "2147483647.0" : d == DType::I64 ? "9223372036854775807.0"
                     : d == DType::U8 ? "255.0" : "4294967295.0";
    const char* T = storageType(d);
    const char* minV = d == DType::I32 ? "(-2147483647 - 1)" : d == DType::I64 ? "(-9223372036854775807LL - 1)" : "0";
    const char* maxV = d == DType::I32 ? "2147483647" : d == DType::I64 ? "9223372036854775807LL"
                       : d == DType::U8 ? "255" : "4294967295u";
    return fmt::format("([&]() {{ double t = (double)({0}); if (t != t) return ({1})0; if (t <= {2}) return ({1}){3}; "
                       "if (t >= {4}) return ({1}){5}; return ({1})t; }}())",
                       v, T, lo, minV, hi, maxV);
  }
  if (isIntType(d) && isIntType(s)) {
    // Wrap around through the unsigned 64-bit value.
    return fmt::format("({})(u64)(long long)({})", storageType(d), v);
  }
  return fmt::format("({})({})", storageType(d), v);
}

std::string header(const std::string& label, int numArgs) {
  std::string s = fmt::format("// {}\nextern \"C\" __global__ void __launch_bounds__({}) KERNEL_NAME(", label, kThreads);
  for (int i = 0; i < numArgs; ++i) s += fmt::format("{}char* __restrict__ p{}", i ? ", " : "", i);
  return s + ") {\n";
}

std::string indexLoop(int64_t n) {
  return fmt::format("  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < {0}LL; "
                     "i += (long long)gridDim.x * blockDim.x) {{\n",
                     n);
}

GeneratedKernel finish(std::string code, int64_t elements, int numArgs) {
  GeneratedKernel k;
  // The name hashes the code without its first line (the label), so equal kernels share one compile.
  k.name = fmt::format("tsr_{:016x}", fnv1a(code.substr(code.find('\n') + 1)));
  for (size_t pos; (pos = code.find("KERNEL_NAME")) != std::string::npos;) code.replace(pos, 11, k.name);
  k.body = code;
  k.source = std::string(kernelPrelude()) + code;
  k.shape = LaunchShape::Elements;
  k.elements = elements;
  k.numArgs = numArgs;
  return k;
}

// A lone elementwise node of any dtype the fused kernels do not take (bf16, integers, bool): operands are
// dense and of one shape. Where float holds every operand exactly (f32, bf16, bool) the op runs its loop lowering
// (ir::LoopLowering, as in fused kernels): bf16 computes in f32 and rounds once, bool results store their 0/1.
// Integers keep integer arithmetic, which the float dialect cannot express: add, sub, mul and neg wrap around as
// the CPU kernels do, max, min, clamp and comparisons are exact. select of any dtype moves bits.
std::optional<GeneratedKernel> elementwiseKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  if (n.results.size() != 1 || n.operands.empty()) return std::nullopt;
  const Aval& out = g.aval(n.results[0]);
  const DType in = g.aval(n.operands.back()).dtype;  // select: the value operands
  for (ir::ValueId v : n.operands)
    if (g.aval(v).shape != out.shape) return std::nullopt;
  const char* IT = storageType(in);
  const char* OT = storageType(out.dtype);
  if (!IT || !OT) return std::nullopt;
  auto raw = [&](int i) {
    DType t = g.aval(n.operands[static_cast<size_t>(i)]).dtype;
    return fmt::format("((const {}*)p{})[i]", storageType(t), k.operandArgs[static_cast<size_t>(i)]);
  };
  bool floatExact = true;
  for (ir::ValueId v : n.operands) {
    DType t = g.aval(v).dtype;
    floatExact &= t == DType::F32 || t == DType::BF16 || t == DType::Bool;
  }
  std::string value;
  const OpCode op = n.op;
  if (op == OpCode::Select) {
    value = fmt::format("(((const u8*)p{0})[i] ? ((const {1}*)p{2})[i] : ((const {1}*)p{3})[i])", k.operandArgs[0], OT,
                        k.operandArgs[1], k.operandArgs[2]);
  } else if (floatExact) {
    auto load = [&](int i) -> std::string {
      if (i >= static_cast<int>(n.operands.size())) return "0.0f";
      DType t = g.aval(n.operands[static_cast<size_t>(i)]).dtype;
      if (t == DType::BF16) return fmt::format("tsr_bf16_to_f32({})", raw(i));
      if (t == DType::Bool) return fmt::format("tsr_b({} != 0)", raw(i));
      return raw(i);
    };
    std::string e = opExpression(op, out.dtype == DType::Bool, load(0), load(1), load(2));
    if (e.empty()) return std::nullopt;
    if (out.dtype == DType::Bool) value = fmt::format("(u8)({} != 0.0f)", e);
    else if (out.dtype == DType::BF16) value = fmt::format("tsr_f32_to_bf16({})", e);
    else if (out.dtype == DType::F32) value = e;
    else return std::nullopt;
  } else if (isIntType(in) && (out.dtype == in || out.dtype == DType::Bool)) {
    const char* U = in == DType::I32 ? "u32" : in == DType::I64 ? "u64" : nullptr;
    const bool compare = op == OpCode::Eq || op == OpCode::Ne || op == OpCode::Lt || op == OpCode::Le ||
                         op == OpCode::Gt || op == OpCode::Ge;
    if (!U && !compare) return std::nullopt;
    if (compare != (out.dtype == DType::Bool)) return std::nullopt;  // comparisons give bool, arithmetic its type
    auto load = raw;
    switch (op) {
      case OpCode::Add: value = fmt::format("({})(({}){} + ({}){})", OT, U, load(0), U, load(1)); break;
      case OpCode::Sub: value = fmt::format("({})(({}){} - ({}){})", OT, U, load(0), U, load(1)); break;
      case OpCode::Mul: value = fmt::format("({})(({}){} * ({}){})", OT, U, load(0), U, load(1)); break;
      case OpCode::Max: value = fmt::format("max({}, {})", load(0), load(1)); break;
      case OpCode::Min: value = fmt::format("min({}, {})", load(0), load(1)); break;
      case OpCode::Neg: value = fmt::format("({})(({})0 - ({}){})", OT, U, U, load(0)); break;
      case OpCode::Square: value = fmt::format("({})(({}){} * ({}){})", OT, U, load(0), U, load(0)); break;
      case OpCode::StopGradient: value = load(0); break;
      case OpCode::Clamp: value = fmt::format("min(max({}, {}), {})", load(1), load(0), load(2)); break;
      case OpCode::Eq: value = fmt::format("(u8)({} == {})", load(0), load(1)); break;
      case OpCode::Ne: value = fmt::format("(u8)({} != {})", load(0), load(1)); break;
      case OpCode::Lt: value = fmt::format("(u8)({} < {})", load(0), load(1)); break;
      case OpCode::Le: value = fmt::format("(u8)({} <= {})", load(0), load(1)); break;
      case OpCode::Gt: value = fmt::format("(u8)({} > {})", load(0), load(1)); break;
      case OpCode::Ge: value = fmt::format("(u8)({} >= {})", load(0), load(1)); break;
      default: return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  std::string c = header(k.info.name, static_cast<int>(k.args.size())) + indexLoop(out.numel());
  c += fmt::format("    (({}*)p{})[i] = {};\n  }}\n}}\n", OT, k.resultArgs[0], value);
  return finish(c, out.numel(), static_cast<int>(k.args.size()));
}

// Materialised layout ops of any dtype (slice, pad, broadcast_in_dim, transpose, reshape, rev, concatenate): one
// thread per result element computes where its bits come from (an operand element, or the pad value) and
// copies them.
std::optional<GeneratedKernel> layoutKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  if (n.results.size() != 1 || n.operands.empty()) return std::nullopt;
  const Aval& out = g.aval(n.results[0]);
  const Aval& x = g.aval(n.operands[0]);
  const char* E = bitsType(dtypeSize(out.dtype));
  if (!E) return std::nullopt;
  const int rank = out.rank();
  const auto xs = x.shape.strides();
  auto src = [&](int operand) { return fmt::format("((const {}*)p{})", E, k.operandArgs[static_cast<size_t>(operand)]); };
  std::string body;  // sets `v` from the result's multi-index o0..o{rank-1}
  switch (n.op) {
    case OpCode::Slice: {
      const auto& a = std::get<ir::SliceAttrs>(n.attrs);
      std::string off = "0";
      for (int d = 0; d < rank; ++d)
        off += fmt::format(" + ({}LL + o{} * {}LL) * {}LL", a.starts[static_cast<size_t>(d)], d,
                           a.strides.empty() ? 1 : a.strides[static_cast<size_t>(d)], xs[static_cast<size_t>(d)]);
      body = fmt::format("    v = {}[{}];\n", src(0), off);
      break;
    }
    case OpCode::BroadcastInDim: {
      const auto& a = std::get<ir::BroadcastInDimAttrs>(n.attrs);
      std::string off = "0";
      for (int d = 0; d < x.rank(); ++d)
        if (x.shape[d] != 1) off += fmt::format(" + o{} * {}LL", a.broadcastDims[static_cast<size_t>(d)], xs[static_cast<size_t>(d)]);
      body = fmt::format("    v = {}[{}];\n", src(0), off);
      break;
    }
    case OpCode::Transpose: {
      const auto& a = std::get<ir::TransposeAttrs>(n.attrs);
      std::string off = "0";
      for (int d = 0; d < rank; ++d) off += fmt::format(" + o{} * {}LL", d, xs[static_cast<size_t>(a.perm[static_cast<size_t>(d)])]);
      body = fmt::format("    v = {}[{}];\n", src(0), off);
      break;
    }
    case OpCode::Reshape: body = fmt::format("    v = {}[i];\n", src(0)); break;
    case OpCode::Rev: {
      const auto& a = std::get<ir::RevAttrs>(n.attrs);
      std::string off = "0";
      for (int d = 0; d < rank; ++d) {
        const bool reversed = std::find(a.dims.begin(), a.dims.end(), int64_t{d}) != a.dims.end();
        off += reversed ? fmt::format(" + ({}LL - o{}) * {}LL", out.shape[d] - 1, d, xs[static_cast<size_t>(d)])
                        : fmt::format(" + o{} * {}LL", d, xs[static_cast<size_t>(d)]);
      }
      body = fmt::format("    v = {}[{}];\n", src(0), off);
      break;
    }
    case OpCode::Pad: {
      const auto& a = std::get<ir::PadAttrs>(n.attrs);
      body = "    long long off = 0; bool inside = true;\n";
      for (int d = 0; d < rank; ++d) {
        const int64_t step = (a.interior.empty() ? 0 : a.interior[static_cast<size_t>(d)]) + 1;
        body += fmt::format("    {{ const long long q = o{} - ({}LL); if (q < 0 || q % {} != 0 || q / {} >= {}) inside = false; "
                            "else off += (q / {}) * {}LL; }}\n",
                            d, a.low[static_cast<size_t>(d)], step, step, x.shape[d], step, xs[static_cast<size_t>(d)]);
      }
      body += fmt::format("    v = inside ? {}[off] : {}[0];\n", src(0), src(1));
      break;
    }
    case OpCode::Concatenate: {
      const auto& a = std::get<ir::ConcatenateAttrs>(n.attrs);
      const int axis = static_cast<int>(a.axis);
      int64_t start = 0;
      for (size_t j = 0; j < n.operands.size(); ++j) {
        const Aval& pj = g.aval(n.operands[j]);
        if (pj.dtype != out.dtype) return std::nullopt;
        const auto ps = pj.shape.strides();
        std::string off = "0";
        for (int d = 0; d < rank; ++d)
          off += d == axis ? fmt::format(" + (o{} - {}LL) * {}LL", d, start, ps[static_cast<size_t>(d)])
                           : fmt::format(" + o{} * {}LL", d, ps[static_cast<size_t>(d)]);
        const int64_t end = start + pj.shape[axis];
        body += fmt::format("    {}if (o{} < {}LL) v = {}[{}];\n", j ? "else " : "", axis, end, src(static_cast<int>(j)), off);
        start = end;
      }
      break;
    }
    default: return std::nullopt;
  }
  std::string c = header(k.info.name, static_cast<int>(k.args.size())) + indexLoop(out.numel());
  c += "    long long r = i;\n";
  for (int d = rank - 1; d >= 0; --d)
    c += fmt::format("    const long long o{} = r % {}LL; r /= {}LL;\n", d, std::max<int64_t>(out.shape[d], 1),
                     std::max<int64_t>(out.shape[d], 1));
  c += fmt::format("    {} v = 0;\n{}    (({}*)p{})[i] = v;\n  }}\n}}\n", E, body, E, k.resultArgs[0]);
  return finish(c, out.numel(), static_cast<int>(k.args.size()));
}

// The type a node kernel computes a dtype in: floats in float (bf16 widened) or double, integers in the
// unsigned type of their width (so products wrap as the CPU kernels' do).
const char* computeType(DType t) {
  switch (t) {
    case DType::F32:
    case DType::BF16: return "float";
    case DType::F64: return "double";
    case DType::I32: return "u32";
    case DType::I64: return "u64";
    default: return nullptr;
  }
}
std::string loadAs(DType t, const std::string& p, const std::string& index) {
  if (t == DType::BF16) return fmt::format("tsr_bf16_to_f32(((const u16*){})[{}])", p, index);
  return fmt::format("((const {}*){})[{}]", storageType(t), p, index);
}
std::string storeFrom(DType t, const std::string& p, const std::string& index, const std::string& v) {
  if (t == DType::BF16) return fmt::format("((u16*){})[{}] = tsr_f32_to_bf16((float)({}));", p, index, v);
  return fmt::format("(({0}*){1})[{2}] = ({0})({3});", storageType(t), p, index, v);
}

// integer_pow(x){n}: x^|n| by squaring (the exponent is a constant of the kernel), then 1 / that for n < 0.
// optimization_barrier: each operand's bytes copied to its result, one thread per byte of the largest.
std::optional<GeneratedKernel> barrierKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  const int numArgs = static_cast<int>(k.args.size());
  int64_t most = 0;
  for (ir::ValueId v : n.operands) most = std::max(most, g.aval(v).bytes());
  std::string c = header("optimization_barrier", numArgs) + indexLoop(most);
  for (size_t i = 0; i < n.operands.size(); ++i)
    c += fmt::format("    if (i < {0}LL) ((u8*)p{1})[i] = ((const u8*)p{2})[i];\n", g.aval(n.operands[i]).bytes(),
                     k.resultArgs[i], k.operandArgs[i]);
  c += "  }\n}\n";
  return std::optional(finish(c, most, numArgs));
}

std::optional<GeneratedKernel> integerPowKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  const Aval& out = g.aval(n.results[0]);
  const char* C = computeType(out.dtype);
  if (!C) return std::nullopt;
  const int64_t e = std::get<ir::IntegerPowAttrs>(n.attrs).exponent;
  const uint64_t m = e < 0 ? uint64_t(0) - static_cast<uint64_t>(e) : static_cast<uint64_t>(e);
  const int numArgs = static_cast<int>(k.args.size());
  std::string c = header(k.info.name, numArgs) + indexLoop(out.numel());
  c += fmt::format("    {0} b = ({0}){1}; {0} acc = ({0})1;\n", C,
                   loadAs(out.dtype, fmt::format("p{}", k.operandArgs[0]), "i"));
  c += fmt::format("    for (u64 m = {}ull; m; m >>= 1) {{ if (m & 1ull) acc = acc * b; b = b * b; }}\n", m);
  if (e < 0) c += fmt::format("    acc = ({0})1 / acc;\n", C);
  c += "    " + storeFrom(out.dtype, fmt::format("p{}", k.resultArgs[0]), "i", "acc") + "\n  }\n}\n";
  return finish(c, out.numel(), numArgs);
}

// cumsum, cumprod, cummax, cumlogsumexp(x){axis, reverse}: one thread per line along the axis (x viewed as
// [outer, n, inner]), accumulating as the CPU kernels do: floats in double, integer sums and products in u64.
std::optional<GeneratedKernel> cumulativeKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  const Aval& x = g.aval(n.operands[0]);
  const auto& at = std::get<ir::CumulativeAttrs>(n.attrs);
  const char* T = storageType(x.dtype);
  if (!T || !computeType(x.dtype)) return std::nullopt;
  const bool isFloat = isFloatType(x.dtype);
  const bool native = isFloat || n.op == OpCode::Cummax;  // accumulates in the value's own type (or double)
  const char* A = isFloat ? "double" : native ? T : "u64";
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < at.axis; ++d) outer *= x.shape[d];
  for (int d = static_cast<int>(at.axis) + 1; d < x.rank(); ++d) inner *= x.shape[d];
  const int64_t len = x.shape[static_cast<int>(at.axis)];
  std::string combine;
  switch (n.op) {
    case OpCode::Cumsum: combine = "acc = acc + v;"; break;
    case OpCode::Cumprod: combine = "acc = acc * v;"; break;
    case OpCode::Cummax: combine = isFloat ? "acc = (v > acc || v != v) ? v : acc;" : "acc = v > acc ? v : acc;"; break;
    case OpCode::Cumlogsumexp:
      combine = "if (acc != acc || v != v) { acc = acc + v; } else { const double mx = acc > v ? acc : v; "
                "acc = isinf(mx) ? mx : mx + log1p(exp(-fabs(acc - v))); }";
      break;
    default: return std::nullopt;
  }
  const int numArgs = static_cast<int>(k.args.size());
  std::string c = header(k.info.name, numArgs) + indexLoop(outer * inner);
  c += fmt::format("    const long long base = (i / {0}LL) * {1}LL * {0}LL + i % {0}LL;\n", inner, len);
  c += fmt::format("    {} acc = 0;\n", A);
  c += fmt::format("    for (long long s = 0; s < {}LL; ++s) {{\n", len);
  c += fmt::format("      const long long at = base + ({}) * {}LL;\n",
                   at.reverse ? fmt::format("{}LL - 1 - s", len) : std::string("s"), inner);
  const std::string load = loadAs(x.dtype, fmt::format("p{}", k.operandArgs[0]), "at");
  c += native ? fmt::format("      const {0} v = ({0}){1};\n", A, load)
              : fmt::format("      const u64 v = (u64)(long long){};\n", load);
  c += fmt::format("      if (s == 0) acc = v; else {{ {} }}\n", combine);
  c += "      " + storeFrom(x.dtype, fmt::format("p{}", k.resultArgs[0]), "at", native ? "acc" : "(long long)acc") +
       "\n    }\n  }\n}\n";
  return finish(c, outer * inner, numArgs);
}

// reduce_and / reduce_or over bool bytes: one thread per result element walks its reduced elements.
std::optional<GeneratedKernel> logicalReduceKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  const Aval& x = g.aval(n.operands[0]);
  const Aval& out = g.aval(n.results[0]);
  const auto& axes = std::get<ir::ReduceAttrs>(n.attrs).axes;
  const bool isAnd = n.op == OpCode::ReduceAnd;
  std::vector<int64_t> stride(static_cast<size_t>(x.rank()), 1);
  for (int d = x.rank() - 2; d >= 0; --d)
    stride[static_cast<size_t>(d)] = stride[static_cast<size_t>(d) + 1] * x.shape[d + 1];
  auto reduced = [&](int d) { return std::find(axes.begin(), axes.end(), d) != axes.end(); };
  int64_t count = 1;
  for (int64_t a : axes) count *= x.shape[static_cast<int>(a)];
  const int numArgs = static_cast<int>(k.args.size());
  std::string c = header(k.info.name, numArgs) + indexLoop(out.numel());
  c += "    long long r = i, base = 0;\n";
  for (int d = x.rank() - 1; d >= 0; --d)
    if (!reduced(d))
      c += fmt::format("    base += (r % {0}LL) * {1}LL; r /= {0}LL;\n", std::max<int64_t>(x.shape[d], 1),
                       stride[static_cast<size_t>(d)]);
  c += fmt::format("    u8 acc = {};\n", isAnd ? 1 : 0);
  c += fmt::format("    for (long long q = 0; q < {}LL; ++q) {{\n      long long t = q, at = base;\n", count);
  for (int d = x.rank() - 1; d >= 0; --d)
    if (reduced(d))
      c += fmt::format("      at += (t % {0}LL) * {1}LL; t /= {0}LL;\n", std::max<int64_t>(x.shape[d], 1),
                       stride[static_cast<size_t>(d)]);
  c += fmt::format("      acc = acc {} (u8)(((const u8*)p{})[at] != 0);\n    }}\n", isAnd ? "&" : "|", k.operandArgs[0]);
  c += fmt::format("    ((u8*)p{})[i] = acc;\n  }}\n}}\n", k.resultArgs[0]);
  return finish(c, out.numel(), numArgs);
}

// -1, 0 or 1 as the loaded values a and b are in numpy's order (floats: NaN after every number).
std::string orderExpr(DType t, const std::string& a, const std::string& b) {
  if (isFloatType(t))
    return fmt::format("(({0} != {0} || {1} != {1}) ? ((int)({0} != {0}) - (int)({1} != {1})) : "
                       "({0} < {1} ? -1 : ({1} < {0} ? 1 : 0)))",
                       a, b);
  return fmt::format("({0} < {1} ? -1 : ({1} < {0} ? 1 : 0))", a, b);
}

// sort: one thread per element, whose place along its line is its rank: the number of elements whose keys come
// before its own, or equal them at a lower position (a stable order, which an unstable sort may give too). It
// copies the element of every operand there. O(n) per element: lines of a few thousand at most are its target.
std::optional<GeneratedKernel> sortKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  const auto& at = std::get<ir::SortAttrs>(n.attrs);
  const Aval& x = g.aval(n.operands[0]);
  for (size_t o = 0; o < n.operands.size(); ++o) {
    const DType t = g.aval(n.operands[o]).dtype;
    if (!bitsType(dtypeSize(t)) || (static_cast<int64_t>(o) < at.numKeys && !storageType(t))) return std::nullopt;
  }
  int64_t inner = 1;
  for (int d = static_cast<int>(at.dimension) + 1; d < x.rank(); ++d) inner *= x.shape[d];
  const int64_t len = std::max<int64_t>(x.shape[static_cast<int>(at.dimension)], 1);
  const int numArgs = static_cast<int>(k.args.size());
  std::string c = header(k.info.name, numArgs) + indexLoop(x.numel());
  c += fmt::format("    const long long j = (i / {0}LL) % {1}LL, lineBase = i - j * {0}LL;\n", inner, len);
  c += fmt::format("    long long rank = 0;\n    for (long long t = 0; t < {}LL; ++t) {{\n", len);
  c += fmt::format("      const long long at = lineBase + t * {}LL;\n      int c = 0;\n", inner);
  for (int64_t key = 0; key < at.numKeys; ++key) {
    const DType t = g.aval(n.operands[static_cast<size_t>(key)]).dtype;
    const std::string p = fmt::format("p{}", k.operandArgs[static_cast<size_t>(key)]);
    const char* C = t == DType::BF16 ? "float" : storageType(t);
    c += fmt::format("      if (c == 0) {{ const {0} a = {1}, b = {2}; c = {3}; }}\n", C, loadAs(t, p, "at"),
                     loadAs(t, p, "i"), orderExpr(t, "a", "b"));
  }
  c += "      if (c < 0 || (c == 0 && t < j)) ++rank;\n    }\n";
  c += fmt::format("    const long long to = lineBase + rank * {}LL;\n", inner);
  for (size_t o = 0; o < n.operands.size(); ++o) {
    const char* E = bitsType(dtypeSize(g.aval(n.operands[o]).dtype));
    c += fmt::format("    (({0}*)p{1})[to] = ((const {0}*)p{2})[i];\n", E, k.resultArgs[o], k.operandArgs[o]);
  }
  c += "  }\n}\n";
  return finish(c, x.numel(), numArgs);
}

// top_k: one thread per element of x [rows, n]; an element with fewer than k elements before it in descending
// order (larger, NaN first; ties by position) writes its value and index at that rank.
std::optional<GeneratedKernel> topKKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  const Aval& x = g.aval(n.operands[0]);
  const char* S = storageType(x.dtype);
  if (!S) return std::nullopt;
  const int64_t topk = std::get<ir::TopKAttrs>(n.attrs).k;
  const int64_t len = std::max<int64_t>(x.shape[x.rank() - 1], 1);
  const std::string p = fmt::format("p{}", k.operandArgs[0]);
  const char* C = x.dtype == DType::BF16 ? "float" : S;
  const int numArgs = static_cast<int>(k.args.size());
  std::string c = header(k.info.name, numArgs) + indexLoop(x.numel());
  c += fmt::format("    const long long j = i % {0}LL, row = i / {0}LL;\n", len);
  c += fmt::format("    const {} b = {};\n    long long rank = 0;\n", C, loadAs(x.dtype, p, "i"));
  c += fmt::format("    for (long long t = 0; t < {}LL; ++t) {{\n", len);
  c += fmt::format("      const {} a = {};\n      const int c = {};\n", C, loadAs(x.dtype, p, fmt::format("row * {}LL + t", len)),
                   orderExpr(x.dtype, "a", "b"));
  c += "      if (c > 0 || (c == 0 && t < j)) ++rank;\n    }\n";
  c += fmt::format("    if (rank >= {}LL) continue;\n", topk);
  const char* E = bitsType(dtypeSize(x.dtype));
  c += fmt::format("    (({0}*)p{1})[row * {2}LL + rank] = ((const {0}*){3})[i];\n", E, k.resultArgs[0], topk, p);
  c += fmt::format("    ((int*)p{})[row * {}LL + rank] = (int)j;\n  }}\n}}\n", k.resultArgs[1], topk);
  return finish(c, x.numel(), numArgs);
}

}  // namespace

namespace {

// conv_general_dilated (f32, f64, bf16 in f32): one thread per result element, a direct loop over its group's
// input features and window positions; every size, stride and layout is a constant of the kernel.
std::optional<GeneratedKernel> convKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  const Aval& lhs = g.aval(n.operands[0]);
  const Aval& rhs = g.aval(n.operands[1]);
  const Aval& out = g.aval(n.results[0]);
  const DType t = out.dtype;
  if (t != DType::F32 && t != DType::F64 && t != DType::BF16) return std::nullopt;
  const auto& at = std::get<ir::ConvAttrs>(n.attrs);
  const ops::ConvGeometry geo = ops::convGeometry(lhs.shape, rhs.shape, at);
  const char* T = storageType(t);
  const char* acc = t == DType::F64 ? "double" : "float";
  auto load = [&](const std::string& x) { return t == DType::BF16 ? fmt::format("tsr_bf16_to_f32({})", x) : x; };
  const auto ls = lhs.shape.strides(), rs = rhs.shape.strides();
  auto lStride = [&](size_t role) { return ls[static_cast<size_t>(at.lhsSpec[role])]; };
  auto rStride = [&](size_t role) { return rs[static_cast<size_t>(at.rhsSpec[role])]; };
  const int rank = out.rank();
  const size_t ns = geo.k.size();
  const int64_t groups = geo.featureGroups * geo.batchGroups, og = geo.o / groups, nOut = geo.n / geo.batchGroups;
  std::string c = header(k.info.name, static_cast<int>(k.args.size())) + indexLoop(out.numel());
  c += "    long long r = i;\n";
  for (int d = rank - 1; d >= 0; --d)
    c += fmt::format("    const long long o{0} = r % {1}; r /= {1};\n", d, out.shape[d]);
  c += fmt::format("    const long long grp = o{} / {};\n", at.outSpec[1], og);
  c += fmt::format("    const long long lbase = ({} + o{}) * {}LL + {} * {}LL;\n",
                   geo.batchGroups > 1 ? fmt::format("grp * {}", nOut) : "0", at.outSpec[0], lStride(0),
                   geo.featureGroups > 1 ? fmt::format("grp * {}", geo.i) : "0", lStride(1));
  c += fmt::format("    const long long rbase = o{} * {}LL;\n", at.outSpec[1], rStride(0));
  c += fmt::format("    {} acc = 0;\n", acc);
  c += fmt::format("    for (long long f = 0; f < {}; ++f) {{\n", geo.i);
  std::string lOff = fmt::format("lbase + f * {}LL", lStride(1)), rOff = fmt::format("rbase + f * {}LL", rStride(1));
  for (size_t d = 0; d < ns; ++d) {
    c += fmt::format("    for (long long k{0} = 0; k{0} < {1}; ++k{0}) {{\n", d, geo.k[d]);
    c += fmt::format("      long long x{0} = o{1} * {2} + k{0} * {3} - ({4});\n", d, at.outSpec[d + 2], geo.stride[d],
                     geo.rhsDil[d], geo.lo[d]);
    c += fmt::format("      if (x{0} < 0 || x{0} % {1} != 0 || x{0} / {1} >= {2}) continue;\n", d, geo.lhsDil[d],
                     geo.in[d]);
    lOff += fmt::format(" + (x{} / {}) * {}LL", d, geo.lhsDil[d], lStride(d + 2));
    rOff += fmt::format(" + k{} * {}LL", d, rStride(d + 2));
  }
  c += fmt::format("      acc += ({0}){1} * ({0}){2};\n", acc,
                   load(fmt::format("((const {}*)p{})[{}]", T, k.operandArgs[0], lOff)),
                   load(fmt::format("((const {}*)p{})[{}]", T, k.operandArgs[1], rOff)));
  for (size_t d = 0; d < ns; ++d) c += "    }\n";
  c += "    }\n";
  c += fmt::format("    (({}*)p{})[i] = {};\n  }}\n}}\n", T, k.resultArgs[0],
                   t == DType::BF16 ? "tsr_f32_to_bf16(acc)" : fmt::format("({})acc", T));
  return finish(c, out.numel(), static_cast<int>(k.args.size()));
}

// The loops over the window positions of result element o0..o{rank-1}: per dim, x{d} the operand index,
// padding skipped (`continue` moves to the dim's next position). Closed by closeLoops.
std::string windowLoops(const Shape& operand, const ir::WindowAttrs& at, const char* o, const char* k,
                        const char* x) {
  std::string c;
  for (int d = 0; d < operand.rank(); ++d) {
    const auto u = static_cast<size_t>(d);
    c += fmt::format("    for (long long {1}{0} = 0; {1}{0} < {2}; ++{1}{0}) {{\n", d, k, at.windowDimensions[u]);
    c += fmt::format("      const long long {4}{0} = {5}{0} * {1} + {6}{0} * {2} - {3};\n", d, at.windowStrides[u],
                     at.windowDilation[u], at.paddingLo[u], x, o, k);
    c += fmt::format("      if ({1}{0} < 0 || {1}{0} >= {2}) continue;\n", d, x, operand[d]);
  }
  return c;
}
std::string closeLoops(int rank) { return std::string(static_cast<size_t>(rank), '}') + "\n"; }

// A flat index from per-dim indices name0..name{rank-1} and row-major strides.
std::string flatIndex(const Shape& shape, const char* name) {
  const auto st = shape.strides();
  std::string off = "0";
  for (int d = 0; d < shape.rank(); ++d) off += fmt::format(" + {}{} * {}LL", name, d, st[static_cast<size_t>(d)]);
  return off;
}

std::string unravelInto(const Shape& shape, const char* name) {
  std::string c = "    long long r = i;\n";
  for (int d = shape.rank() - 1; d >= 0; --d)
    c += fmt::format("    const long long {0}{1} = r % {2}LL; r /= {2}LL;\n", name, d, std::max<int64_t>(shape[d], 1));
  return c;
}

// reduce_window_sum / _max / _min: one thread per result element, a loop over its window. Floats accumulate in
// float (double for f64) and propagate NaN, integer sums wrap, as the CPU kernels.
std::optional<GeneratedKernel> reduceWindowKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  const Aval& x = g.aval(n.operands[0]);
  const Aval& out = g.aval(n.results[0]);
  const DType t = x.dtype;
  const char* S = storageType(t);
  if (!S || t == DType::Bool || t == DType::U8 || t == DType::U32) return std::nullopt;
  const auto& at = std::get<ir::WindowAttrs>(n.attrs);
  const bool isFloat = isFloatType(t);
  const char* A = n.op == OpCode::ReduceWindowSum || isFloat ? computeType(t) : S;
  std::string identity, combine;
  const bool isMax = n.op == OpCode::ReduceWindowMax;
  switch (n.op) {
    case OpCode::ReduceWindowSum: identity = "0"; combine = "acc = acc + v;"; break;
    case OpCode::ReduceWindowMax:
    case OpCode::ReduceWindowMin:
      identity = isFloat ? (isMax ? "-__int_as_float(0x7f800000)" : "__int_as_float(0x7f800000)")
                 : t == DType::I32 ? (isMax ? "(-2147483647 - 1)" : "2147483647")
                                   : (isMax ? "(-9223372036854775807LL - 1)" : "9223372036854775807LL");
      combine = fmt::format("if (v {} acc{}) acc = v;", isMax ? ">" : "<", isFloat ? " || v != v" : "");
      break;
    default: return std::nullopt;
  }
  const int numArgs = static_cast<int>(k.args.size());
  std::string c = header(k.info.name, numArgs) + indexLoop(out.numel()) + unravelInto(out.shape, "o");
  c += fmt::format("    {0} acc = ({0}){1};\n", A, identity);
  c += windowLoops(x.shape, at, "o", "k", "x");
  c += fmt::format("      const {0} v = ({0}){1};\n      {2}\n", A,
                   loadAs(t, fmt::format("p{}", k.operandArgs[0]), flatIndex(x.shape, "x")), combine);
  c += closeLoops(x.rank());
  c += "    " + storeFrom(t, fmt::format("p{}", k.resultArgs[0]), "i", "acc") + "\n  }\n}\n";
  return finish(c, out.numel(), numArgs);
}

// select_and_scatter_add(source, operand): one thread per result element y, which sums the source values of
// the windows that select it (each such window's first maximum recomputed): no atomics, and the same sums in
// the same order on every run.
std::optional<GeneratedKernel> selectAndScatterAddKernel(const ir::Graph& g, const ir::Node& n,
                                                         const cpu::LoweredKernel& k) {
  const Aval& source = g.aval(n.operands[0]);
  const Aval& x = g.aval(n.operands[1]);
  const DType t = x.dtype;
  const char* A = computeType(t);
  if (!A) return std::nullopt;
  const auto& at = std::get<ir::WindowAttrs>(n.attrs);
  const int rank = x.rank();
  const std::string src = fmt::format("p{}", k.operandArgs[0]), op = fmt::format("p{}", k.operandArgs[1]);
  const char* C = isFloatType(t) ? A : storageType(t);  // compared in the value's own type (bf16 widened)
  const int numArgs = static_cast<int>(k.args.size());
  // The result index is y0..y{rank-1}: p0, p1, ... name the kernel's arguments.
  std::string c = header(k.info.name, numArgs) + indexLoop(x.numel()) + unravelInto(x.shape, "y");
  c += fmt::format("    {0} acc = ({0})0;\n", A);
  // The windows w whose position j lands on y: w * stride + j * dilation - lo = y.
  for (int d = 0; d < rank; ++d) {
    const auto u = static_cast<size_t>(d);
    c += fmt::format("    for (long long j{0} = 0; j{0} < {1}; ++j{0}) {{\n", d, at.windowDimensions[u]);
    c += fmt::format("      const long long q{0} = y{0} + {1} - j{0} * {2};\n", d, at.paddingLo[u], at.windowDilation[u]);
    c += fmt::format("      if (q{0} < 0 || q{0} % {1} != 0 || q{0} / {1} >= {2}) continue;\n", d, at.windowStrides[u],
                     source.shape[d]);
    c += fmt::format("      const long long w{0} = q{0} / {1};\n", d, at.windowStrides[u]);
  }
  c += fmt::format("    long long best = -1; {} bv = 0;\n", C);
  c += windowLoops(x.shape, at, "w", "k", "x");
  c += fmt::format("      const long long at = {};\n      const {} v = {};\n", flatIndex(x.shape, "x"), C, loadAs(t, op, "at"));
  c += "      if (best < 0 || v > bv || (v != v && bv == bv)) { best = at; bv = v; }\n";
  c += closeLoops(rank);
  c += fmt::format("    if (best == i) acc = acc + ({}){};\n", A, loadAs(t, src, flatIndex(source.shape, "w")));
  c += closeLoops(rank);
  c += "    " + storeFrom(t, fmt::format("p{}", k.resultArgs[0]), "i", "acc") + "\n  }\n}\n";
  return finish(c, x.numel(), numArgs);
}

// scatter / scatter_mul / scatter_min / scatter_max(x, idx, updates): the result holds x already
// (GeneratedKernel::prefill). One thread per column (batch, outer, inner) of the updates [batch, outer, I,
// inner] walks the I indices in order and folds each in-range update into its target, so repeated indices
// meet in index order as on the CPU, with no atomics. scatter moves bits (any dtype); the others compute as the
// elementwise mul, min and max do: floats (bf16 widened) with NaN winning min and max, integers wrapping on
// multiply.
std::optional<GeneratedKernel> scatterKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  const Aval& x = g.aval(n.operands[0]);
  const Aval& idx = g.aval(n.operands[1]);
  const DType t = x.dtype;
  const char* I = storageType(idx.dtype);
  if (!I || !isIntType(idx.dtype)) return std::nullopt;
  const bool isFloat = isFloatType(t);
  std::string combine;  // a: the target's value, v: the update's, both in type C
  const char* C = nullptr;
  switch (n.op) {
    case OpCode::Scatter: C = bitsType(dtypeSize(t)); break;  // moves bits: no combine
    case OpCode::ScatterMul:
      // Integers multiply modulo 2^bits in an unsigned type of at least their width.
      C = isFloat ? computeType(t) : t == DType::I64 ? "u64" : isIntType(t) ? "u32" : nullptr;
      combine = "a = a * v;";
      break;
    case OpCode::ScatterMin:
    case OpCode::ScatterMax:
      C = isFloat ? computeType(t) : isIntType(t) ? storageType(t) : nullptr;
      combine = fmt::format("a = (a {} v || a != a) ? a : v;", n.op == OpCode::ScatterMax ? ">" : "<");
      break;
    default: return std::nullopt;
  }
  if (!C || !storageType(t)) return std::nullopt;
  ops::GatherGeometry geo = ops::gatherGeometry(x.shape, idx.shape, std::get<ir::GatherAttrs>(n.attrs));
  const int numArgs = static_cast<int>(k.args.size());
  const std::string out = fmt::format("p{}", k.resultArgs[0]), upd = fmt::format("p{}", k.operandArgs[2]);
  auto load = [&](const std::string& p, const std::string& at) {
    if (n.op == OpCode::Scatter) return fmt::format("((const {}*){})[{}]", C, p, at);
    return fmt::format("({}){}", C, loadAs(t, p, at));
  };
  const int64_t columns = geo.batch * geo.outer * geo.inner;
  std::string c = header(k.info.name, numArgs) + indexLoop(columns);
  c += fmt::format("    const long long s = i % {0}, bo = i / {0}, b = bo / {1};\n", std::max<int64_t>(geo.inner, 1),
                   std::max<int64_t>(geo.outer, 1));
  c += fmt::format("    for (long long q = 0; q < {}LL; ++q) {{\n", geo.indices);
  c += fmt::format("      const long long j = (long long)((const {0}*){1})[b * {2}LL + q];\n", I,
                   fmt::format("p{}", k.operandArgs[1]), geo.indices);
  c += fmt::format("      if (j < 0 || j >= {}LL) continue;\n", geo.axisSize);
  c += fmt::format("      const long long to = (bo * {}LL + j) * {}LL + s;\n", geo.axisSize, geo.inner);
  c += fmt::format("      const {0} v = {1};\n", C,
                   load(upd, fmt::format("(bo * {}LL + q) * {}LL + s", geo.indices, geo.inner)));
  if (n.op == OpCode::Scatter) {
    c += fmt::format("      (({}*){})[to] = v;\n", C, out);
  } else {
    c += fmt::format("      {} a = {};\n      {}\n", C, load(out, "to"), combine);
    c += "      " + storeFrom(t, out, "to", "a") + "\n";
  }
  c += "    }\n  }\n}\n";
  GeneratedKernel gk = finish(c, columns, numArgs);
  gk.prefillFrom = k.operandArgs[0];
  gk.prefillTo = k.resultArgs[0];
  gk.prefillBytes = x.bytes();
  return gk;
}

// softmax_cross_entropy and its gradient over f32 or bf16 logits viewed as [rows, V] (f32 arithmetic, the rows'
// values f32, bf16 logits' gradient rounded once): a block per row. The forward keeps
// an online (max, sum of exp) pair per thread in base 2 (one exp2 a logit, a rescale where the max grows),
// combined across the warp with shuffles and across warps in shared memory, so the logits are read once; the
// gradient reads each logit once and writes exp(x - lse) (dloss + dlse), less dloss at the label.
std::optional<GeneratedKernel> crossEntropyKernel(const ir::Graph& g, const ir::Node& n, const cpu::LoweredKernel& k) {
  const Aval& x = g.aval(n.operands[0]);
  const Aval& labels = g.aval(n.operands[1]);
  const char* L = storageType(labels.dtype);
  const int64_t classes = x.shape[x.rank() - 1], rows = labels.numel();
  if ((x.dtype != DType::F32 && x.dtype != DType::BF16) || !L || !isIntType(labels.dtype) || rows == 0)
    return std::nullopt;
  const int numArgs = static_cast<int>(k.args.size());
  auto arg = [&](int i) { return fmt::format("p{}", i); };
  std::string c = header(k.info.name, numArgs);
  c += "  const long long row = blockIdx.x;\n";
  c += fmt::format("  const {0}* xr = (const {0}*){1} + row * {2}LL;\n", x.dtype == DType::BF16 ? "u16" : "float",
                   arg(k.operandArgs[0]), classes);
  const std::string xAt = x.dtype == DType::BF16 ? "tsr_bf16_to_f32(xr[{}])" : "xr[{}]";
  auto logit = [&](const char* j) { return fmt::format(fmt::runtime(xAt), j); };
  c += fmt::format("  const long long label = (long long)((const {}*){})[row];\n", L, arg(k.operandArgs[1]));
  c += "  const float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f, kInf = __int_as_float(0x7f800000);\n";
  if (n.op == OpCode::SoftmaxCrossEntropy) {
    // m and s: the running max of x log2(e) and the sum of 2^(t - m); a thread without finite entries has m -inf.
    c += "  float m = -kInf, s = 0.0f;\n";
    c += fmt::format("  for (long long j = threadIdx.x; j < {}LL; j += blockDim.x) {{\n", classes);
    c += fmt::format("    const float t = {} * kLog2e;\n", logit("j"));
    c += "    if (t > m) { s = s * exp2f(m - t) + 1.0f; m = t; }\n";
    c += "    else if (t != -kInf) s += exp2f(t - m);\n";
    c += "  }\n";
    c += "  auto merge = [&](float om, float os) {\n";
    c += "    const float nm = fmaxf(m, om);\n";
    c += "    if (nm == -kInf) { s += os; return; }\n";
    c += "    s = (m == -kInf ? 0.0f : s * exp2f(m - nm)) + (om == -kInf ? 0.0f : os * exp2f(om - nm));\n";
    c += "    m = nm;\n";
    c += "  };\n";
    c += "  for (int o = 16; o > 0; o >>= 1) {\n";
    c += "    const float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);\n";
    c += "    merge(om, os);\n";
    c += "  }\n";
    c += fmt::format("  __shared__ float pm[{0}], ps[{0}];\n", kRowThreads / 32);
    c += "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n";
    c += "  if (lane == 0) { pm[warp] = m; ps[warp] = s; }\n";
    c += "  __syncthreads();\n";
    c += "  if (warp != 0) return;\n";
    c += "  m = lane < (int)(blockDim.x >> 5) ? pm[lane] : -kInf;\n";
    c += "  s = lane < (int)(blockDim.x >> 5) ? ps[lane] : 0.0f;\n";
    c += "  for (int o = 16; o > 0; o >>= 1) {\n";
    c += "    const float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);\n";
    c += "    merge(om, os);\n";
    c += "  }\n";
    c += "  if (lane != 0) return;\n";
    // A NaN logit makes s NaN (exp2 of NaN); a row of -inf keeps s 0 and lse -inf.
    c += "  const float lse = m == -kInf ? (s != s ? s : -kInf) : (m + log2f(s)) * kLn2;\n";
    c += fmt::format("  ((float*){})[row] = lse;\n", arg(k.resultArgs[1]));
    c += fmt::format("  ((float*){})[row] = label >= 0 && label < {}LL ? lse - {} : __int_as_float(0x7fc00000);\n",
                     arg(k.resultArgs[0]), classes, logit("label"));
    c += "}\n";
  } else {
    c += fmt::format("  const float lse2 = ((const float*){})[row] * kLog2e;\n", arg(k.operandArgs[2]));
    c += fmt::format("  const float dloss = ((const float*){})[row];\n", arg(k.operandArgs[3]));
    c += fmt::format("  const float gsum = dloss + ((const float*){})[row];\n", arg(k.operandArgs[4]));
    c += fmt::format("  {0}* dx = ({0}*){1} + row * {2}LL;\n", x.dtype == DType::BF16 ? "u16" : "float",
                     arg(k.resultArgs[0]), classes);
    c += fmt::format("  for (long long j = threadIdx.x; j < {}LL; j += blockDim.x) {{\n", classes);
    c += fmt::format("    const float d = exp2f({} * kLog2e - lse2) * gsum;\n", logit("j"));
    if (x.dtype == DType::BF16) c += "    dx[j] = tsr_f32_to_bf16(j == label ? d - dloss : d);\n";
    else c += "    dx[j] = j == label ? d - dloss : d;\n";
    c += "  }\n}\n";
  }
  GeneratedKernel gk = finish(c, rows, numArgs);
  gk.shape = LaunchShape::Rows;
  gk.rows = rows;
  return gk;
}

}  // namespace

Result<std::optional<GeneratedKernel>> generateNodeKernel(const ir::Graph& g, const cpu::LoweredKernel& k) {
  const ir::Node& n = g.nodes()[static_cast<size_t>(k.node)];
  const int numArgs = static_cast<int>(k.args.size());
  auto arg = [&](int i) { return fmt::format("p{}", i); };
  const std::string label = k.info.name;
  switch (n.op) {
    case OpCode::Gather: {
      const Aval& x = g.aval(n.operands[0]);
      const Aval& idx = g.aval(n.operands[1]);
      const Aval& out = g.aval(n.results[0]);
      const char* E = bitsType(dtypeSize(x.dtype));
      const char* I = storageType(idx.dtype);
      if (!E || !I || !isIntType(idx.dtype)) return std::optional<GeneratedKernel>();
      ops::GatherGeometry geo = ops::gatherGeometry(x.shape, idx.shape, std::get<ir::GatherAttrs>(n.attrs));
      std::string c = header(label, numArgs) + indexLoop(out.numel());
      // result [batch, outer, indices, inner] <- x [batch, outer, axis, inner]
      c += fmt::format("    const long long s = i % {0}, r = i / {0}; const long long q = r % {1}, bo = r / {1};\n",
                       geo.inner, geo.indices);
      c += fmt::format("    const long long b = bo / {};\n", geo.outer);
      c += fmt::format("    long long j = (long long)((const {0}*){1})[b * {2} + q];\n", I, arg(k.operandArgs[1]),
                       geo.indices);
      c += fmt::format("    j = j < 0 ? 0 : j > {0} ? {0} : j;\n", std::max<int64_t>(geo.axisSize - 1, 0));
      if (geo.axisSize == 0)
        c += fmt::format("    (({0}*){1})[i] = 0;\n", E, arg(k.resultArgs[0]));
      else
        c += fmt::format("    (({0}*){1})[i] = ((const {0}*){2})[(bo * {3} + j) * {4} + s];\n", E,
                         arg(k.resultArgs[0]), arg(k.operandArgs[0]), geo.axisSize, geo.inner);
      c += "  }\n}\n";
      return std::optional(finish(c, out.numel(), numArgs));
    }
    case OpCode::ScatterAdd: {
      const Aval& x = g.aval(n.operands[0]);
      const Aval& idx = g.aval(n.operands[1]);
      const Aval& upd = g.aval(n.operands[2]);
      if ((x.dtype != DType::F32 && x.dtype != DType::I32) || !isIntType(idx.dtype)) return std::optional<GeneratedKernel>();
      ops::GatherGeometry geo = ops::gatherGeometry(x.shape, idx.shape, std::get<ir::GatherAttrs>(n.attrs));
      const char* T = storageType(x.dtype);
      const char* I = storageType(idx.dtype);
      // The result holds x already (GeneratedKernel::prefill); updates [batch, outer, indices, inner].
      std::string c = header(label, numArgs) + indexLoop(upd.numel());
      c += fmt::format("    const long long s = i % {0}, r = i / {0}; const long long q = r % {1}, bo = r / {1};\n",
                       geo.inner, geo.indices);
      c += fmt::format("    const long long b = bo / {};\n", geo.outer);
      c += fmt::format("    const long long j = (long long)((const {0}*){1})[b * {2} + q];\n", I,
                       arg(k.operandArgs[1]), geo.indices);
      c += fmt::format("    if (j < 0 || j >= {}) continue;\n", geo.axisSize);
      c += fmt::format("    atomicAdd(({0}*){1} + (bo * {2} + j) * {3} + s, ((const {0}*){4})[i]);\n", T,
                       arg(k.resultArgs[0]), geo.axisSize, geo.inner, arg(k.operandArgs[2]));
      c += "  }\n}\n";
      GeneratedKernel gk = finish(c, upd.numel(), numArgs);
      gk.prefillFrom = k.operandArgs[0];
      gk.prefillTo = k.resultArgs[0];
      gk.prefillBytes = x.bytes();
      return std::optional(std::move(gk));
    }
    case OpCode::Iota: {
      const auto& at = std::get<ir::IotaAttrs>(n.attrs);
      const Aval& out = g.aval(n.results[0]);
      const char* T = storageType(out.dtype);
      if (!T || out.dtype == DType::Bool) return std::optional<GeneratedKernel>();
      int64_t inner = 1;
      for (size_t d = static_cast<size_t>(at.dimension) + 1; d < at.shape.size(); ++d) inner *= at.shape[d];
      const int64_t size = at.shape[static_cast<size_t>(at.dimension)];
      std::string c = header(label, numArgs) + indexLoop(out.numel());
      const std::string v = fmt::format("(i / {}) % {}", inner, std::max<int64_t>(size, 1));
      c += fmt::format("    (({0}*){1})[i] = {2};\n", T, arg(k.resultArgs[0]),
                       out.dtype == DType::BF16 ? fmt::format("tsr_f32_to_bf16((float)({}))", v)
                                                : fmt::format("({})({})", T, v));
      c += "  }\n}\n";
      return std::optional(finish(c, out.numel(), numArgs));
    }
    case OpCode::Convert: {
      const Aval& in = g.aval(n.operands[0]);
      const Aval& out = g.aval(n.results[0]);
      if (!storageType(in.dtype) || !storageType(out.dtype)) return std::optional<GeneratedKernel>();
      std::string c = header(label, numArgs) + indexLoop(out.numel());
      c += fmt::format("    const {0} x = ((const {0}*){1})[i];\n", storageType(in.dtype), arg(k.operandArgs[0]));
      c += fmt::format("    (({0}*){1})[i] = {2};\n", storageType(out.dtype), arg(k.resultArgs[0]),
                       convertExpr(in.dtype, out.dtype, "x"));
      c += "  }\n}\n";
      return std::optional(finish(c, out.numel(), numArgs));
    }
    case OpCode::SoftmaxCrossEntropy:
    case OpCode::SoftmaxCrossEntropyGrad: return crossEntropyKernel(g, n, k);
    case OpCode::IntegerPow: return integerPowKernel(g, n, k);
    case OpCode::OptimizationBarrier: return barrierKernel(g, n, k);
    case OpCode::Sort: return sortKernel(g, n, k);
    case OpCode::TopK: return topKKernel(g, n, k);
    case OpCode::Cumsum:
    case OpCode::Cumprod:
    case OpCode::Cummax:
    case OpCode::Cumlogsumexp: return cumulativeKernel(g, n, k);
    case OpCode::ReduceAnd:
    case OpCode::ReduceOr: return logicalReduceKernel(g, n, k);
    case OpCode::Slice:
    case OpCode::BroadcastInDim:
    case OpCode::Transpose:
    case OpCode::Reshape:
    case OpCode::Rev:
    case OpCode::Pad:
    case OpCode::Concatenate: return layoutKernel(g, n, k);
    case OpCode::ConvGeneralDilated: return convKernel(g, n, k);
    case OpCode::ReduceWindowSum:
    case OpCode::ReduceWindowMax:
    case OpCode::ReduceWindowMin: return reduceWindowKernel(g, n, k);
    case OpCode::SelectAndScatterAdd: return selectAndScatterAddKernel(g, n, k);
    case OpCode::Scatter:
    case OpCode::ScatterMul:
    case OpCode::ScatterMin:
    case OpCode::ScatterMax: return scatterKernel(g, n, k);
    default: return elementwiseKernel(g, n, k);
  }
}

}  // namespace tsr::cuda
