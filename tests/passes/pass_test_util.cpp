#include "tests/passes/pass_test_util.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "engine/runtime/interpreter.h"

namespace tsr::test {

const ir::OpRegistry& reg() { return ops::registry(); }

std::vector<ir::ValueId> Builder::addMulti(ir::OpCode op, std::vector<ir::ValueId> operands, ir::Attrs attrs) {
  auto r = g.addNode(reg(), op, std::move(operands), std::move(attrs));
  if (!r.ok()) {
    std::fprintf(stderr, "test graph: %s\n", r.error().message.c_str());
    std::abort();
  }
  return *r;
}

ir::ValueId Builder::add(ir::OpCode op, std::vector<ir::ValueId> operands, ir::Attrs attrs, ir::Provenance prov) {
  auto r = g.addNode(reg(), op, std::move(operands), std::move(attrs), std::move(prov));
  if (!r.ok() || r->size() != 1) {
    std::fprintf(stderr, "test graph: %s\n", r.ok() ? "expected one result" : r.error().message.c_str());
    std::abort();
  }
  return (*r)[0];
}

ir::ValueId Builder::constant(const ir::Literal& lit) { return add(ir::OpCode::Constant, {}, ir::ConstantAttrs{lit}); }

ir::ValueId Builder::ramp(const Aval& a, double start, double step) {
  std::vector<uint8_t> bytes(static_cast<size_t>(a.bytes()));
  for (int64_t i = 0; i < a.numel(); ++i) {
    ir::Literal s = ir::Literal::scalar(a.dtype, start + step * static_cast<double>(i));
    std::memcpy(bytes.data() + i * dtypeSize(a.dtype), s.bytes(), static_cast<size_t>(dtypeSize(a.dtype)));
  }
  return constant(ir::Literal::fromBytes(a, bytes.data()));
}

ir::ValueId Builder::splat(double v, const Aval& a) {
  return add(ir::OpCode::BroadcastInDim, {scalar(v, a.dtype)}, ir::BroadcastInDimAttrs{a.shape.dims(), {}});
}

ir::Graph Builder::done(std::vector<ir::ValueId> outputs) {
  g.setOutputs(std::move(outputs));
  return g;
}

std::vector<runtime::BufferPtr> randomInputs(const ir::Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> real(-2, 2);
  std::vector<runtime::BufferPtr> out;
  for (ir::ValueId v : g.inputs()) {
    const Aval& a = g.aval(v);
    auto b = runtime::Buffer::allocate(a.bytes());
    if (!b.ok()) std::abort();
    auto* dst = static_cast<uint8_t*>((*b)->data());
    auto size = static_cast<size_t>(dtypeSize(a.dtype));
    for (int64_t i = 0; i < a.numel(); ++i) {
      double x = isFloating(a.dtype) ? real(rng) : a.dtype == DType::Bool ? double(rng() % 2) : double(rng() % 7);
      ir::Literal s = ir::Literal::scalar(a.dtype, x);
      std::memcpy(dst + static_cast<size_t>(i) * size, s.bytes(), size);
    }
    out.push_back(*b);
  }
  return out;
}

std::vector<double> toDoubles(const runtime::BufferPtr& b, const Aval& a) {
  ir::Literal lit = ir::Literal::fromBytes(a, b->data());
  std::vector<double> out;
  for (int64_t i = 0; i < a.numel(); ++i) out.push_back(lit.elementAsDouble(i));
  return out;
}

std::string compareResults(const ir::Graph& before, const ir::Graph& after, int seeds) {
  if (before.outputs().size() != after.outputs().size()) return "different number of outputs";
  for (int s = 0; s < seeds; ++s) {
    auto in = randomInputs(before, 1234u + static_cast<uint32_t>(s));
    auto a = runtime::interpret(before, reg(), in);
    auto b = runtime::interpret(after, reg(), in);
    if (!a.ok()) return "before: " + a.error().message;
    if (!b.ok()) return "after: " + b.error().message;
    for (size_t o = 0; o < a->size(); ++o) {
      const Aval& av = before.aval(before.outputs()[o]);
      if (!(av == after.aval(after.outputs()[o]))) return fmt::format("output {}: aval changed", o);
      auto x = toDoubles((*a)[o], av), y = toDoubles((*b)[o], av);
      for (size_t i = 0; i < x.size(); ++i) {
        bool same = x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]));
        if (!same) return fmt::format("output {} element {}: {} before, {} after", o, i, x[i], y[i]);
      }
    }
  }
  return "";
}

PassRun runPass(passes::Pass& pass, ir::Graph& g, passes::PassContext& ctx) {
  PassRun r;
  if (auto st = ir::verify(g, reg()); !st.ok()) {
    r.error = "input graph invalid: " + st.error().message;
    return r;
  }
  auto changed = pass.run(g, ctx);
  if (!changed.ok()) {
    r.error = changed.error().message;
    return r;
  }
  r.changed = *changed;
  if (auto st = ir::verify(g, reg()); !st.ok())
    r.error = "after the pass: " + st.error().message + "\n" + printGraph(g);
  return r;
}

int countOp(const ir::Graph& g, ir::OpCode op) { return g.count(op); }

std::string printGraph(const ir::Graph& g) { return ir::print(g, reg()); }

}  // namespace tsr::test
