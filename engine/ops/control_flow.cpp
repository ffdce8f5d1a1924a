// scan, cond and while_loop: loops and a branch whose bodies are nested graphs (ScanAttrs, CondAttrs, WhileAttrs
// in attrs.h). All their rules live here: infer checks the bodies' signatures against the operands, cost is the
// bodies' cost (times the trip count where it is known), the CPU kernels run the bodies with the reference
// interpreter, and the vjp and batching rules build new scans, conds and while_loops whose bodies are the
// pullback, or the vmap, of the replayed body (as JAX's rules do). The CUDA backend runs these ops on the host
// through the same kernels (an opaque kernel's host path): a while_loop's predicate is read where it is computed,
// with no device-to-host copy per iteration.
#include <cstring>

#include <fmt/format.h>

#include "engine/ops/nested_graphs.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/control_flow.h"
#include "engine/transform/trace.h"
#include "engine/transform/vmap.h"

namespace tsr::ops {
namespace {

using ir::CondAttrs;
using ir::ScanAttrs;
using ir::WhileAttrs;

// ---- shared ----

// A scalar predicate's truth: nonzero in any byte (bool and integer predicates alike).
bool isTrue(const ir::TensorView& pred) {
  const auto* p = static_cast<const uint8_t*>(pred.data);
  bool taken = false;
  for (int64_t i = 0; i < dtypeSize(pred.aval.dtype); ++i) taken |= p[i] != 0;
  return taken;
}

// Indices of the floating-point arrays among avals: only those have cotangents.
template <class GetAval>
std::vector<size_t> floatingIndices(size_t n, GetAval aval) {
  std::vector<size_t> out;
  for (size_t i = 0; i < n; ++i)
    if (isFloating(aval(i).dtype)) out.push_back(i);
  return out;
}

// ---- scan ----

// Operands: consts (numConsts), carries (numCarry), xs [length, ...]. Body: (consts, carries, x slices) ->
// (carries, y slices). Results: carries, ys [length, ...].
Result<std::vector<Aval>> inferScan(std::span<const Aval> ops, const ir::Attrs& attrs) {
  constexpr const char* kOp = "scan";
  const auto& a = attrsAs<ScanAttrs>(attrs);
  if (!a.body) return opError(kOp, ops, "has no body");
  if (a.length < 0) return opError(kOp, ops, fmt::format("length must be at least 0, got {}", a.length));
  if (a.numConsts < 0 || a.numCarry < 0 || a.numConsts + a.numCarry > static_cast<int64_t>(ops.size()))
    return opError(kOp, ops, fmt::format("num_consts {} and num_carry {} do not fit the {} operands", a.numConsts,
                                         a.numCarry, ops.size()));
  const ir::Graph& body = *a.body;
  auto nC = static_cast<size_t>(a.numConsts), nH = static_cast<size_t>(a.numCarry);
  if (body.inputs().size() != ops.size())
    return opError(kOp, ops, fmt::format("the body takes {} inputs but scan has {} operands (consts, carries, xs)",
                                         body.inputs().size(), ops.size()));
  for (size_t i = 0; i < ops.size(); ++i) {
    const char* what = i < nC ? "const" : i < nC + nH ? "carry" : "x";
    size_t k = i < nC ? i : i < nC + nH ? i - nC : i - nC - nH;
    Aval want = ops[i];
    if (i >= nC + nH) {
      if (want.rank() == 0 || want.shape[0] != a.length)
        return opError(kOp, ops, fmt::format("x {} is {} but every x needs a leading dim of the length {}", k,
                                             want.toString(), a.length));
      want.shape.dims().erase(want.shape.dims().begin());
    }
    TSR_ASSIGN(Aval have, ioAval(kOp, body, body.inputs()[i]));
    if (!(have == want))
      return opError(kOp, ops, fmt::format("body input {} is {} but {} {} gives it {}", i, have.toString(), what, k,
                                           want.toString()));
  }
  if (body.outputs().size() < nH)
    return opError(kOp, ops,
                   fmt::format("the body returns {} values but there are {} carries", body.outputs().size(), nH));
  std::vector<Aval> out;
  for (size_t i = 0; i < body.outputs().size(); ++i) {
    TSR_ASSIGN(Aval y, ioAval(kOp, body, body.outputs()[i]));
    if (i < nH) {
      if (!(y == ops[nC + i]))
        return opError(kOp, ops, fmt::format("the body returns carry {} as {} but it enters as {}", i, y.toString(),
                                             ops[nC + i].toString()));
    } else {
      y.shape.dims().insert(y.shape.dims().begin(), a.length);
    }
    out.push_back(std::move(y));
  }
  return out;
}

// length x the body, plus slicing the xs and stacking the ys.
ir::Cost costScan(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) {
  const auto& a = attrsAs<ScanAttrs>(attrs);
  if (!a.body) return {};
  ir::Cost body = ir::graphCost(*a.body, registry());
  auto n = static_cast<double>(a.length);
  ir::Cost c{body.flops * n, static_cast<int64_t>(static_cast<double>(body.bytesRead) * n),
             static_cast<int64_t>(static_cast<double>(body.bytesWritten) * n)};
  for (size_t i = static_cast<size_t>(a.numConsts + a.numCarry); i < in.size(); ++i) c.bytesRead += in[i].bytes();
  for (size_t i = static_cast<size_t>(a.numCarry); i < out.size(); ++i) c.bytesWritten += out[i].bytes();
  return c;
}

void scanKernel(const ir::CpuKernelArgs& args) {
  const auto& a = attrsAs<ScanAttrs>(args.attrs);
  const ir::Graph& body = *a.body;
  auto nC = static_cast<size_t>(a.numConsts), nH = static_cast<size_t>(a.numCarry);
  size_t nIn = args.inputs.size();
  // Step inputs: consts and carries (the carries replaced by each step's outputs), then this step's x slices.
  std::vector<runtime::BufferPtr> step(nIn);
  for (size_t i = 0; i < nC + nH; ++i) step[i] = copyToBuffer(args.inputs[i].data, args.inputs[i].aval.bytes());
  for (int64_t s = 0; s < a.length; ++s) {
    int64_t t = a.reverse ? a.length - 1 - s : s;
    for (size_t i = nC + nH; i < nIn; ++i) {
      int64_t sliceBytes = args.inputs[i].aval.bytes() / a.length;
      step[i] = copyToBuffer(static_cast<const char*>(args.inputs[i].data) + t * sliceBytes, sliceBytes);
    }
    std::vector<runtime::BufferPtr> outs = runGraph("scan", body, step);
    for (size_t i = 0; i < nH; ++i) step[nC + i] = outs[i];
    for (size_t j = nH; j < outs.size(); ++j) {
      int64_t sliceBytes = args.outputs[j].aval.bytes() / a.length;
      if (sliceBytes) std::memcpy(static_cast<char*>(args.outputs[j].data) + t * sliceBytes, outs[j]->data(),
                                  static_cast<size_t>(sliceBytes));
    }
  }
  for (size_t i = 0; i < nH; ++i) copyOut(args.outputs[i], step[nC + i]);
}

// The pullback of a scan is a scan running the other way. Residuals: the carry entering every step, from a second
// forward scan whose body also emits its input carries as ys. The backward body replays the forward body at
// (consts, carry_t, x_t) and applies its pullback: it carries the carry cotangent (and sums the consts'
// cotangents) and emits the x cotangents. Non-floating operands get no cotangent.
std::vector<Array> scanVjp(const ir::VjpArgs& args) {
  const auto& a = attrsAs<ScanAttrs>(args.attrs);
  const ir::GraphPtr body = a.body;
  auto nC = static_cast<size_t>(a.numConsts), nH = static_cast<size_t>(a.numCarry);
  size_t nIn = args.operands.size(), nX = nIn - nC - nH, nY = body->outputs().size() - nH;
  const std::vector<Array>& ops = args.operands;
  std::vector<size_t> fC = floatingIndices(nC, [&](size_t i) { return ops[i].aval(); });
  std::vector<size_t> fH = floatingIndices(nH, [&](size_t i) { return ops[nC + i].aval(); });
  std::vector<size_t> fX = floatingIndices(nX, [&](size_t i) { return ops[nC + nH + i].aval(); });
  std::vector<size_t> fY = floatingIndices(nY, [&](size_t i) { return args.results[nH + i].aval(); });
  std::vector<Array> cts(nIn);
  if (fC.empty() && fH.empty() && fX.empty()) return cts;

  std::vector<Array> carriesIn;  // [length, ...] per carry: its value entering step t
  if (nH > 0) {
    auto fwd = std::make_shared<ir::Graph>(*body);
    std::vector<ir::ValueId> outs = body->outputs();
    for (size_t i = 0; i < nH; ++i) outs.push_back(body->inputs()[nC + i]);
    fwd->setOutputs(std::move(outs));
    ScanAttrs fa = a;
    fa.body = std::move(fwd);
    std::vector<Array> r = bind(ir::OpCode::Scan, ops, fa, std::source_location::current());
    carriesIn = range(r, nH + nY, nH);
  }

  // Backward scan: consts; carries: float carries' cotangents, float consts' cotangent sums;
  // xs: carriesIn, the xs, float ys' cotangents.
  std::vector<Array> init, xs = carriesIn;
  for (size_t i : fH) init.push_back(cotangentOrZeros(args, i));
  for (size_t i : fC) init.push_back(zerosLike(ops[i]));
  for (size_t j = 0; j < nX; ++j) xs.push_back(ops[nC + nH + j]);
  for (size_t j : fY) xs.push_back(cotangentOrZeros(args, nH + j));
  ArrayFn backward = [=](const std::vector<Array>& in) {
    size_t p = 0;
    auto take = [&](size_t n) {
      p += n;
      return range(in, p - n, n);
    };
    std::vector<Array> c = take(nC), ctH = take(fH.size()), ctC = take(fC.size()), h = take(nH), x = take(nX),
                       ctY = take(fY.size());
    std::vector<Array> primals = c;
    primals.insert(primals.end(), h.begin(), h.end());
    primals.insert(primals.end(), x.begin(), x.end());
    VjpOutput v = vjp(graphFn(body), primals);
    std::vector<Array> outCts(nH + nY);  // invalid: zero (and integer outputs)
    for (size_t k = 0; k < fH.size(); ++k) outCts[fH[k]] = ctH[k];
    for (size_t k = 0; k < fY.size(); ++k) outCts[nH + fY[k]] = ctY[k];
    std::vector<Array> inCts = v.pullback(outCts);
    std::vector<Array> out;
    for (size_t i : fH) out.push_back(inCts[nC + i]);
    for (size_t k = 0; k < fC.size(); ++k) out.push_back(add(ctC[k], inCts[fC[k]]));
    for (size_t j : fX) out.push_back(inCts[nC + nH + j]);
    return out;
  };
  std::vector<Array> r = scanFlat(backward, range(ops, 0, nC), init, xs, a.length, !a.reverse);
  for (size_t k = 0; k < fH.size(); ++k) cts[nC + fH[k]] = r[k];
  for (size_t k = 0; k < fC.size(); ++k) cts[fC[k]] = r[fH.size() + k];
  for (size_t k = 0; k < fX.size(); ++k) cts[nC + nH + fX[k]] = r[fH.size() + fC.size() + k];
  return cts;
}

// vmap of a scan is a scan of the vmapped body. Batched consts go to dim 0 and batched xs to dim 1 (dim 0 is the
// scan axis); unbatched ones stay as they are. Every carry is batched (broadcast where it is not), since the body
// may make an unbatched carry batched; every y comes out batched on dim 1.
ir::BatchResult scanBatch(const ir::BatchArgs& args) {
  const auto& a = attrsAs<ScanAttrs>(args.attrs);
  auto nC = static_cast<size_t>(a.numConsts), nH = static_cast<size_t>(a.numCarry);
  size_t nIn = args.operands.size();
  std::vector<Array> consts, carries, xs;
  std::vector<int> inAxes;
  for (size_t i = 0; i < nIn; ++i) {
    const Array& x = args.operands[i];
    int bd = args.batchDims[i];
    if (i >= nC && i < nC + nH) {
      carries.push_back(moveBatchDim(x, bd, 0, args.batchSize));
      inAxes.push_back(0);
    } else {
      Array moved = bd < 0 ? x : moveBatchDim(x, bd, i < nC ? 0 : 1, args.batchSize);
      (i < nC ? consts : xs).push_back(moved);
      inAxes.push_back(bd < 0 ? -1 : 0);
    }
  }
  ir::BatchResult r;
  r.results = scanFlat(vmap(graphFn(a.body), inAxes), consts, carries, xs, a.length, a.reverse);
  r.batchDims.assign(r.results.size(), 1);
  for (size_t i = 0; i < nH; ++i) r.batchDims[i] = 0;
  return r;
}

// ---- cond ----

// Operands: pred (scalar bool or integer), then the branch operands. Both branches map the branch operands to
// the same avals, the results.
Result<std::vector<Aval>> inferCond(std::span<const Aval> ops, const ir::Attrs& attrs) {
  constexpr const char* kOp = "cond";
  const auto& a = attrsAs<CondAttrs>(attrs);
  if (ops.empty()) return opError(kOp, ops, "expects a predicate operand");
  if (ops[0].rank() != 0 || isFloating(ops[0].dtype))
    return opError(kOp, ops, fmt::format("the predicate must be a scalar bool or integer, got {}", ops[0].toString()));
  if (!a.trueBranch || !a.falseBranch) return opError(kOp, ops, "needs both branches");
  std::vector<Aval> results;
  for (int b = 0; b < 2; ++b) {
    const ir::Graph* g = b == 0 ? a.trueBranch.get() : a.falseBranch.get();
    TSR_TRY(checkGraphInputs(kOp, ops, ops.subspan(1), *g, b == 0 ? "the true branch" : "the false branch"));
    std::vector<Aval> out;
    for (ir::ValueId v : g->outputs()) {
      TSR_ASSIGN(Aval y, ioAval(kOp, *g, v));
      out.push_back(std::move(y));
    }
    if (b == 0) {
      results = std::move(out);
    } else if (out != results) {
      std::string t, f;
      for (const Aval& x : results) t += (t.empty() ? "" : ", ") + x.toString();
      for (const Aval& x : out) f += (f.empty() ? "" : ", ") + x.toString();
      return opError(kOp, ops, fmt::format("the branches return different avals: ({}) and ({})", t, f));
    }
  }
  return results;
}

// The dearer branch (one of the two runs).
ir::Cost costCond(std::span<const Aval>, std::span<const Aval>, const ir::Attrs& attrs) {
  const auto& a = attrsAs<CondAttrs>(attrs);
  if (!a.trueBranch || !a.falseBranch) return {};
  ir::Cost t = ir::graphCost(*a.trueBranch, registry()), f = ir::graphCost(*a.falseBranch, registry());
  return t.flops >= f.flops ? t : f;
}

void condKernel(const ir::CpuKernelArgs& args) {
  const auto& a = attrsAs<CondAttrs>(args.attrs);
  runGraphKernel("cond", isTrue(args.inputs[0]) ? *a.trueBranch : *a.falseBranch, args, 1);
}

// The pullback of a cond is a cond of the branches' pullbacks, taking the operands and the result cotangents.
std::vector<Array> condVjp(const ir::VjpArgs& args) {
  const auto& a = attrsAs<CondAttrs>(args.attrs);
  std::vector<Array> ops = range(args.operands, 1, args.operands.size() - 1);
  size_t n = ops.size(), nR = args.results.size();
  std::vector<size_t> fOps = floatingIndices(n, [&](size_t i) { return ops[i].aval(); });
  std::vector<size_t> fRes = floatingIndices(nR, [&](size_t i) { return args.results[i].aval(); });
  std::vector<Array> cts(args.operands.size());
  if (fOps.empty()) return cts;
  std::vector<Array> in = ops;
  for (size_t j : fRes) in.push_back(cotangentOrZeros(args, j));
  auto pullback = [&](ir::GraphPtr g) -> ArrayFn {
    return [=](const std::vector<Array>& xs) {
      VjpOutput v = vjp(graphFn(g), range(xs, 0, n));
      std::vector<Array> outCts(nR);
      for (size_t k = 0; k < fRes.size(); ++k) outCts[fRes[k]] = xs[n + k];
      std::vector<Array> inCts = v.pullback(outCts);
      std::vector<Array> out;
      for (size_t i : fOps) out.push_back(inCts[i]);
      return out;
    };
  };
  std::vector<Array> r = condFlat(args.operands[0], pullback(a.trueBranch), pullback(a.falseBranch), in);
  for (size_t k = 0; k < fOps.size(); ++k) cts[1 + fOps[k]] = r[k];
  return cts;
}

// vmap of a cond: with an unbatched predicate, a cond of the vmapped branches; with a batched one, both branches
// run on the whole batch and each example selects its own (as JAX does).
ir::BatchResult condBatch(const ir::BatchArgs& args) {
  const auto& a = attrsAs<CondAttrs>(args.attrs);
  int64_t size = args.batchSize;
  std::vector<Array> ops;
  std::vector<int> inAxes;
  bool anyBatched = false;
  for (size_t i = 1; i < args.operands.size(); ++i) {
    int bd = args.batchDims[i];
    ops.push_back(bd < 0 ? args.operands[i] : moveBatchDim(args.operands[i], bd, 0, size));
    inAxes.push_back(bd < 0 ? -1 : 0);
    anyBatched |= bd >= 0;
  }
  // Each branch on the batch, every result batched on dim 0.
  auto batched = [&](ir::GraphPtr g) -> ArrayFn {
    if (anyBatched) return vmap(graphFn(g), inAxes);
    return [g, size](const std::vector<Array>& xs) {
      std::vector<Array> out = bindGraph(*g, xs);
      for (Array& y : out) y = moveBatchDim(y, -1, 0, size);
      return out;
    };
  };
  ir::BatchResult r;
  int predDim = args.batchDims[0];
  if (predDim < 0) {
    r.results = condFlat(args.operands[0], batched(a.trueBranch), batched(a.falseBranch), ops);
  } else {
    std::vector<Array> t = batched(a.trueBranch)(ops), f = batched(a.falseBranch)(ops);
    Array pred = moveBatchDim(args.operands[0], predDim, 0, size);  // [B]
    if (pred.dtype() != DType::Bool) pred = notEqual(pred, zerosLike(pred));
    for (size_t i = 0; i < t.size(); ++i)
      r.results.push_back(where(broadcastInDim(pred, t[i].shape(), {0}), t[i], f[i]));
  }
  r.batchDims.assign(r.results.size(), 0);
  return r;
}

// ---- while_loop ----

// Operands: consts (numConsts), then carries. cond: (consts, carries) -> bool[]; body: (consts, carries) ->
// carries. Results: the carries when cond first fails.
Result<std::vector<Aval>> inferWhile(std::span<const Aval> ops, const ir::Attrs& attrs) {
  constexpr const char* kOp = "while_loop";
  const auto& a = attrsAs<WhileAttrs>(attrs);
  if (!a.cond || !a.body) return opError(kOp, ops, "needs a cond graph and a body graph");
  if (a.numConsts < 0 || a.numConsts > static_cast<int64_t>(ops.size()))
    return opError(kOp, ops, fmt::format("num_consts {} does not fit the {} operands", a.numConsts, ops.size()));
  TSR_TRY(checkGraphInputs(kOp, ops, ops, *a.cond, "the cond function"));
  TSR_TRY(checkGraphInputs(kOp, ops, ops, *a.body, "the body"));
  if (a.cond->outputs().size() != 1)
    return opError(kOp, ops, fmt::format("the cond function must return one scalar bool, it returns {} values",
                                         a.cond->outputs().size()));
  TSR_ASSIGN(Aval pred, ioAval(kOp, *a.cond, a.cond->outputs()[0]));
  if (pred.rank() != 0 || pred.dtype != DType::Bool)
    return opError(kOp, ops, fmt::format("the cond function must return a scalar bool, got {}", pred.toString()));
  std::span<const Aval> carries = ops.subspan(static_cast<size_t>(a.numConsts));
  if (a.body->outputs().size() != carries.size())
    return opError(kOp, ops, fmt::format("the body returns {} values but there are {} carries",
                                         a.body->outputs().size(), carries.size()));
  for (size_t i = 0; i < carries.size(); ++i) {
    TSR_ASSIGN(Aval y, ioAval(kOp, *a.body, a.body->outputs()[i]));
    if (!(y == carries[i]))
      return opError(kOp, ops, fmt::format("the body returns carry {} as {} but it enters as {}", i, y.toString(),
                                           carries[i].toString()));
  }
  return std::vector<Aval>(carries.begin(), carries.end());
}

// The trip count is known only at run time, so the cost is one iteration: the predicate and the body once (as a
// scan's cost is its body's times its length). Profiles show the measured time.
ir::Cost costWhile(std::span<const Aval>, std::span<const Aval>, const ir::Attrs& attrs) {
  const auto& a = attrsAs<WhileAttrs>(attrs);
  if (!a.cond || !a.body) return {};
  ir::Cost c = ir::graphCost(*a.cond, registry()), b = ir::graphCost(*a.body, registry());
  return {c.flops + b.flops, c.bytesRead + b.bytesRead, c.bytesWritten + b.bytesWritten};
}

// Evaluates the predicate on the current carries, then runs the body, until the predicate is false.
void whileKernel(const ir::CpuKernelArgs& args) {
  const auto& a = attrsAs<WhileAttrs>(args.attrs);
  auto nC = static_cast<size_t>(a.numConsts);
  std::vector<runtime::BufferPtr> state;
  for (const ir::TensorView& in : args.inputs) state.push_back(copyToBuffer(in.data, in.aval.bytes()));
  for (;;) {
    runtime::BufferPtr pred = runGraph("while_loop", *a.cond, state)[0];
    if (!isTrue(ir::TensorView{pred->data(), Aval{Shape{}, DType::Bool}, 0})) break;
    std::vector<runtime::BufferPtr> next = runGraph("while_loop", *a.body, state);
    for (size_t i = 0; i < next.size(); ++i) state[nC + i] = std::move(next[i]);
  }
  for (size_t i = 0; i < args.outputs.size(); ++i) copyOut(args.outputs[i], state[nC + i]);
}

// Reverse mode needs every iteration's carry, and the number of iterations is known only at run time, so it is
// refused as JAX refuses it; scan and foriLoop with static bounds are differentiable. A loop whose float results
// get no cotangent (an integer counter, a loop the loss does not depend on) is not an error.
std::vector<Array> whileVjp(const ir::VjpArgs& args) {
  bool floatCotangent = false;
  for (size_t i = 0; i < args.results.size(); ++i)
    floatCotangent |= isFloating(args.results[i].dtype()) && i < args.cotangents.size() && args.cotangents[i].valid();
  if (floatCotangent)
    raiseAt({}, Error{"while_loop: reverse-mode differentiation does not work for while_loop, whose number of "
                      "iterations is known only at run time; use scan, or foriLoop (lax.fori_loop) with static bounds, "
                      "which lowers to scan"});
  return std::vector<Array>(args.operands.size());
}

// Which outputs of g depend on a marked input (through any path; a node's results depend on all its operands).
std::vector<bool> outputsDependingOn(const ir::Graph& g, const std::vector<bool>& markedInputs) {
  std::vector<bool> marked(static_cast<size_t>(g.numValues()), false);
  for (size_t i = 0; i < g.inputs().size(); ++i) marked[static_cast<size_t>(g.inputs()[i])] = markedInputs[i];
  for (const ir::Node& n : g.nodes()) {
    bool any = false;
    for (ir::ValueId v : n.operands) any |= marked[static_cast<size_t>(v)];
    for (ir::ValueId r : n.results) marked[static_cast<size_t>(r)] = any;
  }
  std::vector<bool> out;
  for (ir::ValueId v : g.outputs()) out.push_back(marked[static_cast<size_t>(v)]);
  return out;
}

// Example 0 of x, batched on dim 0: [B, ...] -> [...].
Array firstExample(const Array& x) {
  auto dims = x.shape().dims();
  dims.erase(dims.begin());
  return reshape(sliceAxis(x, 0, 0, 1), dims);
}

// vmap of a while_loop, as JAX batches it. Which carries are batched is a fixpoint: those batched on entry and
// those the body makes depend on a batched value. When the predicate depends on nothing batched, every example
// runs the same number of iterations: a while_loop of the vmapped body (unbatched carries stay unbatched).
// Otherwise every carry is batched; the loop runs while any example's predicate holds, and the body keeps the
// carries of the examples whose predicate no longer holds (a select per carry, as a batched cond does).
ir::BatchResult whileBatch(const ir::BatchArgs& args) {
  const auto& a = attrsAs<WhileAttrs>(args.attrs);
  auto nC = static_cast<size_t>(a.numConsts);
  size_t nIn = args.operands.size();
  std::vector<bool> batched(nIn);
  for (size_t i = 0; i < nIn; ++i) batched[i] = args.batchDims[i] >= 0;
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<bool> out = outputsDependingOn(*a.body, batched);
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] && !batched[nC + i]) changed = batched[nC + i] = true;
  }
  bool predBatched = outputsDependingOn(*a.cond, batched)[0];
  if (predBatched) std::fill(batched.begin() + static_cast<std::ptrdiff_t>(nC), batched.end(), true);

  std::vector<Array> ops;
  std::vector<int> inAxes;
  for (size_t i = 0; i < nIn; ++i) {
    ops.push_back(batched[i] ? moveBatchDim(args.operands[i], args.batchDims[i], 0, args.batchSize)
                             : args.operands[i]);
    inAxes.push_back(batched[i] ? 0 : -1);
  }
  ir::GraphPtr condG = a.cond, bodyG = a.body;
  // The body on the batch: vmap puts every output on dim 0; a carry that stays unbatched is the same for every
  // example, so example 0 is its value.
  ArrayFn body = [=](const std::vector<Array>& in) {
    std::vector<Array> out = vmap(graphFn(bodyG), inAxes)(in);
    for (size_t i = 0; i < out.size(); ++i)
      if (!batched[nC + i]) out[i] = firstExample(out[i]);
    return out;
  };
  ArrayFn batchedPred = [=](const std::vector<Array>& in) { return vmap(graphFn(condG), inAxes)(in); };  // [B]
  ArrayFn cond, step;
  if (!predBatched) {
    // The predicate reads no batched value; example 0 stands in for the batched operands it does not read.
    cond = [=](const std::vector<Array>& in) {
      std::vector<Array> example = in;
      for (size_t i = 0; i < in.size(); ++i)
        if (batched[i]) example[i] = firstExample(in[i]);
      return bindGraph(*condG, example);
    };
    step = body;
  } else {
    cond = [=](const std::vector<Array>& in) { return std::vector<Array>{any(batchedPred(in)[0])}; };
    step = [=](const std::vector<Array>& in) {
      Array pred = batchedPred(in)[0];
      std::vector<Array> next = body(in);
      for (size_t i = 0; i < next.size(); ++i)
        next[i] = where(broadcastInDim(pred, next[i].shape(), {0}), next[i], in[nC + i]);
      return next;
    };
  }
  ir::BatchResult r;
  r.results = whileLoopFlat(cond, step, range(ops, 0, nC), range(ops, nC, nIn - nC));
  for (size_t i = nC; i < nIn; ++i) r.batchDims.push_back(batched[i] ? 0 : -1);
  return r;
}

}  // namespace

void registerControlFlowOps(ir::OpRegistry& reg) {
  // Variadic in operands and results: how many follows from the attrs and the bodies.
  ir::OpDef scan = coreOp(ir::OpCode::Scan, "control_flow", ir::FusionKind::Opaque, -1, -1);
  scan.minOperands = 0;
  scan.infer = inferScan;
  scan.cost = costScan;
  scan.cpu = scanKernel;
  scan.vjp = scanVjp;
  scan.batch = scanBatch;
  addCoreOp(reg, std::move(scan));

  ir::OpDef cond = coreOp(ir::OpCode::Cond, "control_flow", ir::FusionKind::Opaque, -1, -1);
  cond.minOperands = 1;
  cond.infer = inferCond;
  cond.cost = costCond;
  cond.cpu = condKernel;
  cond.vjp = condVjp;
  cond.batch = condBatch;
  addCoreOp(reg, std::move(cond));

  ir::OpDef loop = coreOp(ir::OpCode::WhileLoop, "control_flow", ir::FusionKind::Opaque, -1, -1);
  loop.minOperands = 0;
  loop.infer = inferWhile;
  loop.cost = costWhile;
  loop.cpu = whileKernel;
  loop.vjp = whileVjp;
  loop.vjpRefused = true;
  loop.batch = whileBatch;
  addCoreOp(reg, std::move(loop));
}

}  // namespace tsr::ops
