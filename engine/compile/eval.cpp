#include "engine/compile/eval.h"

#include "engine/runtime/interpreter.h"
#include "engine/ops/registry.h"

namespace tsr {

Result<std::vector<Array>> evalGraph(const ClosedGraph& cg, const std::vector<Array>& args,
                                     const runtime::InterpretOptions& options) {
  const auto& g = cg.graph;
  if (static_cast<int>(args.size()) != cg.numArgs())
    return makeError("{}: expects {} arguments, got {}", g.name, cg.numArgs(), args.size());
  std::vector<runtime::BufferPtr> bufs;
  auto addArg = [&](const Array& a, size_t i) -> Status {
    const Aval& want = g.aval(g.inputs()[i]);
    if (!a.isConcrete()) return makeError("{}: input {} is not a concrete array", g.name, i);
    if (!(a.aval() == want))
      return makeError("{}: input {} must be {}, got {}", g.name, i, want.toString(), a.aval().toString());
    bufs.push_back(a.isSharded() ? a.gathered().buffer() : a.buffer());
    return {};
  };
  for (size_t i = 0; i < args.size(); ++i) TSR_TRY(addArg(args[i], i));
  for (size_t i = 0; i < cg.consts.size(); ++i) TSR_TRY(addArg(cg.consts[i], args.size() + i));
  TSR_ASSIGN(std::vector<runtime::BufferPtr> outs, runtime::interpret(g, ops::registry(), bufs, options));
  std::vector<Array> result;
  for (size_t i = 0; i < outs.size(); ++i) result.push_back(Array::fromBuffer(outs[i], g.aval(g.outputs()[i])));
  return result;
}

}  // namespace tsr
