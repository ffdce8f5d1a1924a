#include "engine/backends/cuda/executable.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <array>
#include <map>
#include <thread>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "engine/backends/cuda/cuda_status.h"
#include "engine/backends/cuda/collective_kernels.h"
#include "engine/backends/cuda/flash_attention.h"
#include "engine/backends/cuda/gemm.h"
#include "engine/backends/cuda/loop_groups.h"
#include "engine/backends/cuda/node_kernels.h"
#include "engine/backends/cuda/nvrtc.h"
#include "engine/backends/cuda/step_graphs.h"
#include "engine/core/env_options.h"
#include "engine/runtime/profiler.h"

namespace tsr::cuda {

using cpu::LoweredKernel;
using ir::OpCode;
using ir::ValueId;
using passes::GroupKind;

const char* kernelPathName(KernelPath p) {
  switch (p) {
    case KernelPath::Generated: return "nvrtc";
    case KernelPath::CuBlasLt: return "cublaslt";
    case KernelPath::Cudnn: return "cudnn";
    case KernelPath::Flash: return "flash";
    case KernelPath::Host: return "host";
    case KernelPath::Collective: return "collective";
    case KernelPath::None: return "none";
  }
  return "?";
}

const char* opPath(const ir::OpDef& def) {
  switch (def.code) {
    case OpCode::DotGeneral: return "cublaslt";
    case OpCode::ConvGeneralDilated: return cudnnBuilt() ? "cudnn" : "nvrtc";  // nvrtc where cuDNN declines
    case OpCode::DotProductAttention:
    case OpCode::DotProductAttentionGrad: return "flash";  // bf16 operands or bf16 matmuls; the host otherwise
    case OpCode::ReduceSum:
    case OpCode::ReduceMax:
    case OpCode::ReduceMin:  // f32 reductions (fused with their prologue)
    case OpCode::Slice:
    case OpCode::BroadcastInDim:
    case OpCode::Transpose:
    case OpCode::Reshape:
    case OpCode::Rev:
    case OpCode::Pad:
    case OpCode::Concatenate:
    case OpCode::Gather:
    case OpCode::ScatterAdd:
    case OpCode::Scatter:
    case OpCode::ScatterMul:
    case OpCode::ScatterMin:
    case OpCode::ScatterMax:
    case OpCode::Iota:
    case OpCode::IntegerPow:
    case OpCode::SoftmaxCrossEntropy:
    case OpCode::SoftmaxCrossEntropyGrad:
    case OpCode::OptimizationBarrier:
    case OpCode::ReduceAnd:
    case OpCode::ReduceOr:
    case OpCode::Cumsum:
    case OpCode::Cumprod:
    case OpCode::Cummax:
    case OpCode::Cumlogsumexp:
    case OpCode::Sort:
    case OpCode::TopK:
    case OpCode::ReduceWindowSum:
    case OpCode::ReduceWindowMax:
    case OpCode::ReduceWindowMin:
    case OpCode::SelectAndScatterAdd: return "nvrtc";
    case OpCode::AllReduce:
    case OpCode::AllGather:
    case OpCode::ReduceScatter:
    case OpCode::AllToAll:
    case OpCode::CollectivePermute: return "collective";
    default: break;
  }
  if (def.fusion == ir::FusionKind::Elementwise && def.loop.valid())
    return "nvrtc";
  return "host";
}

namespace {

bool gemmTypesSupported(const ir::Graph& g, const ir::Node& n) {
  DType a = g.aval(n.operands[0]).dtype, b = g.aval(n.operands[1]).dtype, c = g.aval(n.results[0]).dtype;
  return a == b && (a == DType::F32 || a == DType::BF16) && (c == DType::F32 || c == DType::BF16);
}

// cuBLASLt wants non-empty matrices whose leading dimensions cover their rows (column-major views, gemm.h);
// other products (empty, or size-1 dims with a degenerate stride) take the CPU kernel.
bool cublasLtCanRun(const cpu::GemmPlan& p) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.batch <= 0) return false;
  const int64_t rowsFirst = p.transB ? p.k : p.n, rowsSecond = p.transA ? p.m : p.k;
  return p.ldb >= rowsFirst && p.lda >= rowsSecond && p.batch <= 0x7fffffff;
}

KernelPath pathOf(const cpu::Executable& exe, const LoweredKernel& k) {
  switch (k.info.kind) {
    case GroupKind::Loop:
    case GroupKind::Reduction: return KernelPath::Generated;
    case GroupKind::Gemm:
      return k.gemm && cublasLtCanRun(*k.gemm) &&
                     gemmTypesSupported(exe.graph(), exe.graph().nodes()[static_cast<size_t>(k.node)])
                 ? KernelPath::CuBlasLt
                 : KernelPath::Host;
    case GroupKind::Opaque:
    case GroupKind::Conv: return KernelPath::Host;  // unless a kernel of their own or cuDNN runs them
    default: return KernelPath::None;
  }
}

// The cuDNN problem of a convolution alone in its kernel or anchoring a conv group, where this build has cuDNN
// and it maps.
std::optional<CudnnConvProblem> cudnnProblem(const ir::Graph& g, const LoweredKernel& k) {
  if (!cudnnBuilt() || k.node < 0) return std::nullopt;
  const ir::Node& n = g.nodes()[static_cast<size_t>(k.node)];
  if (n.op != OpCode::ConvGeneralDilated || (k.info.kind != GroupKind::Conv && k.info.nodes.size() != 1))
    return std::nullopt;
  CudnnConvDecision d = mapConvToCudnn(g.aval(n.operands[0]), g.aval(n.operands[1]), g.aval(n.results[0]),
                                       std::get<ir::ConvAttrs>(n.attrs));
  return std::move(d.problem);
}

// The flash attention problem of a dot_product_attention (or its gradient) alone in its kernel, where the
// tensor-core kernels take it (f32 or bf16, head dims 16 to 64 in steps of 16).
std::optional<AttentionProblem> attentionProblem(const ir::Graph& g, const LoweredKernel& k) {
  if (k.node < 0 || k.info.nodes.size() != 1) return std::nullopt;
  const ir::Node& n = g.nodes()[static_cast<size_t>(k.node)];
  if (n.op != OpCode::DotProductAttention && n.op != OpCode::DotProductAttentionGrad) return std::nullopt;
  const Aval &q = g.aval(n.operands[0]), &kv = g.aval(n.operands[1]);
  if ((q.dtype != DType::F32 && q.dtype != DType::BF16) || !flashAttentionSupports(q.shape[3]) ||
      q.shape[0] * q.shape[2] > 65535)
    return std::nullopt;
  return AttentionProblem{q.shape[0], q.shape[2], q.shape[1], kv.shape[1], q.shape[3],
                          std::get<ir::AttentionAttrs>(n.attrs).causal, q.dtype == DType::BF16};
}

}  // namespace

passes::FusionOptions fusionOptions() { return passes::FusionOptions{}; }

Result<GeneratedProgram> generateProgram(const cpu::Executable& exe, bool groupLoops) {
  GeneratedProgram out;
  std::map<std::string, int> byName;  // equal kernels share one source
  auto add = [&](GeneratedKernel g) {
    auto it = byName.find(g.name);
    if (it == byName.end()) {
      it = byName.emplace(g.name, static_cast<int>(out.kernels.size())).first;
      out.kernels.push_back(std::move(g));
    }
    return it->second;
  };
  for (const LoweredKernel& k : exe.loweredKernels()) {
    const size_t ki = out.paths.size();
    KernelPath path = pathOf(exe, k);
    std::optional<Result<GeneratedKernel>> gen;
    int anchor = -1;
    if (k.info.kind == GroupKind::Opaque || k.info.kind == GroupKind::Conv) {
      TSR_ASSIGN(std::optional<GeneratedKernel> node, generateNodeKernel(exe.graph(), k));
      if (node) {
        path = KernelPath::Generated;
        if (k.info.kind == GroupKind::Conv)
          anchor = add(std::move(*node));
        else
          gen = std::move(*node);
      }
      if (std::optional<CudnnConvProblem> conv = cudnnProblem(exe.graph(), k)) {
        std::vector<ops::ConvPostOp> chain;
        for (const LoweredKernel::PostOpArg& pa : k.postOps) chain.push_back(pa.op);
        CudnnEpilogueDecision e = mapEpilogueToCudnn(*conv, chain);
        if (e.epilogue) out.cudnnEpilogues.emplace(ki, std::move(*e.epilogue));
        out.cudnnConvs.emplace(ki, std::move(*conv));
        path = KernelPath::Cudnn;  // the generated kernel stays as its fallback
      }
    }
    if (std::optional<AttentionProblem> a = attentionProblem(exe.graph(), k)) {
      if (a->bf16) path = KernelPath::Flash;
      out.attention.emplace(ki, *a);
    }
    if (k.node >= 0 && k.info.nodes.size() == 1 && isCollective(exe.graph().nodes()[static_cast<size_t>(k.node)].op))
      path = KernelPath::Collective;
    out.paths.push_back(path);
    out.anchorIndex.push_back(anchor);
    if (k.info.kind == GroupKind::Loop) gen = generateLoop(k.prog, static_cast<int>(k.args.size()), k.info.name);
    if (k.info.kind == GroupKind::Reduction) gen = generateReduction(k, k.info.name);
    if ((k.info.kind == GroupKind::Gemm || k.info.kind == GroupKind::Conv) && k.hasProgram)
      gen = generateLoop(k.prog, static_cast<int>(k.args.size()), k.info.name + " epilogue");
    if (!gen) {
      out.generatedIndex.push_back(-1);
      continue;
    }
    if (!gen->ok()) return gen->takeError();
    out.generatedIndex.push_back(add(std::move(*gen).value()));
  }
  if (groupLoops) {
    TSR_TRY(planLoopGroups(exe, out));
  } else {
    out.groupOf.assign(out.paths.size(), -1);
  }
  return out;
}

struct Executable::Impl {
  const ir::OpRegistry* reg = nullptr;
  CompileOptions options;
  Device* device = nullptr;
  std::unique_ptr<cpu::Executable> lowered;
  GeneratedProgram program;
  std::vector<std::shared_ptr<LoadedModule>> modules;  // per generated kernel
  std::vector<const void*> functions;                  // per generated kernel
  std::vector<std::unique_ptr<LtGemm>> gemms;          // per lowered kernel (null unless cuBLASLt)
  // Operands converted to bf16 once for every product that reads the same value as it lies (a forward
  // activation that its weight gradient reads again, an output gradient that the input and the weight gradients
  // both read), as autocast keeps the bf16 copy for the backward pass: per kernel, each operand's slot or -1;
  // per slot, its bytes and the last kernel that reads it (the copy is freed after it, in stream order).
  std::vector<std::array<int, 2>> stageSlot;
  std::vector<int64_t> slotBytes;
  std::vector<size_t> slotLast;
  std::vector<std::unique_ptr<CudnnConv>> convs;       // per lowered kernel (null unless cuDNN)
  std::map<size_t, std::string> fallbacks;             // convolutions cuDNN declined on this device: why
  std::vector<DeviceBufferPtr> consts;
  LoopGroupTables groupTables;  // where each loop group's entries lie in a run's table
  // Buffers handed out for fresh outputs while runs may become graphs, per value: one whose only holder is this
  // list goes out again, so that a training loop's outputs (fed back as its next inputs) alternate between two
  // addresses and its graphs replay (step_graphs.h).
  static constexpr size_t kOutputBuffers = 2;
  std::vector<std::vector<DeviceBufferPtr>> handedOut;
  std::unique_ptr<StepGraphs> graphs;  // last: its graphs go before the modules their kernels live in

  const ir::Graph& graph() const { return lowered->graph(); }
  ValueId root(ValueId v) const {
    const auto& slots = lowered->valueSlots();
    while (slots[static_cast<size_t>(v)].loc == cpu::Loc::Alias) v = slots[static_cast<size_t>(v)].aliasOf;
    return v;
  }
  // A cuBLASLt product or a cuDNN convolution followed by its generated epilogue: the timeline shows the two
  // apart. (A convolution alone in its kernel keeps its generated kernel as the fallback, not an epilogue.)
  bool epilogueApart(size_t ki) const {
    if (program.generatedIndex[ki] < 0) return false;
    if (program.paths[ki] == KernelPath::CuBlasLt) return true;
    return program.paths[ki] == KernelPath::Cudnn && lowered->loweredKernels()[ki].info.kind == GroupKind::Conv &&
           !convs[ki]->fused();
  }
  Status runCudnn(size_t ki, const LoweredKernel& k, const std::vector<void*>& ptrs);
  Status launchGenerated(int gi, const std::vector<void*>& ptrs);
  Status runHostKernel(const LoweredKernel& k, const std::vector<void*>& ptrs);
  Status runAttention(size_t ki, const LoweredKernel& k, const std::vector<void*>& ptrs);
  Status launchGroup(int group, const void* table);
  Status runGemm(size_t ki, const LoweredKernel& k, const std::vector<void*>& args,
                 std::vector<DeviceBufferPtr>& staged, cudaEvent_t productEnd);
  Result<DeviceBufferPtr> freshOutput(size_t v, int64_t bytes);
  // Queues one run on the compute stream: the arena, the loop groups' table (written into pinnedTable, host
  // memory that outlives the run, where given), every kernel. bound: each value's pointer but the arena's.
  // events: 3 per kernel, or null.
  Status enqueue(const std::vector<void*>& bound, void* pinnedTable, const std::vector<cudaEvent_t>* events);
};

Executable::Executable() : m(std::make_unique<Impl>()) {}
Executable::~Executable() = default;
Device& Executable::device() const { return *m->device; }
const cpu::Executable& Executable::lowered() const { return *m->lowered; }

int Executable::groupedLoops() const {
  int n = 0;
  for (const LoopGroup& g : m->program.groups) n += static_cast<int>(g.members.size());
  return n;
}
int Executable::loopGroupLaunches() const { return static_cast<int>(m->program.groups.size()); }
int Executable::graphCaptures() const { return m->graphs->captures(); }
int Executable::graphReplays() const { return m->graphs->replays(); }

int Executable::numKernels(KernelPath p) const {
  return static_cast<int>(std::count(m->program.paths.begin(), m->program.paths.end(), p));
}

Result<std::unique_ptr<Executable>> Executable::compile(const ir::Graph& g, const ir::OpRegistry& reg,
                                                        const passes::FusionPlan& plan, const CompileOptions& options) {
  std::unique_ptr<Executable> e(new Executable());
  Impl& im = *e->m;
  im.reg = &reg;
  im.options = options;
  TSR_ASSIGN(im.device, Device::get(options.device));
  TSR_CUDA(cudaSetDevice(im.device->ordinal()));
  cpu::CompileOptions co;
  co.name = options.name;
  co.oneDnn = false;
  co.runsOnCpu = false;
  co.bf16ExcessPrecision = envOptions().bf16ExcessPrecision;
  TSR_ASSIGN(im.lowered, cpu::Executable::compile(g, reg, plan, co));
  TSR_ASSIGN(im.program, generateProgram(*im.lowered, options.groupLoops && envOptions().cudaLoopGroups));
  const auto& kernels = im.lowered->loweredKernels();
  const MatmulPrecision precision = matmulPrecision();
  // cuDNN's plans first (a conv group's with its epilogue where that maps): a convolution it declines on this
  // device runs its NVRTC kernel (or, without one, on the host), and only the NVRTC kernels something runs are
  // compiled.
  im.convs.resize(kernels.size());
  for (auto& [ki, problem] : im.program.cudnnConvs) {
    auto e = im.program.cudnnEpilogues.find(ki);
    const CudnnEpilogue* epilogue = e == im.program.cudnnEpilogues.end() ? nullptr : &e->second;
    Result<std::unique_ptr<CudnnConv>> conv = CudnnConv::create(*im.device, problem, precision, epilogue);
    if (conv.ok()) {
      im.convs[ki] = std::move(conv).value();
      continue;
    }
    im.fallbacks[ki] = conv.error().message;
    const int fallback = kernels[ki].info.kind == GroupKind::Conv ? im.program.anchorIndex[ki] : im.program.generatedIndex[ki];
    im.program.paths[ki] = fallback >= 0 ? KernelPath::Generated : KernelPath::Host;
  }
  // Fused attention on FlashAttention-2's tensor-core kernels where its operands are bf16 (autocast) or products
  // are bf16 (what the models trace it for); f32 operands at f32 and tf32 run its CPU kernel on the host, as exact
  // as the unfused form would be.
  for (const auto& [ki, a] : im.program.attention)
    if (a.bf16 || precision == MatmulPrecision::BF16) im.program.paths[ki] = KernelPath::Flash;
  const size_t nk = im.program.kernels.size();
  std::vector<bool> needed(nk, false);
  for (size_t ki = 0; ki < kernels.size(); ++ki) {
    const int gi = im.program.generatedIndex[ki], ai = im.program.anchorIndex[ki];
    const KernelPath path = im.program.paths[ki];
    // On cuDNN only a conv group's unfused epilogue runs generated (a lone convolution's kernel is its fallback);
    // a grouped loop runs as its group's kernel.
    if (const int group = im.program.groupOf[ki]; group >= 0)
      needed[static_cast<size_t>(im.program.groups[static_cast<size_t>(group)].kernel)] = true;
    else if (gi >= 0 && (path != KernelPath::Cudnn || im.epilogueApart(ki)))
      needed[static_cast<size_t>(gi)] = true;
    if (ai >= 0 && path == KernelPath::Generated) needed[static_cast<size_t>(ai)] = true;
  }
  NvrtcOptions no;
  no.sm = im.device->smVersion();
  // NVRTC compiles independent programs concurrently: one worker per core.
  std::vector<std::optional<Result<CompiledModule>>> compiled(nk);
  {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < nk;)
        if (needed[i]) compiled[i] = compileCuda(im.program.kernels[i].source, im.program.kernels[i].name, no);
    };
    const size_t threads = std::min<size_t>(nk, std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
  }
  for (size_t i = 0; i < nk; ++i) {
    const GeneratedKernel& gk = im.program.kernels[i];
    if (!needed[i]) {
      im.modules.push_back(nullptr);
      im.functions.push_back(nullptr);
      continue;
    }
    if (!compiled[i]->ok()) return compiled[i]->takeError();
    TSR_ASSIGN(std::shared_ptr<LoadedModule> lm, LoadedModule::load(compiled[i]->value()));
    TSR_ASSIGN(const void* fn, lm->kernel(gk.name));
    im.modules.push_back(std::move(lm));
    im.functions.push_back(fn);
  }
  im.gemms.resize(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (im.program.paths[i] != KernelPath::CuBlasLt) continue;
    const ir::Node& n = im.graph().nodes()[static_cast<size_t>(kernels[i].node)];
    GemmSpec spec;
    spec.plan = *kernels[i].gemm;
    spec.inType = im.graph().aval(n.operands[0]).dtype;
    spec.outType = im.graph().aval(n.results[0]).dtype;
    spec.precision = precision;
    TSR_ASSIGN(im.gemms[i], LtGemm::create(*im.device, spec));
  }
  im.stageSlot.assign(kernels.size(), {-1, -1});
  {
    std::map<std::pair<ValueId, int64_t>, std::vector<std::pair<size_t, int>>> readers;  // (value, bytes) -> uses
    for (size_t i = 0; i < kernels.size(); ++i) {
      if (im.program.paths[i] != KernelPath::CuBlasLt) continue;
      for (int which = 0; which < 2; ++which) {
        const int64_t bytes = im.gemms[i]->flatStagedBytes(which);
        const ValueId v = kernels[i].args[static_cast<size_t>(kernels[i].operandArgs[static_cast<size_t>(which)])];
        if (bytes > 0) readers[{im.root(v), bytes}].push_back({i, which});
      }
    }
    for (const auto& [key, uses] : readers) {
      if (uses.size() < 2) continue;
      const int slot = static_cast<int>(im.slotBytes.size());
      im.slotBytes.push_back(key.second);
      im.slotLast.push_back(uses.back().first);
      for (const auto& [i, which] : uses) im.stageSlot[i][static_cast<size_t>(which)] = slot;
    }
  }
  for (const auto& c : im.lowered->constants()) {
    TSR_ASSIGN(DeviceBufferPtr d, toDevice(*im.device, *c, c->size()));
    im.consts.push_back(std::move(d));
  }
  im.groupTables = layoutLoopGroups(im.program, im.device->numSMs());
  // A kernel on host copies synchronises with the host in the middle of the step: no graph can hold it.
  std::string off;
  if (!options.graphs || !envOptions().cudaGraphs)
    off = options.graphs ? "TESSERA_CUDA_GRAPHS=off" : "switched off in its compile options";
  for (size_t ki = 0; ki < kernels.size() && off.empty(); ++ki) {
    if (im.program.paths[ki] == KernelPath::Host)
      off = fmt::format("kernel {} ({}) runs its CPU kernel on host copies", ki, kernels[ki].info.name);
    else if (im.program.paths[ki] == KernelPath::Collective)  // NCCL or the host, chosen at run time
      off = fmt::format("kernel {} ({}) is a collective", ki, kernels[ki].info.name);
  }
  im.graphs = std::make_unique<StepGraphs>(*im.device, options.name, std::move(off));
  im.handedOut.resize(static_cast<size_t>(im.graph().numValues()));
  TSR_TRY(im.device->synchronize());
  return e;
}

Status Executable::Impl::launchGenerated(int gi, const std::vector<void*>& ptrs) {
  const GeneratedKernel& gk = program.kernels[static_cast<size_t>(gi)];
  if (gk.prefillFrom >= 0 && gk.prefillBytes > 0)
    TSR_CUDA(cudaMemcpyAsync(ptrs[static_cast<size_t>(gk.prefillTo)], ptrs[static_cast<size_t>(gk.prefillFrom)],
                             static_cast<size_t>(gk.prefillBytes), cudaMemcpyDeviceToDevice,
                             static_cast<cudaStream_t>(device->computeStream())));
  for (const auto& [arg, bytes] : gk.zeroArgs)
    TSR_CUDA(cudaMemsetAsync(ptrs[static_cast<size_t>(arg)], 0, static_cast<size_t>(bytes),
                             static_cast<cudaStream_t>(device->computeStream())));
  std::vector<void*> vals = ptrs;
  std::vector<void*> argp(vals.size());
  for (size_t i = 0; i < vals.size(); ++i) argp[i] = &vals[i];
  if (gk.shape == LaunchShape::Rows)
    return launchKernel(functions[static_cast<size_t>(gi)], gk.rows, kRowThreads, argp.data(), 0, device->computeStream());
  int64_t blocks = (gk.elements + kThreads - 1) / kThreads;
  blocks = std::min<int64_t>(blocks, int64_t{device->numSMs()} * 32);
  return launchKernel(functions[static_cast<size_t>(gi)], blocks, kThreads, argp.data(), 0, device->computeStream());
}

// A convolution on cuDNN: with its epilogue in the same graph (fused: the chain's operands and result), or
// alone, a conv group's epilogue then generated.
Status Executable::Impl::runCudnn(size_t ki, const LoweredKernel& k, const std::vector<void*>& ptrs) {
  CudnnConv& conv = *convs[ki];
  const void* lhs = ptrs[static_cast<size_t>(k.operandArgs[0])];
  const void* rhs = ptrs[static_cast<size_t>(k.operandArgs[1])];
  if (!conv.fused()) return conv.run(lhs, rhs, ptrs[static_cast<size_t>(k.resultArgs[0])]);
  std::vector<const void*> operands;
  for (const LoweredKernel::PostOpArg& pa : k.postOps)
    if (pa.arg >= 0) operands.push_back(ptrs[static_cast<size_t>(pa.arg)]);
  return conv.run(lhs, rhs, ptrs[static_cast<size_t>(k.postOut)], operands);
}

Status Executable::Impl::runAttention(size_t ki, const LoweredKernel& k, const std::vector<void*>& ptrs) {
  const AttentionProblem& p = program.attention.at(ki);  // a kernel on the flash path has its problem
  auto in = [&](size_t i) { return ptrs[static_cast<size_t>(k.operandArgs[i])]; };
  auto out = [&](size_t i) { return ptrs[static_cast<size_t>(k.resultArgs[i])]; };
  auto rows = [](void* x) { return static_cast<float*>(x); };  // lse and dlse: f32 whatever q's dtype
  if (graph().nodes()[static_cast<size_t>(k.node)].op == OpCode::DotProductAttention)
    return flashAttentionForward(*device, in(0), in(1), in(2), out(0), rows(out(1)), p);
  return flashAttentionBackward(*device, in(0), in(1), in(2), in(3), rows(in(4)), in(5), rows(in(6)), out(0), out(1),
                                out(2), p);
}

// A node without a device kernel: its CPU kernel on host copies (operands down, results up).
Status Executable::Impl::runHostKernel(const LoweredKernel& k, const std::vector<void*>& ptrs) {
  const ir::Node& nd = graph().nodes()[static_cast<size_t>(k.node)];
  const ir::OpDef& def = reg->get(nd.op);
  std::vector<runtime::BufferPtr> hostIn, hostOut;
  std::vector<ir::TensorView> in;
  std::vector<ir::MutableTensorView> out;
  for (size_t i = 0; i < nd.operands.size(); ++i) {
    const Aval& a = graph().aval(nd.operands[i]);
    TSR_ASSIGN(runtime::BufferPtr b, runtime::Buffer::allocateUninitialized(std::max<int64_t>(a.bytes(), 1)));
    TSR_TRY(device->download(b->data(), ptrs[static_cast<size_t>(k.operandArgs[i])], a.bytes()));
    in.push_back(ir::TensorView{b->data(), a, 0});
    hostIn.push_back(std::move(b));
  }
  for (size_t i = 0; i < nd.results.size(); ++i) {
    const Aval& a = graph().aval(nd.results[i]);
    TSR_ASSIGN(runtime::BufferPtr b, runtime::Buffer::allocate(std::max<int64_t>(a.bytes(), 1)));  // zeroed
    out.push_back(ir::MutableTensorView{b->data(), a, 0});
    hostOut.push_back(std::move(b));
  }
  try {
    def.cpu(ir::CpuKernelArgs{in, out, nd.attrs});
  } catch (const std::exception& ex) {
    return makeError("{}: {}", k.info.name, ex.what());
  }
  for (size_t i = 0; i < nd.results.size(); ++i)
    TSR_TRY(device->upload(ptrs[static_cast<size_t>(k.resultArgs[i])], hostOut[i]->data(),
                           graph().aval(nd.results[i]).bytes()));
  // The host buffers must outlive the asynchronous uploads.
  return device->synchronize();
}

Status Executable::Impl::launchGroup(int group, const void* table) {
  const LoopGroup& g = program.groups[static_cast<size_t>(group)];
  const LoopGroupLayout& l = groupTables.groups[static_cast<size_t>(group)];
  const long long* entries = static_cast<const long long*>(table) + l.offset;
  int count = static_cast<int>(g.members.size());
  void* args[] = {&entries, &count};
  return launchKernel(functions[static_cast<size_t>(g.kernel)], l.blocks, kThreads, args, 0, device->computeStream());
}

// A product on cuBLASLt with its operands' shared bf16 copies (made by the first product that reads them, freed
// after the last), then its generated epilogue. productEnd: recorded between the two where the timeline shows
// them apart.
Status Executable::Impl::runGemm(size_t ki, const LoweredKernel& k, const std::vector<void*>& args,
                                 std::vector<DeviceBufferPtr>& staged, cudaEvent_t productEnd) {
  const void* copies[2] = {nullptr, nullptr};
  for (int which = 0; which < 2; ++which) {
    const int slot = stageSlot[ki][static_cast<size_t>(which)];
    if (slot < 0) continue;
    DeviceBufferPtr& copy = staged[static_cast<size_t>(slot)];
    if (!copy) {
      TSR_ASSIGN(copy, device->allocate(slotBytes[static_cast<size_t>(slot)]));
      TSR_TRY(gemms[ki]->stageInto(which, args[static_cast<size_t>(k.operandArgs[static_cast<size_t>(which)])],
                                   copy->data()));
    }
    copies[which] = copy->data();
  }
  TSR_TRY(gemms[ki]->run(args[static_cast<size_t>(k.operandArgs[0])], args[static_cast<size_t>(k.operandArgs[1])],
                         args[static_cast<size_t>(k.resultArgs[0])], nullptr, copies[0], copies[1]));
  for (int which = 0; which < 2; ++which) {
    const int slot = stageSlot[ki][static_cast<size_t>(which)];
    if (slot >= 0 && slotLast[static_cast<size_t>(slot)] == ki) staged[static_cast<size_t>(slot)].reset();
  }
  if (productEnd && epilogueApart(ki))
    TSR_CUDA(cudaEventRecord(productEnd, static_cast<cudaStream_t>(device->computeStream())));
  if (const int gi = program.generatedIndex[ki]; gi >= 0) return launchGenerated(gi, args);
  return {};
}

Result<DeviceBufferPtr> Executable::Impl::freshOutput(size_t v, int64_t bytes) {
  if (!graphs->active()) {
    if (!handedOut[v].empty()) handedOut[v].clear();
    return device->allocate(bytes);
  }
  std::vector<DeviceBufferPtr>& mine = handedOut[v];
  for (const DeviceBufferPtr& b : mine)
    if (b.use_count() == 1) return b;  // the caller dropped it: every earlier reader is queued before this run
  TSR_ASSIGN(DeviceBufferPtr b, device->allocate(bytes));
  if (mine.size() < kOutputBuffers) mine.push_back(b);
  return b;
}

Status Executable::Impl::enqueue(const std::vector<void*>& bound, void* pinnedTable,
                                 const std::vector<cudaEvent_t>* events) {
  const auto& slots = lowered->valueSlots();
  const auto& kernels = lowered->loweredKernels();
  auto stream = static_cast<cudaStream_t>(device->computeStream());
  // Everything allocated here is freed here too: under capture it is the graph's own memory.
  TSR_ASSIGN(DeviceBufferPtr arena, device->allocate(lowered->memory().arenaBytes));
  std::vector<void*> ptr = bound;
  for (size_t v = 0; v < slots.size(); ++v)
    if (slots[v].loc == cpu::Loc::Arena) ptr[v] = static_cast<char*>(arena->data()) + slots[v].offset;
  for (size_t v = 0; v < slots.size(); ++v)
    if (slots[v].loc == cpu::Loc::Alias) ptr[v] = ptr[static_cast<size_t>(root(static_cast<ValueId>(v)))];
  DeviceBufferPtr table;
  if (groupTables.words > 0) {
    const int64_t bytes = groupTables.words * static_cast<int64_t>(sizeof(int64_t));
    std::vector<int64_t> pageable;
    auto* host = static_cast<int64_t*>(pinnedTable);
    if (!host) {
      pageable.resize(static_cast<size_t>(groupTables.words));
      host = pageable.data();  // copied into a staging buffer before cudaMemcpyAsync returns
    }
    writeLoopGroupTables(*lowered, program, groupTables, ptr, host);
    TSR_ASSIGN(table, device->allocate(bytes));
    TSR_CUDA(cudaMemcpyAsync(table->data(), host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream));
  }
  std::vector<void*> args;
  std::vector<DeviceBufferPtr> staged(slotBytes.size());  // bf16 copies shared between products
  auto mark = [&](size_t i) {
    if (events) cudaEventRecord((*events)[i], stream);
  };
  for (size_t ki = 0; ki < kernels.size(); ++ki) {
    const LoweredKernel& k = kernels[ki];
    args.clear();
    for (ValueId v : k.args) args.push_back(ptr[static_cast<size_t>(v)]);
    mark(3 * ki);
    Status st;
    const int gi = program.generatedIndex[ki];
    switch (program.paths[ki]) {
      case KernelPath::Generated:
        if (const int group = program.groupOf[ki]; group >= 0) {
          // The group launches at its first member; the others ran with it (an empty span on the timeline).
          if (program.groups[static_cast<size_t>(group)].members.front() == ki) st = launchGroup(group, table->data());
          break;
        }
        if (const int ai = program.anchorIndex[ki]; ai >= 0) st = launchGenerated(ai, args);
        if (st.ok() && gi >= 0) st = launchGenerated(gi, args);
        break;
      case KernelPath::CuBlasLt: st = runGemm(ki, k, args, staged, events ? (*events)[3 * ki + 1] : nullptr); break;
      case KernelPath::Cudnn:
        st = runCudnn(ki, k, args);
        if (epilogueApart(ki)) {
          mark(3 * ki + 1);
          if (st.ok()) st = launchGenerated(gi, args);
        }
        break;
      case KernelPath::Flash: st = runAttention(ki, k, args); break;
      case KernelPath::Host:
        st = runHostKernel(k, args);
        if (st.ok() && gi >= 0) st = launchGenerated(gi, args);
        break;
      case KernelPath::Collective: {
        Result<bool> onDevice = runCollective(*device, graph(), k, args);
        st = !onDevice.ok() ? onDevice.takeError() : *onDevice ? Status{} : runHostKernel(k, args);
        break;
      }
      case KernelPath::None: break;
    }
    if (!st.ok()) return makeError("{}: {}: {}", options.name, k.info.name, st.error().message);
    if (!epilogueApart(ki)) mark(3 * ki + 1);
    mark(3 * ki + 2);
  }
  return {};
}

Result<std::vector<DeviceBufferPtr>> Executable::run(std::span<const DeviceBufferPtr> inputs) {
  Impl& im = *m;
  const ir::Graph& g = im.graph();
  const std::string& name = im.options.name;
  if (inputs.size() != g.inputs().size())
    return makeError("{}: expects {} inputs, got {}", name, g.inputs().size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Aval& a = g.aval(g.inputs()[i]);
    if (!inputs[i] || inputs[i]->size() < a.bytes())
      return makeError("{}: input {} must hold {} ({} bytes)", name, i, a.toString(), a.bytes());
    if (&inputs[i]->device() != im.device)
      return makeError("{}: input {} is on cuda:{}, the program on cuda:{}", name, i, inputs[i]->device().ordinal(),
                       im.device->ordinal());
  }
  TSR_CUDA(cudaSetDevice(im.device->ordinal()));
  // Every pointer but the arena's (enqueue's): together they are the key of the run's graph.
  const auto& slots = im.lowered->valueSlots();
  std::vector<void*> ptr(static_cast<size_t>(g.numValues()), nullptr);
  std::vector<DeviceBufferPtr> owned(static_cast<size_t>(g.numValues()));
  for (size_t v = 0; v < slots.size(); ++v) {
    const cpu::ValueSlot& s = slots[v];
    switch (s.loc) {
      case cpu::Loc::Input: owned[v] = inputs[static_cast<size_t>(s.index)]; break;
      case cpu::Loc::Const: owned[v] = im.consts[static_cast<size_t>(s.index)]; break;
      case cpu::Loc::Fresh: {
        TSR_ASSIGN(owned[v], im.freshOutput(v, g.aval(static_cast<ValueId>(v)).bytes()));
        break;
      }
      default: break;
    }
    if (owned[v]) ptr[v] = owned[v]->data();
  }
  for (size_t v = 0; v < slots.size(); ++v)
    if (slots[v].loc == cpu::Loc::Alias) {
      ValueId r = im.root(static_cast<ValueId>(v));
      ptr[v] = ptr[static_cast<size_t>(r)];
      owned[v] = owned[static_cast<size_t>(r)];
    }

  runtime::Profiler* prof = runtime::Profiler::active();
  const auto& kernels = im.lowered->loweredKernels();
  auto stream = static_cast<cudaStream_t>(im.device->computeStream());
  if (prof && !prof->hasFusion(im.lowered->fusionBase())) {
    std::vector<runtime::FusionInfo> table;
    for (const auto& k : kernels) {
      runtime::FusionInfo f;
      f.id = k.info.fusionId;
      f.executable = name;
      f.name = k.info.name;
      f.kind = passes::groupKindName(k.info.kind);
      for (ir::NodeId n : k.info.nodes) {
        f.nodes.push_back(n);
        f.ops.push_back(im.reg->get(g.nodes()[static_cast<size_t>(n)].op).name);
      }
      table.push_back(std::move(f));
    }
    prof->registerFusions(table);
  }
  // Timeline: three events per kernel (start, the product's end, end: a GEMM's generated epilogue is an event of
  // its own, "<name> epilogue"); `anchor` is recorded on an idle stream at host time t0.
  std::vector<cudaEvent_t> events;
  cudaEvent_t anchor = nullptr;
  int64_t t0 = 0;
  auto destroyEvents = [&] {
    for (cudaEvent_t ev : events) cudaEventDestroy(ev);
    if (anchor) cudaEventDestroy(anchor);
  };
  if (prof) {
    TSR_CUDA(cudaStreamSynchronize(stream));
    TSR_CUDA(cudaEventCreate(&anchor));
    t0 = runtime::Profiler::nowNs();
    TSR_CUDA(cudaEventRecord(anchor, stream));
    events.resize(3 * kernels.size(), nullptr);
    for (auto& ev : events) TSR_CUDA(cudaEventCreate(&ev));
  }
  Status st = im.graphs->run(ptr, im.groupTables.words * static_cast<int64_t>(sizeof(int64_t)),
                             prof ? "profiled (CUDA events around every kernel)" : nullptr,
                             [&](void* pinnedTable) { return im.enqueue(ptr, pinnedTable, prof ? &events : nullptr); });
  if (!st.ok()) {
    destroyEvents();
    return st.takeError();
  }
  if (prof) {
    TSR_CUDA(cudaStreamSynchronize(stream));
    const std::string deviceName = fmt::format("cuda:{}", im.device->ordinal());
    auto record = [&](size_t ki, cudaEvent_t from, cudaEvent_t to, std::string eventName, bool withCost) {
      float startMs = 0, endMs = 0;
      cudaEventElapsedTime(&startMs, anchor, from);
      cudaEventElapsedTime(&endMs, anchor, to);
      runtime::ProfileEvent ev;
      ev.device = deviceName;
      ev.stream = 0;
      ev.name = std::move(eventName);
      ev.fusion = kernels[ki].info.fusionId;
      ev.startNs = t0 + static_cast<int64_t>(static_cast<double>(startMs) * 1e6);
      ev.durationNs = static_cast<int64_t>(static_cast<double>(endMs - startMs) * 1e6);
      ev.flops = withCost ? kernels[ki].info.flops : 0;  // the fusion's cost goes to its product
      ev.bytes = withCost ? kernels[ki].info.bytes : 0;
      prof->record(std::move(ev));
    };
    for (size_t ki = 0; ki < kernels.size(); ++ki) {
      const bool epilogue = im.epilogueApart(ki);
      record(ki, events[3 * ki], events[3 * ki + (epilogue ? 1 : 2)], kernels[ki].info.name, true);
      if (epilogue) record(ki, events[3 * ki + 1], events[3 * ki + 2], kernels[ki].info.name + " epilogue", false);
    }
    destroyEvents();
  }
  // Errors of asynchronous launches surface here at the latest.
  TSR_CUDA(cudaGetLastError());
  std::vector<DeviceBufferPtr> out;
  for (ValueId v : g.outputs()) out.push_back(owned[static_cast<size_t>(v)]);
  return out;
}

Result<std::vector<runtime::BufferPtr>> Executable::runHost(std::span<const runtime::BufferPtr> inputs) {
  Impl& im = *m;
  const ir::Graph& g = im.graph();
  if (inputs.size() != g.inputs().size())
    return makeError("{}: expects {} inputs, got {}", im.options.name, g.inputs().size(), inputs.size());
  std::vector<DeviceBufferPtr> dev;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Aval& a = g.aval(g.inputs()[i]);
    if (!inputs[i] || inputs[i]->size() < a.bytes())
      return makeError("{}: input {} must hold {} ({} bytes)", im.options.name, i, a.toString(), a.bytes());
    TSR_ASSIGN(DeviceBufferPtr d, toDevice(*im.device, *inputs[i], a.bytes()));
    dev.push_back(std::move(d));
  }
  TSR_ASSIGN(std::vector<DeviceBufferPtr> outs, run(dev));
  std::vector<runtime::BufferPtr> host;
  for (size_t i = 0; i < outs.size(); ++i) {
    TSR_ASSIGN(runtime::BufferPtr h, toHost(*im.device, *outs[i], g.aval(g.outputs()[i]).bytes()));
    host.push_back(std::move(h));
  }
  return host;
}

std::string Executable::describe() const {
  const Impl& im = *m;
  const auto& kernels = im.lowered->loweredKernels();
  std::string s = fmt::format(
      "{} on cuda:{} ({}): {} kernels: {} generated, {} cuBLASLt, {} cuDNN, {} flash, {} host, {} collective; arena "
      "{:.1f} MiB\n",
      im.options.name, im.device->ordinal(), im.device->name(), kernels.size(), numKernels(KernelPath::Generated),
      numKernels(KernelPath::CuBlasLt), numKernels(KernelPath::Cudnn), numKernels(KernelPath::Flash),
      numKernels(KernelPath::Host), numKernels(KernelPath::Collective),
      im.lowered->memory().arenaBytes / 1048576.0);
  s += fmt::format("{} loops grouped into {} launches; {}\n", groupedLoops(), loopGroupLaunches(),
                   im.graphs->describe());
  for (size_t i = 0; i < kernels.size(); ++i) {
    int gi = im.program.generatedIndex[i];
    std::string detail;
    if (im.program.paths[i] == KernelPath::Cudnn) {
      const CudnnConv& c = *im.convs[i];
      detail = fmt::format(" -> cuDNN {} ({})", cudnnConvOpName(c.problem().op), c.engineSummary());
      if (im.epilogueApart(i))
        detail += fmt::format(" then {}{}", im.program.kernels[static_cast<size_t>(gi)].name,
                              c.epilogueDeclined().empty() ? "" : " (fused graph declined: " + c.epilogueDeclined() + ")");
    } else {
      std::vector<std::string> names;  // a conv group's convolution, then the kernel (or epilogue)
      for (int x : {im.program.paths[i] == KernelPath::Generated ? im.program.anchorIndex[i] : -1, gi})
        if (x >= 0) names.push_back(im.program.kernels[static_cast<size_t>(x)].name);
      if (!names.empty()) detail = fmt::format(" -> {}", fmt::join(names, " then "));
    }
    if (auto f = im.fallbacks.find(i); f != im.fallbacks.end()) detail += " (cuDNN declined: " + f->second + ")";
    if (const int group = im.program.groupOf[i]; group >= 0) {
      const LoopGroup& lg = im.program.groups[static_cast<size_t>(group)];
      detail = lg.members.front() == i
                   ? fmt::format(" -> {}, {} loops in one launch", im.program.kernels[static_cast<size_t>(lg.kernel)].name,
                                 lg.members.size())
                   : fmt::format(" -> launched with the loops of kernel {}", lg.members.front());
    }
    for (int which = 0; which < 2; ++which)
      if (const int slot = im.stageSlot[i][static_cast<size_t>(which)]; slot >= 0)
        detail += fmt::format(" ({} operand's bf16 copy {}shared)", which == 0 ? "first" : "second",
                              im.slotLast[static_cast<size_t>(slot)] == i ? "last read, " : "");
    s += fmt::format("{:4} {:<9} {}{}\n", i, kernelPathName(im.program.paths[i]), kernels[i].info.name, detail);
  }
  if (!im.slotBytes.empty()) {
    int64_t bytes = 0;
    for (int64_t b : im.slotBytes) bytes += b;
    s += fmt::format("{} bf16 operand copies shared between products ({:.1f} MiB if all were alive at once)\n",
                     im.slotBytes.size(), static_cast<double>(bytes) / 1048576.0);
  }
  return s;
}

Result<DeviceBufferPtr> toDevice(Device& d, const runtime::Buffer& host, int64_t bytes) {
  TSR_ASSIGN(DeviceBufferPtr b, d.allocate(bytes));
  TSR_TRY(d.upload(b->data(), host.data(), bytes));
  TSR_TRY(d.synchronize());  // the host buffer may go once this returns
  return b;
}

Result<runtime::BufferPtr> toHost(Device& d, const DeviceBuffer& dev, int64_t bytes) {
  TSR_ASSIGN(runtime::BufferPtr h, runtime::Buffer::allocateUninitialized(std::max<int64_t>(bytes, 1)));
  TSR_TRY(d.download(h->data(), dev.data(), bytes));
  return h;
}

}  // namespace tsr::cuda
