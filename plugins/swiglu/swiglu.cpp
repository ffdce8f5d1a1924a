// The SwiGLU plugin: the op swiglu(gate, up) = silu(gate) * up = gate * sigmoid(gate) * up (Shazeer 2020, as in
// LLaMA's MLP), with every rule a core elementwise op has (infer, cost, CPU kernel, vjp, batching, sharding, and
// CUDA source for NVRTC), and the model family gpt2_swiglu: GPT-2 whose MLP is
// c_proj(swiglu(c_fc(x), c_up(x))) with a hidden width of mlp_hidden (default 8/3 n_embd, a multiple of 8).
#include <algorithm>
#include <cmath>
#include <memory>

#include "engine/core/limits.h"
#include "engine/nn/attention.h"
#include "engine/ops/loop_lowering.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/ops/shard_rules.h"
#include "engine/plugin/plugin.h"
#include "engine/random/random.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"
#include "engine/version.h"

namespace {

using namespace tsr;

constexpr const char* kOp = "swiglu";
constexpr double kFlopsPerElement = 16;  // sigmoid (exp, add, div: 13 as the core logistic) and two multiplies

// The op's code, given when the plugin was committed; looked up once.
ir::OpCode swigluCode() {
  static const ir::OpCode code = ops::registry().find(kOp)->code;
  return code;
}

Array swiglu(const Array& gate, const Array& up) {
  return bind1(swigluCode(), {gate, up}, ir::NoAttrs{}, std::source_location::current());
}

// ---- Rules ----------------------------------------------------------------------------------------------------

// swiglu(gate: T[S], up: T[S]) -> T[S], T in {f32, f64, bf16} (bf16 computed in f32 and rounded once, as in fused
// loops: a model under autocast gives it bf16)
Result<std::vector<Aval>> infer(std::span<const Aval> in, const ir::Attrs&) {
  TSR_TRY(ops::checkArity(kOp, in, 2));
  if (in[0].shape != in[1].shape) return ops::opError(kOp, in, "gate and up must have equal shapes");
  if (in[0].dtype != in[1].dtype) return ops::opError(kOp, in, "gate and up must have equal dtypes");
  if (in[0].dtype != DType::F32 && in[0].dtype != DType::F64 && in[0].dtype != DType::BF16)
    return ops::opError(kOp, in, "dtype must be f32, f64 or bf16");
  return std::vector<Aval>{in[0]};
}

ir::Cost cost(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  return ops::elementwiseCost(in, out, kFlopsPerElement);
}

template <class T>
void kernelOf(const ir::CpuKernelArgs& a) {
  const T* g = a.inputs[0].as<T>();
  const T* u = a.inputs[1].as<T>();
  T* y = a.outputs[0].as<T>();
  const int64_t n = a.outputs[0].aval.numel();
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (T(1) + std::exp(-g[i])) * u[i];
}

void kernel(const ir::CpuKernelArgs& a) {
  if (a.inputs[0].aval.dtype == DType::F64) {
    kernelOf<double>(a);
  } else if (a.inputs[0].aval.dtype == DType::BF16) {
    const bf16* g = a.inputs[0].as<bf16>();
    const bf16* u = a.inputs[1].as<bf16>();
    bf16* y = a.outputs[0].as<bf16>();
    const int64_t n = a.outputs[0].aval.numel();
    for (int64_t i = 0; i < n; ++i) {
      const float gi = static_cast<float>(g[i]);
      y[i] = bf16(gi / (1.0f + std::exp(-gi)) * static_cast<float>(u[i]));
    }
  } else {
    kernelOf<float>(a);
  }
}

// y = g s(g) u with s the sigmoid: dy/dg = u s(g) (1 + g (1 - s(g))), dy/du = g s(g).
std::vector<Array> vjp(const ir::VjpArgs& a) {
  const Array& ct = a.cotangents[0];
  if (!ct.valid()) return {Array(), Array()};
  const Array& g = a.operands[0];
  const Array& u = a.operands[1];
  Array s = sigmoid(g);
  return {ct * u * s * (1.0 + g * (1.0 - s)), ct * g * s};
}

// Operands batched on one dim line up element for element: the op applies as is. Otherwise every batch dim
// moves to the front (ops::batchElementwise, as the core elementwise ops do).
ir::BatchResult batch(const ir::BatchArgs& a) {
  int d = a.batchDims[0];
  if (d >= 0 && a.batchDims[1] == d) return ir::BatchResult{{swiglu(a.operands[0], a.operands[1])}, {d}};
  return ops::batchElementwise(swigluCode(), a);
}

// NVRTC source: one thread per element.
constexpr const char* kCudaSource = R"(
extern "C" __global__ void swiglu_f32(const float* g, const float* u, float* y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
)";

ir::OpDef swigluDef() {
  ir::OpDef def;
  def.name = kOp;
  def.family = "elementwise";
  def.numOperands = 2;
  def.numResults = 1;
  def.attrsIndex = ir::Attrs(ir::NoAttrs{}).index();
  def.fusion = ir::FusionKind::Elementwise;
  def.infer = infer;
  def.cost = cost;
  def.cpu = kernel;
  def.vjp = vjp;
  def.batch = batch;
  def.shard = ops::elementwiseShardRule();  // every dim of gate, up and the result split alike
  def.cudaSource = kCudaSource;
  // Inside fused loops (interpreter, native CPU kernels and CUDA kernels alike): the kernel's formula.
  def.loop = TSR_LOOP_LOWERING(2, a / (1.0f + tsr_exp(-a)) * b);
  return def;
}

// ---- The model family ---------------------------------------------------------------------------------------------

struct Parts {
  nn::Dense cAttn, attnProj, cFc, cUp, mlpProj;
  nn::LayerNorm ln;
  nn::Dropout drop;
};

int64_t hiddenOf(const nn::Gpt2Config& c, double mlpHidden) {
  if (mlpHidden > 0) return static_cast<int64_t>(mlpHidden);
  int64_t h = (8 * c.nEmbd) / 3;
  return std::max<int64_t>(8, (h + 7) / 8 * 8);
}

Parts partsOf(const nn::Gpt2Config& c, int64_t hidden) {
  double projStd = 0.02 / std::sqrt(2.0 * static_cast<double>(c.nLayer));
  Parts p;
  p.cAttn = nn::Dense{c.nEmbd, 3 * c.nEmbd, true, nn::WeightLayout::InOut, 0.02, c.dtype};
  p.attnProj = nn::Dense{c.nEmbd, c.nEmbd, true, nn::WeightLayout::InOut, projStd, c.dtype};
  p.cFc = nn::Dense{c.nEmbd, hidden, false, nn::WeightLayout::InOut, 0.02, c.dtype};
  p.cUp = nn::Dense{c.nEmbd, hidden, false, nn::WeightLayout::InOut, 0.02, c.dtype};
  p.mlpProj = nn::Dense{hidden, c.nEmbd, false, nn::WeightLayout::InOut, projStd, c.dtype};
  p.ln = nn::LayerNorm{c.nEmbd, c.layerNormEps, c.dtype};
  p.drop = nn::Dropout{c.dropout};
  return p;
}

class Gpt2Swiglu {
 public:
  Gpt2Swiglu(nn::Gpt2Config c, int64_t hidden) : m_cfg(c), m_parts(partsOf(c, hidden)) {}

  Tree init(const Array& key) const {
    Array keys = random::split(key, 2 + m_cfg.nLayer);
    auto keyAt = [&](const Array& ks, int64_t i) { return reshape(sliceAxis(ks, 0, i, i + 1), {2}); };
    Tree blocks = Tree::list();
    for (int64_t i = 0; i < m_cfg.nLayer; ++i) {
      Array k = random::split(keyAt(keys, 2 + i), 5);
      blocks.push(Tree::dict(
          {{"ln_1", m_parts.ln.init()},
           {"attn", Tree::dict({{"c_attn", m_parts.cAttn.init(keyAt(k, 0))}, {"c_proj", m_parts.attnProj.init(keyAt(k, 1))}})},
           {"ln_2", m_parts.ln.init()},
           {"mlp", Tree::dict({{"c_fc", m_parts.cFc.init(keyAt(k, 2))},
                               {"c_up", m_parts.cUp.init(keyAt(k, 3))},
                               {"c_proj", m_parts.mlpProj.init(keyAt(k, 4))}})}}));
    }
    return Tree::dict({{"wte", nn::Embed{m_cfg.vocabSize, m_cfg.nEmbd, 0.02, m_cfg.dtype}.init(keyAt(keys, 0))},
                       {"wpe", nn::Embed{m_cfg.blockSize, m_cfg.nEmbd, 0.02, m_cfg.dtype}.init(keyAt(keys, 1))},
                       {"h", std::move(blocks)},
                       {"ln_f", m_parts.ln.init()}});
  }

  // tokens: [B, T] -> logits [B, T, V]
  Array apply(const Tree& params, const Array& tokens, nn::Context& ctx) const {
    if (tokens.rank() != 2) raise(makeError("gpt2_swiglu: tokens must be [B, T], got {}", tokens.aval().toString()));
    int64_t t = tokens.dim(1);
    if (t > m_cfg.blockSize)
      raise(makeError("gpt2_swiglu: sequence length {} exceeds the block size {}", t, m_cfg.blockSize));
    nn::Embed wte{m_cfg.vocabSize, m_cfg.nEmbd}, wpe{m_cfg.blockSize, m_cfg.nEmbd};
    Array x;
    {
      ModuleScope s("wte");
      x = wte.apply(*params.find("wte"), tokens);  // [B, T, C]
    }
    {
      ModuleScope s("wpe");
      x = x + wpe.apply(*params.find("wpe"), arange(t));
    }
    x = m_parts.drop.apply(x, ctx);
    const Tree& blocks = *params.find("h");
    for (int64_t i = 0; i < m_cfg.nLayer; ++i) {
      ModuleScope s("h." + std::to_string(i));
      x = block(blocks.child(static_cast<size_t>(i)), x, ctx);
    }
    {
      ModuleScope s("ln_f");
      x = m_parts.ln.apply(*params.find("ln_f"), x);
    }
    ModuleScope s("lm_head");
    return wte.attend(*params.find("wte"), x);  // tied head
  }

  int64_t numParams() const {
    const Parts& p = m_parts;
    int64_t perBlock = 2 * p.ln.numParams() + p.cAttn.numParams() + p.attnProj.numParams() + p.cFc.numParams() +
                       p.cUp.numParams() + p.mlpProj.numParams();
    return m_cfg.vocabSize * m_cfg.nEmbd + m_cfg.blockSize * m_cfg.nEmbd + m_cfg.nLayer * perBlock +
           p.ln.numParams();
  }

  double trainFlopsPerToken(int64_t seqLen) const {
    double n = static_cast<double>(numParams() - m_cfg.blockSize * m_cfg.nEmbd);
    return 6.0 * n + 12.0 * static_cast<double>(m_cfg.nLayer * m_cfg.nEmbd * seqLen);
  }

 private:
  // x: [B, T, C]
  Array block(const Tree& p, const Array& x, nn::Context& ctx) const {
    // The layer norms are modules of their own (h.N.ln_1, h.N.ln_2), as their parameters are.
    Array h = x;
    Array normed;
    {
      ModuleScope s("ln_1");
      normed = m_parts.ln.apply(*p.find("ln_1"), h);
    }
    {
      ModuleScope s("attn");
      const Tree& a = *p.find("attn");
      Array qkv = m_parts.cAttn.apply(*a.find("c_attn"), normed);  // [B, T, 3C]
      int64_t c = m_cfg.nEmbd;
      Array q = nn::splitHeads(sliceAxis(qkv, 2, 0, c), m_cfg.nHead);
      Array k = nn::splitHeads(sliceAxis(qkv, 2, c, 2 * c), m_cfg.nHead);
      Array v = nn::splitHeads(sliceAxis(qkv, 2, 2 * c, 3 * c), m_cfg.nHead);
      Array y = nn::mergeHeads(nn::dotProductAttention(q, k, v, true, m_parts.drop, ctx));
      h = h + m_parts.drop.apply(m_parts.attnProj.apply(*a.find("c_proj"), y), ctx);
    }
    {
      ModuleScope s("ln_2");
      normed = m_parts.ln.apply(*p.find("ln_2"), h);
    }
    {
      ModuleScope s("mlp");
      const Tree& m = *p.find("mlp");
      Array u = swiglu(m_parts.cFc.apply(*m.find("c_fc"), normed), m_parts.cUp.apply(*m.find("c_up"), normed));  // [B, T, H]
      h = h + m_parts.drop.apply(m_parts.mlpProj.apply(*m.find("c_proj"), u), ctx);
    }
    return h;
  }

  nn::Gpt2Config m_cfg;
  Parts m_parts;
};

project::ModelFamily gpt2SwigluFamily() {
  project::ModelFamily f;
  f.name = "gpt2_swiglu";
  f.description = "GPT-2 with a SwiGLU MLP: c_proj(swiglu(c_fc(x), c_up(x)))";
  // GPT-2's keys, and the MLP's width.
  f.keys = project::gpt2Keys();
  project::FamilyKey hidden;
  hidden.name = "mlp_hidden";
  hidden.type = project::KeyType::Integer;
  hidden.defaultValue = int64_t(0);
  hidden.min = 0;
  hidden.max = static_cast<double>(limits::kWidth);
  hidden.help = "the MLP's hidden width (0: 8/3 n_embd rounded up to a multiple of 8)";
  f.keys.push_back(hidden);
  f.languageModel = true;
  f.contextKey = "block_size";
  f.check = project::checkGpt2;
  f.build = [](const project::ModelConfig& c, const project::BuildContext& context) {
    nn::Gpt2Config cfg = project::gpt2Config(c, context);
    auto model = std::make_shared<Gpt2Swiglu>(cfg, hiddenOf(cfg, static_cast<double>(c.integer("mlp_hidden"))));
    project::FamilyModel m;
    m.init = [model](const Array& key) { return model->init(key); };
    m.apply = [model](const Tree& p, const Array& tokens, nn::Context& ctx) { return model->apply(p, tokens, ctx); };
    m.numParams = model->numParams();
    m.trainFlopsPerItem = model->trainFlopsPerToken(cfg.blockSize);
    m.flopsRule = "6*N*tokens + 12*L*C*T*tokens (N without wpe)";
    return m;
  };
  return f;
}

int init(TesseraPluginHost* h) {
  plugin::Host& host = plugin::Host::from(h);
  host.addOp(swigluDef(), {Aval{Shape{2, 3}, DType::F32}, Aval{Shape{2, 3}, DType::F32}});
  host.addModelFamily(gpt2SwigluFamily());
  return 0;
}

const TesseraPluginInfo kInfo = {TESSERA_PLUGIN_API_VERSION, "swiglu", "1.0.0",
                                 "the SwiGLU op and the gpt2_swiglu model family", tsr::kVersion, init};

}  // namespace

extern "C" TSR_PLUGIN_EXPORT const TesseraPluginInfo* tessera_plugin_v1(void) { return &kInfo; }
