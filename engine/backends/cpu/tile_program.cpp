#include "engine/backends/cpu/tile_program.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "engine/backends/cpu/thread_pool.h"
#include "engine/core/check.h"
#include "engine/ops/registry.h"

namespace tsr::cpu {


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
    s += fmt::format("\n  s{} = {}(", inputs.size() + i, ops::registry().get(instrs[i].op).name);
    for (int k = 0; k < 3; ++k)
      if (instrs[i].args[k] >= 0) s += fmt::format("{}s{}", k ? ", " : "", instrs[i].args[k]);
    s += instrs[i].roundBf16 ? ") bf16" : ")";
  }
  for (const auto& st : stores) s += fmt::format("\n  arg{} <- s{} ({})", st.arg, st.slot, dtypeName(st.dtype));
  return s;
}

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
  // Each instruction's tile function, from its op's loop lowering, for the operands that are broadcast scalars.
  m_fn.resize(p.instrs.size());
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const TileInstr& in = p.instrs[i];
    const ir::LoopLowering* l = ir::loopLoweringOf(ops::registry().get(in.op), in.resultIsBool);
    TSR_CHECK_MSG(l, "a fused loop holds an op without a loop lowering");  // the fusion pass fuses no other
    unsigned mask = 0;
    for (int k = 0; k < 3; ++k)
      if (in.args[k] >= 0 && in.args[k] < nin && m_uniform[static_cast<size_t>(in.args[k])]) mask |= 1u << k;
    m_fn[i] = l->tile[mask];
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
      } else if (st.dtype == DType::BF16) {
        bf16* dst = static_cast<bf16*>(args[st.arg]) + flat;
        for (int64_t i = 0; i < len; ++i) dst[i] = bf16(v[i]);
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
        float v = in.dtype == DType::F32    ? static_cast<const float*>(args[in.arg])[in.offset]
                  : in.dtype == DType::BF16 ? static_cast<float>(static_cast<const bf16*>(args[in.arg])[in.offset])
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
    } else if (in.dtype == DType::BF16) {
      const bf16* src = static_cast<const bf16*>(args[in.arg]) + off;
      for (int64_t i = 0; i < len; ++i) scratch[i] = static_cast<float>(src[i * st]);
      m_slots[s] = scratch;
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
    const float* x[3];
    for (int k = 0; k < 3; ++k) x[k] = ins.args[k] >= 0 ? m_slots[static_cast<size_t>(ins.args[k])] : nullptr;
    m_fn[i](x, y, len);
    if (ins.roundBf16) roundToBf16(y, len);
    m_slots[slot] = y;
    runStores(slot);
  }
  return m_slots.data();
}

void roundToBf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(bf16(x[i]));
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
