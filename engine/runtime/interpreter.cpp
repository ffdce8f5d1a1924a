#include "engine/runtime/interpreter.h"

#include <fmt/format.h>

#include "engine/runtime/debug_nans.h"

namespace tsr::runtime {

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

  std::vector<runtime::BufferPtr> args;
  std::vector<Aval> avals;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const ir::Node& node = nodes[n];
    const ir::OpDef* def = reg.find(node.op);
    if (!def || !def->cpu) return makeError("node {}: op has no CPU kernel", n);
    args.clear();
    avals.clear();
    for (ir::ValueId v : node.operands) {
      args.push_back(vals[static_cast<size_t>(v)]);
      avals.push_back(g.aval(v));
    }
    auto outs = runtime::runCpuOp(*def, args, avals, node.attrs);
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
