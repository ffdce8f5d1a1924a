#include "engine/transform/autodiff.h"

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"

namespace tsr {

namespace {

std::vector<Aval> avalsOf(const std::vector<Array>& xs) {
  std::vector<Aval> out;
  for (const auto& x : xs) {
    if (!x.valid()) raise(makeError("vjp: an input is an empty Array"));
    out.push_back(x.aval());
  }
  return out;
}

// Cotangents accumulate: a value used twice gets the sum of both uses' cotangents.
void accumulate(std::vector<Array>& cts, ir::ValueId v, const Array& ct) {
  Array& slot = cts[static_cast<size_t>(v)];
  slot = slot.valid() ? add(slot, ct) : ct;
}

}  // namespace

VjpOutput vjpOfGraph(std::shared_ptr<const ClosedGraph> cg, const std::vector<Array>& primals,
                     std::vector<Array> known) {
  const ir::Graph& g = cg->graph;
  if (primals.size() + cg->consts.size() != g.inputs().size())
    raise(makeError("vjp: {} takes {} inputs, got {}", g.name, g.inputs().size(), primals.size() + cg->consts.size()));
  // Replay the forward pass in the current context, keeping every primal value for the rules.
  known.resize(static_cast<size_t>(g.numValues()));
  auto env = std::make_shared<std::vector<Array>>(std::move(known));
  for (size_t i = 0; i < primals.size(); ++i) (*env)[static_cast<size_t>(g.inputs()[i])] = primals[i];
  for (size_t i = 0; i < cg->consts.size(); ++i) (*env)[static_cast<size_t>(g.inputs()[primals.size() + i])] = cg->consts[i];
  for (const ir::Node& n : g.nodes()) {
    bool allKnown = !n.results.empty();
    for (ir::ValueId r : n.results) allKnown &= (*env)[static_cast<size_t>(r)].valid();
    if (allKnown) continue;
    std::vector<Array> operands;
    for (ir::ValueId v : n.operands) operands.push_back((*env)[static_cast<size_t>(v)]);
    std::vector<Array> results = bind(n.op, operands, n.attrs, n.prov);
    for (size_t r = 0; r < n.results.size(); ++r) (*env)[static_cast<size_t>(n.results[r])] = results[r];
  }

  VjpOutput out;
  for (ir::ValueId v : g.outputs()) out.outputs.push_back((*env)[static_cast<size_t>(v)]);
  size_t numPrimals = primals.size();
  out.pullback = [cg, env, numPrimals](const std::vector<Array>& cotangents) {
    const auto& reg = ops::registry();
    const ir::Graph& g = cg->graph;
    if (cotangents.size() != g.outputs().size())
      raise(makeError("vjp: expected {} cotangents, got {}", g.outputs().size(), cotangents.size()));
    std::vector<Array> cts(static_cast<size_t>(g.numValues()));
    for (size_t i = 0; i < cotangents.size(); ++i) {
      if (!cotangents[i].valid()) continue;
      const Aval& want = g.aval(g.outputs()[i]);
      if (!(cotangents[i].aval() == want))
        raise(makeError("vjp: cotangent {} must be {}, got {}", i, want.toString(), cotangents[i].aval().toString()));
      accumulate(cts, g.outputs()[i], cotangents[i]);
    }
    const auto& nodes = g.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      const ir::Node& n = *it;
      std::vector<Array> resultCts;
      bool any = false;
      for (ir::ValueId r : n.results) {
        resultCts.push_back(cts[static_cast<size_t>(r)]);
        any |= resultCts.back().valid();
      }
      if (!any) continue;
      const ir::OpDef& def = reg.get(n.op);
      if (!def.differentiable) continue;  // comparisons, integer ops, random bits: zero cotangents
      if (!def.vjp) raise(makeError("{}: no vjp rule (at {})", def.name, n.prov.toString()));
      std::vector<Array> operands, results;
      for (ir::ValueId v : n.operands) operands.push_back((*env)[static_cast<size_t>(v)]);
      for (ir::ValueId v : n.results) results.push_back((*env)[static_cast<size_t>(v)]);
      // Backward ops point at the forward op they differentiate (its module path, file and line), as JAX's
      // transpose keeps the name stack: the rule's ops and the sums that add its cotangents to the others.
      ProvenanceScope scope(n.prov);
      std::vector<Array> operandCts = def.vjp(ir::VjpArgs{operands, results, resultCts, n.attrs});
      if (operandCts.size() != n.operands.size())
        raise(makeError("{}: vjp rule returned {} cotangents for {} operands", def.name, operandCts.size(),
                        n.operands.size()));
      for (size_t i = 0; i < operandCts.size(); ++i) {
        if (!operandCts[i].valid()) continue;
        const Aval& want = g.aval(n.operands[i]);
        if (!isFloating(want.dtype)) continue;  // integer operands have no cotangent
        if (!(operandCts[i].aval() == want))
          raise(makeError("{}: vjp rule gave operand {} a cotangent {} but the operand is {} (at {})", def.name, i,
                          operandCts[i].aval().toString(), want.toString(), n.prov.toString()));
        accumulate(cts, n.operands[i], operandCts[i]);
      }
    }
    std::vector<Array> inputCts;
    for (size_t i = 0; i < numPrimals; ++i) inputCts.push_back(cts[static_cast<size_t>(g.inputs()[i])]);
    return inputCts;
  };
  return out;
}

VjpOutput vjp(const ArrayFn& f, const std::vector<Array>& primals) {
  auto traced = makeGraph(f, avalsOf(primals), "vjp");
  if (!traced.ok()) raise(traced.takeError());
  VjpOutput out = vjpOfGraph(std::make_shared<const ClosedGraph>(std::move(traced).value()), primals);
  out.pullback = [pullback = std::move(out.pullback), primals](const std::vector<Array>& cotangents) {
    std::vector<Array> cts = pullback(cotangents);
    for (size_t i = 0; i < cts.size(); ++i)
      if (!cts[i].valid()) cts[i] = zerosLike(primals[i]);
    return cts;
  };
  return out;
}

namespace {

ValueAndGrad valueAndGradImpl(const LossWithAuxFn& f, const Tree& params) {
  TreeDef def = params.def();
  std::vector<Array> leaves = params.leaves();
  auto auxHolder = std::make_shared<Tree>();
  ArrayFn flat = [&, auxHolder](const std::vector<Array>& xs) {
    auto rebuilt = Tree::unflatten(def, xs);
    if (!rebuilt.ok()) raise(rebuilt.takeError());
    auto [loss, aux] = f(*rebuilt);
    if (!loss.valid() || loss.numel() != 1)
      raise(makeError("grad: the loss must be a scalar, got {}", loss.valid() ? loss.aval().toString() : "nothing"));
    if (!isFloating(loss.dtype())) raise(makeError("grad: the loss must be floating point, got {}", loss.aval().toString()));
    std::vector<Array> outs{loss};
    for (const auto& a : aux.leaves()) outs.push_back(a);
    *auxHolder = aux;
    return outs;
  };
  VjpOutput v = vjp(flat, leaves);
  // Aux leaves come back replayed in the caller's context; rebuild the aux tree from them.
  std::vector<Array> auxLeaves(v.outputs.begin() + 1, v.outputs.end());
  auto aux = Tree::unflatten(auxHolder->def(), auxLeaves);
  if (!aux.ok()) raise(aux.takeError());
  std::vector<Array> cts(v.outputs.size());
  cts[0] = Array::full(v.outputs[0].shape(), 1.0, v.outputs[0].dtype());
  auto gradLeaves = v.pullback(cts);
  auto grads = Tree::unflatten(def, gradLeaves);
  if (!grads.ok()) raise(grads.takeError());
  return ValueAndGrad{v.outputs[0], std::move(grads).value(), std::move(aux).value()};
}

}  // namespace

std::function<ValueAndGrad(const Tree&)> valueAndGradWithAux(LossWithAuxFn f) {
  return [f = std::move(f)](const Tree& params) { return valueAndGradImpl(f, params); };
}

std::function<ValueAndGrad(const Tree&)> valueAndGrad(LossFn f) {
  return valueAndGradWithAux([f = std::move(f)](const Tree& p) { return std::make_pair(f(p), Tree()); });
}

std::function<Tree(const Tree&)> grad(LossFn f) {
  auto vg = valueAndGrad(std::move(f));
  return [vg](const Tree& params) { return vg(params).grads; };
}

ScalarFn gradOf(ScalarFn f) {
  auto g = grad([f](const Tree& p) { return f(p.leaf()); });
  return [g](const Array& x) { return g(Tree(x)).leaf(); };
}

}  // namespace tsr
