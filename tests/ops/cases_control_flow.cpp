// scan and cond cases. The bodies are small graphs built here; each reference is the loop or branch written out
// naively on host values. scan: cumulative sums (every dtype class, forward and reverse, and length 0), a
// two-carry recurrence with a const, an integer counter carry and two ys; cond: both branches, bool and integer
// predicates, several operands and results; while_loop: Collatz steps (integer carries), halving until a norm is
// small (a float carry and a counter) and counting up to a const bound (so that vmap meets both a batched and an
// unbatched predicate); custom_vjp_call: sin(x) * y with a hand-written bwd (the gradient checks compare it with
// finite differences of the primal, so it must be the true gradient); remat_call: tanh(x @ w) * x + sin(x) with w
// closed over, recomputing everything or keeping the matmul (which is then a result of its own);
// optimization_barrier: the identity on operands of different shapes and dtypes.
#include <cmath>

#include <fmt/format.h>

#include "engine/core/check.h"
#include "engine/ir/graph.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

using ir::OpCode;

// A nested graph built node by node with the real ops' infer rules.
class Body {
 public:
  explicit Body(std::string name) : m_g(std::make_shared<ir::Graph>()) { m_g->name = std::move(name); }
  ir::ValueId in(const Aval& a) { return m_g->addInput(a); }
  ir::ValueId op(OpCode code, std::vector<ir::ValueId> operands, ir::Attrs attrs = ir::NoAttrs{}) {
    auto r = m_g->addNode(ops::registry(), code, std::move(operands), std::move(attrs));
    TSR_CHECK_MSG(r.ok(), r.ok() ? "" : r.error().message.c_str());
    return (*r)[0];
  }
  ir::ValueId constant(DType t, double v) {
    return op(OpCode::Constant, {}, ir::ConstantAttrs{ir::Literal::scalar(t, v)});
  }
  // v in every element of an array of this aval.
  ir::ValueId full(const Aval& a, double v) {
    ir::ValueId c = constant(a.dtype, v);
    return a.rank() == 0 ? c : op(OpCode::BroadcastInDim, {c}, ir::BroadcastInDimAttrs{a.shape.dims(), {}});
  }
  ir::GraphPtr done(std::vector<ir::ValueId> outs) {
    m_g->setOutputs(std::move(outs));
    return m_g;
  }

 private:
  std::shared_ptr<ir::Graph> m_g;
};

// ---- scan ----

// cumsum over the leading dim: carry h [n], xs [len, n]; body (h, x) -> (h + x, h + x).
void addCumsumCase(std::vector<OpCase>& cases, std::mt19937& rng, DType t, int64_t len, bool reverse) {
  const int64_t n = 3;
  Aval row{Shape{n}, t};
  Body b("body");
  ir::ValueId h = b.in(row), x = b.in(row);
  ir::ValueId s = b.op(OpCode::Add, {h, x});
  OpCase c;
  c.label = fmt::format("scan cumsum {} length {}{}", dtypeName(t), len, reverse ? " reverse" : "");
  c.op = OpCode::Scan;
  c.attrs = ir::ScanAttrs{len, 0, 1, reverse, b.done({s, s})};
  c.inputs = {randomTensor(row, rng), randomTensor(Aval{Shape{len, n}, t}, rng)};
  c.reference = [=](const std::vector<HostTensor>& in) {
    HostTensor carry = in[0];
    HostTensor ys = HostTensor::zeros(Aval{Shape{len, n}, t});
    for (int64_t s = 0; s < len; ++s) {
      int64_t step = reverse ? len - 1 - s : s;
      for (int64_t j = 0; j < n; ++j) {
        carry.set(j, carry.get(j) + in[1].get(step * n + j));
        ys.set(step * n + j, carry.get(j));
      }
    }
    return std::vector<HostTensor>{carry, ys};
  };
  cases.push_back(std::move(c));
}

// consts w [2,3]; carries a, b [2,3] and k i32[]; xs x [5,2,3].
// body: a' = b, b' = a + b * w + x, k' = k + 1; ys: a (the carry entering the step), k'.
void addRecurrenceCase(std::vector<OpCase>& cases, std::mt19937& rng, bool reverse) {
  const int64_t len = 5;
  Aval m{Shape{2, 3}, DType::F32}, k{Shape{}, DType::I32};
  Body b("body");
  ir::ValueId w = b.in(m), a0 = b.in(m), b0 = b.in(m), k0 = b.in(k), x = b.in(m);
  ir::ValueId bw = b.op(OpCode::Mul, {b0, w});
  ir::ValueId b1 = b.op(OpCode::Add, {b.op(OpCode::Add, {a0, bw}), x});
  ir::ValueId k1 = b.op(OpCode::Add, {k0, b.constant(DType::I32, 1)});
  OpCase c;
  c.label = fmt::format("scan recurrence two carries, a counter and a const{}", reverse ? " reverse" : "");
  c.op = OpCode::Scan;
  c.attrs = ir::ScanAttrs{len, 1, 3, reverse, b.done({b0, b1, k1, a0, k1})};
  c.inputs = {randomTensor(m, rng, -0.5, 0.5), randomTensor(m, rng), randomTensor(m, rng),
              HostTensor::fromValues(k, {7}), randomTensor(Aval{Shape{len, 2, 3}, DType::F32}, rng)};
  c.reference = [=](const std::vector<HostTensor>& in) {
    const HostTensor& wt = in[0];
    HostTensor a = in[1], bb = in[2], kk = in[3];
    HostTensor ya = HostTensor::zeros(Aval{Shape{len, 2, 3}, DType::F32});
    HostTensor yk = HostTensor::zeros(Aval{Shape{len}, DType::I32});
    for (int64_t s = 0; s < len; ++s) {
      int64_t t = reverse ? len - 1 - s : s;
      HostTensor na = bb, nb = bb;
      for (int64_t j = 0; j < 6; ++j) {
        ya.set(t * 6 + j, a.get(j));
        nb.set(j, a.get(j) + bb.get(j) * wt.get(j) + in[4].get(t * 6 + j));
      }
      kk.set(0, kk.get(0) + 1);
      yk.set(t, kk.get(0));
      a = na;
      bb = nb;
    }
    return std::vector<HostTensor>{a, bb, kk, ya, yk};
  };
  cases.push_back(std::move(c));
}

// ---- cond ----

// cond(pred, x, y): true -> (x + y, tanh(x)), false -> (x - y, neg(x)).
void addCondCase(std::vector<OpCase>& cases, std::mt19937& rng, DType predType, double pred) {
  Aval m{Shape{2, 3}, DType::F32};
  Body t("true_branch"), f("false_branch");
  ir::ValueId tx = t.in(m), ty = t.in(m), fx = f.in(m), fy = f.in(m);
  OpCase c;
  c.label = fmt::format("cond {} pred {}", dtypeName(predType), pred);
  c.op = OpCode::Cond;
  c.attrs = ir::CondAttrs{t.done({t.op(OpCode::Add, {tx, ty}), t.op(OpCode::Tanh, {tx})}),
                          f.done({f.op(OpCode::Sub, {fx, fy}), f.op(OpCode::Neg, {fx})})};
  c.inputs = {HostTensor::fromValues(Aval{Shape{}, predType}, {pred}), randomTensor(m, rng), randomTensor(m, rng)};
  c.reference = [](const std::vector<HostTensor>& in) {
    bool taken = in[0].get(0) != 0;
    HostTensor r0 = HostTensor::zeros(in[1].aval), r1 = HostTensor::zeros(in[1].aval);
    for (int64_t i = 0; i < r0.numel(); ++i) {
      double x = in[1].get(i), y = in[2].get(i);
      r0.set(i, taken ? x + y : x - y);
      r1.set(i, taken ? std::tanh(x) : -x);
    }
    return std::vector<HostTensor>{r0, r1};
  };
  cases.push_back(std::move(c));
}

// ---- while_loop ----

// Collatz: carries n, steps (i32[]); while n != 1: n = n even ? n / 2 : 3n + 1, steps + 1.
void addCollatzCase(std::vector<OpCase>& cases, int64_t start) {
  Aval k{Shape{}, DType::I32};
  Body c("cond"), b("body");
  ir::ValueId cn = c.in(k);
  c.in(k);
  ir::ValueId n = b.in(k), steps = b.in(k);
  ir::ValueId even = b.op(OpCode::Eq, {b.op(OpCode::Rem, {n, b.constant(DType::I32, 2)}), b.constant(DType::I32, 0)});
  ir::ValueId half = b.op(OpCode::Div, {n, b.constant(DType::I32, 2)});
  ir::ValueId up = b.op(OpCode::Add, {b.op(OpCode::Mul, {n, b.constant(DType::I32, 3)}), b.constant(DType::I32, 1)});
  OpCase t;
  t.label = fmt::format("while_loop collatz from {}", start);
  t.op = OpCode::WhileLoop;
  t.attrs = ir::WhileAttrs{0, c.done({c.op(OpCode::Ne, {cn, c.constant(DType::I32, 1)})}),
                           b.done({b.op(OpCode::Select, {even, half, up}),
                                   b.op(OpCode::Add, {steps, b.constant(DType::I32, 1)})})};
  t.inputs = {HostTensor::fromValues(k, {static_cast<double>(start)}), HostTensor::fromValues(k, {0})};
  t.reference = [](const std::vector<HostTensor>& in) {
    auto n = static_cast<int64_t>(in[0].get(0));
    int64_t steps = static_cast<int64_t>(in[1].get(0));
    for (; n != 1; ++steps) n = n % 2 == 0 ? n / 2 : 3 * n + 1;
    HostTensor rn = in[0], rs = in[1];
    rn.set(0, static_cast<double>(n));
    rs.set(0, static_cast<double>(steps));
    return std::vector<HostTensor>{rn, rs};
  };
  cases.push_back(std::move(t));
}

// carries x [2,3] (float), k i32[]; while sum(x * x) > 0.01: x = x * 0.5, k + 1.
void addHalvingCase(std::vector<OpCase>& cases, std::mt19937& rng, DType t) {
  Aval m{Shape{2, 3}, t}, k{Shape{}, DType::I32};
  Body c("cond"), b("body");
  ir::ValueId cx = c.in(m);
  c.in(k);
  ir::ValueId norm = c.op(OpCode::ReduceSum, {c.op(OpCode::Mul, {cx, cx})}, ir::ReduceAttrs{{0, 1}});
  ir::ValueId x = b.in(m), kk = b.in(k);
  OpCase w;
  w.label = fmt::format("while_loop halving {}", dtypeName(t));
  w.op = OpCode::WhileLoop;
  w.attrs = ir::WhileAttrs{0, c.done({c.op(OpCode::Gt, {norm, c.constant(t, 0.01)})}),
                           b.done({b.op(OpCode::Mul, {x, b.full(m, 0.5)}),
                                   b.op(OpCode::Add, {kk, b.constant(DType::I32, 1)})})};
  w.inputs = {randomTensor(m, rng, -4, 4), HostTensor::fromValues(k, {0})};
  w.reference = [](const std::vector<HostTensor>& in) {
    HostTensor x = in[0], kk = in[1];
    auto norm = [&] {
      double s = 0;
      for (int64_t i = 0; i < x.numel(); ++i) s += x.get(i) * x.get(i);
      return s;
    };
    while (norm() > 0.01) {
      for (int64_t i = 0; i < x.numel(); ++i) x.set(i, x.get(i) * 0.5);
      kk.set(0, kk.get(0) + 1);
    }
    return std::vector<HostTensor>{x, kk};
  };
  cases.push_back(std::move(w));
}

// const limit i32[]; carries i i32[], acc f32[3]; while i < limit: i + 1, acc * 1.5 + 1.
void addCountingCase(std::vector<OpCase>& cases, std::mt19937& rng, int64_t limit) {
  Aval k{Shape{}, DType::I32}, v{Shape{3}, DType::F32};
  Body c("cond"), b("body");
  ir::ValueId cl = c.in(k), ci = c.in(k);
  c.in(v);
  b.in(k);
  ir::ValueId i = b.in(k), acc = b.in(v);
  ir::ValueId scaled = b.op(OpCode::Mul, {acc, b.full(v, 1.5)});
  OpCase w;
  w.label = fmt::format("while_loop counting to {}", limit);
  w.op = OpCode::WhileLoop;
  w.attrs = ir::WhileAttrs{1, c.done({c.op(OpCode::Lt, {ci, cl})}),
                           b.done({b.op(OpCode::Add, {i, b.constant(DType::I32, 1)}),
                                   b.op(OpCode::Add, {scaled, b.full(v, 1)})})};
  w.inputs = {HostTensor::fromValues(k, {static_cast<double>(limit)}), HostTensor::fromValues(k, {0}),
              randomTensor(v, rng)};
  w.reference = [](const std::vector<HostTensor>& in) {
    HostTensor i = in[1], acc = in[2];
    for (; i.get(0) < in[0].get(0); i.set(0, i.get(0) + 1))
      for (int64_t j = 0; j < 3; ++j) acc.set(j, acc.get(j) * 1.5 + 1);
    return std::vector<HostTensor>{i, acc};
  };
  cases.push_back(std::move(w));
}

// ---- custom_vjp_call ----

// primal (x, y) -> sin(x) * y; fwd -> (sin(x) * y, cos(x)); bwd (x, y, cos(x), g) -> (cos(x) * g * y, sin(x) * g).
void addCustomVjpCase(std::vector<OpCase>& cases, std::mt19937& rng, DType t) {
  Aval m{Shape{2, 3}, t};
  Body p("primal"), f("fwd"), b("bwd");
  ir::ValueId px = p.in(m), py = p.in(m), fx = f.in(m), fy = f.in(m);
  ir::ValueId bx = b.in(m), by = b.in(m), bc = b.in(m), bg = b.in(m);
  OpCase c;
  c.label = fmt::format("custom_vjp_call sin(x) * y {}", dtypeName(t));
  c.op = OpCode::CustomVjpCall;
  c.attrs = ir::CustomVjpAttrs{
      2, p.done({p.op(OpCode::Mul, {p.op(OpCode::Sin, {px}), py})}),
      f.done({f.op(OpCode::Mul, {f.op(OpCode::Sin, {fx}), fy}), f.op(OpCode::Cos, {fx})}),
      b.done({b.op(OpCode::Mul, {b.op(OpCode::Mul, {bc, bg}), by}), b.op(OpCode::Mul, {b.op(OpCode::Sin, {bx}), bg})})};
  c.inputs = {randomTensor(m, rng), randomTensor(m, rng)};
  c.reference = [](const std::vector<HostTensor>& in) {
    HostTensor r = HostTensor::zeros(in[0].aval);
    for (int64_t i = 0; i < r.numel(); ++i) r.set(i, std::sin(in[0].get(i)) * in[1].get(i));
    return std::vector<HostTensor>{r};
  };
  cases.push_back(std::move(c));
}

// ---- remat_call, optimization_barrier ----

// body (x [2,3], w [3,3]) -> tanh(x @ w) * x + sin(x), and x @ w itself when the policy keeps the matmuls.
void addRematCase(std::vector<OpCase>& cases, std::mt19937& rng, DType t, bool dotsSaveable) {
  Aval xa{Shape{2, 3}, t}, wa{Shape{3, 3}, t};
  Body b("remat");
  ir::ValueId x = b.in(xa), w = b.in(wa);
  ir::ValueId d = b.op(OpCode::DotGeneral, {x, w}, ir::DotGeneralAttrs{{1}, {0}, {}, {}});
  ir::ValueId out = b.op(OpCode::Add, {b.op(OpCode::Mul, {b.op(OpCode::Tanh, {d}), x}), b.op(OpCode::Sin, {x})});
  OpCase c;
  c.label = fmt::format("remat_call tanh(x @ w) * x + sin(x) {} {}", dtypeName(t),
                        dotsSaveable ? "dots_saveable" : "nothing_saveable");
  c.op = OpCode::RematCall;
  std::vector<ir::ValueId> outs{out};
  if (dotsSaveable) outs.push_back(d);
  c.attrs = ir::RematAttrs{1, dotsSaveable ? 1 : 0, dotsSaveable ? "dots_saveable" : "nothing_saveable", b.done(outs)};
  c.inputs = {randomTensor(xa, rng), randomTensor(wa, rng)};
  c.reference = [dotsSaveable](const std::vector<HostTensor>& in) {
    HostTensor r = HostTensor::zeros(in[0].aval), dot = HostTensor::zeros(in[0].aval);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < 3; ++k) acc += in[0].get(i * 3 + k) * in[1].get(k * 3 + j);
        dot.set(i * 3 + j, acc);
        const double xv = in[0].get(i * 3 + j);
        r.set(i * 3 + j, std::tanh(acc) * xv + std::sin(xv));
      }
    std::vector<HostTensor> outs{r};
    if (dotsSaveable) outs.push_back(dot);
    return outs;
  };
  cases.push_back(std::move(c));
}

// Operands of one dtype (what the gradient checks take) and of several.
void addBarrierCase(std::vector<OpCase>& cases, std::mt19937& rng, std::vector<Aval> avals) {
  OpCase c;
  c.label = "optimization_barrier " + ops::describeAvals(avals);
  c.op = OpCode::OptimizationBarrier;
  c.attrs = ir::NoAttrs{};
  for (const Aval& a : avals) c.inputs.push_back(randomTensor(a, rng));
  c.reference = [](const std::vector<HostTensor>& in) { return in; };
  cases.push_back(std::move(c));
}

}  // namespace

void addControlFlowCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::BF16})
    for (bool reverse : {false, true}) addCumsumCase(cases, rng, t, 6, reverse);
  addCumsumCase(cases, rng, DType::F32, 0, false);
  addCumsumCase(cases, rng, DType::F32, 1, true);
  for (bool reverse : {false, true}) addRecurrenceCase(cases, rng, reverse);
  for (double pred : {0.0, 1.0}) addCondCase(cases, rng, DType::Bool, pred);
  for (double pred : {0.0, 5.0, -1.0}) addCondCase(cases, rng, DType::I32, pred);
  for (int64_t start : {1, 6, 27}) addCollatzCase(cases, start);
  for (DType t : {DType::F32, DType::F64}) addHalvingCase(cases, rng, t);
  for (int64_t limit : {0, 4}) addCountingCase(cases, rng, limit);
  for (DType t : {DType::F32, DType::F64}) addCustomVjpCase(cases, rng, t);
  for (DType t : {DType::F32, DType::F64})
    for (bool dots : {false, true}) addRematCase(cases, rng, t, dots);
  for (DType t : {DType::F32, DType::F64})
    addBarrierCase(cases, rng, {Aval{Shape{2, 3}, t}, Aval{Shape{4}, t}, Aval{Shape{}, t}});
  addBarrierCase(cases, rng, {Aval{Shape{2, 3}, DType::F32}, Aval{Shape{4}, DType::I32}, Aval{Shape{}, DType::Bool}});
}

}  // namespace tsr::test
