#include "engine/runtime/interpreter.h"

#include <fmt/format.h>

#include "engine/core/interrupt.h"
#include "engine/runtime/debug_nans.h"
#include "engine/runtime/profiler.h"

namespace tsr::runtime {

namespace {

// Interpretations in progress on this thread: the bodies a scan or cond kernel runs are not recorded apart
// from the scan node itself, whose cost already counts them.
thread_local int t_depth = 0;

struct DepthGuard {
  DepthGuard() { ++t_depth; }
  ~DepthGuard() { --t_depth; }
};

// What kind of kernel a node is when it runs alone.
const char* kernelKind(const ir::OpDef& def) {
  if (def.code == ir::OpCode::DotGeneral) return "gemm";
  switch (def.fusion) {
    case ir::FusionKind::Elementwise: return "loop";
    case ir::FusionKind::Reduction: return "reduction";
    case ir::FusionKind::Layout: return "copy";
    case ir::FusionKind::Opaque: return "opaque";
  }
  return "opaque";
}

// Identifies a graph within a profile: its address, and its contents in case the address was reused.
uint64_t graphKey(const ir::Graph& g) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(reinterpret_cast<uintptr_t>(&g));
  for (char c : g.name) mix(static_cast<unsigned char>(c));
  mix(static_cast<uint64_t>(g.numValues()));
  for (const ir::Node& n : g.nodes()) {
    mix(static_cast<uint64_t>(n.op));
    for (ir::ValueId v : n.results) mix(static_cast<uint64_t>(v));
  }
  return h;
}

// One kernel per node: "dot_general f32[64,784],f32[784,1024]", with the work its cost rule gives.
KernelTable nodeKernels(const ir::Graph& g, const ir::OpRegistry& reg) {
  KernelTable t;
  const auto& nodes = g.nodes();
  t.base = Profiler::reserveIds(static_cast<int64_t>(nodes.size()));
  for (size_t n = 0; n < nodes.size(); ++n) {
    const ir::Node& node = nodes[n];
    const ir::OpDef* def = reg.find(node.op);
    FusionInfo k;
    k.id = t.base + static_cast<int64_t>(n);
    k.executable = g.name;
    k.name = ir::nodeSignature(g, node, reg);
    k.kind = def ? kernelKind(*def) : "opaque";
    k.nodes = {static_cast<int>(n)};
    k.ops = {def ? def->name : "?"};
    k.modulePath = node.prov.modulePath;
    ir::Cost c = ir::nodeCost(g, node, reg);
    t.kernels.push_back(std::move(k));
    t.flops.push_back(c.flops);
    t.bytes.push_back(static_cast<double>(c.bytesRead + c.bytesWritten));
  }
  return t;
}

}  // namespace

Result<std::vector<runtime::BufferPtr>> interpret(const ir::Graph& g, const ir::OpRegistry& reg,
                                                  std::span<const runtime::BufferPtr> inputs,
                                                  const InterpretOptions& options) {
  if (inputs.size() != g.inputs().size())
    return makeError("{}: expects {} inputs, got {}", g.name, g.inputs().size(), inputs.size());
  std::vector<runtime::BufferPtr> vals(static_cast<size_t>(g.numValues()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Aval& a = g.aval(g.inputs()[i]);
    if (!inputs[i] || inputs[i]->size() < a.bytes())
      return makeError("{}: input {} must hold {} ({} bytes)", g.name, i, a.toString(), a.bytes());
    vals[static_cast<size_t>(g.inputs()[i])] = inputs[i];
  }

  // Last node that reads each value; graph outputs live to the end.
  std::vector<int> lastUse(static_cast<size_t>(g.numValues()), -1);
  const auto& nodes = g.nodes();
  for (size_t n = 0; n < nodes.size(); ++n)
    for (ir::ValueId v : nodes[n].operands) lastUse[static_cast<size_t>(v)] = static_cast<int>(n);
  for (ir::ValueId v : g.outputs()) lastUse[static_cast<size_t>(v)] = static_cast<int>(nodes.size());

  // One atomic load when nobody profiles; nested interpretations (scan bodies) are never recorded.
  Profiler* profiler = t_depth == 0 ? Profiler::active() : nullptr;
  std::shared_ptr<const KernelTable> table;
  if (profiler) table = profiler->kernelTable(graphKey(g), [&] { return nodeKernels(g, reg); });
  DepthGuard depth;

  std::vector<runtime::BufferPtr> args;
  std::vector<Aval> avals;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const ir::Node& node = nodes[n];
    // Ctrl-C in Python: stop between nodes (a loop's body runs here once per iteration).
    if (interruptRequested()) return makeError("node {}: {}", n, kInterruptedMessage);
    const ir::OpDef* def = reg.find(node.op);
    if (!def || !def->cpu) return makeError("node {}: op has no CPU kernel", n);
    args.clear();
    avals.clear();
    for (ir::ValueId v : node.operands) {
      args.push_back(vals[static_cast<size_t>(v)]);
      avals.push_back(g.aval(v));
    }
    int64_t start = profiler ? Profiler::nowNs() : 0;
    auto outs = runtime::runCpuOp(*def, args, avals, node.attrs);
    if (profiler) {
      const FusionInfo& k = table->kernels[n];
      profiler->record(ProfileEvent{"cpu:0", 0, k.name, k.id, start, Profiler::nowNs() - start, table->flops[n],
                                    table->bytes[n], -1, {}});
    }
    if (!outs.ok()) return Error{fmt::format("node {} ({}): {}", n, def->name, outs.error().message)};
    for (size_t r = 0; r < node.results.size(); ++r) {
      vals[static_cast<size_t>(node.results[r])] = (*outs)[r];
      if (!options.checkNonFinite) continue;
      if (auto bad = findNonFinite(*(*outs)[r], g.aval(node.results[r]))) {
        std::string operands;
        for (size_t i = 0; i < avals.size(); ++i) operands += (i ? ", " : "") + avals[i].toString();
        return makeError("{} ({}) produced {} in result {} ({}) at node {}{}", def->name, operands, *bad, r,
                         g.aval(node.results[r]).toString(), n,
                         node.prov.empty() ? "" : " (at " + node.prov.toString() + ")");
      }
    }
    for (ir::ValueId v : node.operands)
      if (lastUse[static_cast<size_t>(v)] == static_cast<int>(n)) vals[static_cast<size_t>(v)].reset();
  }
  std::vector<runtime::BufferPtr> out;
  for (ir::ValueId v : g.outputs()) out.push_back(vals[static_cast<size_t>(v)]);
  return out;
}

}  // namespace tsr::runtime
