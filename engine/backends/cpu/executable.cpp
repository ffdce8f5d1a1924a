#include "engine/backends/cpu/executable.h"

#include <algorithm>
#include <numeric>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "engine/backends/cpu/arena_placement.h"
#include "engine/backends/cpu/gemm.h"
#include "engine/backends/cpu/native_compiler.h"
#include "engine/backends/cpu/reduction_kernel.h"
#include "engine/backends/cpu/row_views.h"
#include "engine/backends/cpu/schedule.h"
#include "engine/backends/cpu/thread_pool.h"
#include "engine/backends/cpu/tile_program.h"
#include "engine/core/interrupt.h"
#include "engine/dist/communicator.h"
#include "engine/ops/conv_geometry.h"
#include "engine/ops/matmul_onednn.h"
#include "engine/passes/rewrite.h"
#include "engine/runtime/profiler.h"

namespace tsr::cpu {

using ir::NodeId;
using ir::OpCode;
using ir::ValueId;
using passes::GroupKind;

namespace {

using Kernel = LoweredKernel;
using Reduce = ReduceSpec;

}  // namespace

int LoweredKernel::argOf(ValueId v) {
  auto it = std::find(args.begin(), args.end(), v);
  if (it != args.end()) return static_cast<int>(it - args.begin());
  args.push_back(v);
  return static_cast<int>(args.size()) - 1;
}

std::string MemoryPlan::findOverlap() const {
  for (size_t i = 0; i < intervals.size(); ++i)
    for (size_t j = i + 1; j < intervals.size(); ++j) {
      const auto& a = intervals[i];
      const auto& b = intervals[j];
      bool bytes = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      bool time = a.def <= b.lastUse && b.def <= a.lastUse;
      if (bytes && time && a.bytes > 0 && b.bytes > 0)
        return fmt::format("values %{} and %{} share bytes [{}, {}) while both live", a.value, b.value,
                           std::max(a.offset, b.offset), std::min(a.offset + a.bytes, b.offset + b.bytes));
    }
  return "";
}

struct Executable::Impl {
  const ir::OpRegistry* reg = nullptr;
  ir::Graph graph;
  CompileOptions options;
  std::vector<Kernel> kernels;
  std::vector<KernelInfo> infos;
  std::vector<ValueSlot> slots;
  std::vector<runtime::BufferPtr> consts;
  MemoryPlan memory;
  int64_t fusionBase = 0;
  // Arenas kept between runs: one per concurrent run (the devices of an SPMD program run one executable at
  // once, each on its own thread).
  std::mutex arenaMutex;
  std::vector<runtime::BufferPtr> freeArenas;
  // Native code for the loop programs (null: interpreted only), asked for on the second run.
  std::shared_ptr<NativeKernelSet> native;
  std::atomic<int> runs{0};

  const ir::Node& node(NodeId n) const { return graph.nodes()[static_cast<size_t>(n)]; }
  // The value whose buffer v lies in (through aliases and views), and where in it (bytes).
  ValueId root(ValueId v) const { return rootAndOffset(v).first; }
  std::pair<ValueId, int64_t> rootAndOffset(ValueId v) const {
    int64_t offset = 0;
    for (const ValueSlot* s = &slots[static_cast<size_t>(v)]; s->loc == Loc::Alias || s->loc == Loc::View;
         s = &slots[static_cast<size_t>(v)]) {
      if (s->loc == Loc::View) offset += s->offset;
      v = s->aliasOf;
    }
    return {v, offset};
  }
  // Elements between v's rows where v is a row view, or a reshape of one; 0: contiguous.
  int64_t rowStride(ValueId v) const {
    for (const ValueSlot* s = &slots[static_cast<size_t>(v)]; s->loc == Loc::Alias || s->loc == Loc::View;
         s = &slots[static_cast<size_t>(s->aliasOf)])
      if (s->loc == Loc::View) return s->rowStride;
    return 0;
  }

  Status lower(const passes::FusionPlan& plan);
  Status buildProgram(Kernel& k, const passes::FusionGroup& gr, const passes::FusionPlan& plan);
  void schedule();
  Status planMemory();
  void runKernel(const Kernel& k, void* const* args);
  void runNodeKernel(const Kernel& k, void* const* args);
  Status planPostOps(Kernel& k, const passes::FusionGroup& gr);
  bool runConvPostOps(const Kernel& k, void* const* args);
  void prepareNative();
  void* nativeFn(const Kernel& k) const {
    return native && k.native >= 0 ? native->get(static_cast<size_t>(k.native)) : nullptr;
  }
};

Executable::Executable() : m(std::make_unique<Impl>()) {}
Executable::~Executable() = default;
const std::vector<KernelInfo>& Executable::kernels() const { return m->infos; }
const MemoryPlan& Executable::memory() const { return m->memory; }
const std::vector<LoweredKernel>& Executable::loweredKernels() const { return m->kernels; }
const std::vector<ValueSlot>& Executable::valueSlots() const { return m->slots; }
const std::vector<runtime::BufferPtr>& Executable::constants() const { return m->consts; }
const ir::Graph& Executable::graph() const { return m->graph; }
int64_t Executable::fusionBase() const { return m->fusionBase; }
int64_t Executable::nativeKernels() const { return m->native ? static_cast<int64_t>(m->native->size()) : 0; }
std::shared_ptr<NativeKernelSet> Executable::nativeSet() const { return m->native; }
int64_t Executable::nativeKernelsReady() const {
  int64_t n = 0;
  for (size_t i = 0; m->native && i < m->native->size(); ++i) n += m->native->get(i) != nullptr;
  return n;
}

// Generates the native form of every loop program (loops, gemm epilogues, [K1, R, K2] reductions); in sync mode
// compiles them now.
void Executable::Impl::prepareNative() {
  NativeMode mode = nativeMode();
  if (!options.native || mode == NativeMode::Off) return;
  std::vector<NativeSource> sources;
  for (Kernel& k : kernels) {
    if (!k.hasProgram || k.oneDnnPostOps) continue;  // a post-op chain's program is only its fallback
    Result<NativeSource> src = generateNative(k);
    if (!src.ok()) continue;  // an op without a native form: this kernel stays on the interpreter
    k.native = static_cast<int>(sources.size());
    sources.push_back(std::move(src).value());
  }
  if (sources.empty()) return;
  native = std::make_shared<NativeKernelSet>(std::move(sources));
  if (mode == NativeMode::Sync) (void)compileNative(*native);  // a failure is reported once; kernels interpret
}

// Builds the tile program of a loop, reduction or gemm group: one slot per input (through its view map) and per
// member result, one instruction per elementwise member, stores for the outputs.
Status Executable::Impl::buildProgram(Kernel& k, const passes::FusionGroup& gr, const passes::FusionPlan& plan) {
  TileProgram& p = k.prog;
  p.dims = gr.shape.dims();
  std::map<ValueId, int> slotOf;
  std::map<std::pair<ValueId, std::vector<int64_t>>, int> inputSlot;
  // A gemm's or convolution's result (k.node) is an input of its epilogue.
  auto inGroup = [&](ValueId v) {
    NodeId pr = graph.value(v).producer;
    return pr != ir::kNone && plan.groupOfNode[static_cast<size_t>(pr)] == gr.id && pr != k.node;
  };
  // A read of operand `raw` (as the member sees it) whose kernel-level source is `eff`.
  auto operandSlot = [&](ValueId raw, ValueId eff) -> Result<int> {
    if (inGroup(eff)) {
      auto it = slotOf.find(eff);
      if (it == slotOf.end()) return makeError("{}: value %{} used before it is computed", gr.name, eff);
      return it->second;
    }
    TileInput in;
    in.dtype = graph.aval(eff).dtype;
    if (raw != eff) {
      auto map = passes::resolveView(graph, raw, true, eff);
      if (!map || map->source != eff) return makeError("{}: cannot read %{} through its views", gr.name, raw);
      in.strides = map->strides;
      in.offset = map->offset;
    } else {
      in.strides = graph.aval(raw).shape.strides();
      for (int d = 0; d < graph.aval(raw).rank(); ++d)
        if (graph.aval(raw).shape[d] == 1) in.strides[static_cast<size_t>(d)] = 0;
    }
    if (in.strides.size() != p.dims.size())
      return makeError("{}: operand %{} has rank {} in a {}-d iteration space", gr.name, raw, in.strides.size(),
                       p.dims.size());
    auto key = std::make_pair(eff, in.strides);
    auto it = inputSlot.find(key);
    if (it != inputSlot.end()) return it->second;
    in.arg = k.argOf(eff);
    p.inputs.push_back(in);
    int s = static_cast<int>(p.inputs.size()) - 1;
    inputSlot[key] = s;
    return s;
  };
  // Instructions get slots after all inputs: collect instructions first, then renumber.
  struct PendingInstr {
    TileInstr instr;
    ValueId result;
    std::vector<int> argRefs;  // >= 0: input slot; < 0: -(instruction index + 1)
  };
  std::vector<PendingInstr> pend;
  std::map<ValueId, int> instrOf;
  auto ref = [&](ValueId raw, ValueId eff) -> Result<int> {
    if (inGroup(eff)) {
      auto it = instrOf.find(eff);
      if (it != instrOf.end()) return -(it->second + 1);
    }
    TSR_ASSIGN(int s, operandSlot(raw, eff));
    return s;
  };
  std::vector<std::pair<NodeId, ValueId>> reduceOperands;  // reductions: node, operand as ref
  std::vector<int> reduceRefs;
  for (NodeId m : gr.nodes) {
    const ir::Node& nd = node(m);
    const auto& eff = plan.effectiveOperands[static_cast<size_t>(m)];
    if (nd.op == OpCode::ReduceSum || nd.op == OpCode::ReduceMax || nd.op == OpCode::ReduceMin) {
      TSR_ASSIGN(int r, ref(nd.operands[0], eff[0]));
      reduceOperands.push_back({m, nd.operands[0]});
      reduceRefs.push_back(r);
      continue;
    }
    if (m == k.node) continue;  // the gemm or convolution itself
    if (passes::isViewNode(graph, nd)) {  // a materialised view: a strided copy
      auto map = passes::resolveView(graph, nd.results[0], true, eff[0]);
      if (!map) return makeError("{}: view %{} cannot be resolved", gr.name, nd.results[0]);
      TSR_ASSIGN(int s, operandSlot(nd.results[0], map->source));
      instrOf[nd.results[0]] = -1;
      slotOf[nd.results[0]] = s;
      // store straight from the input slot
      p.stores.push_back(TileStore{s, k.argOf(nd.results[0]), graph.aval(nd.results[0]).dtype});
      continue;
    }
    PendingInstr pi;
    pi.instr.op = nd.op;
    pi.result = nd.results[0];
    pi.instr.resultIsBool = graph.aval(nd.results[0]).dtype == DType::Bool;
    for (size_t i = 0; i < nd.operands.size(); ++i) {
      TSR_ASSIGN(int r, ref(nd.operands[i], eff[i]));
      pi.argRefs.push_back(r);
    }
    instrOf[nd.results[0]] = static_cast<int>(pend.size());
    pend.push_back(std::move(pi));
  }
  // bf16 results: rounded where computed (exact op-by-op results), or under excess precision only where a
  // comparison reads them (an equality mask must see the values stored elsewhere); the rest stay f32 until a
  // store or a reduction takes them.
  std::vector<bool> compared(pend.size(), false);
  for (const auto& pi : pend)
    if (pi.instr.resultIsBool)
      for (int r : pi.argRefs)
        if (r < 0) compared[static_cast<size_t>(-r - 1)] = true;
  for (size_t i = 0; i < pend.size(); ++i)
    pend[i].instr.roundBf16 = graph.aval(pend[i].result).dtype == DType::BF16 &&
                              (!options.bf16ExcessPrecision || compared[i]);
  const int nin = static_cast<int>(p.inputs.size());
  auto resolve = [&](int r) { return r >= 0 ? r : nin + (-r - 1); };
  for (auto& pi : pend) {
    for (size_t i = 0; i < pi.argRefs.size(); ++i) pi.instr.args[i] = resolve(pi.argRefs[i]);
    p.instrs.push_back(pi.instr);
  }
  for (auto& [v, i] : instrOf)
    if (i >= 0) slotOf[v] = nin + i;
  for (ValueId o : gr.outputs) {
    NodeId pr = graph.value(o).producer;
    OpCode op = node(pr).op;
    if (op == OpCode::ReduceSum || op == OpCode::ReduceMax || op == OpCode::ReduceMin || pr == k.node) continue;
    if (passes::isViewNode(graph, node(pr))) continue;  // stored above
    p.stores.push_back(TileStore{slotOf.at(o), k.argOf(o), graph.aval(o).dtype});
  }
  for (size_t i = 0; i < reduceOperands.size(); ++i) {
    NodeId rn = reduceOperands[i].first;
    k.reduces.push_back(Reduce{resolve(reduceRefs[i]), node(rn).op, k.argOf(node(rn).results[0]),
                               graph.aval(node(rn).results[0]).dtype});
    p.liveOut.push_back(k.reduces.back().slot);
  }
  k.hasProgram = true;
  return {};
}

Status Executable::Impl::lower(const passes::FusionPlan& plan) {
  fusionBase = runtime::Profiler::reserveIds(static_cast<int64_t>(plan.groups.size()));
  slots.assign(static_cast<size_t>(graph.numValues()), ValueSlot{});
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    auto& s = slots[static_cast<size_t>(graph.inputs()[i])];
    s.loc = Loc::Input;
    s.index = static_cast<int>(i);
  }
  RowViewPlan views{std::vector<bool>(plan.groups.size(), false), {}};
  if (options.runsOnCpu && options.rowViews) views = planRowViews(graph, *reg, plan);
  for (const RowView& w : views.views) {
    auto& s = slots[static_cast<size_t>(w.value)];
    s.loc = Loc::View;
    s.aliasOf = w.of;
    s.offset = w.offset * dtypeSize(graph.aval(w.of).dtype);
    s.rowStride = w.rowStride;
  }
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const passes::FusionGroup& gr = plan.groups[gi];
    if (views.elided[gi]) continue;  // its values are views
    const ir::Node& first = node(gr.nodes[0]);
    if (gr.kind == GroupKind::Constant) {
      const ir::OpDef& def = reg->get(first.op);
      TSR_ASSIGN(std::vector<runtime::BufferPtr> out, runtime::runCpuOp(def, {}, {}, first.attrs));
      auto& s = slots[static_cast<size_t>(first.results[0])];
      s.loc = Loc::Const;
      s.index = static_cast<int>(consts.size());
      consts.push_back(out[0]);
      continue;
    }
    if (gr.kind == GroupKind::Alias) {
      auto& s = slots[static_cast<size_t>(first.results[0])];
      s.loc = Loc::Alias;
      s.aliasOf = plan.effectiveOperands[static_cast<size_t>(gr.nodes[0])][0];
      continue;
    }
    Kernel k;
    // Names the profile shows: a lone op as "dot_general f32[64,784],f32[784,1024]" (its operands), a fused
    // kernel as "fusion.12 gemm[dot_general,add,tanh] f32[256,3072]".
    if (gr.nodes.size() == 1 && gr.kind != GroupKind::Loop && gr.kind != GroupKind::Reduction) {
      k.info.name = ir::nodeSignature(graph, first, *reg);
    } else {
      std::string ops;
      for (size_t i = 0; i < gr.nodes.size() && i < 4; ++i) ops += (i ? "," : "") + reg->get(node(gr.nodes[i]).op).name;
      if (gr.nodes.size() > 4) ops += fmt::format(",+{}", gr.nodes.size() - 4);
      k.info.name = fmt::format("{} {}[{}] {}", gr.name, passes::groupKindName(gr.kind), ops,
                                Aval{gr.shape, DType::F32}.toString());
    }
    k.info.kind = gr.kind;
    k.info.nodes = gr.nodes;
    k.info.fusionId = fusionBase + gr.id;
    if (gr.kind == GroupKind::Opaque || gr.kind == GroupKind::Gemm || gr.kind == GroupKind::Conv) {
      NodeId n = gr.nodes[0];
      const OpCode anchor = gr.kind == GroupKind::Conv ? OpCode::ConvGeneralDilated : OpCode::DotGeneral;
      if (gr.kind != GroupKind::Opaque)
        for (NodeId m : gr.nodes)
          if (node(m).op == anchor) n = m;
      k.node = n;
      for (ValueId v : node(n).operands) {
        k.operandArgs.push_back(static_cast<int>(k.args.size()));
        k.args.push_back(v);
      }
      for (ValueId v : node(n).results) {
        k.resultArgs.push_back(static_cast<int>(k.args.size()));
        k.args.push_back(v);
      }
      if (gr.kind == GroupKind::Gemm) {
        const auto& at = std::get<ir::DotGeneralAttrs>(node(n).attrs);
        const Aval &lhs = graph.aval(node(n).operands[0]), &rhs = graph.aval(node(n).operands[1]);
        k.gemmDType = graph.aval(node(n).results[0]).dtype;
        if (lhs.dtype == k.gemmDType && rhs.dtype == k.gemmDType) k.gemm = planGemm(lhs.shape, rhs.shape, at);
      }
      if (gr.kind != GroupKind::Opaque && gr.nodes.size() > 1) TSR_TRY(buildProgram(k, gr, plan));
      if (gr.kind == GroupKind::Gemm && k.gemm && k.gemmDType == DType::BF16 && k.hasProgram && options.runsOnCpu &&
          options.bf16ExcessPrecision && !ops::bf16ProductsOnOneDnn()) {
        for (TileInput& in : k.prog.inputs)
          if (in.arg == k.resultArgs[0]) {
            in.dtype = DType::F32;
            k.f32Epilogue = true;
          }
        const ValueId product = node(n).results[0];
        k.storeProduct = std::find(gr.outputs.begin(), gr.outputs.end(), product) != gr.outputs.end();
      }
      if (gr.kind == GroupKind::Conv && !gr.postOps.empty()) TSR_TRY(planPostOps(k, gr));
    } else {
      TSR_TRY(buildProgram(k, gr, plan));
    }
    if (k.hasProgram) {
      std::vector<bool> flags(k.prog.dims.size(), false);
      if (gr.kind == GroupKind::Reduction)
        for (int64_t a : gr.reduceAxes) flags[static_cast<size_t>(a)] = true;
      k.prog.collapse(&flags);
      if (gr.kind == GroupKind::Reduction) {
        // [k1, r, k2] with at most one dim each, else the generic path (also when nothing is reduced: each
        // element is then its own sum).
        size_t nr = static_cast<size_t>(std::count(flags.begin(), flags.end(), true));
        size_t before = static_cast<size_t>(std::find(flags.begin(), flags.end(), true) - flags.begin());
        size_t after = flags.size() - before - nr;
        if (nr == 1 && before <= 1 && after <= 1) {
          k.k1 = before ? k.prog.dims[0] : 1;
          k.r = k.prog.dims[before];
          k.k2 = after ? k.prog.dims.back() : 1;
        } else {
          k.genericReduce = true;
        }
        k.reducedDims = flags;
      }
    }
    // Cost: the nodes' flops; bytes read and written at the kernel's boundary.
    for (NodeId m : gr.nodes) k.info.flops += ir::nodeCost(graph, node(m), *reg).flops;
    for (ValueId v : k.args) k.info.bytes += static_cast<double>(graph.aval(v).bytes());
    kernels.push_back(std::move(k));
  }
  return {};
}

// Reorders the kernels to keep fewer intermediates alive at once (schedule.h).
void Executable::Impl::schedule() {
  std::vector<ScheduleItem> items(kernels.size());
  std::vector<int64_t> bytes(static_cast<size_t>(graph.numValues()));
  std::vector<bool> pinned(static_cast<size_t>(graph.numValues()), false);
  for (size_t v = 0; v < bytes.size(); ++v) {
    bytes[v] = graph.aval(static_cast<ValueId>(v)).bytes();
    Loc l = slots[v].loc;
    pinned[v] = l == Loc::Input || l == Loc::Const;
  }
  for (ValueId v : graph.outputs()) pinned[static_cast<size_t>(root(v))] = true;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Kernel& k = kernels[i];
    for (NodeId m : k.info.nodes) items[i].ordered = items[i].ordered || !passes::isPureNode(node(m));
    for (ValueId v : k.args) {
      NodeId pr = graph.value(v).producer;
      bool defined = pr != ir::kNone && std::find(k.info.nodes.begin(), k.info.nodes.end(), pr) != k.info.nodes.end();
      if (!defined) {
        items[i].reads.push_back(root(v));
      } else if (std::find(items[i].writes.begin(), items[i].writes.end(), root(v)) == items[i].writes.end()) {
        items[i].writes.push_back(root(v));  // once: row views write several results into one buffer
      }
    }
  }
  std::vector<int> order = scheduleForMemory(items, bytes, pinned);
  std::vector<Kernel> sorted;
  sorted.reserve(kernels.size());
  for (int i : order) sorted.push_back(std::move(kernels[static_cast<size_t>(i)]));
  kernels = std::move(sorted);
}

Status Executable::Impl::planMemory() {
  const int nk = static_cast<int>(kernels.size());
  std::vector<bool> escapes(static_cast<size_t>(graph.numValues()), false);
  for (ValueId v : graph.outputs()) escapes[static_cast<size_t>(root(v))] = true;
  // Definitions and uses by kernel index. An alias's uses are its root's.
  for (int ki = 0; ki < nk; ++ki) {
    const Kernel& k = kernels[static_cast<size_t>(ki)];
    for (ValueId v : k.args) {
      ValueId rv = root(v);
      auto& s = slots[static_cast<size_t>(rv)];
      NodeId pr = graph.value(v).producer;
      bool defined = pr != ir::kNone && std::find(k.info.nodes.begin(), k.info.nodes.end(), pr) != k.info.nodes.end();
      // A kernel defines the values it computes and the buffers its row views write into (row_views.h).
      if (defined && (v == rv || slots[static_cast<size_t>(v)].loc == Loc::View))
        s.def = s.def < 0 ? ki : std::min(s.def, ki);
      s.lastUse = std::max(s.lastUse, ki);
    }
  }
  for (ValueId v : graph.outputs()) slots[static_cast<size_t>(root(v))].lastUse = nk;
  for (size_t v = 0; v < slots.size(); ++v) {
    auto& s = slots[v];
    if (s.loc != Loc::None || s.def < 0) continue;
    s.loc = escapes[v] ? Loc::Fresh : Loc::Arena;
  }
  // Donation: an output may take a donatable input's buffer when the input is dead by the time the output is
  // written. Where both meet in one loop kernel, the input must be read element for element (same index) and
  // is copied into the tile before the kernel writes over it.
  std::vector<bool> taken(graph.inputs().size(), false);
  std::vector<bool> isOutput(static_cast<size_t>(graph.numValues()), false);
  for (ValueId v : graph.outputs()) isOutput[static_cast<size_t>(root(v))] = true;
  for (ValueId out : graph.outputs()) {
    ValueId o = root(out);
    auto& so = slots[static_cast<size_t>(o)];
    if (so.loc != Loc::Fresh || so.donor >= 0) continue;
    Kernel& k = kernels[static_cast<size_t>(so.def)];
    for (int pass = 0; pass < 2 && so.donor < 0; ++pass) {
      for (size_t i = 0; i < graph.inputs().size(); ++i) {
        if (taken[i] || i >= options.donatable.size() || !options.donatable[i]) continue;
        ValueId in = graph.inputs()[i];
        if (isOutput[static_cast<size_t>(in)] || graph.aval(in).bytes() != graph.aval(o).bytes()) continue;
        const auto& si = slots[static_cast<size_t>(in)];
        bool readHere = std::find(k.args.begin(), k.args.end(), in) != k.args.end();
        if (pass == 0 && !readHere) continue;  // first choice: the input the kernel updates
        if (si.lastUse > so.def) continue;
        if (si.lastUse == so.def) {
          // Same kernel: only a loop, or a gemm's epilogue (not the product itself), reading the input element
          // for element.
          if (!k.hasProgram || (k.info.kind != GroupKind::Loop && k.info.kind != GroupKind::Gemm)) continue;
          bool readByProduct = false;
          for (int a : k.operandArgs) readByProduct |= k.args[static_cast<size_t>(a)] == in;
          if (readByProduct) continue;
          bool identity = true;
          for (auto& tin : k.prog.inputs) {
            if (k.args[static_cast<size_t>(tin.arg)] != in) continue;
            int64_t expect = 1;
            for (size_t d = tin.strides.size(); d-- > 0;) {
              identity &= tin.strides[d] == expect || k.prog.dims[d] == 1;
              expect *= k.prog.dims[d];
            }
            identity &= tin.offset == 0;
          }
          if (!identity) continue;
          for (auto& tin : k.prog.inputs)
            if (k.args[static_cast<size_t>(tin.arg)] == in) tin.copy = true;
        }
        so.donor = static_cast<int>(i);
        taken[i] = true;
        ++memory.donationPairs;
        break;
      }
    }
  }
  // Arena offsets from the arena values' lifetimes (arena_placement.h); each value dies at its last use.
  std::vector<ValueId> placed;
  std::vector<ArenaValue> values;
  auto alignUp = [](int64_t b) { return (b + 63) / 64 * 64; };
  for (size_t v = 0; v < slots.size(); ++v) {
    const auto& s = slots[v];
    if (s.loc != Loc::Arena) continue;
    const int last = std::max(s.def, s.lastUse);
    kernels[static_cast<size_t>(last)].dying.push_back(static_cast<ValueId>(v));
    placed.push_back(static_cast<ValueId>(v));
    values.push_back({alignUp(std::max<int64_t>(graph.aval(static_cast<ValueId>(v)).bytes(), 1)), s.def, last});
  }
  ArenaPlacement arena = placeArena(values, nk);
  // The intervals in the order their values are defined.
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a].def < values[b].def; });
  for (size_t l : order) {
    const ValueId v = placed[l];
    slots[static_cast<size_t>(v)].offset = arena.offsets[l];
    const int64_t bytes = graph.aval(v).bytes();
    memory.intermediateBytes += bytes;
    ++memory.numIntermediates;
    memory.intervals.push_back({v, arena.offsets[l], bytes, values[l].def, values[l].last});
  }
  memory.arenaBytes = arena.bytes;
  return {};
}

Result<std::unique_ptr<Executable>> Executable::compile(const ir::Graph& g, const ir::OpRegistry& reg,
                                                        const passes::FusionPlan& plan, const CompileOptions& options) {
  std::unique_ptr<Executable> e(new Executable());
  Impl& m = *e->m;
  m.reg = &reg;
  m.graph = g;
  m.options = options;
  if (plan.groupOfNode.size() != g.nodes().size()) return makeError("{}: the fusion plan is for another graph", options.name);
  TSR_TRY(m.lower(plan));
  if (options.schedule) {
    // Plan memory both ways and keep the order with the smaller arena (the greedy schedule usually wins on
    // inference graphs; a training step's peak is set by the activations the backward pass needs, and there the
    // traced order can pack tighter).
    std::vector<Kernel> programOrder = m.kernels;
    std::vector<ValueSlot> slots = m.slots;
    m.schedule();
    TSR_TRY(m.planMemory());
    int64_t scheduledBytes = m.memory.arenaBytes;
    std::vector<Kernel> scheduled = std::move(m.kernels);
    std::vector<ValueSlot> scheduledSlots = std::move(m.slots);
    MemoryPlan scheduledPlan = std::move(m.memory);
    m.kernels = std::move(programOrder);
    m.slots = std::move(slots);
    m.memory = MemoryPlan{};
    TSR_TRY(m.planMemory());
    int64_t traced = m.memory.arenaBytes;
    if (scheduledBytes < traced) {
      m.kernels = std::move(scheduled);
      m.slots = std::move(scheduledSlots);
      m.memory = std::move(scheduledPlan);
      m.memory.scheduled = true;
    }
    m.memory.tracedOrderArenaBytes = traced;
  } else {
    TSR_TRY(m.planMemory());
    m.memory.tracedOrderArenaBytes = m.memory.arenaBytes;
  }
  for (const auto& k : m.kernels) m.infos.push_back(k.info);
  m.prepareNative();
  coordinateBlasThreads();
  return e;
}

// The plan's post-ops and oneDNN's are listed in the same order.
static_assert(static_cast<int>(passes::PostOpKind::GeluErf) == static_cast<int>(ops::ConvPostOp::Kind::GeluErf) &&
              static_cast<int>(passes::PostOpKind::Min) == static_cast<int>(ops::ConvPostOp::Kind::Min) &&
              static_cast<int>(passes::PostOpOperand::Full) == static_cast<int>(ops::ConvPostOp::Operand::Full));

// A conv group's epilogue as a post-op chain, where the plan gives the chain for every member; oneDNN runs it
// with the convolution where it takes the chain for this problem (asked now, which also builds the primitive),
// otherwise the convolution and its epilogue run apart.
Status Executable::Impl::planPostOps(Kernel& k, const passes::FusionGroup& gr) {
  const ir::Node& conv = node(k.node);
  std::vector<NodeId> covered{k.node};
  for (const passes::PostOp& op : gr.postOps) covered.insert(covered.end(), op.nodes.begin(), op.nodes.end());
  std::sort(covered.begin(), covered.end());
  const ValueId last = gr.postOps.back().result;
  if (covered != gr.nodes || gr.outputs != std::vector<ValueId>{last}) return {};
  std::vector<Kernel::PostOpArg> chain;
  std::vector<ops::ConvPostOp> ops;
  for (const passes::PostOp& op : gr.postOps) {
    Kernel::PostOpArg pa;
    pa.op.kind = static_cast<ops::ConvPostOp::Kind>(op.kind);
    pa.op.operand = static_cast<ops::ConvPostOp::Operand>(op.operand);
    if (op.operand != passes::PostOpOperand::None) pa.arg = k.argOf(op.value);
    chain.push_back(pa);
    ops.push_back(pa.op);
  }
  const Shape& lhs = graph.aval(conv.operands[0]).shape;
  const Shape& rhs = graph.aval(conv.operands[1]).shape;
  const Shape& out = graph.aval(conv.results[0]).shape;
  const auto& at = std::get<ir::ConvAttrs>(conv.attrs);
  k.postOps = std::move(chain);
  k.postOut = k.argOf(last);
  k.oneDnnPostOps = options.oneDnn && ops::oneDnnTakesPostOps(lhs, rhs, out, at, ops::convGeometry(lhs, rhs, at), ops);
  return {};
}

bool Executable::Impl::runConvPostOps(const Kernel& k, void* const* args) {
  const ir::Node& conv = node(k.node);
  std::vector<ops::ConvPostOp> chain;
  for (const Kernel::PostOpArg& pa : k.postOps) {
    ops::ConvPostOp op = pa.op;
    if (pa.arg >= 0) op.data = static_cast<const float*>(args[pa.arg]);
    chain.push_back(op);
  }
  const Shape& lhs = graph.aval(conv.operands[0]).shape;
  const Shape& rhs = graph.aval(conv.operands[1]).shape;
  const Shape& out = graph.aval(conv.results[0]).shape;
  const auto& at = std::get<ir::ConvAttrs>(conv.attrs);
  return ops::oneDnnConvolution(static_cast<const float*>(args[k.operandArgs[0]]), lhs,
                                static_cast<const float*>(args[k.operandArgs[1]]), rhs,
                                static_cast<float*>(args[k.postOut]), out, at, ops::convGeometry(lhs, rhs, at), chain);
}

void Executable::Impl::runNodeKernel(const Kernel& k, void* const* args) {
  const ir::Node& nd = node(k.node);
  const ir::OpDef& def = reg->get(nd.op);
  std::vector<ir::TensorView> in;
  std::vector<ir::MutableTensorView> out;
  for (size_t i = 0; i < nd.operands.size(); ++i)
    in.push_back(ir::TensorView{args[k.operandArgs[i]], graph.aval(nd.operands[i]), rowStride(nd.operands[i])});
  for (size_t i = 0; i < nd.results.size(); ++i) {
    const Aval& a = graph.aval(nd.results[i]);
    void* p = args[k.resultArgs[i]];
    // Kernels may rely on zeroed results unless their op says it writes them whole (OpDef::cpuWritesWholeResult:
    // an embedding gradient is 150 MB, a ResNet activation 16 MB, and a step has dozens). Row views are only
    // planned for ops that do.
    if (!def.cpuWritesWholeResult) std::memset(p, 0, static_cast<size_t>(a.bytes()));
    out.push_back(ir::MutableTensorView{p, a, rowStride(nd.results[i])});
  }
  ir::CpuKernelArgs kernelArgs{in, out, nd.attrs};
  kernelArgs.parallelFor = [](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn) {
    ThreadPool::instance().parallelFor(n, grain, fn);
  };
  kernelArgs.threads = ThreadPool::instance().numThreads();
  def.cpu(kernelArgs);
}

void Executable::Impl::runKernel(const Kernel& k, void* const* args) {
  switch (k.info.kind) {
    case GroupKind::Loop: runLoop(k.prog, args, reinterpret_cast<NativeLoopFn>(nativeFn(k))); return;
    case GroupKind::Reduction: runReduction(k, args, reinterpret_cast<NativeReduceFn>(nativeFn(k))); return;
    case GroupKind::Conv:
      if (k.oneDnnPostOps && runConvPostOps(k, args)) return;
      runNodeKernel(k, args);
      if (k.hasProgram) runLoop(k.prog, args, reinterpret_cast<NativeLoopFn>(nativeFn(k)));
      return;
    case GroupKind::Gemm:
      // OpenBLAS's SGEMM for f32; a bf16 product (autocast) on SGEMM too, widened, where the CPU's bf16 products
      // are no faster (ops::bf16ProductsOnOneDnn), else through its op's kernel (oneDNN).
      if (k.gemm && k.gemmDType == DType::F32) {
        runGemm(*k.gemm, static_cast<const float*>(args[k.operandArgs[0]]),
                static_cast<const float*>(args[k.operandArgs[1]]), static_cast<float*>(args[k.resultArgs[0]]));
      } else if (k.f32Epilogue || (k.gemm && k.gemmDType == DType::BF16 && !ops::bf16ProductsOnOneDnn())) {
        // Under excess precision (f32Epilogue) the epilogue runs inside, on the f32 products.
        std::function<void(const float*)> epilogue;
        if (k.f32Epilogue)
          epilogue = [&](const float* wide) {
            std::vector<void*> withWide(args, args + k.args.size());
            withWide[static_cast<size_t>(k.resultArgs[0])] = const_cast<float*>(wide);
            runLoop(k.prog, withWide.data(), reinterpret_cast<NativeLoopFn>(nativeFn(k)));
          };
        runGemmWidened(*k.gemm, static_cast<const bf16*>(args[k.operandArgs[0]]),
                       static_cast<const bf16*>(args[k.operandArgs[1]]),
                       k.storeProduct ? static_cast<bf16*>(args[k.resultArgs[0]]) : nullptr, epilogue);
        if (k.f32Epilogue) return;
      } else {
        runNodeKernel(k, args);
      }
      if (k.hasProgram) runLoop(k.prog, args, reinterpret_cast<NativeLoopFn>(nativeFn(k)));
      return;
    default: runNodeKernel(k, args); return;
  }
}

Result<std::vector<runtime::BufferPtr>> Executable::run(std::span<const runtime::BufferPtr> inputs,
                                                        const std::vector<bool>& donated) {
  Impl& im = *m;
  const ir::Graph& g = im.graph;
  if (inputs.size() != g.inputs().size())
    return makeError("{}: expects {} inputs, got {}", im.options.name, g.inputs().size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Aval& a = g.aval(g.inputs()[i]);
    if (!inputs[i] || inputs[i]->size() < a.bytes())
      return makeError("{}: input {} must hold {} ({} bytes)", im.options.name, i, a.toString(), a.bytes());
  }
  // Hot (run a second time): its loops go to the background compiler, and switch to native code when it lands.
  if (im.native && im.runs.fetch_add(1) == 1 && nativeMode() == NativeMode::Async) requestNative(im.native);
  // The arena: a free one from an earlier run, else a new one; back to the free list when this run ends.
  runtime::BufferPtr arena;
  {
    std::lock_guard lock(im.arenaMutex);
    if (!im.freeArenas.empty()) {
      arena = std::move(im.freeArenas.back());
      im.freeArenas.pop_back();
    }
  }
  if (!arena) {
    TSR_ASSIGN(arena, runtime::Buffer::allocateUninitialized(std::max<int64_t>(im.memory.arenaBytes, 64)));
  }
  struct ArenaReturn {
    Impl& im;
    runtime::BufferPtr& arena;
    ~ArenaReturn() {
      std::lock_guard lock(im.arenaMutex);
      im.freeArenas.push_back(std::move(arena));
    }
  } arenaReturn{im, arena};
  dist::DeviceContext* device = dist::currentDevice();
  const std::string deviceName = device ? fmt::format("cpu:{}", device->position) : "cpu:0";
  std::vector<void*> ptr(static_cast<size_t>(g.numValues()), nullptr);
  std::vector<runtime::BufferPtr> owned(static_cast<size_t>(g.numValues()));
  for (size_t v = 0; v < im.slots.size(); ++v) {
    const ValueSlot& s = im.slots[v];
    switch (s.loc) {
      case Loc::Input:
        ptr[v] = inputs[static_cast<size_t>(s.index)]->data();
        owned[v] = inputs[static_cast<size_t>(s.index)];
        break;
      case Loc::Const:
        ptr[v] = im.consts[static_cast<size_t>(s.index)]->data();
        owned[v] = im.consts[static_cast<size_t>(s.index)];
        break;
      case Loc::Arena: ptr[v] = static_cast<char*>(arena->data()) + s.offset; break;
      case Loc::Fresh: {
        if (s.donor >= 0 && static_cast<size_t>(s.donor) < donated.size() && donated[static_cast<size_t>(s.donor)]) {
          owned[v] = inputs[static_cast<size_t>(s.donor)];
        } else {
          TSR_ASSIGN(owned[v], runtime::Buffer::allocateUninitialized(g.aval(static_cast<ValueId>(v)).bytes()));
        }
        ptr[v] = owned[v]->data();
        break;
      }
      default: break;
    }
  }
  for (size_t v = 0; v < im.slots.size(); ++v)
    if (im.slots[v].loc == Loc::Alias || im.slots[v].loc == Loc::View) {
      const auto [r, offset] = im.rootAndOffset(static_cast<ValueId>(v));
      ptr[v] = static_cast<char*>(ptr[static_cast<size_t>(r)]) + offset;
      owned[v] = owned[static_cast<size_t>(r)];
    }

  runtime::Profiler* prof = runtime::Profiler::active();
  if (prof && !prof->hasFusion(im.fusionBase)) {
    std::vector<runtime::FusionInfo> table;
    for (const auto& k : im.kernels) {
      runtime::FusionInfo f;
      f.id = k.info.fusionId;
      f.executable = im.options.name;
      f.name = k.info.name;
      f.kind = passes::groupKindName(k.info.kind);
      for (NodeId n : k.info.nodes) {
        f.nodes.push_back(n);
        f.ops.push_back(im.reg->get(im.node(n).op).name);
      }
      f.modulePath = im.node(k.info.nodes[0]).prov.modulePath;
      for (NodeId n : k.info.nodes)
        if (im.node(n).prov.modulePath != f.modulePath) f.modulePath.clear();
      table.push_back(std::move(f));
    }
    prof->registerFusions(table);
  }
  FlushDenormals ftz;
  std::vector<void*> args;
  for (const Kernel& k : im.kernels) {
    if (interruptRequested()) return makeError("{}: {}", im.options.name, kInterruptedMessage);
    args.clear();
    for (ValueId v : k.args) args.push_back(ptr[static_cast<size_t>(v)]);
    int64_t t0 = prof ? runtime::Profiler::nowNs() : 0;
    try {
      im.runKernel(k, args.data());
    } catch (const std::exception& e) {
      return makeError("{}: {}: {}", im.options.name, k.info.name, e.what());
    }
    // A collective that failed (another device gave up, a bad group) stops this device here.
    if (device && !device->error.empty()) return makeError("{}: {}: {}", im.options.name, k.info.name, device->error);
    if (prof) {
      runtime::ProfileEvent ev;
      ev.device = deviceName;
      ev.name = k.info.name;
      ev.fusion = k.info.fusionId;
      ev.startNs = t0;
      ev.durationNs = runtime::Profiler::nowNs() - t0;
      ev.flops = k.info.flops;
      ev.bytes = k.info.bytes;
      if (device && !device->collectiveGroup.empty()) {
        ev.collective = prof->nextCollective(deviceName);
        ev.group = std::move(device->collectiveGroup);
      }
      prof->record(std::move(ev));
    }
    if (device) device->collectiveGroup.clear();
    if (im.options.poisonFreed)
      for (ValueId v : k.dying)
        std::memset(ptr[static_cast<size_t>(v)], 0xff, static_cast<size_t>(g.aval(v).bytes()));
  }
  std::vector<runtime::BufferPtr> out;
  for (ValueId v : g.outputs()) out.push_back(owned[static_cast<size_t>(v)]);
  return out;
}

int64_t Executable::arenaBytes() const { return memory().arenaBytes; }

std::string Executable::summary() const {
  return fmt::format(", {} kernels, {:.1f} MiB arena", kernels().size(), memory().arenaBytes / 1048576.0);
}

std::string Executable::describe() const {
  const Impl& im = *m;
  std::string s = fmt::format("{}: {} kernels, arena {:.1f} MiB for {} intermediates ({:.1f} MiB without reuse), "
                              "{} outputs written into donated inputs\n",
                              im.options.name, im.kernels.size(), im.memory.arenaBytes / 1048576.0,
                              im.memory.numIntermediates, im.memory.intermediateBytes / 1048576.0,
                              im.memory.donationPairs);
  auto where = [&](ValueId v) {
    const auto [r, offset] = im.rootAndOffset(v);
    const ValueSlot& sl = im.slots[static_cast<size_t>(r)];
    // A row view: where its buffer is, "+bytes", and its rows' stride in elements.
    const std::string view = im.rowStride(v) ? fmt::format("+{}/rows{}", offset, im.rowStride(v)) : "";
    switch (sl.loc) {
      case Loc::Input: return fmt::format("in{}{}", sl.index, view);
      case Loc::Const: return fmt::format("const{}{}", sl.index, view);
      case Loc::Arena: return fmt::format("arena+{}{}", sl.offset, view);
      case Loc::Fresh: return (sl.donor >= 0 ? fmt::format("out(donor in{})", sl.donor) : std::string("out")) + view;
      default: return std::string("?");
    }
  };
  for (size_t i = 0; i < im.kernels.size(); ++i) {
    const Kernel& k = im.kernels[i];
    s += fmt::format("{:4} {:<22} {:<9} nodes {:<3} args", i, k.info.name, passes::groupKindName(k.info.kind),
                     k.info.nodes.size());
    for (ValueId v : k.args) s += fmt::format(" %{}@{}", v, where(v));
    s += "\n";
    if (k.hasProgram) {
      // The tile program: arguments are the positions in the list above.
      std::string prog = k.prog.toString();
      for (size_t pos = 0; pos != std::string::npos;) {
        size_t nl = prog.find('\n', pos);
        s += "       " + prog.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos) + "\n";
        pos = nl == std::string::npos ? nl : nl + 1;
      }
    }
  }
  return s;
}

}  // namespace tsr::cpu
