#pragma once
// Helpers for the pass tests: a terse graph builder, random inputs, and a check that a pass leaves results
// unchanged (the graph is run before and after with the reference interpreter on the same random inputs).
#include <random>
#include <string>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/passes/pass.h"
#include "engine/runtime/buffer.h"

namespace tsr::test {

const ir::OpRegistry& reg();

inline Aval f32(Shape s) { return Aval{std::move(s), DType::F32}; }
inline Aval i32(Shape s) { return Aval{std::move(s), DType::I32}; }

inline ir::BroadcastInDimAttrs bcast(std::vector<int64_t> shape, std::vector<int64_t> dims) {
  ir::BroadcastInDimAttrs a;
  a.shape = std::move(shape);
  a.broadcastDims = std::move(dims);
  return a;
}
inline ir::ReduceAttrs axes(std::vector<int64_t> ax) {
  ir::ReduceAttrs a;
  a.axes = std::move(ax);
  return a;
}

// Builds graphs by hand; every add() must succeed (a typo in a test aborts with the infer message).
class Builder {
 public:
  explicit Builder(std::string name = "test") { g.name = std::move(name); }
  ir::ValueId input(const Aval& a) { return g.addInput(a); }
  ir::ValueId add(ir::OpCode op, std::vector<ir::ValueId> operands, ir::Attrs attrs = ir::NoAttrs{},
                  ir::Provenance prov = {});
  std::vector<ir::ValueId> addMulti(ir::OpCode op, std::vector<ir::ValueId> operands, ir::Attrs attrs = ir::NoAttrs{});
  ir::ValueId constant(const ir::Literal& lit);
  ir::ValueId scalar(double v, DType dtype = DType::F32) { return constant(ir::Literal::scalar(dtype, v)); }
  // A constant of the given aval with elements start, start + step, ...
  ir::ValueId ramp(const Aval& a, double start, double step);
  // broadcast_in_dim of a scalar constant: what fullLike gives.
  ir::ValueId splat(double v, const Aval& a);
  ir::Graph done(std::vector<ir::ValueId> outputs);

  ir::Graph g;
};

// Random values suited to each input's dtype (floats in [-2, 2], small integers, bools).
std::vector<runtime::BufferPtr> randomInputs(const ir::Graph& g, uint32_t seed);
std::vector<double> toDoubles(const runtime::BufferPtr& b, const Aval& a);

// Runs `before` and `after` on the same random inputs (several seeds) and returns "" when every output is
// equal (exactly: passes do not reassociate; -0.0 equals 0.0 and NaN equals NaN), else what differs.
std::string compareResults(const ir::Graph& before, const ir::Graph& after, int seeds = 3);

// Runs one pass on g with verification before and after; returns the changed flag. Fails the test on error.
struct PassRun {
  bool changed = false;
  std::string error;  // non-empty: the pass or verify failed
};
PassRun runPass(passes::Pass& pass, ir::Graph& g, passes::PassContext& ctx);

int countOp(const ir::Graph& g, ir::OpCode op);
std::string printGraph(const ir::Graph& g);

}  // namespace tsr::test
