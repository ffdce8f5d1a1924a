#pragma once
// A small registry of stand-ins for a few core ops (same names, codes and attrs kinds, simple infer rules,
// no kernels), so the text-form and verifier tests exercise every attribute field type and multi-result
// ops without depending on the op families, which have their own tests. The real ops are covered by the
// per-op example table below.
#include <map>
#include <string>
#include <vector>

#include "engine/ir/graph.h"

namespace tsr::test {

// add(x, y), relu(x), convert(x){dtype}, slice(x){starts,limits,strides}, concatenate(xs...){axis},
// iota(){shape,dtype,dimension}, constant(){value}, threefry2x32(a,b,c,d) -> 2 results.
const ir::OpRegistry& irTestRegistry();

inline Aval avalOf(DType dtype, Shape shape) { return Aval{std::move(shape), dtype}; }

// A literal from raw element bits (the low dtypeSize bytes of each), so tests can spell NaN payloads and -0.
ir::Literal literalFromBits(DType dtype, Shape shape, const std::vector<uint64_t>& bits);

// One valid use of a core op: operand avals and attrs. Where the dtypes a family accepts are its own design
// choice (bitwise ops on bool or integers) an op lists alternatives; the first its infer rule accepts is used.
struct OpExample {
  std::vector<Aval> operands;
  ir::Attrs attrs;
};
// Keyed by op name; covers all of op_list.inc (test_ir_text checks that).
std::map<std::string, std::vector<OpExample>> coreOpExamples();

// Builds into `out` one node of `def` on fresh inputs, its results the outputs. Returns "" or why none of
// the examples was valid.
std::string buildOpGraph(const ir::OpRegistry& reg, const ir::OpDef& def, const std::vector<OpExample>& examples,
                         ir::Provenance prov, ir::Graph& out);

}  // namespace tsr::test
