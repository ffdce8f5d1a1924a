// Every op's infer rule rejects bad operands with a message that names the op and the operand avals,
// and a bad op reached through a graph names the provenance too. Never a crash.
#include "tests/check.h"

#include "engine/ir/graph.h"
#include "engine/ops/registry.h"

using namespace tsr;
using namespace tsr::ir;

namespace {

Aval f32(std::initializer_list<int64_t> d) { return Aval{Shape(d), DType::F32}; }
Aval i32(std::initializer_list<int64_t> d) { return Aval{Shape(d), DType::I32}; }

struct BadCase {
  OpCode op;
  std::vector<Aval> operands;
  Attrs attrs;
  std::vector<std::string> mustMention;
};

}  // namespace

TEST_CASE("inferRejectsBadOperands") {
  const std::vector<BadCase> cases = {
      {OpCode::Add, {f32({2, 3}), f32({3})}, NoAttrs{}, {"add", "f32[2,3]", "f32[3]"}},
      {OpCode::Add, {f32({2}), i32({2})}, NoAttrs{}, {"add", "f32[2]", "i32[2]"}},
      {OpCode::Exp, {i32({2})}, NoAttrs{}, {"exp", "i32[2]"}},
      {OpCode::Select, {f32({2}), f32({2}), f32({2})}, NoAttrs{}, {"select", "f32[2]"}},
      {OpCode::ShiftLeft, {f32({2}), f32({2})}, NoAttrs{}, {"shift_left", "f32[2]"}},
      {OpCode::BitcastConvert, {f32({2})}, ConvertAttrs{DType::F16}, {"bitcast_convert", "f32[2]"}},
      {OpCode::DotGeneral, {f32({8, 784}), f32({1024, 10})}, DotGeneralAttrs{{1}, {0}, {}, {}},
       {"dot_general", "f32[8,784]", "f32[1024,10]", "784", "1024"}},
      {OpCode::DotGeneral, {f32({8, 4}), f32({4, 10})}, DotGeneralAttrs{{2}, {0}, {}, {}}, {"dot_general", "f32[8,4]"}},
      {OpCode::Reshape, {f32({2, 3})}, ReshapeAttrs{{4, 2}}, {"reshape", "f32[2,3]"}},
      {OpCode::Transpose, {f32({2, 3})}, TransposeAttrs{{0, 0}}, {"transpose", "f32[2,3]"}},
      {OpCode::BroadcastInDim, {f32({3})}, BroadcastInDimAttrs{{2, 4}, {1}}, {"broadcast_in_dim", "f32[3]"}},
      {OpCode::Slice, {f32({4})}, SliceAttrs{{1}, {6}, {1}}, {"slice", "f32[4]"}},
      {OpCode::Concatenate, {f32({2, 3}), f32({2, 4})}, ConcatenateAttrs{0}, {"concatenate", "f32[2,3]", "f32[2,4]"}},
      {OpCode::Pad, {f32({2}), f32({2})}, PadAttrs{{0}, {0}, {0}}, {"pad", "f32[2]"}},
      {OpCode::ReduceSum, {f32({2, 3})}, ReduceAttrs{{2}}, {"reduce_sum", "f32[2,3]"}},
      {OpCode::ReduceSum, {f32({2, 3})}, ReduceAttrs{{1, 1}}, {"reduce_sum", "f32[2,3]"}},
      {OpCode::Argmax, {f32({2, 3})}, ArgReduceAttrs{3, DType::I32}, {"argmax", "f32[2,3]"}},
      {OpCode::ReduceAnd, {f32({2, 3})}, ReduceAttrs{{1}}, {"reduce_and", "f32[2,3]", "bool"}},
      {OpCode::IntegerPow, {i32({2})}, IntegerPowAttrs{-2}, {"integer_pow", "i32[2]", "-2"}},
      {OpCode::Lgamma, {i32({2})}, NoAttrs{}, {"lgamma", "i32[2]"}},
      {OpCode::Cumsum, {f32({2, 3})}, CumulativeAttrs{2, false}, {"cumsum", "f32[2,3]", "axis 2"}},
      {OpCode::Cumlogsumexp, {i32({4})}, CumulativeAttrs{0, false}, {"cumlogsumexp", "i32[4]"}},
      {OpCode::Cumprod, {f32({})}, CumulativeAttrs{0, false}, {"cumprod", "f32[]"}},
      {OpCode::TopK, {f32({2, 3})}, TopKAttrs{5}, {"top_k", "f32[2,3]", "k = 5"}},
      {OpCode::Sort, {f32({2, 3}), f32({3, 2})}, SortAttrs{0, true, 1}, {"sort", "f32[2,3]", "f32[3,2]"}},
      {OpCode::Sort, {f32({2, 3})}, SortAttrs{2, true, 1}, {"sort", "f32[2,3]", "dimension 2"}},
      {OpCode::Sort, {f32({2, 3})}, SortAttrs{0, true, 2}, {"sort", "f32[2,3]", "num_keys 2"}},
      {OpCode::Gather, {f32({10, 4}), f32({3})}, GatherAttrs{0, 0}, {"gather", "f32[10,4]", "f32[3]"}},
      {OpCode::ScatterAdd, {f32({10, 4}), i32({3}), f32({3, 5})}, GatherAttrs{0, 0}, {"scatter_add", "f32[3,5]"}},
      {OpCode::Scatter, {f32({10, 4}), i32({3}), f32({3, 5})}, GatherAttrs{0, 0},
       {"scatter", "f32[10,4]", "f32[3,5]", "gathered shape [3,4]"}},
      {OpCode::ScatterMul, {f32({10, 4}), i32({3}), Aval{Shape{3, 4}, DType::F64}}, GatherAttrs{0, 0},
       {"scatter_mul", "f64[3,4]", "equal dtypes"}},
      {OpCode::ScatterMin, {Aval{Shape{4}, DType::Bool}, i32({2}), Aval{Shape{2}, DType::Bool}}, GatherAttrs{0, 0},
       {"scatter_min", "bool[4]", "numeric"}},
      {OpCode::ScatterMax, {f32({10, 4}), f32({3}), f32({3, 4})}, GatherAttrs{0, 0},
       {"scatter_max", "f32[3]", "indices must be"}},
      {OpCode::ScatterMax, {f32({10, 4}), i32({3}), f32({3, 4})}, GatherAttrs{2, 0}, {"scatter_max", "axis 2"}},
      {OpCode::DynamicSlice, {f32({4, 4}), i32({})}, DynamicSliceAttrs{{2, 2}}, {"dynamic_slice", "f32[4,4]"}},
      {OpCode::Threefry2x32, {f32({2}), f32({2}), f32({2}), f32({2})}, NoAttrs{}, {"threefry2x32", "f32[2]"}},
      {OpCode::ReduceWindowMax, {f32({4, 4})}, WindowAttrs{{5, 1}, {1, 1}, {0, 0}, {0, 0}, {1, 1}},
       {"reduce_window_max", "f32[4,4]", "larger than the padded operand"}},
      {OpCode::SelectAndScatterAdd, {f32({3, 3}), f32({4, 4})}, WindowAttrs{{2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}},
       {"select_and_scatter_add", "f32[3,3]", "f32[4,4]"}},
  };
  const auto& reg = ops::registry();
  for (const auto& c : cases) {
    const OpDef* def = reg.find(c.op);
    REQUIRE(def);
    auto r = def->infer(c.operands, c.attrs);
    REQUIRE_MESSAGE(!r.ok(), (def->name + " accepted bad operands"));
    for (const auto& word : c.mustMention)
      REQUIRE_MESSAGE(r.error().message.find(word) != std::string::npos,
                      (def->name + ": '" + r.error().message + "' lacks '" + word + "'"));
  }
}

TEST_CASE("graphErrorsNameProvenance") {
  Graph g;
  ValueId a = g.addInput(f32({2, 3}));
  ValueId b = g.addInput(f32({3, 2}));
  auto r = g.addNode(ops::registry(), OpCode::Add, {a, b}, NoAttrs{}, Provenance{"blocks.0.mlp", "model.cpp", 42});
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find("blocks.0.mlp @ model.cpp:42") != std::string::npos,
                  r.error().message.c_str());
  // Wrong attribute kind and bad operand ids are errors, not crashes.
  REQUIRE(!g.addNode(ops::registry(), OpCode::Add, {a, a}, ReduceAttrs{{0}}).ok());
  REQUIRE(!g.addNode(ops::registry(), OpCode::Add, {a, 99}, NoAttrs{}).ok());
}
