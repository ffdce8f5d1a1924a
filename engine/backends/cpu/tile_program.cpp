#include "engine/backends/cpu/tile_program.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "engine/backends/cpu/thread_pool.h"
#include "engine/backends/cpu/vmath.h"
#include "engine/ops/elementwise_functors.h"

namespace tsr::cpu {

using ir::OpCode;
namespace ew = ops::elementwise;

void TileProgram::collapse(std::vector<bool>* flags) {
  if (dims.empty()) {
    dims = {1};
    for (auto& in : inputs) in.strides = {0};
    if (flags) *flags = {false};
    return;
  }
  // Drop size-1 dims first (their stride never matters), keeping at least one dim.
  std::vector<bool> apart = flags ? *flags : std::vector<bool>(dims.size(), false);
  {
    std::vector<int64_t> nd;
    std::vector<bool> na;
    std::vector<std::vector<int64_t>> ns(inputs.size());
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d] == 1 && dims.size() > 1) continue;
      nd.push_back(dims[d]);
      na.push_back(apart[d]);
      for (size_t i = 0; i < inputs.size(); ++i) ns[i].push_back(inputs[i].strides[d]);
    }
    if (nd.empty()) {
      nd = {1};
      na = {apart.empty() ? false : apart[0]};
      for (auto& s : ns) s = {0};
    }
    dims = nd;
    apart = na;
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i].strides = ns[i];
  }
  // Merge d into d+1 where every input's stride of d equals its stride of d+1 times the size of d+1.
  for (int d = static_cast<int>(dims.size()) - 2; d >= 0; --d) {
    auto ud = static_cast<size_t>(d);
    if (apart[ud] != apart[ud + 1]) continue;
    bool ok = true;
    for (const auto& in : inputs) ok &= in.strides[ud] == in.strides[ud + 1] * dims[ud + 1];
    if (!ok) continue;
    dims[ud] *= dims[ud + 1];
    dims.erase(dims.begin() + d + 1);
    apart.erase(apart.begin() + d + 1);
    for (auto& in : inputs) {
      in.strides[ud] = in.strides[ud + 1];
      in.strides.erase(in.strides.begin() + d + 1);
    }
  }
  if (flags) *flags = apart;
}

std::string TileProgram::toString() const {
  std::string s = "dims [";
  for (size_t d = 0; d < dims.size(); ++d) s += fmt::format("{}{}", d ? "," : "", dims[d]);
  s += "]";
  for (size_t i = 0; i < inputs.size(); ++i) {
    s += fmt::format("\n  s{} = arg{} {} strides [", i, inputs[i].arg, dtypeName(inputs[i].dtype));
    for (size_t d = 0; d < inputs[i].strides.size(); ++d) s += fmt::format("{}{}", d ? "," : "", inputs[i].strides[d]);
    s += fmt::format("] +{}", inputs[i].offset);
  }
  for (size_t i = 0; i < instrs.size(); ++i) {
    s += fmt::format("\n  s{} = {}(", inputs.size() + i, ir::coreOpName(instrs[i].op));
    for (int k = 0; k < 3; ++k)
      if (instrs[i].args[k] >= 0) s += fmt::format("{}s{}", k ? ", " : "", instrs[i].args[k]);
    s += ")";
  }
  for (const auto& st : stores) s += fmt::format("\n  arg{} <- s{} ({})", st.arg, st.slot, dtypeName(st.dtype));
  return s;
}

namespace {

template <class F>
inline void map1(const float* a, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(a[i]);
}
template <class F>
inline void map2(const float* a, const float* b, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
}
template <class F>
inline void map3(const float* a, const float* b, const float* c, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i], c[i]);
}
inline float b2f(bool b) { return b ? 1.0f : 0.0f; }

// The common binary ops with a scalar second operand (a broadcast constant): one load per element, not two.
bool runScalarInstr(const TileInstr& in, const float* a, float b, float* y, int64_t n) {
  switch (in.op) {
    case OpCode::Add: map1(a, y, n, [b](float x) { return x + b; }); return true;
    case OpCode::Sub: map1(a, y, n, [b](float x) { return x - b; }); return true;
    case OpCode::Mul: map1(a, y, n, [b](float x) { return x * b; }); return true;
    case OpCode::Div: map1(a, y, n, [b](float x) { return x / b; }); return true;
    default: return false;
  }
}

// The same with a scalar first operand.
bool runScalarFirstInstr(const TileInstr& in, float a, const float* b, float* y, int64_t n) {
  switch (in.op) {
    case OpCode::Add: map1(b, y, n, [a](float x) { return a + x; }); return true;
    case OpCode::Sub: map1(b, y, n, [a](float x) { return a - x; }); return true;
    case OpCode::Mul: map1(b, y, n, [a](float x) { return a * x; }); return true;
    case OpCode::Div: map1(b, y, n, [a](float x) { return a / x; }); return true;
    default: return false;
  }
}

void runInstr(const TileInstr& in, const float* a, const float* b, const float* c, float* y, int64_t n) {
  switch (in.op) {
    case OpCode::Neg: return map1(a, y, n, [](float x) { return -x; });
    case OpCode::Abs: return map1(a, y, n, [](float x) { return std::fabs(x); });
    case OpCode::Sign: return map1(a, y, n, [](float x) { return ew::Sign::apply(x); });
    case OpCode::Exp: return vmath::exp(a, y, n);
    case OpCode::Exp2: return map1(a, y, n, [](float x) { return std::exp2(x); });
    // log stays the C library's: jitted random numbers (gumbel, categorical) equal eager ones bit for bit.
    case OpCode::Log: return map1(a, y, n, [](float x) { return std::log(x); });
    case OpCode::Log1p: return map1(a, y, n, [](float x) { return std::log1p(x); });
    case OpCode::Expm1: return map1(a, y, n, [](float x) { return std::expm1(x); });
    case OpCode::Sqrt: return map1(a, y, n, [](float x) { return std::sqrt(x); });
    case OpCode::Rsqrt: return map1(a, y, n, [](float x) { return 1.0f / std::sqrt(x); });
    case OpCode::Tanh: return vmath::tanh(a, y, n);
    case OpCode::Logistic: return vmath::logistic(a, y, n);
    case OpCode::Sin: return map1(a, y, n, [](float x) { return std::sin(x); });
    case OpCode::Cos: return map1(a, y, n, [](float x) { return std::cos(x); });
    case OpCode::Tan: return map1(a, y, n, [](float x) { return std::tan(x); });
    case OpCode::Erf: return map1(a, y, n, [](float x) { return std::erf(x); });
    case OpCode::Floor: return map1(a, y, n, [](float x) { return std::floor(x); });
    case OpCode::Ceil: return map1(a, y, n, [](float x) { return std::ceil(x); });
    case OpCode::Round: return map1(a, y, n, [](float x) { return std::round(x); });
    case OpCode::IsFinite: return map1(a, y, n, [](float x) { return b2f(std::isfinite(x)); });
    case OpCode::Not: return map1(a, y, n, [](float x) { return b2f(x == 0.0f); });
    case OpCode::Relu: return map1(a, y, n, [](float x) { return x < 0.0f ? 0.0f : x; });
    case OpCode::Add: return map2(a, b, y, n, [](float x, float z) { return x + z; });
    case OpCode::Sub: return map2(a, b, y, n, [](float x, float z) { return x - z; });
    case OpCode::Mul: return map2(a, b, y, n, [](float x, float z) { return x * z; });
    case OpCode::Div: return map2(a, b, y, n, [](float x, float z) { return x / z; });
    case OpCode::Rem: return map2(a, b, y, n, [](float x, float z) { return ew::Rem::apply(x, z); });
    case OpCode::Pow: return map2(a, b, y, n, [](float x, float z) { return std::pow(x, z); });
    case OpCode::Max: return map2(a, b, y, n, [](float x, float z) { return (x > z || x != x) ? x : z; });
    case OpCode::Min: return map2(a, b, y, n, [](float x, float z) { return (x < z || x != x) ? x : z; });
    case OpCode::Atan2: return map2(a, b, y, n, [](float x, float z) { return std::atan2(x, z); });
    case OpCode::And: return map2(a, b, y, n, [](float x, float z) { return b2f(x != 0.0f && z != 0.0f); });
    case OpCode::Or: return map2(a, b, y, n, [](float x, float z) { return b2f(x != 0.0f || z != 0.0f); });
    case OpCode::Xor: return map2(a, b, y, n, [](float x, float z) { return b2f((x != 0.0f) != (z != 0.0f)); });
    case OpCode::Eq: return map2(a, b, y, n, [](float x, float z) { return b2f(x == z); });
    case OpCode::Ne: return map2(a, b, y, n, [](float x, float z) { return b2f(x != z); });
    case OpCode::Lt: return map2(a, b, y, n, [](float x, float z) { return b2f(x < z); });
    case OpCode::Le: return map2(a, b, y, n, [](float x, float z) { return b2f(x <= z); });
    case OpCode::Gt: return map2(a, b, y, n, [](float x, float z) { return b2f(x > z); });
    case OpCode::Ge: return map2(a, b, y, n, [](float x, float z) { return b2f(x >= z); });
    case OpCode::Select: return map3(a, b, c, y, n, [](float p, float t, float f) { return p != 0.0f ? t : f; });
    case OpCode::Clamp:
      return map3(a, b, c, y, n, [](float lo, float x, float hi) {
        float m = (x > lo || x != x) ? x : lo;
        return (m < hi || m != m) ? m : hi;
      });
    case OpCode::Convert:
      if (in.resultIsBool) return map1(a, y, n, [](float x) { return b2f(x != 0.0f); });
      if (a != y) std::memcpy(y, a, static_cast<size_t>(n) * sizeof(float));
      return;
    default:
      std::fill(y, y + n, std::nanf(""));  // the planner only fuses the ops above
  }
}

}  // namespace

TileEvaluator::TileEvaluator(const TileProgram& p)
    : m_p(p),
      m_slots(static_cast<size_t>(p.numSlots())),
      m_storeOf(static_cast<size_t>(p.numSlots()), -1),
      m_buffer(static_cast<size_t>(p.numSlots()), -1),
      m_storesAfter(static_cast<size_t>(p.numSlots())) {
  const int nin = static_cast<int>(p.inputs.size());
  const int ns = p.numSlots();
  // A slot stored once as f32 is computed straight into the output (no copy), unless it is an input slot.
  std::vector<int> count(static_cast<size_t>(ns), 0);
  for (const auto& st : p.stores) ++count[static_cast<size_t>(st.slot)];
  for (size_t s = 0; s < p.stores.size(); ++s) {
    const auto& st = p.stores[s];
    if (st.dtype == DType::F32 && count[static_cast<size_t>(st.slot)] == 1 && st.slot >= nin)
      m_storeOf[static_cast<size_t>(st.slot)] = static_cast<int>(s);
    else
      m_storesAfter[static_cast<size_t>(st.slot)].push_back(static_cast<int>(s));
  }
  // Scratch tiles by liveness: a slot's tile is free after the last instruction that reads it (stores run right
  // after the value is computed), so a long chain needs a few tiles, all in L1.
  std::vector<int> lastUse(static_cast<size_t>(ns), -1);
  for (int i = 0; i < static_cast<int>(p.instrs.size()); ++i)
    for (int a : p.instrs[static_cast<size_t>(i)].args)
      if (a >= 0) lastUse[static_cast<size_t>(a)] = nin + i;
  for (int s : p.liveOut) lastUse[static_cast<size_t>(s)] = ns;  // never freed
  std::vector<int> freeTiles;
  int numTiles = 0;
  auto take = [&]() {
    if (!freeTiles.empty()) {
      int t = freeTiles.back();
      freeTiles.pop_back();
      return t;
    }
    return numTiles++;
  };
  m_uniform.assign(static_cast<size_t>(nin), false);
  m_uniformFilled.assign(static_cast<size_t>(nin), false);
  for (int s = 0; s < nin; ++s) {
    bool allZero = true;
    for (int64_t st : p.inputs[static_cast<size_t>(s)].strides) allZero &= st == 0;
    m_uniform[static_cast<size_t>(s)] = allZero;
  }
  // Inputs are all loaded before the first instruction: each gets its own tile.
  for (int s = 0; s < nin; ++s) m_buffer[static_cast<size_t>(s)] = take();
  for (int i = 0; i < static_cast<int>(p.instrs.size()); ++i) {
    const int slot = nin + i;
    if (m_storeOf[static_cast<size_t>(slot)] < 0) m_buffer[static_cast<size_t>(slot)] = take();
    // Operands dying here give their tiles back (after the result took its own: no aliasing within an op).
    for (int a : p.instrs[static_cast<size_t>(i)].args)
      if (a >= nin && lastUse[static_cast<size_t>(a)] == slot && m_buffer[static_cast<size_t>(a)] >= 0 &&
          std::find(freeTiles.begin(), freeTiles.end(), m_buffer[static_cast<size_t>(a)]) == freeTiles.end())
        freeTiles.push_back(m_buffer[static_cast<size_t>(a)]);
    if (lastUse[static_cast<size_t>(slot)] < 0 && m_buffer[static_cast<size_t>(slot)] >= 0)
      freeTiles.push_back(m_buffer[static_cast<size_t>(slot)]);  // only stored
  }
  m_scratch.assign(static_cast<size_t>(std::max(numTiles, 1)) * kTile, 0.0f);
}

const float* const* TileEvaluator::eval(void* const* args, const int64_t* idx, int64_t len, bool store) {
  const size_t rank = m_p.dims.size();
  // Offset of the tile in the (contiguous) outputs.
  int64_t flat = 0, mul = 1;
  for (size_t d = rank; d-- > 0;) {
    flat += idx[d] * mul;
    mul *= m_p.dims[d];
  }
  auto runStores = [&](size_t slot) {
    if (!store) return;
    for (int si : m_storesAfter[slot]) {
      const TileStore& st = m_p.stores[static_cast<size_t>(si)];
      const float* v = m_slots[slot];
      if (st.dtype == DType::F32) {
        float* dst = static_cast<float*>(args[st.arg]) + flat;
        if (dst != v) std::memcpy(dst, v, static_cast<size_t>(len) * sizeof(float));
      } else {
        uint8_t* dst = static_cast<uint8_t*>(args[st.arg]) + flat;
        for (int64_t i = 0; i < len; ++i) dst[i] = v[i] != 0.0f;
      }
    }
  };
  for (size_t s = 0; s < m_p.inputs.size(); ++s) {
    const TileInput& in = m_p.inputs[s];
    int64_t off = in.offset;
    for (size_t d = 0; d < rank; ++d) off += idx[d] * in.strides[d];
    const int64_t st = in.strides[rank - 1];
    float* scratch = m_scratch.data() + static_cast<size_t>(m_buffer[s]) * kTile;
    if (m_uniform[s]) {
      // The same element for every tile (a scalar broadcast): filled once per evaluator.
      if (!m_uniformFilled[s]) {
        float v = in.dtype == DType::F32 ? static_cast<const float*>(args[in.arg])[in.offset]
                                         : (static_cast<const uint8_t*>(args[in.arg])[in.offset] ? 1.0f : 0.0f);
        std::fill(scratch, scratch + kTile, v);
        m_uniformFilled[s] = true;
      }
      m_slots[s] = scratch;
      continue;
    }
    if (in.dtype == DType::F32) {
      const float* src = static_cast<const float*>(args[in.arg]) + off;
      if (st == 1 && !in.copy) {
        m_slots[s] = src;
      } else {
        if (st == 0) std::fill(scratch, scratch + len, *src);
        else if (st == 1) std::memcpy(scratch, src, static_cast<size_t>(len) * sizeof(float));
        else for (int64_t i = 0; i < len; ++i) scratch[i] = src[i * st];
        m_slots[s] = scratch;
      }
    } else {  // bool bytes
      const uint8_t* src = static_cast<const uint8_t*>(args[in.arg]) + off;
      for (int64_t i = 0; i < len; ++i) scratch[i] = src[i * st] ? 1.0f : 0.0f;
      m_slots[s] = scratch;
    }
  }
  for (size_t s = 0; s < m_p.inputs.size(); ++s) runStores(s);
  const size_t nin = m_p.inputs.size();
  for (size_t i = 0; i < m_p.instrs.size(); ++i) {
    const TileInstr& ins = m_p.instrs[i];
    const size_t slot = nin + i;
    int so = m_storeOf[slot];
    float* y;
    if (so >= 0) {
      // Written straight into the output; when not storing (a reduction re-reading), into a spare tile.
      y = store ? static_cast<float*>(args[m_p.stores[static_cast<size_t>(so)].arg]) + flat : nullptr;
      if (!y) {
        if (m_spare.empty()) m_spare.resize(static_cast<size_t>(kTile) * m_p.instrs.size());
        y = m_spare.data() + i * kTile;
      }
    } else {
      y = m_scratch.data() + static_cast<size_t>(m_buffer[slot]) * kTile;
    }
    auto arg = [&](int k) { return ins.args[k] >= 0 ? m_slots[static_cast<size_t>(ins.args[k])] : nullptr; };
    auto uniform = [&](int k) {
      int a = ins.args[k];
      return a >= 0 && a < static_cast<int>(nin) && m_uniform[static_cast<size_t>(a)];
    };
    bool done = false;
    if (ins.args[2] < 0 && ins.args[1] >= 0) {
      if (uniform(1) && !uniform(0)) done = runScalarInstr(ins, arg(0), arg(1)[0], y, len);
      else if (uniform(0) && !uniform(1)) done = runScalarFirstInstr(ins, arg(0)[0], arg(1), y, len);
    }
    if (!done) runInstr(ins, arg(0), arg(1), arg(2), y, len);
    m_slots[slot] = y;
    runStores(slot);
  }
  return m_slots.data();
}

void runLoop(const TileProgram& p, void* const* args, NativeLoopFn native) {
  for (int64_t d : p.dims)
    if (d == 0) return;  // an empty array
  const size_t rank = p.dims.size();
  const int64_t inner = p.dims.back();
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < rank; ++d) outer *= p.dims[d];
  const int64_t tilesPerRow = (inner + kTile - 1) / kTile;
  const int64_t units = outer * tilesPerRow;
  const int64_t tileLen = std::min(inner, kTile);
  const int64_t grain = std::max<int64_t>(1, 32768 / tileLen);
  if (native) {
    ThreadPool::instance().parallelFor(units, grain, [&](int64_t b, int64_t e, int) { native(args, b, e); });
    return;
  }
  ThreadPool::instance().parallelFor(units, grain, [&](int64_t b, int64_t e, int) {
    TileEvaluator ev(p);
    std::vector<int64_t> idx(rank, 0);
    for (int64_t u = b; u < e; ++u) {
      int64_t row = u / tilesPerRow, t = u % tilesPerRow;
      for (size_t d = rank - 1; d-- > 0;) {
        idx[d] = row % p.dims[d];
        row /= p.dims[d];
      }
      idx[rank - 1] = t * kTile;
      ev.eval(args, idx.data(), std::min(kTile, inner - t * kTile));
    }
  });
}

}  // namespace tsr::cpu
