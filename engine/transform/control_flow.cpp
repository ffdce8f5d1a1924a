#include "engine/transform/control_flow.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/ops/nested_graphs.h"
#include "engine/ops/op_helpers.h"
#include "engine/transform/trace.h"

namespace tsr {

namespace {

template <class T>
std::vector<T> concat(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

using ops::range;

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

// The leaves of a loop body's new carry, checked against the carry that entered: the same structure, and each leaf
// the same shape and dtype (named by its path, so a user sees which leaf changed).
std::vector<Array> checkedCarry(const char* op, const Tree& next, const TreeDef& def, const std::vector<Array>& carries,
                                const std::vector<std::string>& paths) {
  if (!(next.def() == def))
    raise(makeError("{}: the body returns a carry of structure {} but the initial carry is {}", op,
                    next.def().toString(), def.toString()));
  std::vector<Array> out = next.leaves();
  for (size_t i = 0; i < carries.size(); ++i) {
    if (!out[i].valid()) raise(makeError("{}: the body returns an empty Array for {}", op, carryName(paths[i])));
    if (!(out[i].aval() == carries[i].aval()))
      raise(makeError("{}: {} enters the body as {} but comes out as {}; the body must keep each carry's shape "
                      "and dtype",
                      op, carryName(paths[i]), carries[i].aval().toString(), out[i].aval().toString()));
  }
  return out;
}

}  // namespace

Tree unflattenOrRaise(const TreeDef& def, std::vector<Array> leaves) {
  auto t = Tree::unflatten(def, std::move(leaves));
  if (!t.ok()) raise(t.takeError());
  return std::move(t).value();
}

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

  // Both branches take the same operands: the explicit ones, then what either branch closed over.
  SharedCaptures shared = shareCaptures({&*t, &*f}, operands.size());
  ir::CondAttrs attrs;
  attrs.trueBranch = shared.graphs[0];
  attrs.falseBranch = shared.graphs[1];
  std::vector<Array> all = concat(concat(std::vector<Array>{pred}, operands), shared.consts);
  return bind(ir::OpCode::Cond, all, std::move(attrs), loc);
}

std::vector<Array> whileLoopFlat(const ArrayFn& condFn, const ArrayFn& bodyFn, const std::vector<Array>& consts,
                                 const std::vector<Array>& carries, std::source_location loc) {
  checkValid(consts, "while_loop", "const", loc);
  checkValid(carries, "while_loop", "carry", loc);
  std::vector<Aval> avals = concat(avalsOf(consts), avalsOf(carries));
  auto c = makeGraph(condFn, avals, "cond");
  if (!c.ok()) raiseAt(loc, Error{"in the cond function of while_loop: " + c.error().message});
  auto b = makeGraph(bodyFn, avals, "body");
  if (!b.ok()) raiseAt(loc, Error{"in the body of while_loop: " + b.error().message});
  const ir::Graph &cg = c->graph, &bg = b->graph;
  std::vector<Aval> predAvals;
  for (ir::ValueId v : cg.outputs()) predAvals.push_back(cg.aval(v));
  if (predAvals.size() != 1 || !(predAvals[0] == Aval{Shape{}, DType::Bool}))
    raiseAt(loc, makeError("while_loop: the cond function must return a scalar bool, got ({})",
                           ops::describeAvals(predAvals)));
  size_t nC = consts.size(), nH = carries.size();
  if (bg.outputs().size() != nH)
    raiseAt(loc, makeError("while_loop: the body returns {} values but there are {} carries", bg.outputs().size(), nH));
  for (size_t i = 0; i < nH; ++i)
    if (!(bg.aval(bg.outputs()[i]) == carries[i].aval()))
      raiseAt(loc, makeError("while_loop: carry {} enters the body as {} but comes out as {}; the body must keep "
                             "each carry's shape and dtype",
                             i, carries[i].aval().toString(), bg.aval(bg.outputs()[i]).toString()));
  // Both graphs take the explicit consts, then what either closed over, then the carries.
  SharedCaptures shared = shareCaptures({&*c, &*b}, nC);
  ir::WhileAttrs attrs;
  attrs.numConsts = static_cast<int64_t>(nC + shared.consts.size());
  attrs.cond = shared.graphs[0];
  attrs.body = shared.graphs[1];
  std::vector<Array> operands = concat(concat(consts, shared.consts), carries);
  return bind(ir::OpCode::WhileLoop, operands, std::move(attrs), loc);
}

SharedCaptures shareCaptures(const std::vector<const ClosedGraph*>& traced, size_t lead) {
  SharedCaptures out;
  for (const ClosedGraph* t : traced) out.consts = concat(out.consts, t->consts);
  for (size_t k = 0; k < traced.size(); ++k) {
    const ClosedGraph& t = *traced[k];
    size_t nArgs = t.graph.inputs().size() - t.consts.size();
    std::vector<int> order = iotaOrder(0, lead);
    std::vector<Aval> fresh(lead);
    for (size_t j = 0; j < traced.size(); ++j) {
      const std::vector<Array>& captured = traced[j]->consts;
      if (j == k) {
        order = concat(order, iotaOrder(nArgs, captured.size()));
        fresh.resize(fresh.size() + captured.size());
      } else {
        order.insert(order.end(), captured.size(), -1);
        fresh = concat(fresh, avalsOf(captured));
      }
    }
    order = concat(order, iotaOrder(lead, nArgs - lead));
    fresh.resize(order.size());
    out.graphs.push_back(withInputs(t.graph, order, fresh, t.graph.name));
  }
  return out;
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
    std::vector<Array> out = checkedCarry("scan", next, carryDef, carries, paths);
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

Tree whileLoop(const LoopCond& condFn, const LoopStep& bodyFn, const Tree& init, std::source_location loc) {
  std::vector<Array> carries = init.leaves();
  checkValid(carries, "while_loop", "carry", loc);
  TreeDef def = init.def();
  std::vector<std::string> paths = init.paths();
  ArrayFn c = [&](const std::vector<Array>& in) {
    Array pred = condFn(unflattenOrRaise(def, in));
    if (!pred.valid()) raise(makeError("while_loop: the cond function returns an empty Array"));
    return std::vector<Array>{pred};
  };
  ArrayFn b = [&](const std::vector<Array>& in) {
    return checkedCarry("while_loop", bodyFn(unflattenOrRaise(def, in)), def, carries, paths);
  };
  return unflattenOrRaise(def, whileLoopFlat(c, b, {}, carries, loc));
}

Tree foriLoop(const Array& lower, const Array& upper, const LoopBody& body, const Tree& init,
              std::source_location loc) {
  for (const Array* bound : {&lower, &upper}) {
    const char* which = bound == &lower ? "lower" : "upper";
    if (!bound->valid()) raiseAt(loc, makeError("foriLoop: the {} bound is an empty Array", which));
    if (bound->rank() != 0 || !isInteger(bound->dtype()))
      raiseAt(loc, makeError("foriLoop: the {} bound must be a scalar integer, got {}", which,
                             bound->aval().toString()));
  }
  // carry = [i, upper, init]: the bound is carried so that the predicate reads it on the device.
  Tree carry = Tree::list({Tree(astype(lower, DType::I32)), Tree(astype(upper, DType::I32)), init});
  auto pred = [](const Tree& c) { return less(c.child(0).leaf(), c.child(1).leaf()); };
  auto step = [&](const Tree& c) {
    const Array& i = c.child(0).leaf();
    return Tree::list({Tree(i + 1.0), c.child(1), body(i, c.child(2))});
  };
  return whileLoop(pred, step, carry, loc).child(2);
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
