#include "engine/backends/cuda/codegen.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/hash.h"
#include "engine/ops/loop_lowering.h"
#include "engine/ops/registry.h"

namespace tsr::cuda {

using ir::OpCode;

namespace {

// Shared by every kernel, before the loop dialect (engine/ops/loop_dialect_cuda.inc: the ops' scalar functions,
// NaN-propagating max and min for the reduction combiners too). bf16 is kept as its 16 bits and converted by hand (round to nearest even, NaN stays NaN): no CUDA header.
constexpr const char* kPrelude = R"(typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
static __device__ __forceinline__ float tsr_bf16_to_f32(u16 b) { return __uint_as_float(((u32)b) << 16); }
static __device__ __forceinline__ u16 tsr_f32_to_bf16(float f) {
  u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (u16)(u >> 16);
}
)";

int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

// Whether every index of the kernel fits in 32 bits (faster index arithmetic).
bool fitsInt32(const cpu::TileProgram& p) {
  int64_t n = product(p.dims);
  int64_t maxOffset = n;
  for (const auto& in : p.inputs) {
    int64_t o = in.offset;
    for (size_t d = 0; d < p.dims.size(); ++d) o += (p.dims[d] - 1) * std::max<int64_t>(in.strides[d], 0);
    maxOffset = std::max(maxOffset, o);
  }
  // Margin for the grid-stride step (i + gridDim.x * blockDim.x must not overflow either).
  return maxOffset < (int64_t{1} << 31) - (int64_t{1} << 26);
}

bool contiguous(const cpu::TileInput& in, const std::vector<int64_t>& dims) {
  int64_t expect = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] != 1 && in.strides[d] != expect) return false;
    expect *= dims[d];
  }
  return true;
}

// Whether reading the input needs the element's index along some dim (it is neither contiguous nor one value
// broadcast over the whole space): body() then writes idx[d] into its offset.
bool readsByIndex(const cpu::TileInput& in, const std::vector<int64_t>& dims) {
  if (contiguous(in, dims)) return false;
  for (size_t d = 0; d < dims.size(); ++d)
    if (in.strides[d] != 0 && dims[d] != 1) return true;
  return false;
}

// Declares the kernel's pointer arguments p0..pn-1.
std::string signature(const std::string& name, int numArgs, const char* bounds) {
  std::string s = fmt::format("extern \"C\" __global__ void {} {}(", bounds, name);
  for (int i = 0; i < numArgs; ++i) s += fmt::format("{}char* __restrict__ p{}", i ? ", " : "", i);
  return s + ")";
}

// The body that evaluates the program at one element: slot variables s<i>, stores when `store`.
// idx[d]: the expression of the index along dim d; flat: the element's position in iteration order.
Result<std::string> body(const cpu::TileProgram& p, const std::vector<std::string>& idx, const std::string& flat,
                         const std::string& indexType, bool store, const std::string& indent) {
  std::string s;
  const int nin = static_cast<int>(p.inputs.size());
  for (int i = 0; i < nin; ++i) {
    const auto& in = p.inputs[static_cast<size_t>(i)];
    std::string off;
    if (contiguous(in, p.dims)) {
      off = in.offset ? fmt::format("{} + {}", flat, in.offset) : flat;
    } else {
      off = fmt::format("{}", in.offset);
      for (size_t d = 0; d < p.dims.size(); ++d)
        if (in.strides[d] != 0 && p.dims[d] != 1) off += fmt::format(" + {} * ({})", idx[d], in.strides[d]);
    }
    if (in.dtype == DType::F32)
      s += fmt::format("{}const float s{} = ((const float*)p{})[{}];\n", indent, i, in.arg, off);
    else if (in.dtype == DType::Bool)
      s += fmt::format("{}const float s{} = tsr_b(((const u8*)p{})[{}] != 0);\n", indent, i, in.arg, off);
    else if (in.dtype == DType::BF16)
      s += fmt::format("{}const float s{} = tsr_bf16_to_f32(((const u16*)p{})[{}]);\n", indent, i, in.arg, off);
    else
      return makeError("input {} of type {} cannot be read by a fused kernel", i, dtypeName(in.dtype));
  }
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const auto& ins = p.instrs[i];
    auto a = [&](int k) { return ins.args[k] >= 0 ? fmt::format("s{}", ins.args[k]) : std::string("0.0f"); };
    std::string e = opExpression(ins.op, ins.resultIsBool, a(0), a(1), a(2));
    if (e.empty()) return makeError("op {} has no loop lowering", ops::registry().get(ins.op).name);
    // A bf16 result is rounded where it is computed, as the op alone would store it.
    if (ins.roundBf16) e = fmt::format("tsr_bf16_to_f32(tsr_f32_to_bf16({}))", e);
    s += fmt::format("{}const float s{} = {};\n", indent, nin + static_cast<int>(i), e);
  }
  if (store)
    for (const auto& st : p.stores) {
      if (st.dtype == DType::F32)
        s += fmt::format("{}((float*)p{})[{}] = s{};\n", indent, st.arg, flat, st.slot);
      else if (st.dtype == DType::Bool)
        s += fmt::format("{}((u8*)p{})[{}] = (u8)(s{} != 0.0f);\n", indent, st.arg, flat, st.slot);
      else if (st.dtype == DType::BF16)
        s += fmt::format("{}((u16*)p{})[{}] = tsr_f32_to_bf16(s{});\n", indent, st.arg, flat, st.slot);
      else
        return makeError("a fused kernel cannot store {}", dtypeName(st.dtype));
    }
  (void)indexType;
  return s;
}

// Index expressions for dims [first, last) of the iteration space from the linear position `var`.
std::string unravel(const std::vector<int64_t>& dims, const std::vector<size_t>& which, const std::string& var,
                    const std::string& type, const std::string& prefix, const std::string& indent) {
  std::string s = fmt::format("{}{} {}r = {};\n", indent, type, prefix, var);
  for (size_t k = which.size(); k-- > 0;) {
    size_t d = which[k];
    if (k == 0)
      s += fmt::format("{}const {} {}{} = {}r;\n", indent, type, prefix, d, prefix);
    else
      s += fmt::format("{}const {} {}{} = {}r % {}; {}r /= {};\n", indent, type, prefix, d, prefix, dims[d], prefix,
                       dims[d]);
  }
  return s;
}

std::string finish(const std::string& label, const std::string& code, GeneratedKernel& k) {
  std::string name = fmt::format("tsr_{:016x}", fnv1a(code));
  std::string body = code;
  for (size_t pos; (pos = body.find("KERNEL_NAME")) != std::string::npos;) body.replace(pos, 11, name);
  k.name = name;
  k.body = fmt::format("// {}\n{}", label, body);
  return kernelPrelude() + k.body;
}

const char* reduceInit(OpCode op) {
  if (op == OpCode::ReduceMax) return "-__int_as_float(0x7f800000)";
  if (op == OpCode::ReduceMin) return "__int_as_float(0x7f800000)";
  return "0.0f";
}

std::string combine(OpCode op, const std::string& a, const std::string& b) {
  if (op == OpCode::ReduceMax) return fmt::format("tsr_max({}, {})", a, b);
  if (op == OpCode::ReduceMin) return fmt::format("tsr_min({}, {})", a, b);
  return fmt::format("{} + {}", a, b);
}

}  // namespace

const char* kernelPrelude() {
  static const std::string prelude = std::string(kPrelude) + ops::loopDialectCudaText();
  return prelude.c_str();
}

std::string opExpression(OpCode op, bool resultIsBool, const std::string& a, const std::string& b,
                         const std::string& c) {
  const ir::OpDef* def = ops::registry().find(op);
  const ir::LoopLowering* l = def ? ir::loopLoweringOf(*def, resultIsBool) : nullptr;
  if (!l) return "";
  const std::string operands[] = {"(" + a + ")", "(" + b + ")", "(" + c + ")"};
  return "(" + ops::instantiateLoopExpression(l->expr, operands) + ")";
}

// A loop kernel's parts: its index type, the unravelled indices its strided inputs read ("" when every input is
// contiguous or one broadcast value) and the body at element i.
struct LoopParts {
  std::string type;
  std::string indices;
  std::string body;
};

Result<LoopParts> loopParts(const cpu::TileProgram& p, const std::string& label) {
  LoopParts lp;
  lp.type = fitsInt32(p) ? "int" : "long long";
  std::vector<size_t> all(p.dims.size());
  std::vector<std::string> idx;
  for (size_t d = 0; d < p.dims.size(); ++d) {
    all[d] = d;
    idx.push_back(fmt::format("i{}", d));
  }
  bool needIdx = false;
  for (const auto& in : p.inputs) needIdx |= readsByIndex(in, p.dims);
  auto b = body(p, idx, "i", lp.type, true, "    ");
  if (!b.ok()) return makeError("{}: {}", label, b.error().message);
  if (needIdx) lp.indices = unravel(p.dims, all, "i", lp.type, "i", "    ");
  lp.body = std::move(*b);
  return lp;
}

Result<GeneratedKernel> generateLoop(const cpu::TileProgram& p, int numArgs, const std::string& label) {
  GeneratedKernel k;
  k.shape = LaunchShape::Elements;
  k.elements = product(p.dims);
  k.numArgs = numArgs;
  TSR_ASSIGN(LoopParts lp, loopParts(p, label));
  std::string code = signature("KERNEL_NAME", numArgs, fmt::format("__launch_bounds__({})", kThreads).c_str());
  code += fmt::format(" {{\n  const {0} n = {1};\n  for ({0} i = ({0})blockIdx.x * blockDim.x + threadIdx.x; i < n; "
                      "i += ({0})gridDim.x * blockDim.x) {{\n",
                      lp.type, k.elements);
  code += lp.indices + lp.body + "  }\n}\n";
  k.source = finish(label, code, k);
  return k;
}

Result<std::optional<GeneratedKernel>> generateLoopGroup(const cpu::TileProgram& p, int numArgs,
                                                         const std::string& label) {
  TSR_ASSIGN(LoopParts lp, loopParts(p, label));
  if (!lp.indices.empty()) return std::optional<GeneratedKernel>();  // its text depends on the dims
  GeneratedKernel k;
  k.shape = LaunchShape::Elements;
  k.numArgs = numArgs;
  const int w = numArgs + kGroupEntryExtra;
  std::string code = fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}) KERNEL_NAME(const long long* __restrict__ table, int entries) {{\n",
      kThreads);
  code += fmt::format("  // {} words an entry: {} pointers, then the elements, the first block and the blocks\n", w,
                      numArgs);
  code += "  int lo = 0, hi = entries - 1;\n  while (lo < hi) {\n    const int mid = (lo + hi + 1) >> 1;\n";
  code += fmt::format("    if (table[(long long)mid * {} + {}] <= (long long)blockIdx.x) lo = mid; else hi = mid - 1;\n",
                      w, numArgs + 1);
  code += fmt::format("  }}\n  const long long* e = table + (long long)lo * {};\n", w);
  for (int i = 0; i < numArgs; ++i) code += fmt::format("  char* __restrict__ p{0} = (char*)e[{0}];\n", i);
  code += fmt::format("  const {0} n = ({0})e[{1}], first = ({0})e[{2}], blocks = ({0})e[{3}];\n", lp.type, numArgs,
                      numArgs + 1, numArgs + 2);
  code += fmt::format("  for ({0} i = (({0})blockIdx.x - first) * blockDim.x + threadIdx.x; i < n; "
                      "i += blocks * blockDim.x) {{\n",
                      lp.type);
  code += lp.body + "  }\n}\n";
  k.source = finish("group of loops like " + label, code, k);
  return std::optional<GeneratedKernel>(std::move(k));
}

Result<GeneratedKernel> generateReduction(const cpu::LoweredKernel& lk, const std::string& label) {
  const cpu::TileProgram& p = lk.prog;
  GeneratedKernel k;
  k.numArgs = static_cast<int>(lk.args.size());
  const std::string T = fitsInt32(p) ? "int" : "long long";
  const size_t rank = p.dims.size();
  const size_t nred = lk.reduces.size();
  for (const auto& r : lk.reduces)
    if (r.op != OpCode::ReduceSum && r.op != OpCode::ReduceMax && r.op != OpCode::ReduceMin)
      return makeError("{}: {} cannot be fused", label, ir::coreOpName(r.op));
  std::string code;
  // Result j's element `at` = v: f32, or bf16 rounded once (bf16 results are never split into atomic chunks).
  auto storeResult = [&](size_t j, const std::string& at, const std::string& v) {
    const auto& r = lk.reduces[j];
    return r.dtype == DType::BF16 ? fmt::format("((u16*)p{})[{}] = tsr_f32_to_bf16({});", r.arg, at, v)
                                  : fmt::format("((float*)p{})[{}] = {};", r.arg, at, v);
  };
  bool anyHalf = false;
  for (const auto& r : lk.reduces) anyHalf |= r.dtype == DType::BF16;
  auto accInit = [&](const std::string& indent) {
    std::string s;
    for (size_t j = 0; j < nred; ++j) s += fmt::format("{}float acc{} = {};\n", indent, j, reduceInit(lk.reduces[j].op));
    return s;
  };
  auto accumulate = [&](const std::string& indent) {
    std::string s;
    for (size_t j = 0; j < nred; ++j)
      s += fmt::format("{}acc{} = {};\n", indent, j,
                       combine(lk.reduces[j].op, fmt::format("acc{}", j), fmt::format("s{}", lk.reduces[j].slot)));
    return s;
  };
  std::vector<std::string> idx;
  for (size_t d = 0; d < rank; ++d) idx.push_back(fmt::format("i{}", d));
  const bool hasK1 = rank >= 2 && !lk.reducedDims[0];
  if (!lk.genericReduce && lk.k2 == 1) {
    // Rows: block `row` reduces R elements; threads stride over them. Few long rows of sums (a global norm
    // over a whole parameter) are split into chunks, one block each, added into the zeroed output atomically.
    bool allSums = !anyHalf;
    for (const auto& r : lk.reduces) allSums &= r.op == OpCode::ReduceSum;
    int64_t chunks = 1;
    if (allSums && lk.k1 < 128 && lk.r >= (int64_t{1} << 16))
      chunks = std::max<int64_t>(1, std::min<int64_t>((lk.r + 16383) / 16384, 512 / std::max<int64_t>(lk.k1, 1)));
    const int64_t chunkLen = (lk.r + chunks - 1) / chunks;
    k.shape = LaunchShape::Rows;
    k.rows = lk.k1 * chunks;
    if (chunks > 1)
      for (const auto& r : lk.reduces) k.zeroArgs.push_back({r.arg, lk.k1 * 4});
    const size_t rDim = hasK1 ? 1 : 0;
    std::string flat = hasK1 ? fmt::format("(({0})i0 * {1} + i{2})", T, lk.r, rDim) : fmt::format("i{}", rDim);
    auto b = body(p, idx, flat, T, true, "    ");
    if (!b.ok()) return makeError("{}: {}", label, b.error().message);
    code = signature("KERNEL_NAME", k.numArgs, fmt::format("__launch_bounds__({})", kRowThreads).c_str());
    code += " {\n";
    code += fmt::format("  const {0} row = blockIdx.x / {1}, chunk = blockIdx.x % {1};\n", T, chunks);
    code += fmt::format("  const {0} lo = chunk * ({0}){1}, hi = min(({0}){2}, lo + ({0}){1});\n", T, chunkLen, lk.r);
    if (hasK1) code += fmt::format("  const {} i0 = row;\n", T);
    code += accInit("  ");
    code += fmt::format("  for ({0} i{1} = lo + threadIdx.x; i{1} < hi; i{1} += blockDim.x) {{\n", T, rDim);
    code += *b + accumulate("    ") + "  }\n";
    // Warp shuffles, then one value per warp through shared memory.
    code += fmt::format("  __shared__ float part[{}][32];\n", std::max<size_t>(nred, 1));
    code += "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n";
    for (size_t j = 0; j < nred; ++j) {
      OpCode op = lk.reduces[j].op;
      code += fmt::format("  for (int o = 16; o > 0; o >>= 1) acc{0} = {1};\n", j,
                          combine(op, fmt::format("acc{}", j), fmt::format("__shfl_xor_sync(0xffffffffu, acc{}, o)", j)));
      code += fmt::format("  if (lane == 0) part[{0}][warp] = acc{0};\n", j);
    }
    code += "  __syncthreads();\n  if (warp == 0) {\n";
    for (size_t j = 0; j < nred; ++j) {
      OpCode op = lk.reduces[j].op;
      code += fmt::format("    float v{0} = lane < (int)(blockDim.x >> 5) ? part[{0}][lane] : {1};\n", j, reduceInit(op));
      code += fmt::format("    for (int o = 16; o > 0; o >>= 1) v{0} = {1};\n", j,
                          combine(op, fmt::format("v{}", j), fmt::format("__shfl_xor_sync(0xffffffffu, v{}, o)", j)));
      if (chunks > 1)
        code += fmt::format("    if (lane == 0) atomicAdd((float*)p{} + row, v{});\n", lk.reduces[j].arg, j);
      else
        code += fmt::format("    if (lane == 0) {}\n", storeResult(j, "row", fmt::format("v{}", j)));
    }
    code += "  }\n}\n";
  } else if (!lk.genericReduce) {
    // Columns: a block takes 32 adjacent outputs of one K1 row (coalesced reads along K2); its 8 warps walk
    // interleaved rows of R and combine their partials in shared memory. Few output tiles over many rows (the
    // bias gradient of a [tokens, features] product: one K1 row, features/32 tiles) would leave most of the GPU
    // idle, so sums split R into chunks, one block each, added into the zeroed output atomically.
    k.shape = LaunchShape::Rows;
    const int64_t tiles = (lk.k2 + 31) / 32;
    bool allSums = !anyHalf;
    for (const auto& r : lk.reduces) allSums &= r.op == OpCode::ReduceSum;
    int64_t chunks = 1;
    if (allSums && lk.k1 * tiles < kMinReductionBlocks && lk.r >= 256)
      chunks = std::min((kMinReductionBlocks + lk.k1 * tiles - 1) / (lk.k1 * tiles), (lk.r + 63) / 64);
    const int64_t chunkLen = (lk.r + chunks - 1) / chunks;
    k.rows = lk.k1 * tiles * chunks;
    if (chunks > 1)
      for (const auto& r : lk.reduces) k.zeroArgs.push_back({r.arg, lk.k1 * lk.k2 * 4});
    const size_t rDim = hasK1 ? 1 : 0, cDim = rank - 1;
    std::string flat = hasK1 ? fmt::format("((({0})i0 * {1} + i{2}) * {3} + i{4})", T, lk.r, rDim, lk.k2, cDim)
                             : fmt::format("(({0})i{1} * {2} + i{3})", T, rDim, lk.k2, cDim);
    auto b = body(p, idx, flat, T, true, "      ");
    if (!b.ok()) return makeError("{}: {}", label, b.error().message);
    code = signature("KERNEL_NAME", k.numArgs, fmt::format("__launch_bounds__({})", kRowThreads).c_str());
    code += fmt::format(" {{\n  const int lane = threadIdx.x & 31, group = threadIdx.x >> 5;  // {} groups\n",
                        kRowThreads / 32);
    code += fmt::format("  const {0} tile = blockIdx.x / {1}, chunk = blockIdx.x % {1};\n", T, chunks);
    code += fmt::format("  const {0} lo = chunk * ({0}){1}, hi = min(({0}){2}, lo + ({0}){1});\n", T, chunkLen, lk.r);
    if (hasK1) code += fmt::format("  const {} i0 = tile / {};\n", T, tiles);
    code += fmt::format("  const {} i{} = ({})(tile % {}) * 32 + lane;\n", T, cDim, T, tiles);
    code += accInit("  ");
    code += fmt::format("  if (i{} < {}) {{\n", cDim, lk.k2);
    code += fmt::format("    for ({0} i{1} = lo + group; i{1} < hi; i{1} += {2}) {{\n", T, rDim, kRowThreads / 32);
    code += *b + accumulate("      ") + "    }\n  }\n";
    code += fmt::format("  __shared__ float part[{}][{}][32];\n", std::max<size_t>(nred, 1), kRowThreads / 32);
    for (size_t j = 0; j < nred; ++j) code += fmt::format("  part[{0}][group][lane] = acc{0};\n", j);
    code += "  __syncthreads();\n";
    code += fmt::format("  if (group == 0 && i{} < {}) {{\n", cDim, lk.k2);
    const std::string out = hasK1 ? fmt::format("i0 * {} + i{}", lk.k2, cDim) : fmt::format("i{}", cDim);
    for (size_t j = 0; j < nred; ++j) {
      OpCode op = lk.reduces[j].op;
      code += fmt::format("    float v{} = part[{}][0][lane];\n", j, j);
      code += fmt::format("    for (int g = 1; g < {}; ++g) v{} = {};\n", kRowThreads / 32, j,
                          combine(op, fmt::format("v{}", j), fmt::format("part[{}][g][lane]", j)));
      if (chunks > 1)
        code += fmt::format("    atomicAdd((float*)p{} + {}, v{});\n", lk.reduces[j].arg, out, j);
      else
        code += fmt::format("    {}\n", storeResult(j, out, fmt::format("v{}", j)));
    }
    code += "  }\n}\n";
  } else {
    // Any layout: thread o owns one output and walks every reduced index.
    std::vector<size_t> kept, reduced;
    int64_t outs = 1, inner = 1;
    for (size_t d = 0; d < rank; ++d) {
      if (lk.reducedDims[d]) {
        reduced.push_back(d);
        inner *= p.dims[d];
      } else {
        kept.push_back(d);
        outs *= p.dims[d];
      }
    }
    k.shape = LaunchShape::Elements;
    k.elements = outs;
    std::string flat = "0";
    {
      int64_t mul = 1;
      flat.clear();
      for (size_t d = rank; d-- > 0;) {
        flat += fmt::format("{}({})i{} * {}", flat.empty() ? "" : " + ", T, d, mul);
        mul *= p.dims[d];
      }
      flat = "(" + flat + ")";
    }
    auto b = body(p, idx, flat, T, true, "    ");
    if (!b.ok()) return makeError("{}: {}", label, b.error().message);
    code = signature("KERNEL_NAME", k.numArgs, fmt::format("__launch_bounds__({})", kThreads).c_str());
    code += fmt::format(" {{\n  const {0} o = ({0})blockIdx.x * blockDim.x + threadIdx.x;\n  if (o >= {1}) return;\n",
                        T, outs);
    if (!kept.empty()) code += unravel(p.dims, kept, "o", T, "i", "  ");
    code += accInit("  ");
    code += fmt::format("  for ({0} q = 0; q < {1}; ++q) {{\n", T, inner);
    if (!reduced.empty()) code += unravel(p.dims, reduced, "q", T, "i", "    ");
    code += *b + accumulate("    ") + "  }\n";
    for (size_t j = 0; j < nred; ++j) code += fmt::format("  {}\n", storeResult(j, "o", fmt::format("acc{}", j)));
    code += "}\n";
  }
  k.source = finish(label, code, k);
  return k;
}

}  // namespace tsr::cuda
