// The collective ops on 8 in-process devices (a 4x2 mesh: position = 2 * row + column), each device with its own
// input, through both the reference interpreter and the compiled CPU executable (after the standard pass
// pipeline), against naive references written here from the definitions in engine/ir/attrs.h. Plus the text
// round trip, infer errors, run-time errors that end the run instead of hanging it, the passes' treatment of
// collectives, vjp rules checked by the transpose identity sum_d <ct_d, f(x)_d> == sum_d <f^T(ct)_d, x_d>,
// and batching rules checked against a loop over examples.
#include "tests/check.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <regex>

#include <fmt/format.h>

#include "engine/backends/cpu/executable.h"
#include "engine/dist/communicator.h"
#include "engine/ops/registry.h"
#include "engine/passes/constant_folding.h"
#include "engine/passes/cse.h"
#include "engine/passes/fusion.h"
#include "engine/passes/pipeline.h"
#include "engine/runtime/interpreter.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"
#include "engine/transform/vmap.h"
#include "tests/ops/harness.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;

namespace {

constexpr int kDevices = 8;
using Group = std::vector<int>;
using Groups = std::vector<Group>;
using PerDevice = std::vector<HostTensor>;  // one tensor per device

const ir::OpRegistry& reg() { return ops::registry(); }

// The 4x2 mesh's groups: rows (2 members, the "column" axis), columns (4 members), and the columns listed in a
// permuted order, so that chunk order differs from position order.
const Groups kRows = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
const Groups kColumns = {{0, 2, 4, 6}, {1, 3, 5, 7}};
const Groups kPermutedColumns = {{6, 0, 4, 2}, {3, 7, 1, 5}};

struct NamedGroups {
  const char* name;
  Groups groups;
};
const std::vector<NamedGroups> kGroupings = {
    {"rows", kRows}, {"columns", kColumns}, {"permuted columns", kPermutedColumns}};

ir::Ints flatten(const Groups& groups) {
  ir::Ints flat;
  for (const Group& g : groups) flat.insert(flat.end(), g.begin(), g.end());
  return flat;
}

const Group& groupOf(const Groups& groups, int p) {
  for (const Group& g : groups)
    if (std::find(g.begin(), g.end(), p) != g.end()) return g;
  TSR_FATAL("device " << p << " is in no group");
}

int indexIn(const Group& g, int p) { return static_cast<int>(std::find(g.begin(), g.end(), p) - g.begin()); }

// ---- naive references, element by element

// The group-order sum of the values, accumulated as the communicators do: f64 in double, other floats in
// float, integers exactly (the test's small integers never overflow).
double groupSum(DType t, const std::vector<double>& values) {
  if (t == DType::F64) {
    double acc = values[0];
    for (size_t i = 1; i < values.size(); ++i) acc += values[i];
    return acc;
  }
  if (isFloating(t)) {
    float acc = static_cast<float>(values[0]);
    for (size_t i = 1; i < values.size(); ++i) acc += static_cast<float>(values[i]);
    return acc;
  }
  double acc = 0;
  for (double v : values) acc += v;
  return acc;
}

PerDevice refAllReduce(const PerDevice& x, const Groups& groups) {
  PerDevice out;
  for (int p = 0; p < kDevices; ++p) {
    HostTensor y = HostTensor::zeros(x[p].aval);
    for (int64_t e = 0; e < y.numel(); ++e) {
      std::vector<double> v;
      for (int m : groupOf(groups, p)) v.push_back(x[m].get(e));
      y.set(e, groupSum(y.aval.dtype, v));
    }
    out.push_back(y);
  }
  return out;
}

// out[..., j*D + k, ...] = member j's x[..., k, ...].
PerDevice refAllGather(const PerDevice& x, const Groups& groups, int dim) {
  PerDevice out;
  for (int p = 0; p < kDevices; ++p) {
    const Group& g = groupOf(groups, p);
    Aval a = x[p].aval;
    const int64_t d = a.shape[dim];
    a.shape[dim] *= static_cast<int64_t>(g.size());
    HostTensor y = HostTensor::zeros(a);
    for (int64_t e = 0; e < y.numel(); ++e) {
      auto idx = unravel(e, a.shape);
      const int j = static_cast<int>(idx[dim] / d);
      idx[dim] %= d;
      y.setBits(e, x[g[j]].getBits(ravel(idx, x[p].aval.shape)));
    }
    out.push_back(y);
  }
  return out;
}

// out[..., k, ...] = sum over members m of x_m[..., me*D + k, ...].
PerDevice refReduceScatter(const PerDevice& x, const Groups& groups, int dim) {
  PerDevice out;
  for (int p = 0; p < kDevices; ++p) {
    const Group& g = groupOf(groups, p);
    Aval a = x[p].aval;
    a.shape[dim] /= static_cast<int64_t>(g.size());
    HostTensor y = HostTensor::zeros(a);
    for (int64_t e = 0; e < y.numel(); ++e) {
      auto idx = unravel(e, a.shape);
      idx[dim] += indexIn(g, p) * a.shape[dim];
      std::vector<double> v;
      for (int m : g) v.push_back(x[m].get(ravel(idx, x[p].aval.shape)));
      y.set(e, groupSum(a.dtype, v));
    }
    out.push_back(y);
  }
  return out;
}

// out (chunk shape C = x with split/n, then concat*n): out[o] with j = o[c] / C[c] is member j's x at o with
// o[c] %= C[c] and o[s] += me * C[s].
PerDevice refAllToAll(const PerDevice& x, const Groups& groups, int split, int concat) {
  PerDevice out;
  for (int p = 0; p < kDevices; ++p) {
    const Group& g = groupOf(groups, p);
    const auto n = static_cast<int64_t>(g.size());
    Shape chunk = x[p].aval.shape;
    chunk[split] /= n;
    Aval a{chunk, x[p].aval.dtype};
    a.shape[concat] *= n;
    HostTensor y = HostTensor::zeros(a);
    for (int64_t e = 0; e < y.numel(); ++e) {
      auto idx = unravel(e, a.shape);
      const int j = static_cast<int>(idx[concat] / chunk[concat]);
      idx[concat] %= chunk[concat];
      idx[split] += indexIn(g, p) * chunk[split];
      y.setBits(e, x[g[j]].getBits(ravel(idx, x[p].aval.shape)));
    }
    out.push_back(y);
  }
  return out;
}

PerDevice refPermute(const PerDevice& x, const std::vector<std::pair<int, int>>& pairs) {
  PerDevice out;
  for (int p = 0; p < kDevices; ++p) {
    HostTensor y = HostTensor::zeros(x[p].aval);
    for (auto [s, t] : pairs)
      if (t == p) y = x[s];
    out.push_back(y);
  }
  return out;
}

// ---- running per-device programs

enum class Mode { Interpreted, Compiled };
const char* modeName(Mode m) { return m == Mode::Interpreted ? "interpreter" : "compiled"; }

// Runs g on 8 devices, device p on inputs[i][p] for each graph input i; returns outputs[o][p]. Compiled: the
// standard pipeline, then fusion and the executable (freed memory poisoned), compiled once and run by all
// devices at the same time.
Result<std::vector<PerDevice>> runSpmd(const ir::Graph& g, const std::vector<PerDevice>& inputs, Mode mode) {
  ir::Graph program = g;
  std::unique_ptr<cpu::Executable> exe;
  if (mode == Mode::Compiled) {
    passes::PassContext ctx(reg());
    TSR_TRY(passes::standardPipeline().run(program, ctx));
    TSR_ASSIGN(auto plan, passes::planFusion(program, reg()));
    cpu::CompileOptions options;
    options.poisonFreed = true;
    TSR_ASSIGN(exe, cpu::Executable::compile(program, reg(), plan, options));
  }
  std::vector<PerDevice> outputs(g.outputs().size(), PerDevice(kDevices));
  auto comm = dist::makeInProcessCommunicator(kDevices);
  Status st = dist::runOnDevices(*comm, [&](int p) -> Status {
    std::vector<runtime::BufferPtr> bufs;
    for (const PerDevice& in : inputs) bufs.push_back(toBuffer(in[p]));
    auto r = mode == Mode::Interpreted ? runtime::interpret(program, reg(), bufs) : exe->run(bufs);
    if (!r.ok()) return r.takeError();
    for (size_t o = 0; o < r->size(); ++o) outputs[o][p] = fromBuffer((*r)[o], program.aval(program.outputs()[o]));
    return Status{};
  });
  if (!st.ok()) return st.takeError();
  return outputs;
}

ir::Graph oneOp(OpCode op, const Aval& in, ir::Attrs attrs) {
  ir::Graph g;
  g.name = "spmd";
  ir::ValueId x = g.addInput(in);
  auto r = g.addNode(reg(), op, {x}, std::move(attrs));
  if (!r.ok()) TSR_FATAL(r.error().message);
  g.setOutputs(*r);
  return g;
}

PerDevice randomPerDevice(const Aval& a, std::mt19937& rng) {
  PerDevice x;
  for (int p = 0; p < kDevices; ++p) x.push_back(randomTensor(a, rng));
  return x;
}

// "" when every device's output equals the reference bit for bit, else the first difference.
std::string compare(const PerDevice& got, const PerDevice& want) {
  for (int p = 0; p < kDevices; ++p) {
    if (!(got[p].aval == want[p].aval))
      return fmt::format("device {}: {} instead of {}", p, got[p].aval.toString(), want[p].aval.toString());
    for (int64_t e = 0; e < want[p].numel(); ++e)
      if (got[p].getBits(e) != want[p].getBits(e))
        return fmt::format("device {} element {}: {} instead of {}", p, e, got[p].get(e), want[p].get(e));
  }
  return "";
}

// Runs the one-op program in both modes and compares with the reference.
void checkOp(const std::string& what, OpCode op, const ir::Attrs& attrs, const PerDevice& x, const PerDevice& want) {
  ir::Graph g = oneOp(op, x[0].aval, attrs);
  for (Mode mode : {Mode::Interpreted, Mode::Compiled}) {
    auto got = runSpmd(g, {x}, mode);
    REQUIRE_MESSAGE(got.ok(),
                    fmt::format("{} ({}): {}", what, modeName(mode), got.ok() ? "" : got.error().message).c_str());
    std::string diff = compare((*got)[0], want);
    REQUIRE_MESSAGE(diff.empty(), fmt::format("{} ({}): {}", what, modeName(mode), diff).c_str());
  }
}

double dot(const HostTensor& a, const HostTensor& b) {
  double s = 0;
  for (int64_t e = 0; e < a.numel(); ++e) s += a.get(e) * b.get(e);
  return s;
}

}  // namespace

TEST_CASE("allReduceOverMeshGroups") {
  std::mt19937 rng(1);
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::I32})
    for (const auto& [name, groups] : kGroupings) {
      PerDevice x = randomPerDevice(Aval{Shape{5, 3}, t}, rng);
      checkOp(fmt::format("all_reduce {} over {}", dtypeName(t), name), OpCode::AllReduce,
              ir::AllReduceAttrs{flatten(groups), static_cast<int64_t>(groups[0].size())}, x,
              refAllReduce(x, groups));
    }
}

// Along dim 0 (the communicator's own layout), a middle dim and the last dim (packed around the call).
TEST_CASE("allGatherAlongEachDim") {
  std::mt19937 rng(2);
  for (int dim : {0, 1, 2})
    for (const auto& [name, groups] : kGroupings) {
      PerDevice x = randomPerDevice(Aval{Shape{2, 3, 4}, DType::F32}, rng);
      checkOp(fmt::format("all_gather dim {} over {}", dim, name), OpCode::AllGather,
              ir::AllGatherAttrs{flatten(groups), static_cast<int64_t>(groups[0].size()), dim}, x,
              refAllGather(x, groups, dim));
    }
}

TEST_CASE("reduceScatterAlongEachDim") {
  std::mt19937 rng(3);
  for (DType t : {DType::F32, DType::I32})
    for (int dim : {0, 1, 2})
      for (const auto& [name, groups] : kGroupings) {
        PerDevice x = randomPerDevice(Aval{Shape{4, 8, 4}, t}, rng);
        checkOp(fmt::format("reduce_scatter {} dim {} over {}", dtypeName(t), dim, name), OpCode::ReduceScatter,
                ir::AllGatherAttrs{flatten(groups), static_cast<int64_t>(groups[0].size()), dim}, x,
                refReduceScatter(x, groups, dim));
      }
}

TEST_CASE("allToAllSplitsAndConcatenates") {
  std::mt19937 rng(4);
  const std::vector<std::pair<int, int>> dims = {{0, 0}, {1, 1}, {0, 1}, {1, 0}, {2, 1}, {1, 2}, {0, 2}};
  for (auto [split, concat] : dims)
    for (const auto& [name, groups] : kGroupings) {
      PerDevice x = randomPerDevice(Aval{Shape{4, 8, 4}, DType::F32}, rng);
      checkOp(fmt::format("all_to_all split {} concat {} over {}", split, concat, name), OpCode::AllToAll,
              ir::AllToAllAttrs{flatten(groups), static_cast<int64_t>(groups[0].size()), split, concat}, x,
              refAllToAll(x, groups, split, concat));
    }
}

// A ring each way, and a partial permutation where devices that no pair targets get zeros.
TEST_CASE("collectivePermute") {
  std::mt19937 rng(5);
  std::vector<std::pair<int, int>> right, left, partial = {{0, 5}, {5, 0}, {3, 3}, {6, 1}};
  for (int p = 0; p < kDevices; ++p) {
    right.push_back({p, (p + 1) % kDevices});
    left.push_back({p, (p + kDevices - 1) % kDevices});
  }
  for (const auto* pairs : {&right, &left, &partial})
    for (DType t : {DType::F32, DType::Bool}) {
      ir::Ints flat;
      for (auto [s, d] : *pairs) flat.insert(flat.end(), {s, d});
      PerDevice x = randomPerDevice(Aval{Shape{3, 5}, t}, rng);
      checkOp(fmt::format("collective_permute {}", dtypeName(t)), OpCode::CollectivePermute,
              ir::CollectivePermuteAttrs{flat}, x, refPermute(x, *pairs));
    }
}

TEST_CASE("deviceTableGivesEachDeviceItsEntry") {
  for (DType t : {DType::I32, DType::F32, DType::I64}) {
    ir::Graph g;
    auto r = g.addNode(reg(), OpCode::DeviceTable, {}, ir::DeviceTableAttrs{{0, 3, 6, 9, 12, 15, 18, 21}, t});
    REQUIRE(r.ok());
    g.setOutputs(*r);
    for (Mode mode : {Mode::Interpreted, Mode::Compiled}) {
      auto got = runSpmd(g, {}, mode);
      REQUIRE_MESSAGE(got.ok(), got.error().message);
      for (int p = 0; p < kDevices; ++p) TSR_COMPARE((*got)[0][p].get(0), 3.0 * p);
    }
  }
}

// How a sharded program finds its shard: gather the columns' shards, then cut out its own with
// dynamic_slice at the offset device_table gives (its row * 2); the result is its own input (times 2, an
// elementwise op the compiler fuses with the slice).
TEST_CASE("shardOffsetsFromDeviceTable") {
  std::mt19937 rng(6);
  ir::Graph g;
  ir::ValueId x = g.addInput(Aval{Shape{2, 3}, DType::F32});
  auto add = [&](OpCode op, std::vector<ir::ValueId> operands, ir::Attrs attrs) {
    auto r = g.addNode(reg(), op, std::move(operands), std::move(attrs));
    if (!r.ok()) TSR_FATAL(r.error().message);
    return (*r)[0];
  };
  ir::ValueId gathered = add(OpCode::AllGather, {x}, ir::AllGatherAttrs{flatten(kColumns), 4, 0});  // [8, 3]
  ir::ValueId offset = add(OpCode::DeviceTable, {}, ir::DeviceTableAttrs{{0, 0, 2, 2, 4, 4, 6, 6}, DType::I32});
  ir::ValueId zero = add(OpCode::Constant, {}, ir::ConstantAttrs{ir::Literal::scalar(DType::I32, 0)});
  ir::ValueId mine = add(OpCode::DynamicSlice, {gathered, offset, zero}, ir::DynamicSliceAttrs{{2, 3}});
  ir::ValueId two = add(OpCode::Constant, {}, ir::ConstantAttrs{ir::Literal::scalar(DType::F32, 2)});
  ir::ValueId twos = add(OpCode::BroadcastInDim, {two}, ir::BroadcastInDimAttrs{{2, 3}, {}});
  g.setOutputs({add(OpCode::Mul, {mine, twos}, ir::NoAttrs{})});
  PerDevice in = randomPerDevice(Aval{Shape{2, 3}, DType::F32}, rng);
  PerDevice want;
  for (const HostTensor& t : in) {
    HostTensor w = t;
    for (int64_t e = 0; e < w.numel(); ++e) w.set(e, 2 * t.get(e));
    want.push_back(w);
  }
  for (Mode mode : {Mode::Interpreted, Mode::Compiled}) {
    auto got = runSpmd(g, {in}, mode);
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    std::string diff = compare((*got)[0], want);
    REQUIRE_MESSAGE(diff.empty(), modeName(mode) << ": " << diff);
  }
}

// Constant folding leaves collectives and device_table alone even on constant operands (their value depends
// on the device), CSE merges two identical ones, and the results stay right.
TEST_CASE("passesKeepCollectives") {
  ir::Graph g;
  auto add = [&](OpCode op, std::vector<ir::ValueId> operands, ir::Attrs attrs) {
    auto r = g.addNode(reg(), op, std::move(operands), std::move(attrs));
    if (!r.ok()) TSR_FATAL(r.error().message);
    return (*r)[0];
  };
  const float values[4] = {1, 2, 3, 4};
  ir::ValueId c = add(OpCode::Constant, {},
                      ir::ConstantAttrs{ir::Literal::fromBytes(Aval{Shape{4}, DType::F32}, values)});
  const ir::AllReduceAttrs everyone{{0, 1, 2, 3, 4, 5, 6, 7}, 8};
  ir::ValueId a = add(OpCode::AllReduce, {c}, everyone);
  ir::ValueId b = add(OpCode::AllReduce, {c}, everyone);
  ir::ValueId t = add(OpCode::DeviceTable, {}, ir::DeviceTableAttrs{{10, 11, 12, 13, 14, 15, 16, 17}, DType::I32});
  g.setOutputs({a, b, t});

  passes::PassContext ctx(reg());
  passes::ConstantFolding folding;
  auto folded = folding.run(g, ctx);
  REQUIRE(folded.ok());
  TSR_COMPARE(g.count(OpCode::AllReduce), 2);
  TSR_COMPARE(g.count(OpCode::DeviceTable), 1);
  passes::CommonSubexpressionElimination cse;
  REQUIRE(cse.run(g, ctx).ok());
  TSR_COMPARE(g.count(OpCode::AllReduce), 1);
  REQUIRE(ir::verify(g, reg()).ok());

  for (Mode mode : {Mode::Interpreted, Mode::Compiled}) {
    auto got = runSpmd(g, {}, mode);
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    for (int p = 0; p < kDevices; ++p) {
      for (int o = 0; o < 2; ++o)
        for (int e = 0; e < 4; ++e) TSR_COMPARE((*got)[o][p].get(e), 8.0 * values[e]);
      TSR_COMPARE((*got)[2][p].get(0), 10.0 + p);
    }
  }
}

TEST_CASE("textRoundTrip") {
  ir::Graph g;
  g.name = "collectives";
  ir::ValueId x = g.addInput(Aval{Shape{4, 8}, DType::F32});
  auto add = [&](OpCode op, std::vector<ir::ValueId> operands, ir::Attrs attrs) {
    auto r = g.addNode(reg(), op, std::move(operands), std::move(attrs));
    if (!r.ok()) TSR_FATAL(r.error().message);
    return (*r)[0];
  };
  ir::ValueId a = add(OpCode::AllReduce, {x}, ir::AllReduceAttrs{flatten(kRows), 2});
  ir::ValueId b = add(OpCode::AllGather, {a}, ir::AllGatherAttrs{flatten(kPermutedColumns), 4, 1});
  ir::ValueId c = add(OpCode::ReduceScatter, {b}, ir::AllGatherAttrs{flatten(kPermutedColumns), 4, 1});
  ir::ValueId d = add(OpCode::AllToAll, {c}, ir::AllToAllAttrs{flatten(kColumns), 4, 0, 1});
  ir::ValueId e = add(OpCode::CollectivePermute, {d}, ir::CollectivePermuteAttrs{{0, 1, 1, 0, 7, 6}});
  ir::ValueId f = add(OpCode::CollectivePermute, {e}, ir::CollectivePermuteAttrs{{}});
  ir::ValueId t = add(OpCode::DeviceTable, {}, ir::DeviceTableAttrs{{0, 4, 8, 12, 16, 20, 24, 28}, DType::I64});
  g.setOutputs({f, t});
  std::string text = ir::print(g, reg());
  REQUIRE((text.find("all_to_all") != std::string::npos && text.find("device_table") != std::string::npos));
  auto parsed = ir::parse(text, reg());
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message);
  REQUIRE(ir::verify(*parsed, reg()).ok());
  TSR_COMPARE(ir::print(*parsed, reg()), text);
  for (size_t i = 0; i < g.nodes().size(); ++i) REQUIRE(parsed->nodes()[i].attrs == g.nodes()[i].attrs);
}

TEST_CASE("inferErrorsNameOpAndShapes") {
  struct Bad {
    OpCode op;
    Aval in;
    ir::Attrs attrs;
    const char* message;
  };
  const Aval x{Shape{4, 6}, DType::F32};
  const std::vector<Bad> bad = {
      {OpCode::AllReduce, x, ir::AllReduceAttrs{{}, 2},
       "all_reduce: groups must name at least one group; operands f32[4,6]"},
      {OpCode::AllReduce, x, ir::AllReduceAttrs{{0, 1, 2}, 2},
       "all_reduce: the 3 positions of groups do not split into groups of 2"},
      {OpCode::AllReduce, x, ir::AllReduceAttrs{{0, 1, 1, 2}, 2}, "all_reduce: groups name position 1 twice"},
      {OpCode::AllReduce, x, ir::AllReduceAttrs{{0, 1}, 0}, "all_reduce: group_size 0 must be at least 1"},
      {OpCode::AllReduce, Aval{Shape{2}, DType::Bool}, ir::AllReduceAttrs{{0, 1}, 2}, "all_reduce: cannot sum bool"},
      {OpCode::AllGather, x, ir::AllGatherAttrs{{0, 1}, 2, 2},
       "all_gather: dim 2 is out of range for rank 2; operands f32[4,6]"},
      {OpCode::ReduceScatter, x, ir::AllGatherAttrs{{0, 1, 2, 3}, 4, 1},
       "reduce_scatter: dim 1 has size 6, not divisible by the group size 4; operands f32[4,6]"},
      {OpCode::AllToAll, x, ir::AllToAllAttrs{{0, 1, 2, 3}, 4, 1, 0},
       "all_to_all: split_dim 1 has size 6, not divisible by the group size 4"},
      {OpCode::AllToAll, x, ir::AllToAllAttrs{{0, 1}, 2, 0, -1},
       "all_to_all: concat_dim -1 is out of range for rank 2"},
      {OpCode::CollectivePermute, x, ir::CollectivePermuteAttrs{{0, 1, 2}},
       "collective_permute: pairs holds 3 positions, not (source, target) pairs"},
      {OpCode::CollectivePermute, x, ir::CollectivePermuteAttrs{{0, 1, 2, 1}},
       "collective_permute: position 1 is the target of more than one pair"},
  };
  for (const Bad& b : bad) {
    ir::Graph g;
    ir::ValueId v = g.addInput(b.in);
    auto r = g.addNode(reg(), b.op, {v}, b.attrs);
    REQUIRE_MESSAGE(!r.ok(), b.message);
    REQUIRE_MESSAGE(r.error().message.find(b.message) != std::string::npos, r.error().message.c_str());
  }
  ir::Graph g;
  auto r = g.addNode(reg(), OpCode::DeviceTable, {}, ir::DeviceTableAttrs{{0, 300}, DType::U8});
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find("device_table: entry 300 does not fit u8 exactly") != std::string::npos,
                  r.error().message.c_str());
  r = g.addNode(reg(), OpCode::DeviceTable, {}, ir::DeviceTableAttrs{{0, 16777217}, DType::F32});
  REQUIRE(!r.ok());
}

// A device that cannot run its collective fails the run, naming itself, and the devices waiting for it
// return instead of hanging; outside an SPMD run a real group is an error, not a silent identity.
TEST_CASE("runTimeErrorsEndTheRun") {
  std::mt19937 rng(7);
  PerDevice x = randomPerDevice(Aval{Shape{4}, DType::F32}, rng);
  {
    // Device 7 has no table entry: it fails before the all-reduce that the seven others then wait in.
    ir::Graph g;
    ir::ValueId in = g.addInput(x[0].aval);
    auto t = g.addNode(reg(), OpCode::DeviceTable, {}, ir::DeviceTableAttrs{{0, 1, 2, 3, 4, 5, 6}, DType::I32});
    auto s = g.addNode(reg(), OpCode::AllReduce, {in}, ir::AllReduceAttrs{{0, 1, 2, 3, 4, 5, 6, 7}, 8});
    REQUIRE((t.ok() && s.ok()));
    g.setOutputs({(*t)[0], (*s)[0]});
    for (Mode mode : {Mode::Interpreted, Mode::Compiled}) {
      auto r = runSpmd(g, {x}, mode);
      REQUIRE(!r.ok());
      REQUIRE_MESSAGE(r.error().message.rfind("device 7: ", 0) == 0, r.error().message.c_str());
      REQUIRE_MESSAGE(r.error().message.find("device 7 has no entry in a table of 7") != std::string::npos,
                      r.error().message.c_str());
    }
  }
  {
    // Groups that leave devices 4-7 out.
    ir::Graph g = oneOp(OpCode::AllReduce, x[0].aval, ir::AllReduceAttrs{{0, 1, 2, 3}, 4});
    auto r = runSpmd(g, {x}, Mode::Interpreted);
    REQUIRE(!r.ok());
    const std::regex expected("^device [4-7]: .*device [4-7] is in no group of \\[0,1,2,3\\]");
    REQUIRE_MESSAGE(std::regex_search(r.error().message, expected), r.error().message.c_str());
  }
  {
    // No SPMD run: position 0 alone; a group of one is the identity, a group of two an error.
    std::vector<runtime::BufferPtr> in = {toBuffer(x[0])};
    auto ok = runtime::interpret(oneOp(OpCode::AllReduce, x[0].aval, ir::AllReduceAttrs{{0, 1}, 1}), reg(), in);
    REQUIRE(ok.ok());
    REQUIRE(compare(PerDevice(kDevices, fromBuffer((*ok)[0], x[0].aval)), PerDevice(kDevices, x[0])).empty());
    auto bad = runtime::interpret(oneOp(OpCode::AllReduce, x[0].aval, ir::AllReduceAttrs{{0, 1}, 2}), reg(), in);
    REQUIRE(!bad.ok());
    REQUIRE_MESSAGE(bad.error().message.find("all_reduce: a group of 2 devices needs an SPMD run") != std::string::npos,
                    bad.error().message.c_str());
  }
}

// vjp rules: with f linear, sum_d <ct_d, f(x)_d> == sum_d <f^T(ct)_d, x_d>, where f^T comes from the op's vjp
// rule (tsr::vjp's pullback, run per device under runOnDevices); f(x) is also checked against the reference.
TEST_CASE("vjpRulesAreTransposes") {
  struct Case {
    const char* name;
    OpCode op;
    ir::Attrs attrs;
    std::function<PerDevice(const PerDevice&)> reference;
  };
  std::vector<std::pair<int, int>> ring;
  ir::Ints ringFlat;
  for (int p = 0; p < kDevices; ++p) {
    ring.push_back({p, (p + 3) % kDevices});
    ringFlat.insert(ringFlat.end(), {p, (p + 3) % kDevices});
  }
  const std::vector<Case> cases = {
      {"all_reduce", OpCode::AllReduce, ir::AllReduceAttrs{flatten(kPermutedColumns), 4},
       [](const PerDevice& x) { return refAllReduce(x, kPermutedColumns); }},
      {"all_gather", OpCode::AllGather, ir::AllGatherAttrs{flatten(kRows), 2, 1},
       [](const PerDevice& x) { return refAllGather(x, kRows, 1); }},
      {"reduce_scatter", OpCode::ReduceScatter, ir::AllGatherAttrs{flatten(kPermutedColumns), 4, 1},
       [](const PerDevice& x) { return refReduceScatter(x, kPermutedColumns, 1); }},
      {"all_to_all", OpCode::AllToAll, ir::AllToAllAttrs{flatten(kColumns), 4, 0, 1},
       [](const PerDevice& x) { return refAllToAll(x, kColumns, 0, 1); }},
      {"collective_permute", OpCode::CollectivePermute, ir::CollectivePermuteAttrs{ringFlat},
       [ring](const PerDevice& x) { return refPermute(x, ring); }},
  };
  std::mt19937 rng(8);
  for (const Case& c : cases) {
    PerDevice x = randomPerDevice(Aval{Shape{4, 8}, DType::F64}, rng);
    PerDevice want = c.reference(x);
    PerDevice ct, y(kDevices), xt(kDevices);
    for (int p = 0; p < kDevices; ++p) ct.push_back(randomTensor(want[p].aval, rng));
    auto comm = dist::makeInProcessCommunicator(kDevices);
    Status st = dist::runOnDevices(*comm, [&](int p) -> Status {
      auto f = [&](const std::vector<Array>& xs) {
        return std::vector<Array>{bind1(c.op, {xs[0]}, c.attrs, std::source_location::current())};
      };
      VjpOutput out = tsr::vjp(f, {toArray(x[p])});
      y[p] = toHost(out.outputs[0]);
      xt[p] = toHost(out.pullback({toArray(ct[p])})[0]);
      return Status{};
    });
    REQUIRE_MESSAGE(st.ok(), st.error().message);
    std::string diff = compare(y, want);
    REQUIRE_MESSAGE(diff.empty(), c.name << ": " << diff);
    double lhs = 0, rhs = 0, scale = 0;
    for (int p = 0; p < kDevices; ++p) {
      REQUIRE(xt[p].aval == x[p].aval);
      lhs += dot(ct[p], y[p]);
      rhs += dot(xt[p], x[p]);
      scale += std::fabs(dot(ct[p], ct[p]));
    }
    REQUIRE_MESSAGE(std::fabs(lhs - rhs) <= 1e-12 * (1 + scale),
                    fmt::format("{}: <ct, f(x)> = {} but <f^T(ct), x> = {}", c.name, lhs, rhs).c_str());
  }
}

// vmap of a collective over a batch axis (here axis 1) equals running it once per example and stacking.
TEST_CASE("batchingMatchesLoop") {
  struct Case {
    const char* name;
    OpCode op;
    ir::Attrs attrs;
  };
  const std::vector<Case> cases = {
      {"all_reduce", OpCode::AllReduce, ir::AllReduceAttrs{flatten(kColumns), 4}},
      {"all_gather", OpCode::AllGather, ir::AllGatherAttrs{flatten(kPermutedColumns), 4, 1}},
      {"reduce_scatter", OpCode::ReduceScatter, ir::AllGatherAttrs{flatten(kRows), 2, 0}},
      {"all_to_all", OpCode::AllToAll, ir::AllToAllAttrs{flatten(kColumns), 4, 1, 0}},
      {"collective_permute", OpCode::CollectivePermute, ir::CollectivePermuteAttrs{{0, 7, 7, 0, 2, 3}}},
  };
  std::mt19937 rng(9);
  const int64_t batch = 3;
  for (const Case& c : cases) {
    // Per device: xs [4, batch, 8], examples xs[:, b, :] of shape [4, 8].
    PerDevice xs = randomPerDevice(Aval{Shape{4, batch, 8}, DType::F32}, rng);
    PerDevice batched(kDevices), looped(kDevices);
    auto comm = dist::makeInProcessCommunicator(kDevices);
    Status st = dist::runOnDevices(*comm, [&](int p) -> Status {
      ArrayFn f = [&](const std::vector<Array>& in) {
        return std::vector<Array>{bind1(c.op, {in[0]}, c.attrs, std::source_location::current())};
      };
      Array x = toArray(xs[p]);
      batched[p] = toHost(tsr::vmap(f, {1})({x})[0]);
      std::vector<Array> each;
      for (int64_t b = 0; b < batch; ++b) each.push_back(f({squeeze(sliceAxis(x, 1, b, b + 1), {1})})[0]);
      looped[p] = toHost(stack(each, 0));
      return Status{};
    });
    REQUIRE_MESSAGE(st.ok(), st.error().message);
    std::string diff = compare(batched, looped);
    REQUIRE_MESSAGE(diff.empty(), c.name << ": " << diff);
  }
}
