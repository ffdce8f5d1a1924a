#include "engine/transform/control_flow.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/transform/trace.h"

namespace tsr {

namespace {

template <class T>
std::vector<T> concat(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<Array> range(const std::vector<Array>& v, size_t from, size_t n) {
  return std::vector<Array>(v.begin() + static_cast<std::ptrdiff_t>(from),
                            v.begin() + static_cast<std::ptrdiff_t>(from + n));
}

void checkValid(const std::vector<Array>& xs, const char* op, const char* what, const std::source_location& loc) {
  for (size_t i = 0; i < xs.size(); ++i)
    if (!xs[i].valid()) raiseAt(loc, makeError("{}: {} {} is an empty Array", op, what, i));
}

std::vector<Aval> avalsOf(const std::vector<Array>& xs) {
  std::vector<Aval> out;
  for (const auto& x : xs) out.push_back(x.aval());
  return out;
}

// A copy of g with its inputs in a new order: new input k is g's input order[k], or, where order[k] is -1, a fresh
// input of aval fresh[k] that nothing reads. Values are renumbered densely (inputs, then node results), the way the
// printer numbers them.
ir::GraphPtr withInputs(const ir::Graph& g, const std::vector<int>& order, const std::vector<Aval>& fresh,
                        std::string name) {
  auto out = std::make_shared<ir::Graph>();
  out->name = std::move(name);
  std::vector<ir::ValueId> map(static_cast<size_t>(g.numValues()), ir::kNone);
  for (size_t k = 0; k < order.size(); ++k) {
    if (order[k] < 0) {
      out->addInput(fresh[k]);
      continue;
    }
    ir::ValueId v = g.inputs()[static_cast<size_t>(order[k])];
    map[static_cast<size_t>(v)] = out->addInput(g.aval(v));
  }
  auto mapped = [&](const std::vector<ir::ValueId>& ids) {
    std::vector<ir::ValueId> r;
    for (ir::ValueId v : ids) r.push_back(map[static_cast<size_t>(v)]);
    return r;
  };
  for (const ir::Node& n : g.nodes()) {
    std::vector<Aval> avals;
    for (ir::ValueId v : n.results) avals.push_back(g.aval(v));
    auto ids = out->addNodeWithAvals(n.op, mapped(n.operands), n.attrs, std::move(avals), n.prov);
    for (size_t r = 0; r < ids.size(); ++r) map[static_cast<size_t>(n.results[r])] = ids[r];
  }
  out->setOutputs(mapped(g.outputs()));
  return out;
}

std::vector<int> iotaOrder(size_t from, size_t n) {
  std::vector<int> v;
  for (size_t i = 0; i < n; ++i) v.push_back(static_cast<int>(from + i));
  return v;
}

std::string carryName(const std::string& path) { return path.empty() ? "the carry" : "carry '" + path + "'"; }

}  // namespace

std::vector<Array> bindGraph(const ir::Graph& g, const std::vector<Array>& inputs) {
  if (inputs.size() != g.inputs().size())
    raise(makeError("{}: expects {} inputs, got {}", g.name, g.inputs().size(), inputs.size()));
  std::vector<Array> env(static_cast<size_t>(g.numValues()));
  for (size_t i = 0; i < inputs.size(); ++i) env[static_cast<size_t>(g.inputs()[i])] = inputs[i];
  for (const ir::Node& n : g.nodes()) {
    std::vector<Array> operands;
    for (ir::ValueId v : n.operands) operands.push_back(env[static_cast<size_t>(v)]);
    std::vector<Array> results = bind(n.op, operands, n.attrs, n.prov);
    for (size_t r = 0; r < n.results.size(); ++r) env[static_cast<size_t>(n.results[r])] = results[r];
  }
  std::vector<Array> out;
  for (ir::ValueId v : g.outputs()) out.push_back(env[static_cast<size_t>(v)]);
  return out;
}

ArrayFn graphFn(ir::GraphPtr g) {
  return [g = std::move(g)](const std::vector<Array>& xs) { return bindGraph(*g, xs); };
}

std::vector<Array> scanFlat(const ArrayFn& body, const std::vector<Array>& consts, const std::vector<Array>& carries,
                            const std::vector<Array>& xs, int64_t length, bool reverse, std::source_location loc) {
  checkValid(consts, "scan", "const", loc);
  checkValid(carries, "scan", "carry", loc);
  checkValid(xs, "scan", "x", loc);
  if (length < 0) raiseAt(loc, makeError("scan: length must be at least 0, got {}", length));
  // The body is traced on per-step avals: consts and carries as they are, each x without its leading dim.
  std::vector<Aval> avals = concat(avalsOf(consts), avalsOf(carries));
  for (size_t j = 0; j < xs.size(); ++j) {
    Aval a = xs[j].aval();
    if (a.rank() == 0 || a.shape[0] != length)
      raiseAt(loc, makeError("scan: x {} is {} but every x needs a leading dim of the length {}", j, a.toString(),
                             length));
    a.shape.dims().erase(a.shape.dims().begin());
    avals.push_back(a);
  }
  auto traced = makeGraph(body, avals, "body");
  if (!traced.ok()) raiseAt(loc, Error{"in the body of scan: " + traced.error().message});
  const ClosedGraph& cg = *traced;
  const ir::Graph& g = cg.graph;
  size_t nC = consts.size(), nH = carries.size(), nIn = avals.size(), nK = cg.consts.size();
  if (g.outputs().size() < nH)
    raiseAt(loc, makeError("scan: the body returns {} values but there are {} carries", g.outputs().size(), nH));
  for (size_t i = 0; i < nH; ++i)
    if (!(g.aval(g.outputs()[i]) == carries[i].aval()))
      raiseAt(loc, makeError("scan: carry {} enters the body as {} but comes out as {}; the body must keep each "
                             "carry's shape and dtype",
                             i, carries[i].aval().toString(), g.aval(g.outputs()[i]).toString()));

  // Body inputs: explicit consts, the values the body closed over, carries, x slices.
  std::vector<int> order = concat(concat(iotaOrder(0, nC), iotaOrder(nIn, nK)), iotaOrder(nC, nIn - nC));
  ir::ScanAttrs attrs;
  attrs.length = length;
  attrs.numConsts = static_cast<int64_t>(nC + nK);
  attrs.numCarry = static_cast<int64_t>(nH);
  attrs.reverse = reverse;
  attrs.body = withInputs(g, order, {}, "body");
  std::vector<Array> operands = concat(concat(concat(consts, cg.consts), carries), xs);
  return bind(ir::OpCode::Scan, operands, std::move(attrs), loc);
}

std::vector<Array> condFlat(const Array& pred, const ArrayFn& trueFn, const ArrayFn& falseFn,
                            const std::vector<Array>& operands, std::source_location loc) {
  if (!pred.valid()) raiseAt(loc, makeError("cond: the predicate is an empty Array"));
  if (pred.rank() != 0 || isFloating(pred.dtype()))
    raiseAt(loc, makeError("cond: the predicate must be a scalar bool or integer, got {}", pred.aval().toString()));
  checkValid(operands, "cond", "operand", loc);
  std::vector<Aval> avals = avalsOf(operands);
  auto t = makeGraph(trueFn, avals, "true_branch");
  if (!t.ok()) raiseAt(loc, Error{"in the true branch of cond: " + t.error().message});
  auto f = makeGraph(falseFn, avals, "false_branch");
  if (!f.ok()) raiseAt(loc, Error{"in the false branch of cond: " + f.error().message});
  const ir::Graph &tg = t->graph, &fg = f->graph;
  if (tg.outputs().size() != fg.outputs().size())
    raiseAt(loc, makeError("cond: the true branch returns {} values but the false branch {}", tg.outputs().size(),
                           fg.outputs().size()));
  for (size_t i = 0; i < tg.outputs().size(); ++i)
    if (!(tg.aval(tg.outputs()[i]) == fg.aval(fg.outputs()[i])))
      raiseAt(loc, makeError("cond: output {} is {} in the true branch but {} in the false branch", i,
                             tg.aval(tg.outputs()[i]).toString(), fg.aval(fg.outputs()[i]).toString()));

  // Both branches take the same operands: the explicit ones, then what either branch closed over (each branch
  // ignores the other's).
  size_t n = operands.size(), nT = t->consts.size(), nF = f->consts.size();
  std::vector<Aval> tAvals = avalsOf(t->consts), fAvals = avalsOf(f->consts);
  std::vector<int> tOrder = concat(iotaOrder(0, n + nT), std::vector<int>(nF, -1));
  std::vector<Aval> tFresh = concat(std::vector<Aval>(n + nT), fAvals);
  std::vector<int> fOrder = concat(concat(iotaOrder(0, n), std::vector<int>(nT, -1)), iotaOrder(n, nF));
  std::vector<Aval> fFresh = concat(concat(std::vector<Aval>(n), tAvals), std::vector<Aval>(nF));
  ir::CondAttrs attrs;
  attrs.trueBranch = withInputs(tg, tOrder, tFresh, "true_branch");
  attrs.falseBranch = withInputs(fg, fOrder, fFresh, "false_branch");
  std::vector<Array> all = concat(concat(concat(std::vector<Array>{pred}, operands), t->consts), f->consts);
  return bind(ir::OpCode::Cond, all, std::move(attrs), loc);
}

std::pair<Tree, Tree> scan(const ScanBody& f, const Tree& init, const Tree& xs, int64_t length, bool reverse,
                           std::source_location loc) {
  std::vector<Array> carries = init.leaves(), xl = xs.leaves();
  checkValid(carries, "scan", "carry", loc);
  checkValid(xl, "scan", "x", loc);
  if (length < 0) {
    if (xl.empty()) raiseAt(loc, makeError("scan: without xs the length must be given"));
    if (xl[0].rank() == 0) raiseAt(loc, makeError("scan: x 0 is a scalar ({}); xs are scanned over their leading dim",
                                                  xl[0].aval().toString()));
    length = xl[0].shape()[0];
  }
  TreeDef carryDef = init.def(), xDef = xs.def(), yDef;
  std::vector<std::string> paths = init.paths();
  size_t nH = carries.size();
  ArrayFn flat = [&](const std::vector<Array>& in) {
    auto carry = Tree::unflatten(carryDef, range(in, 0, nH));
    auto x = Tree::unflatten(xDef, range(in, nH, in.size() - nH));
    if (!carry.ok()) raise(carry.takeError());
    if (!x.ok()) raise(x.takeError());
    auto [next, y] = f(*carry, *x);
    if (!(next.def() == carryDef))
      raise(makeError("scan: the body returns a carry of structure {} but the initial carry is {}",
                      next.def().toString(), carryDef.toString()));
    std::vector<Array> out = next.leaves();
    for (size_t i = 0; i < nH; ++i) {
      if (!out[i].valid()) raise(makeError("scan: the body returns an empty Array for {}", carryName(paths[i])));
      if (!(out[i].aval() == carries[i].aval()))
        raise(makeError("scan: {} enters the body as {} but comes out as {}; the body must keep each carry's shape "
                        "and dtype",
                        carryName(paths[i]), carries[i].aval().toString(), out[i].aval().toString()));
    }
    yDef = y.def();
    return concat(out, y.leaves());
  };
  std::vector<Array> outs = scanFlat(flat, {}, carries, xl, length, reverse, loc);
  auto finalCarry = Tree::unflatten(carryDef, range(outs, 0, nH));
  auto ys = Tree::unflatten(yDef, range(outs, nH, outs.size() - nH));
  if (!finalCarry.ok()) raise(finalCarry.takeError());
  if (!ys.ok()) raise(ys.takeError());
  return {std::move(finalCarry).value(), std::move(ys).value()};
}

Tree foriLoop(int64_t lower, int64_t upper, const LoopBody& body, const Tree& init, std::source_location loc) {
  // The counter is carried beside the user's carry: carry = [i, init].
  Tree carry = Tree::list({Tree(Array::scalar(static_cast<double>(lower), DType::I32)), init});
  auto step = [&](const Tree& c, const Tree&) {
    const Array& i = c.child(0).leaf();
    Tree next = body(i, c.child(1));
    return std::make_pair(Tree::list({Tree(i + 1.0), std::move(next)}), Tree());
  };
  auto [done, ys] = scan(step, carry, Tree(), std::max<int64_t>(0, upper - lower), false, loc);
  return done.child(1);
}

Tree cond(const Array& pred, const Branch& trueFn, const Branch& falseFn, const Tree& operands,
          std::source_location loc) {
  TreeDef inDef = operands.def(), trueDef;
  auto branch = [&](const Branch& fn, bool isTrue) -> ArrayFn {
    return [&, isTrue](const std::vector<Array>& in) {
      auto args = Tree::unflatten(inDef, in);
      if (!args.ok()) raise(args.takeError());
      Tree out = fn(*args);
      // The true branch is traced first; the false one must match its structure.
      if (isTrue) trueDef = out.def();
      else if (!(out.def() == trueDef))
        raise(makeError("cond: the false branch returns {} but the true branch {}", out.def().toString(),
                        trueDef.toString()));
      return out.leaves();
    };
  };
  std::vector<Array> outs = condFlat(pred, branch(trueFn, true), branch(falseFn, false), operands.leaves(), loc);
  auto r = Tree::unflatten(trueDef, std::move(outs));
  if (!r.ok()) raise(r.takeError());
  return std::move(r).value();
}

}  // namespace tsr
