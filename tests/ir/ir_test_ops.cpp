#include "tests/ir/ir_test_ops.h"

#include <cstring>

#include "engine/core/check.h"
#include "engine/ir/host_callback.h"

namespace tsr::test {

namespace {

using ir::Attrs;
using ir::OpCode;
using Avals = std::vector<Aval>;

ir::OpDef stub(OpCode code, int numOperands, int numResults, ir::InferFn infer) {
  ir::OpDef d;
  d.code = code;
  d.name = ir::coreOpName(code);
  d.family = "ir-test";
  d.numOperands = numOperands;
  d.numResults = numResults;
  d.attrsIndex = ir::coreAttrsIndex(code);
  d.infer = std::move(infer);
  return d;
}

Result<Avals> inferAdd(std::span<const Aval> in, const Attrs&) {
  if (!(in[0] == in[1]))
    return makeError("add: operands must have equal avals, got {} and {}", in[0].toString(), in[1].toString());
  return Avals{in[0]};
}

Result<Avals> inferSlice(std::span<const Aval> in, const Attrs& attrs) {
  const auto& a = std::get<ir::SliceAttrs>(attrs);
  auto rank = static_cast<size_t>(in[0].rank());
  if (a.starts.size() != rank || a.limits.size() != rank || a.strides.size() != rank)
    return makeError("slice: starts, limits and strides need one entry per dim of {}", in[0].toString());
  Aval out{Shape{}, in[0].dtype};
  for (size_t i = 0; i < rank; ++i) {
    if (a.strides[i] < 1 || a.starts[i] < 0 || a.limits[i] < a.starts[i] || a.limits[i] > in[0].shape.dims()[i])
      return makeError("slice: bad bounds for dim {} of {}", i, in[0].toString());
    out.shape.dims().push_back((a.limits[i] - a.starts[i] + a.strides[i] - 1) / a.strides[i]);
  }
  return Avals{out};
}

Result<Avals> inferConcatenate(std::span<const Aval> in, const Attrs& attrs) {
  int axis = normalizeAxis(std::get<ir::ConcatenateAttrs>(attrs).axis, in[0].rank());
  if (axis < 0) return makeError("concatenate: axis out of range for {}", in[0].toString());
  Aval out = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].rank() != out.rank() || in[i].dtype != out.dtype)
      return makeError("concatenate: {} does not match {}", in[i].toString(), in[0].toString());
    out.shape[axis] += in[i].shape[axis];
  }
  return Avals{out};
}

Result<Avals> inferIota(std::span<const Aval>, const Attrs& attrs) {
  const auto& a = std::get<ir::IotaAttrs>(attrs);
  if (a.dimension < 0 || a.dimension >= static_cast<int64_t>(a.shape.size()))
    return makeError("iota: dimension {} out of range", a.dimension);
  return Avals{Aval{Shape(a.shape), a.dtype}};
}

Result<Avals> inferThreefry(std::span<const Aval> in, const Attrs&) {
  for (const Aval& a : in)
    if (!(a == in[0]) || a.dtype != DType::U32)
      return makeError("threefry2x32: operands must be four equal u32 arrays");
  return Avals{in[0], in[0]};
}

Aval f32(Shape s) { return avalOf(DType::F32, std::move(s)); }

ir::OpRegistry makeRegistry() {
  ir::OpRegistry reg;
  auto add = [&](ir::OpDef d) { TSR_CHECK(reg.add(std::move(d)).ok()); };
  add(stub(OpCode::Add, 2, 1, inferAdd));
  add(stub(OpCode::Relu, 1, 1, [](std::span<const Aval> in, const Attrs&) -> Result<Avals> { return Avals{in[0]}; }));
  add(stub(OpCode::Convert, 1, 1, [](std::span<const Aval> in, const Attrs& attrs) -> Result<Avals> {
    return Avals{Aval{in[0].shape, std::get<ir::ConvertAttrs>(attrs).dtype}};
  }));
  add(stub(OpCode::Slice, 1, 1, inferSlice));
  ir::OpDef concat = stub(OpCode::Concatenate, -1, 1, inferConcatenate);
  concat.minOperands = 1;
  add(std::move(concat));
  add(stub(OpCode::Iota, 0, 1, inferIota));
  add(stub(OpCode::Constant, 0, 1, [](std::span<const Aval>, const Attrs& attrs) -> Result<Avals> {
    return Avals{std::get<ir::ConstantAttrs>(attrs).value.aval};
  }));
  add(stub(OpCode::Threefry2x32, 4, 2, inferThreefry));
  return reg;
}

// scan's body: (c, h, x) -> (tanh(h * c + x), h * c + x), all f32[2,3]; one node with provenance.
ir::GraphPtr scanBody() {
  auto g = std::make_shared<ir::Graph>();
  g->name = "body";
  const Aval x = f32({2, 3});
  ir::ValueId c = g->addInput(x), h = g->addInput(x), xs = g->addInput(x);
  ir::ValueId m = g->addNodeWithAvals(OpCode::Mul, {h, c}, ir::NoAttrs{}, {x})[0];
  ir::ValueId s = g->addNodeWithAvals(OpCode::Add, {m, xs}, ir::NoAttrs{}, {x}, ir::Provenance{"cell", "rnn.cpp", 9})[0];
  ir::ValueId t = g->addNodeWithAvals(OpCode::Tanh, {s}, ir::NoAttrs{}, {x})[0];
  g->setOutputs({t, s});
  return g;
}

// A cond branch: (x) -> (op(x)) on f32[2,3].
ir::GraphPtr unaryBranch(const char* name, OpCode op) {
  auto g = std::make_shared<ir::Graph>();
  g->name = name;
  ir::ValueId x = g->addInput(f32({2, 3}));
  g->setOutputs(g->addNodeWithAvals(op, {x}, ir::NoAttrs{}, {f32({2, 3})}));
  return g;
}

// while_loop's graphs on (c, h), both f32[2,3]: cond any(h > c) -> bool[]; body h * c.
ir::GraphPtr whileGraph(bool isCond) {
  auto g = std::make_shared<ir::Graph>();
  g->name = isCond ? "cond" : "body";
  const Aval x = f32({2, 3});
  ir::ValueId c = g->addInput(x), h = g->addInput(x);
  if (isCond) {
    ir::ValueId gt = g->addNodeWithAvals(OpCode::Gt, {h, c}, ir::NoAttrs{}, {avalOf(DType::Bool, {2, 3})})[0];
    g->setOutputs(g->addNodeWithAvals(OpCode::ReduceOr, {gt}, ir::ReduceAttrs{{0, 1}}, {avalOf(DType::Bool, {})}));
  } else {
    g->setOutputs(g->addNodeWithAvals(OpCode::Mul, {h, c}, ir::NoAttrs{}, {x}));
  }
  return g;
}

// custom_vjp_call's fwd (x) -> (sin(x), cos(x)) and bwd (x, cos(x), g) -> cos(x) * g, on f32[2,3].
ir::GraphPtr customVjpGraph(bool isFwd) {
  auto g = std::make_shared<ir::Graph>();
  g->name = isFwd ? "fwd" : "bwd";
  const Aval x = f32({2, 3});
  ir::ValueId in = g->addInput(x);
  if (isFwd) {
    g->setOutputs({g->addNodeWithAvals(OpCode::Sin, {in}, ir::NoAttrs{}, {x})[0],
                   g->addNodeWithAvals(OpCode::Cos, {in}, ir::NoAttrs{}, {x})[0]});
  } else {
    ir::ValueId res = g->addInput(x), ct = g->addInput(x);
    g->setOutputs(g->addNodeWithAvals(OpCode::Mul, {res, ct}, ir::NoAttrs{}, {x}));
  }
  return g;
}

}  // namespace

const ir::OpRegistry& irTestRegistry() {
  static const ir::OpRegistry reg = makeRegistry();
  return reg;
}

ir::Literal literalFromBits(DType dtype, Shape shape, const std::vector<uint64_t>& bits) {
  auto size = static_cast<size_t>(dtypeSize(dtype));
  std::vector<uint8_t> bytes(bits.size() * size);
  for (size_t i = 0; i < bits.size(); ++i) std::memcpy(bytes.data() + i * size, &bits[i], size);  // little-endian host
  return ir::Literal::fromBytes(Aval{std::move(shape), dtype}, bytes.data());
}

namespace {

// A live callback (the attrs hold it, so a printed graph parses back while the example lives); never run here.
OpExample hostCallbackExample(std::vector<Aval> operands, std::vector<Aval> results, bool effectful) {
  ir::HostCallback cb;
  cb.name = effectful ? "example_effect" : "example_pure";
  cb.operands = operands;
  cb.results = std::move(results);
  cb.effectful = effectful;
  cb.fn = [](std::span<const ir::TensorView>, std::span<const ir::MutableTensorView>) {};
  ir::HostCallbackPtr ptr = ir::makeHostCallback(std::move(cb));
  return {std::move(operands), ir::HostCallbackAttrs{ptr->id, ptr}};
}

}  // namespace

std::map<std::string, std::vector<OpExample>> coreOpExamples() {
  std::map<std::string, std::vector<OpExample>> t;
  const Aval x = f32({2, 3});
  const Aval b = avalOf(DType::Bool, {2, 3});
  const Aval i = avalOf(DType::I32, {2, 3});
  const Aval u = avalOf(DType::U32, {2, 3});
  const Aval idx = avalOf(DType::I32, {});
  for (const char* op : {"neg", "abs", "sign", "exp", "exp2", "log", "log1p", "expm1", "sqrt", "rsqrt", "tanh",
                         "logistic", "sin", "cos", "tan", "erf", "erf_inv", "floor", "ceil", "round", "is_finite",
                         "relu", "square", "lgamma", "digamma", "stop_gradient"})
    t[op] = {{{x}, ir::NoAttrs{}}};
  t["integer_pow"] = {{{x}, ir::IntegerPowAttrs{3}}, {{x}, ir::IntegerPowAttrs{-2}}};
  t["not"] = {{{b}, ir::NoAttrs{}}, {{i}, ir::NoAttrs{}}, {{u}, ir::NoAttrs{}}};
  for (const char* op : {"add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2", "eq", "ne", "lt", "le",
                         "gt", "ge"})
    t[op] = {{{x, x}, ir::NoAttrs{}}};
  for (const char* op : {"and", "or", "xor"}) t[op] = {{{b, b}, ir::NoAttrs{}}, {{i, i}, ir::NoAttrs{}}, {{u, u}, ir::NoAttrs{}}};
  for (const char* op : {"shift_left", "shift_right_logical", "shift_right_arithmetic"})
    t[op] = {{{i, i}, ir::NoAttrs{}}, {{u, u}, ir::NoAttrs{}}};
  t["select"] = {{{b, x, x}, ir::NoAttrs{}}};
  t["clamp"] = {{{x, x, x}, ir::NoAttrs{}}, {{f32({}), x, f32({})}, ir::NoAttrs{}}};
  t["convert"] = {{{x}, ir::ConvertAttrs{DType::I32}}};
  t["bitcast_convert"] = {{{x}, ir::ConvertAttrs{DType::U32}}, {{x}, ir::ConvertAttrs{DType::I32}}};
  t["broadcast_in_dim"] = {{{f32({3})}, ir::BroadcastInDimAttrs{{2, 3}, {1}}}};
  t["reshape"] = {{{x}, ir::ReshapeAttrs{{3, 2}}}};
  t["transpose"] = {{{x}, ir::TransposeAttrs{{1, 0}}}};
  t["slice"] = {{{f32({4, 6})}, ir::SliceAttrs{{1, 0}, {3, 6}, {1, 2}}}};
  t["dynamic_slice"] = {{{f32({4, 6}), idx, idx}, ir::DynamicSliceAttrs{{2, 3}}}};
  t["dynamic_update_slice"] = {{{f32({4, 6}), x, idx, idx}, ir::NoAttrs{}}};
  t["concatenate"] = {{{x, f32({4, 3})}, ir::ConcatenateAttrs{0}}};
  t["pad"] = {{{x, f32({})}, ir::PadAttrs{{1, 0}, {0, 2}, {1, 0}}}};
  t["iota"] = {{{}, ir::IotaAttrs{{2, 3}, DType::I32, 1}}};
  t["rev"] = {{{x}, ir::RevAttrs{{0}}}};
  for (const char* op : {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod"})
    t[op] = {{{f32({2, 3, 4})}, ir::ReduceAttrs{{1}}}};
  for (const char* op : {"reduce_and", "reduce_or"}) t[op] = {{{avalOf(DType::Bool, {2, 3, 4})}, ir::ReduceAttrs{{1}}}};
  for (const char* op : {"cumsum", "cumprod", "cummax", "cumlogsumexp"})
    t[op] = {{{x}, ir::CumulativeAttrs{1, false}}, {{x}, ir::CumulativeAttrs{0, true}}};
  t["sort"] = {{{x}, ir::SortAttrs{1, true, 1}}, {{x, i, b}, ir::SortAttrs{0, false, 2}}};
  t["top_k"] = {{{x}, ir::TopKAttrs{2}}};
  for (const char* op : {"argmax", "argmin"}) t[op] = {{{x}, ir::ArgReduceAttrs{1, DType::I32}}};
  t["dot_general"] = {{{f32({2, 3, 4}), f32({2, 4, 5})}, ir::DotGeneralAttrs{{2}, {1}, {0}, {0}}}};
  t["gather"] = {{{f32({5, 3}), avalOf(DType::I32, {4})}, ir::GatherAttrs{0, 0}}};
  for (const char* op : {"scatter_add", "scatter", "scatter_mul", "scatter_min", "scatter_max"})
    t[op] = {{{f32({5, 3}), avalOf(DType::I32, {4}), f32({4, 3})}, ir::GatherAttrs{0, 0}}};
  t["constant"] = {{{}, ir::ConstantAttrs{literalFromBits(DType::F32, {2}, {0x3fc00000u, 0xc0000000u})}}};
  const Aval key = avalOf(DType::U32, {4});
  t["threefry2x32"] = {{{key, key, key, key}, ir::NoAttrs{}}};
  t["scan"] = {{{x, x, f32({4, 2, 3})}, ir::ScanAttrs{4, 1, 1, true, scanBody()}}};
  t["cond"] = {{{avalOf(DType::Bool, {}), x},
                ir::CondAttrs{unaryBranch("true_branch", OpCode::Tanh), unaryBranch("false_branch", OpCode::Neg)}}};
  t["while_loop"] = {{{x, x}, ir::WhileAttrs{1, whileGraph(true), whileGraph(false)}}};
  t["custom_vjp_call"] = {
      {{x}, ir::CustomVjpAttrs{1, unaryBranch("primal", OpCode::Sin), customVjpGraph(true), customVjpGraph(false)}}};
  t["remat_call"] = {{{x}, ir::RematAttrs{0, 0, "nothing_saveable", unaryBranch("remat", OpCode::Tanh)}}};
  t["optimization_barrier"] = {{{x, avalOf(DType::I32, {4})}, ir::NoAttrs{}}};
  t["host_callback"] = {hostCallbackExample({x}, {f32({3})}, false), hostCallbackExample({x}, {}, true)};
  // Collectives on a 2x2 mesh: column groups [0, 2] and [1, 3].
  const ir::Ints columns = {0, 2, 1, 3};
  t["all_reduce"] = {{{x}, ir::AllReduceAttrs{columns, 2}}};
  t["all_gather"] = {{{x}, ir::AllGatherAttrs{columns, 2, 1}}};
  t["reduce_scatter"] = {{{f32({2, 4})}, ir::AllGatherAttrs{columns, 2, 1}}};
  t["all_to_all"] = {{{f32({2, 4})}, ir::AllToAllAttrs{columns, 2, 1, 0}}};
  t["collective_permute"] = {{{x}, ir::CollectivePermuteAttrs{{0, 1, 1, 2, 2, 3, 3, 0}}}};
  t["device_table"] = {{{}, ir::DeviceTableAttrs{{0, 4, 8, 12}, DType::I32}}};
  t["sharding_constraint"] = {{{x}, ir::ShardingConstraintAttrs{{2, 2}, "a,b", {0, 1, 2, 3}, "None,b"}}};
  // NHWC lhs and out, HWIO rhs; strided, padded, dilated, two feature groups.
  t["conv_general_dilated"] = {{{f32({2, 6, 5, 4}), f32({3, 3, 2, 6})},
                                ir::ConvAttrs{{2, 1}, {1, 0}, {1, 2}, {1, 2}, {1, 2}, 2, 1, {0, 3, 1, 2}, {3, 2, 0, 1},
                                              {0, 3, 1, 2}}}};
  // NHWC 3x3 windows, stride (2, 1), padded (1, 0) and (1, 1), dilated 2 along W.
  const ir::WindowAttrs window{{1, 3, 3, 1}, {1, 2, 1, 1}, {0, 1, 1, 0}, {0, 0, 1, 0}, {1, 1, 2, 1}};
  for (const char* op : {"reduce_window_sum", "reduce_window_max", "reduce_window_min"})
    t[op] = {{{f32({2, 6, 5, 4})}, window}};
  t["select_and_scatter_add"] = {{{f32({2, 3, 3, 4}), f32({2, 6, 5, 4})}, window}};
  // [batch 2, seq 5, heads 3, head_dim 4]; cross attention over 6 keys; the gradient with its rows [2, 3, 5].
  const Aval q = f32({2, 5, 3, 4}), kv = f32({2, 6, 3, 4}), rows = f32({2, 3, 5});
  // bf16 q, k and v (autocast) take f32 rows.
  const Aval qb{q.shape, DType::BF16};
  t["dot_product_attention"] = {{{q, q, q}, ir::AttentionAttrs{true}}, {{q, kv, kv}, ir::AttentionAttrs{false}},
                                {{qb, qb, qb}, ir::AttentionAttrs{true}}};
  t["dot_product_attention_grad"] = {{{q, q, q, q, rows, q, rows}, ir::AttentionAttrs{true}},
                                     {{qb, qb, qb, qb, rows, qb, rows}, ir::AttentionAttrs{true}}};
  const Aval nhwc{Shape{2, 3, 3, 4}, DType::F32}, ch{Shape{4}, DType::F32}, nchwCh{Shape{3}, DType::F32};
  const ir::BatchNormAttrs last{ir::Literal::scalar(DType::F64, 1e-5), 3}, second{ir::Literal::scalar(DType::F64, 1e-3), 1};
  t["batch_norm_training"] = {{{nhwc, ch, ch}, last}, {{nhwc, nchwCh, nchwCh}, second}};
  t["batch_norm_grad"] = {{{nhwc, ch, ch, ch, nhwc, ch, ch}, last}};
  // [batch 2, seq 5] rows of 7 classes, labels i32; the gradient with its rows' lse, dloss and dlse.
  const Aval logits = f32({2, 5, 7}), labels{Shape{2, 5}, DType::I32}, lossRows = f32({2, 5});
  t["softmax_cross_entropy"] = {{{logits, labels}, ir::NoAttrs{}}};
  t["softmax_cross_entropy_grad"] = {{{logits, labels, lossRows, lossRows, lossRows}, ir::NoAttrs{}}};
  // Linear algebra over a batch of 2 matrices 4x4; the right-hand sides 4x3 (left side) and 3x4.
  const Aval sq = f32({2, 4, 4});
  t["cholesky"] = {{{sq}, ir::NoAttrs{}}};
  t["lu"] = {{{sq}, ir::NoAttrs{}}};
  t["eigh"] = {{{sq}, ir::NoAttrs{}}};
  t["svd"] = {{{f32({2, 4, 3})}, ir::DecompositionAttrs{false, true}}, {{f32({3, 5})}, ir::DecompositionAttrs{true, true}},
              {{sq}, ir::DecompositionAttrs{false, false}}};
  t["qr"] = {{{f32({2, 4, 3})}, ir::DecompositionAttrs{false, true}}, {{f32({3, 5})}, ir::DecompositionAttrs{true, true}}};
  t["triangular_solve"] = {{{sq, f32({2, 4, 3})}, ir::TriangularSolveAttrs{true, true, false, false}},
                           {{sq, f32({2, 3, 4})}, ir::TriangularSolveAttrs{false, false, true, true}}};
  return t;
}

std::string buildOpGraph(const ir::OpRegistry& reg, const ir::OpDef& def, const std::vector<OpExample>& examples,
                         ir::Provenance prov, ir::Graph& out) {
  std::string errors;
  for (const OpExample& ex : examples) {
    ir::Graph g;
    g.name = def.name;
    std::vector<ir::ValueId> ins;
    for (const Aval& a : ex.operands) ins.push_back(g.addInput(a));
    auto res = g.addNode(reg, def.code, ins, ex.attrs, prov);
    if (!res.ok()) {
      errors += " [" + res.error().message + "]";
      continue;
    }
    g.setOutputs(*res);
    out = std::move(g);
    return "";
  }
  return "no example is valid:" + errors;
}

}  // namespace tsr::test
