#include "engine/transform/custom_vjp.h"

#include <memory>

#include <fmt/format.h>

#include "engine/ops/nested_graphs.h"
#include "engine/transform/control_flow.h"
#include "engine/transform/trace.h"

namespace tsr {

namespace {

std::vector<Aval> outputAvals(const ir::Graph& g) {
  std::vector<Aval> out;
  for (ir::ValueId v : g.outputs()) out.push_back(g.aval(v));
  return out;
}

ClosedGraph traceOrRaise(const ArrayFn& f, const std::vector<Aval>& avals, const char* name,
                         const std::source_location& loc) {
  auto traced = makeGraph(f, avals, name);
  if (!traced.ok()) raiseAt(loc, Error{fmt::format("in {} of custom_vjp: {}", name, traced.error().message)});
  return std::move(traced).value();
}


std::string leafName(const std::string& path) { return path.empty() ? "the primal" : "primal '" + path + "'"; }

}  // namespace

std::vector<Array> customVjpCall(const ArrayFn& f, const ArrayFn& fwd, const ArrayFn& bwd,
                                 const std::vector<Array>& operands, size_t numPrimals, std::source_location loc) {
  std::vector<Aval> avals;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i].valid()) raiseAt(loc, makeError("custom_vjp: operand {} is an empty Array", i));
    avals.push_back(operands[i].aval());
  }
  ClosedGraph p = traceOrRaise(f, avals, "primal", loc);
  ClosedGraph w = traceOrRaise(fwd, avals, "fwd", loc);
  std::vector<Aval> outs = outputAvals(p.graph), fwdOuts = outputAvals(w.graph);
  if (fwdOuts.size() < outs.size())
    raiseAt(loc, makeError("custom_vjp: fwd returns {} values but the function has {} outputs", fwdOuts.size(),
                           outs.size()));
  for (size_t i = 0; i < outs.size(); ++i)
    if (!(fwdOuts[i] == outs[i]))
      raiseAt(loc, makeError("custom_vjp: fwd returns output {} as {} but the function returns {}", i,
                             fwdOuts[i].toString(), outs[i].toString()));
  // bwd is traced on the operands, the residuals fwd returns and one cotangent per output.
  std::vector<Aval> bwdAvals = avals;
  bwdAvals.insert(bwdAvals.end(), fwdOuts.begin() + static_cast<std::ptrdiff_t>(outs.size()), fwdOuts.end());
  bwdAvals.insert(bwdAvals.end(), outs.begin(), outs.end());
  ClosedGraph b = traceOrRaise(bwd, bwdAvals, "bwd", loc);
  std::vector<Aval> cts = outputAvals(b.graph);
  if (cts.size() != numPrimals)
    raiseAt(loc, makeError("custom_vjp: bwd returns {} cotangents for {} primals", cts.size(), numPrimals));
  for (size_t i = 0; i < numPrimals; ++i)
    if (!(cts[i] == avals[i]))
      raiseAt(loc, makeError("custom_vjp: bwd returns a cotangent {} for primal {}, which is {}", cts[i].toString(), i,
                             avals[i].toString()));

  SharedCaptures shared = shareCaptures({&p, &w, &b}, operands.size());
  ir::CustomVjpAttrs attrs;
  attrs.numPrimals = static_cast<int64_t>(numPrimals);
  attrs.primal = shared.graphs[0];
  attrs.fwd = shared.graphs[1];
  attrs.bwd = shared.graphs[2];
  std::vector<Array> all = operands;
  all.insert(all.end(), shared.consts.begin(), shared.consts.end());
  return bind(ir::OpCode::CustomVjpCall, all, std::move(attrs), loc);
}

std::function<Tree(const Tree&)> customVjp(CustomFn f, CustomFwd fwd, CustomBwd bwd, std::source_location loc) {
  // fwd commonly calls the function itself for its output (as in JAX's examples). All three are traced when the
  // function is called, so such a call, made while fwd or bwd is being traced, runs f plainly instead of tracing
  // fwd again without end.
  auto inRule = std::make_shared<int>(0);
  return [f = std::move(f), fwd = std::move(fwd), bwd = std::move(bwd), loc, inRule](const Tree& primals) {
    if (*inRule > 0) return f(primals);
    struct InRule {
      int& depth;
      explicit InRule(int& d) : depth(d) { ++depth; }
      ~InRule() { --depth; }
    };
    std::vector<Array> leaves = primals.leaves();
    TreeDef inDef = primals.def(), outDef, resDef;
    std::vector<std::string> paths = primals.paths();
    size_t n = leaves.size(), nRes = 0;
    ArrayFn flatF = [&](const std::vector<Array>& in) {
      Tree out = f(unflattenOrRaise(inDef, in));
      outDef = out.def();
      return out.leaves();
    };
    ArrayFn flatFwd = [&](const std::vector<Array>& in) {
      InRule guard(*inRule);
      auto [out, res] = fwd(unflattenOrRaise(inDef, in));
      if (!(out.def() == outDef))
        raise(makeError("custom_vjp: fwd returns outputs of structure {} but the function returns {}",
                        out.def().toString(), outDef.toString()));
      resDef = res.def();
      std::vector<Array> r = out.leaves(), rl = res.leaves();
      nRes = rl.size();
      r.insert(r.end(), rl.begin(), rl.end());
      return r;
    };
    ArrayFn flatBwd = [&](const std::vector<Array>& in) {
      Tree res = unflattenOrRaise(resDef, ops::range(in, n, nRes));
      Tree cts = unflattenOrRaise(outDef, ops::range(in, n + nRes, in.size() - n - nRes));
      InRule guard(*inRule);
      Tree g = bwd(res, cts);
      if (!(g.def() == inDef))
        raise(makeError("custom_vjp: bwd returns cotangents of structure {} but the primals are {}",
                        g.def().toString(), inDef.toString()));
      std::vector<Array> out = g.leaves();
      for (size_t i = 0; i < n; ++i) {
        if (!out[i].valid()) {
          out[i] = zerosLike(in[i]);  // no cotangent: zero
        } else if (!(out[i].aval() == in[i].aval())) {
          raise(makeError("custom_vjp: bwd returns a cotangent {} for {}, which is {}", out[i].aval().toString(),
                          leafName(paths[i]), in[i].aval().toString()));
        }
      }
      return out;
    };
    return unflattenOrRaise(outDef, customVjpCall(flatF, flatFwd, flatBwd, leaves, n, loc));
  };
}

}  // namespace tsr
