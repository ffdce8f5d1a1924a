#include "engine/backends/cpu/native_codegen.h"

#include <fmt/format.h>

#include "engine/core/hash.h"
#include "engine/ops/loop_lowering.h"
#include "engine/ops/registry.h"

namespace tsr::cpu {

using ir::OpCode;

namespace {

// The C library's float functions, which the loop dialect calls lane by lane (before the dialect).
constexpr const char* kMathDeclarations = R"(
typedef long long i64;
typedef unsigned char u8;
extern "C" {
float logf(float); float log1pf(float); float expm1f(float); float exp2f(float); float sinf(float);
float cosf(float); float tanf(float); float erff(float); float roundf(float); float powf(float, float);
float atan2f(float, float); float fmodf(float, float); float lgammaf(float); float floorf(float);
}
)";

// Loads and stores after the dialect: masked tails, strided gathers, bool bytes.
constexpr const char* kMemoryHelpers = R"(
static inline __m256 tsr_zero() { return _mm256_setzero_ps(); }
static inline __m256 tsr_nzm(__m256 x) { return _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_UQ); }
// Lanes [0, n) set.
static inline __m256i tsr_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline __m256 tsr_gather(const float* p, i64 st, int n) {
  float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int l = 0; l < n; ++l) x[l] = p[l * st];
  return _mm256_loadu_ps(x);
}
static inline __m256 tsr_load_bool(const u8* p, i64 st, int n) {
  float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int l = 0; l < n; ++l) x[l] = p[l * st] ? 1.0f : 0.0f;
  return _mm256_loadu_ps(x);
}
static inline void tsr_store_bool(u8* p, __m256 v, int n) {
  int m = _mm256_movemask_ps(tsr_nzm(v));
  for (int l = 0; l < n; ++l) p[l] = (u8)((m >> l) & 1);
}
// bf16: the top 16 bits of an f32. Widening is exact; narrowing rounds to nearest even, NaN stays a quiet NaN.
static inline float tsr_bf16_scalar(unsigned short b) {
  unsigned int u = (unsigned int)b << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
static inline __m256 tsr_load_bf16x8(const unsigned short* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
static inline __m256 tsr_load_bf16(const unsigned short* p, i64 st, int n) {
  float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int l = 0; l < n; ++l) x[l] = tsr_bf16_scalar(p[l * st]);
  return _mm256_loadu_ps(x);
}
// The bf16 bits of each lane in the low half of its 32 bits.
static inline __m256i tsr_bf16_bits(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(r, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
static inline __m256 tsr_round_bf16(__m256 v) { return _mm256_castsi256_ps(_mm256_slli_epi32(tsr_bf16_bits(v), 16)); }
static inline void tsr_store_bf16(unsigned short* p, __m256 v, int n) {
  const __m256i b = tsr_bf16_bits(v);
  const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));  // lanes in order
  if (n == 8) {
    _mm_storeu_si128((__m128i*)p, h);
    return;
  }
  unsigned short t[8];
  _mm_storeu_si128((__m128i*)t, h);
  for (int l = 0; l < n; ++l) p[l] = t[l];
}
)";

// The instruction's vector expression: its op's loop lowering over tsr_v lanes (the slots are __m256).
Result<std::string> vectorExpression(const TileInstr& in, const std::string& a, const std::string& b,
                                     const std::string& c) {
  const ir::OpDef& def = ops::registry().get(in.op);
  const ir::LoopLowering* l = ir::loopLoweringOf(def, in.resultIsBool);
  if (!l) return makeError("op {} has no loop lowering", def.name);
  const std::string operands[] = {fmt::format("tsr_v({})", a), fmt::format("tsr_v({})", b), fmt::format("tsr_v({})", c)};
  return fmt::format("tsr_v({}).v", ops::instantiateLoopExpression(l->expr, operands));
}

bool allZero(const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x != 0) return false;
  return true;
}

}  // namespace

const std::string& nativePrelude() {
  static const std::string prelude =
      std::string("#include <immintrin.h>\n") + kMathDeclarations + ops::loopDialectAvx2Text() + kMemoryHelpers;
  return prelude;
}

namespace {

// Emits the pieces of a kernel over a program: pointer declarations, inputs read once, each input's offset at the
// start of a row of the collapsed space, and the body that evaluates 8 consecutive elements of a row (or a tail
// of n < 8 under a mask). Element j of the row at `outer` reads x_i[b_i + j * stride_i]; stores go to
// y[ob + j].
class Emitter {
 public:
  explicit Emitter(const TileProgram& p) : m_p(p), m_rank(p.dims.size()), m_nin(static_cast<int>(p.inputs.size())) {
    for (const auto& in : p.inputs) {
      const bool f32 = in.dtype == DType::F32, half = in.dtype == DType::BF16;
      const int64_t st = in.strides[m_rank - 1];
      m_kind.push_back(allZero(in.strides) ? Uniform
                       : st == 0           ? PerRow
                       : st == 1 && f32    ? Contiguous
                       : st == 1 && half   ? ContiguousBf16
                                           : Strided);
    }
  }

  Status check() const {
    auto readable = [](DType t) { return t == DType::F32 || t == DType::Bool || t == DType::BF16; };
    for (const auto& in : m_p.inputs)
      if (!readable(in.dtype)) return makeError("input of type {} cannot be read by a native kernel", dtypeName(in.dtype));
    for (const auto& st : m_p.stores)
      if (!readable(st.dtype)) return makeError("a native kernel cannot store {}", dtypeName(st.dtype));
    return {};
  }

  // Pointers, and the inputs that are one value for the whole kernel.
  std::string declarations() const {
    std::string s;
    for (int i = 0; i < m_nin; ++i) {
      const auto& in = m_p.inputs[static_cast<size_t>(i)];
      s += fmt::format("  const {0}* const x{1} = (const {0}*)args[{2}] + {3};\n", elementType(in.dtype), i, in.arg,
                       in.offset);
    }
    for (const auto& st : m_p.stores)
      s += fmt::format("  {0}* const y{1} = ({0}*)args[{1}];\n", elementType(st.dtype), st.arg);
    for (int i = 0; i < m_nin; ++i)
      if (m_kind[static_cast<size_t>(i)] == Uniform) s += fmt::format("  const __m256 s{} = {};\n", i, scalar(i, "0"));
    return s;
  }

  // b_i for every input that varies, from the indices of the dims before the last (`idx[d]`, "" for none),
  // then the inputs constant along the row.
  std::string bases(const std::vector<std::string>& idx, const std::string& indent) const {
    std::string s;
    for (int i = 0; i < m_nin; ++i) {
      if (m_kind[static_cast<size_t>(i)] == Uniform) continue;
      const auto& in = m_p.inputs[static_cast<size_t>(i)];
      std::string b = "0";
      for (size_t d = 0; d + 1 < m_rank; ++d)
        if (in.strides[d] != 0) b += fmt::format(" + {} * {}", idx[d], in.strides[d]);
      s += fmt::format("{}const i64 b{} = {};\n", indent, i, b);
    }
    for (int i = 0; i < m_nin; ++i)
      if (m_kind[static_cast<size_t>(i)] == PerRow)
        s += fmt::format("{}const __m256 s{} = {};\n", indent, i, scalar(i, fmt::format("b{}", i)));
    return s;
  }

  // Evaluates the program at elements [j, j + 8) of the row (tail: [j, j + n), `mask` set for them), then stores.
  Result<std::string> body(bool tail, const std::string& indent) const {
    std::string t;
    const std::string n = tail ? "n" : "8";
    for (int i = 0; i < m_nin; ++i) {
      const auto& in = m_p.inputs[static_cast<size_t>(i)];
      const int64_t st = in.strides[m_rank - 1];
      if (m_kind[static_cast<size_t>(i)] == Contiguous)
        t += tail ? fmt::format("{}const __m256 s{} = _mm256_maskload_ps(x{} + b{} + j, mask);\n", indent, i, i, i)
                  : fmt::format("{}const __m256 s{} = _mm256_loadu_ps(x{} + b{} + j);\n", indent, i, i, i);
      else if (m_kind[static_cast<size_t>(i)] == ContiguousBf16)
        t += tail ? fmt::format("{}const __m256 s{} = tsr_load_bf16(x{} + b{} + j, 1, n);\n", indent, i, i, i)
                  : fmt::format("{}const __m256 s{} = tsr_load_bf16x8(x{} + b{} + j);\n", indent, i, i, i);
      else if (m_kind[static_cast<size_t>(i)] == Strided)
        t += fmt::format("{}const __m256 s{} = {}(x{} + b{} + j * {}, {}, {});\n", indent, i,
                         in.dtype == DType::F32    ? "tsr_gather"
                         : in.dtype == DType::BF16 ? "tsr_load_bf16"
                                                   : "tsr_load_bool",
                         i, i, st, st, n);
    }
    for (size_t k = 0; k < m_p.instrs.size(); ++k) {
      const auto& ins = m_p.instrs[k];
      auto a = [&](int m) { return ins.args[m] >= 0 ? fmt::format("s{}", ins.args[m]) : std::string("tsr_zero()"); };
      TSR_ASSIGN(std::string e, vectorExpression(ins, a(0), a(1), a(2)));
      if (ins.roundBf16) e = fmt::format("tsr_round_bf16({})", e);
      t += fmt::format("{}const __m256 s{} = {};\n", indent, m_nin + static_cast<int>(k), e);
    }
    // Stores last: an output written into a donated input is read above, element for element, first.
    for (const auto& st : m_p.stores) {
      if (st.dtype == DType::F32)
        t += tail ? fmt::format("{}_mm256_maskstore_ps(y{} + ob + j, mask, s{});\n", indent, st.arg, st.slot)
                  : fmt::format("{}_mm256_storeu_ps(y{} + ob + j, s{});\n", indent, st.arg, st.slot);
      else if (st.dtype == DType::BF16)
        t += fmt::format("{}tsr_store_bf16(y{} + ob + j, s{}, {});\n", indent, st.arg, st.slot, n);
      else
        t += fmt::format("{}tsr_store_bool(y{} + ob + j, s{}, {});\n", indent, st.arg, st.slot, n);
    }
    return t;
  }

 private:
  enum Kind { Uniform, PerRow, Contiguous, ContiguousBf16, Strided };
  static const char* elementType(DType t) {
    return t == DType::F32 ? "float" : t == DType::BF16 ? "unsigned short" : "u8";
  }
  std::string scalar(int i, const std::string& at) const {
    const DType t = m_p.inputs[static_cast<size_t>(i)].dtype;
    return t == DType::F32    ? fmt::format("_mm256_set1_ps(x{}[{}])", i, at)
           : t == DType::BF16 ? fmt::format("_mm256_set1_ps(tsr_bf16_scalar(x{}[{}]))", i, at)
                              : fmt::format("_mm256_set1_ps(x{}[{}] ? 1.0f : 0.0f)", i, at);
  }
  const TileProgram& m_p;
  size_t m_rank;
  int m_nin;
  std::vector<Kind> m_kind;
};

// "tsr_<hash>" for the code (KERNEL_NAME in it replaced), and the code with the program's first line on top.
NativeSource finish(std::string code, const TileProgram& p) {
  NativeSource out;
  out.symbol = fmt::format("tsr_{:016x}", fnv1a(code));
  for (size_t pos; (pos = code.find("KERNEL_NAME")) != std::string::npos;) code.replace(pos, 11, out.symbol);
  const std::string text = p.toString();
  out.code = fmt::format("// {}\n{}", text.substr(0, text.find('\n')), code);
  return out;
}

const char* reduceInit(OpCode op) {
  if (op == OpCode::ReduceMax) return "-__builtin_inff()";
  if (op == OpCode::ReduceMin) return "__builtin_inff()";
  return "0.0";
}

}  // namespace

Result<NativeSource> generateNativeLoop(const TileProgram& p) {
  if (p.dims.empty()) return makeError("a loop kernel has no iteration space");
  Emitter em(p);
  TSR_TRY(em.check());
  const size_t rank = p.dims.size();
  const int64_t inner = p.dims.back();
  const int64_t tilesPerRow = (inner + kTile - 1) / kTile;
  std::vector<std::string> idx;
  for (size_t d = 0; d < rank; ++d) idx.push_back(fmt::format("i{}", d));
  TSR_ASSIGN(std::string full, em.body(false, "      "));
  TSR_ASSIGN(std::string tail, em.body(true, "      "));
  std::string s = "extern \"C\" void KERNEL_NAME(void* const* args, i64 u0, i64 u1) {\n" + em.declarations();
  s += "  for (i64 u = u0; u < u1; ++u) {\n";
  s += fmt::format("    const i64 row = u / {0}, j0 = (u - row * {0}) * {1};\n", tilesPerRow, kTile);
  s += fmt::format("    const i64 j1 = j0 + {0} < {1} ? j0 + {0} : {1};\n", kTile, inner);
  // The row's multi-index (dims before the last).
  if (rank > 1) {
    s += "    i64 q = row;\n";
    for (size_t d = rank - 1; d-- > 0;) {
      if (d == 0) s += "    const i64 i0 = q;\n";
      else s += fmt::format("    const i64 i{0} = q % {1}; q /= {1};\n", d, p.dims[d]);
    }
  }
  s += em.bases(idx, "    ");
  s += fmt::format("    const i64 ob = row * {};\n", inner);
  s += fmt::format("    i64 j = j0;\n    for (; j + 8 <= j1; j += 8) {{\n{}    }}\n", full);
  s += fmt::format("    if (j < j1) {{\n      const int n = (int)(j1 - j);\n      const __m256i mask = tsr_mask(n);\n"
                   "      (void)mask;\n{}    }}\n", tail);
  s += "  }\n}\n";
  return finish(std::move(s), p);
}

Result<NativeSource> generateNativeReduction(const LoweredKernel& k) {
  const TileProgram& p = k.prog;
  if (k.genericReduce || p.dims.empty()) return makeError("only [K1, R, K2] reductions have a native form");
  for (const auto& r : k.reduces)
    if (r.op != OpCode::ReduceSum && r.op != OpCode::ReduceMax && r.op != OpCode::ReduceMin)
      return makeError("{} has no native form", ir::coreOpName(r.op));
  Emitter em(p);
  TSR_TRY(em.check());
  const size_t rank = p.dims.size();
  const bool hasK1 = rank >= 2 && !k.reducedDims[0];
  const bool rowCase = k.k2 == 1;
  const size_t nred = k.reduces.size();
  // Partials in double: partial[((reduce * K1 + a) * chunks + c) * K2 + column], as the interpreter's.
  std::string s = "extern \"C\" void KERNEL_NAME(void* const* args, i64 u0, i64 u1, i64 chunks, i64 chunkLen, "
                  "double* partial) {\n" + em.declarations();
  auto combineLanes = [&](size_t r, const std::string& v, const std::string& count, const std::string& indent) {
    // Element by element in order, as the interpreter's scalar loop.
    std::string op = k.reduces[r].op == OpCode::ReduceMax ? ">" : "<";
    return fmt::format("{0}{{ float e[8]; _mm256_storeu_ps(e, {1}); for (int l = 0; l < {2}; ++l) m{3} = "
                       "(m{3} {4} e[l] || m{3} != m{3}) ? m{3} : e[l]; }}\n",
                       indent, v, count, r, op);
  };
  if (rowCase) {
    // A unit is one chunk of one row: tiles of kTile elements; a sum keeps 8 float lanes per tile, added in
    // double in lane order, then the tile's tail in double (reduceTile's order); max and min go element by element.
    std::vector<std::string> idx = {hasK1 ? "a" : ""};
    TSR_ASSIGN(std::string full, em.body(false, "        "));
    TSR_ASSIGN(std::string tail, em.body(true, "        "));
    std::string accFull, accTail;
    for (size_t r = 0; r < nred; ++r) {
      const std::string v = fmt::format("s{}", k.reduces[r].slot);
      if (k.reduces[r].op == OpCode::ReduceSum) {
        accFull += fmt::format("        lanes{0} = _mm256_add_ps(lanes{0}, {1});\n", r, v);
        accTail += fmt::format("        {{ float e[8]; _mm256_storeu_ps(e, {0}); for (int l = 0; l < n; ++l) ts{1} += e[l]; }}\n", v, r);
      } else {
        accFull += combineLanes(r, v, "8", "        ");
        accTail += combineLanes(r, v, "n", "        ");
      }
    }
    s += "  for (i64 u = u0; u < u1; ++u) {\n";
    s += "    const i64 a = u / chunks, c = u - a * chunks;\n";
    s += fmt::format("    const i64 r0 = c * chunkLen, r1 = r0 + chunkLen < {0} ? r0 + chunkLen : {0};\n", k.r);
    s += "    (void)a;\n" + em.bases(idx, "    ");
    s += fmt::format("    const i64 ob = a * {};\n    (void)ob;\n", k.r);
    for (size_t r = 0; r < nred; ++r) s += fmt::format("    double acc{} = {};\n", r, reduceInit(k.reduces[r].op));
    s += fmt::format("    for (i64 rt = r0; rt < r1; rt += {0}) {{\n      const i64 t1 = rt + {0} < r1 ? rt + {0} : r1;\n", kTile);
    for (size_t r = 0; r < nred; ++r) {
      if (k.reduces[r].op == OpCode::ReduceSum) s += fmt::format("      __m256 lanes{} = tsr_zero();\n", r);
      else s += fmt::format("      float m{0} = (float)acc{0};\n", r);
    }
    s += fmt::format("      i64 j = rt;\n      for (; j + 8 <= t1; j += 8) {{\n{}{}      }}\n", full, accFull);
    for (size_t r = 0; r < nred; ++r)
      if (k.reduces[r].op == OpCode::ReduceSum)
        s += fmt::format("      double ts{0} = 0;\n      {{ float e[8]; _mm256_storeu_ps(e, lanes{0}); for (int l = 0; l < 8; ++l) "
                         "ts{0} += e[l]; }}\n", r);
    s += fmt::format("      if (j < t1) {{\n        const int n = (int)(t1 - j);\n        const __m256i mask = tsr_mask(n);\n"
                     "        (void)mask;\n{}{}      }}\n", tail, accTail);
    for (size_t r = 0; r < nred; ++r)
      s += k.reduces[r].op == OpCode::ReduceSum ? fmt::format("      acc{0} = acc{0} + ts{0};\n", r)
                                                : fmt::format("      acc{0} = m{0};\n", r);
    s += "    }\n";
    for (size_t r = 0; r < nred; ++r)
      s += fmt::format("    partial[({} * {} + a) * chunks + c] = acc{};\n", r, k.k1, r);
    s += "  }\n}\n";
    return finish(std::move(s), p);
  }
  // Columns: a unit is up to kTile adjacent outputs of one K1 row over one chunk of R; per output the rows are
  // combined in order in float, as the interpreter's accumulator tile does.
  const size_t rDim = hasK1 ? 1 : 0;
  std::vector<std::string> idx(rank - 1);
  // Moved in, not assigned from a literal: GCC 12 warns falsely (-Wrestrict) on the inlined assign.
  if (hasK1) idx[0] = std::string("a");
  idx[rDim] = std::string("r");
  TSR_ASSIGN(std::string full, em.body(false, "        "));
  TSR_ASSIGN(std::string tail, em.body(true, "        "));
  std::string accFull, accTail;
  for (size_t r = 0; r < nred; ++r) {
    const std::string v = fmt::format("s{}", k.reduces[r].slot);
    const std::string comb = k.reduces[r].op == OpCode::ReduceSum ? fmt::format("_mm256_add_ps(q, {})", v)
                             : k.reduces[r].op == OpCode::ReduceMax ? fmt::format("tsr_max(q, {}).v", v)
                                                                   : fmt::format("tsr_min(q, {}).v", v);
    accFull += fmt::format("        {{ const __m256 q = _mm256_loadu_ps(acc{0} + (j - c0)); _mm256_storeu_ps(acc{0} + (j - c0), {1}); }}\n", r, comb);
    accTail += fmt::format("        {{ const __m256 q = _mm256_maskload_ps(acc{0} + (j - c0), mask); _mm256_maskstore_ps(acc{0} + (j - c0), mask, {1}); }}\n", r, comb);
  }
  const int64_t k2Tiles = (k.k2 + kTile - 1) / kTile;
  for (size_t r = 0; r < nred; ++r) s += fmt::format("  float acc{}[{}];\n", r, kTile);
  s += "  for (i64 u = u0; u < u1; ++u) {\n";
  s += fmt::format("    const i64 a = u / (chunks * {0}), rem = u - a * (chunks * {0});\n", k2Tiles);
  s += fmt::format("    const i64 c = rem / {0}, c0 = (rem - c * {0}) * {1};\n", k2Tiles, kTile);
  s += fmt::format("    const i64 c1 = c0 + {0} < {1} ? c0 + {0} : {1};\n", kTile, k.k2);
  s += fmt::format("    const i64 r0 = c * chunkLen, r1 = r0 + chunkLen < {0} ? r0 + chunkLen : {0};\n", k.r);
  for (size_t r = 0; r < nred; ++r)
    s += fmt::format("    for (i64 l = 0; l < c1 - c0; ++l) acc{}[l] = (float){};\n", r, reduceInit(k.reduces[r].op));
  s += fmt::format("    for (i64 r = r0; r < r1; ++r) {{\n{}", em.bases(idx, "      "));
  s += fmt::format("      const i64 ob = (a * {} + r) * {};\n      (void)ob;\n", k.r, k.k2);
  s += fmt::format("      i64 j = c0;\n      for (; j + 8 <= c1; j += 8) {{\n{}{}      }}\n", full, accFull);
  s += fmt::format("      if (j < c1) {{\n        const int n = (int)(c1 - j);\n        const __m256i mask = tsr_mask(n);\n"
                   "        (void)mask;\n{}{}      }}\n    }}\n", tail, accTail);
  for (size_t r = 0; r < nred; ++r)
    s += fmt::format("    for (i64 l = 0; l < c1 - c0; ++l) partial[(({} * {} + a) * chunks + c) * {} + c0 + l] = acc{}[l];\n",
                     r, k.k1, k.k2, r);
  s += "  }\n}\n";
  return finish(std::move(s), p);
}

Result<NativeSource> generateNative(const LoweredKernel& k) {
  if (!k.hasProgram) return makeError("{} has no fused program", k.info.name);
  switch (k.info.kind) {
    case passes::GroupKind::Loop:
    case passes::GroupKind::Gemm:
    case passes::GroupKind::Conv: return generateNativeLoop(k.prog);
    case passes::GroupKind::Reduction: return generateNativeReduction(k);
    default: return makeError("{} has no native form", k.info.name);
  }
}

}  // namespace tsr::cpu
