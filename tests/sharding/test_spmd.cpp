// Sharding propagation (per op family), the SPMD partitioner's collectives, and partitioned programs run on 8
// virtual devices against the same program run whole on one device (the interpreter), on random graphs over
// meshes of 1, 2, 4 and 8 devices and 2x2 and 4x2.
#include "tests/check.h"

#include <cstdio>
#include <iomanip>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "engine/nn/attention.h"
#include "engine/ops/registry.h"
#include "engine/optim/optim.h"
#include "engine/random/random.h"
#include "engine/sharding/partitioner.h"
#include "engine/sharding/propagation.h"
#include "engine/spmd/spmd.h"
#include "tests/sharding/sharding_test_util.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/control_flow.h"
#include "engine/compile/eval.h"
#include "engine/compile/jit.h"
#include "engine/transform/trace.h"

using namespace tsr;
using namespace tsr::sharding;
using tsr::test::must;
using tsr::test::named;

namespace {

Mesh makeMesh(std::vector<int64_t> shape, std::vector<std::string> axes) { return must(Mesh::create(shape, axes)); }

TensorSharding spec(const Mesh& m, const std::string& text, const Shape& shape) {
  return must(TensorSharding::fromSpec(m, must(PartitionSpec::parse(text)), shape));
}

ClosedGraph traceFn(const std::function<std::vector<Array>(const std::vector<Array>&)>& f,
                    const std::vector<Aval>& avals) {
  return must(makeGraph(f, avals, "f"));
}

Aval f32(std::vector<int64_t> shape) { return Aval{Shape(std::move(shape)), DType::F32}; }

// Annotates the graph's inputs with specs ("" leaves an input free) and propagates.
Result<ShardingPlan> planFor(const ClosedGraph& cg, const Mesh& m, const std::vector<std::string>& specs,
                             const std::vector<std::string>& outSpecs = {}) {
  ShardingAnnotations ann;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i] == "-") ann.inputs.emplace_back();
    else ann.inputs.push_back(spec(m, specs[i], cg.graph.aval(cg.graph.inputs()[i]).shape));
  }
  for (size_t i = 0; i < outSpecs.size(); ++i) {
    if (outSpecs[i] == "-") ann.outputs.emplace_back();
    else ann.outputs.push_back(spec(m, outSpecs[i], cg.graph.aval(cg.graph.outputs()[i]).shape));
  }
  return propagateShardings(cg.graph, ops::registry(), m, ann);
}

std::string shardingOf(const ShardingPlan& p, ir::ValueId v) { return p.values[static_cast<size_t>(v)].toString(p.mesh); }

// "all_reduce('a') all_gather('b')": the collectives of a partitioned program, in order.
std::string collectives(const PartitionResult& r) {
  std::vector<std::string> out;
  for (const auto& c : r.collectives) out.push_back(c.opName + "(" + c.axisNames + ")");
  return test::join(out, " ");
}

PartitionResult partitionFor(const ClosedGraph& cg, const ShardingPlan& p) {
  return must(partition(cg.graph, ops::registry(), p));
}

Array randomArray(std::mt19937& rng, std::vector<int64_t> shape) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return Array::fromVector(v, Shape(std::move(shape)));
}

// The largest difference relative to the reference's largest magnitude (sums in another order differ by a few
// ulps of the largest terms, not of each result).
double maxRelDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0, scale = 1e-30;
  for (double x : b) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst / scale;
}

// The program compiled for the mesh and run on the inputs placed as `specs` say, each output gathered.
std::vector<Array> runSharded(const ClosedGraph& cg, const Mesh& m, const std::vector<std::string>& specs,
                              const std::vector<Array>& inputs, PartitionResult* partitioned = nullptr) {
  ShardingAnnotations ann;
  std::vector<Array> placed;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ann.inputs.push_back(spec(m, specs[i], inputs[i].shape()));
    placed.push_back(must(spmd::devicePut(inputs[i], named(m, specs[i]))));
  }
  auto exe = must(spmd::SpmdExecutable::compile(cg.graph, m, ann, spmd::SpmdOptions{.name = cg.graph.name, .donatable = {}}));
  if (partitioned) *partitioned = exe->partitioned();
  return must(exe->run(placed));
}

void compareWithOneDevice(const std::vector<Array>& outs, const std::vector<Array>& reference) {
  TSR_COMPARE(outs.size(), reference.size());
  for (size_t o = 0; o < outs.size(); ++o)
    REQUIRE_MESSAGE(maxRelDiff(outs[o].toDoubles(), reference[o].toDoubles()) < 1e-5, "output " << o);
}

// A GPT-2 written with scan over its blocks: the blocks' parameters, stacked [L, ...], are the scan's xs and the
// activation [B, T, C] its carry. Tied embedding, pre-norm blocks (causal attention, GELU MLP), final norm.
struct ScannedGpt {
  static constexpr int64_t kVocab = 16, kT = 4, kC = 8, kHeads = 2, kLayers = 2;

  static Tree init() {
    uint64_t seed = 10;
    auto normal = [&](Shape s) { return random::normal(random::key(seed++), s) * 0.2; };
    auto dense = [&](int64_t in, int64_t out) {
      return Tree::dict({{"weight", Tree(normal(Shape{kLayers, in, out}))}, {"bias", Tree(normal(Shape{kLayers, out}) * 0.1)}});
    };
    auto norm = [&](std::vector<int64_t> lead) {
      lead.push_back(kC);
      return Tree::dict({{"weight", Tree(Array::ones(Shape(lead)) + normal(Shape(lead)) * 0.1)},
                         {"bias", Tree(normal(Shape(lead)) * 0.1)}});
    };
    Tree blocks = Tree::dict({{"ln_1", norm({kLayers})},
                              {"c_attn", dense(kC, 3 * kC)},
                              {"attn_proj", dense(kC, kC)},
                              {"ln_2", norm({kLayers})},
                              {"c_fc", dense(kC, 4 * kC)},
                              {"mlp_proj", dense(4 * kC, kC)}});
    return Tree::dict({{"wte", Tree(normal(Shape{kVocab, kC}))},
                       {"wpe", Tree(normal(Shape{kT, kC}))},
                       {"h", std::move(blocks)},
                       {"ln_f", norm({})}});
  }

  // tokens, labels: [B, T] -> the mean cross-entropy
  static Array loss(const Tree& p, const Array& tokens, const Array& labels) {
    nn::LayerNorm ln{kC};
    nn::Dense cAttn{kC, 3 * kC}, attnProj{kC, kC}, cFc{kC, 4 * kC}, mlpProj{4 * kC, kC};
    nn::Embed wte{kVocab, kC};
    Tree wteTree = Tree::dict({{"weight", *p.find("wte")}});
    Array x = wte.apply(wteTree, tokens) + take(p.find("wpe")->leaf(), arange(kT), 0);  // [B, T, C]
    auto block = [&](const Tree& carry, const Tree& b) {
      nn::Context ctx;
      Array h = carry.leaf();
      Array qkv = cAttn.apply(*b.find("c_attn"), ln.apply(*b.find("ln_1"), h));  // [B, T, 3C]
      auto head = [&](int64_t i) { return nn::splitHeads(sliceAxis(qkv, 2, i * kC, (i + 1) * kC), kHeads); };
      Array y = nn::mergeHeads(nn::dotProductAttention(head(0), head(1), head(2), true, nn::Dropout{}, ctx));
      h = h + attnProj.apply(*b.find("attn_proj"), y);
      h = h + mlpProj.apply(*b.find("mlp_proj"), gelu(cFc.apply(*b.find("c_fc"), ln.apply(*b.find("ln_2"), h)), true));
      return std::make_pair(Tree(h), Tree());
    };
    Array h = scan(block, Tree(x), *p.find("h")).first.leaf();
    Array logits = wte.attend(wteTree, ln.apply(*p.find("ln_f"), h));  // [B, T, V]
    return optim::softmaxCrossEntropy(logits, labels);
  }
};

struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, int> collectives;  // "all_reduce('data')" -> count
  std::string listing;
  int leaves = 0;
};

// Three SGD steps of ScannedGpt with the parameters and batch placed by `place` (identity for one device).
TrainRun trainScannedGpt(const std::function<Array(const std::string& path, const Array& x)>& place) {
  Tree params = ScannedGpt::init();
  auto ids = [](uint64_t seed) {  // i32 [8, T] in [0, vocab)
    return astype(floor(random::uniform(random::key(seed), Shape{8, ScannedGpt::kT}, DType::F32, 0.0, ScannedGpt::kVocab)), DType::I32);
  };
  Array tokens = ids(1), labels = ids(2);
  TrainRun run;
  params = optim::treeMapWithPath(params, [&](const std::string& path, const Array& a) {
    ++run.leaves;
    return place(path, a);
  });
  tokens = place("batch.tokens", tokens);
  labels = place("batch.labels", labels);
  Jit step = jit(Jit::Fn([](const Tree& args, const StaticArgs&) -> Tree {
    const Array& tokens = args.child(1).leaf();
    const Array& labels = args.child(2).leaf();
    LossFn lossFn = [&](const Tree& p) { return ScannedGpt::loss(p, tokens, labels); };
    ValueAndGrad vg = valueAndGrad(lossFn)(args.child(0));
    Tree updated = optim::treeMap2(args.child(0), vg.grads, [](const Array& p, const Array& g) { return p - g * 0.5; });
    std::vector<Tree> out;
    out.push_back(updated);
    out.emplace_back(vg.value);
    return Tree::list(std::move(out));
  }), "scanned_gpt_step");
  for (int s = 0; s < 3; ++s) {
    std::vector<Tree> args;
    args.push_back(params);
    args.emplace_back(tokens);
    args.emplace_back(labels);
    Tree out = must(step.call(Tree::list(std::move(args))));
    params = out.child(0);
    run.losses.push_back(out.child(1).leaf().item());
  }
  if (const auto* spmd = step.lastSpmd())
    for (const auto& c : spmd->partitioned().collectives) {
      ++run.collectives[c.opName + "(" + c.axisNames + ")"];
      run.listing += "  " + c.toString() + "\n";
    }
  return run;
}

// Every test case runs on 8 CPU devices.
struct EightDevices {
  EightDevices() { REQUIRE(spmd::setCpuDevices(8).ok()); }
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

// ---- propagation, per op family ----

TEST_CASE_FIXTURE(EightDevices, "elementwiseKeepsTheSharding") {
  Mesh m = makeMesh({4, 2}, {"a", "b"});
  auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{sin(x[0])}; }, {f32({8, 4})});
  auto p = must(planFor(cg, m, {"a,b"}));
  TSR_COMPARE(shardingOf(p, cg.graph.outputs()[0]), std::string("P('a', 'b')"));
  REQUIRE(p.origins[static_cast<size_t>(cg.graph.outputs()[0])].kind == ShardingOrigin::Kind::Forward);
}

TEST_CASE_FIXTURE(EightDevices, "dotFreeDimsPassAndContractionIsPartial") {
  Mesh m = makeMesh({4, 2}, {"a", "b"});
  auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{matmul(x[0], x[1])}; },
                    {f32({16, 8}), f32({8, 4})});
  // Batch split, weight column-split: the result is split both ways, no communication.
  auto p = must(planFor(cg, m, {"a,None", "None,b"}));
  TSR_COMPARE(shardingOf(p, cg.graph.outputs()[0]), std::string("P('a', 'b')"));
  TSR_COMPARE(collectives(partitionFor(cg, p)), std::string(""));
  // Contracting dim split on both sides: partial sums, completed by one all_reduce over 'b'.
  auto q = must(planFor(cg, m, {"a,b", "b,None"}));
  TSR_COMPARE(shardingOf(q, cg.graph.outputs()[0]), std::string("P('a', None)"));
  TSR_COMPARE(collectives(partitionFor(cg, q)), std::string("all_reduce('b')"));
  // ... or by a reduce_scatter when the result is asked for split over 'b'.
  auto r = must(planFor(cg, m, {"a,b", "b,None"}, {"a,b"}));
  TSR_COMPARE(collectives(partitionFor(cg, r)), std::string("reduce_scatter('b')"));
}

TEST_CASE_FIXTURE(EightDevices, "reductionsGivePartialSumsOrNeedTheDimWhole") {
  Mesh m = makeMesh({8}, {"a"});
  auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{sum(x[0], {0}), max(x[0], {0})}; },
                    {f32({16, 4})});
  auto p = must(planFor(cg, m, {"a,None"}));
  // reduce_max: its axis whole -> all_gather first; reduce_sum: partial over 'a' -> all_reduce, where the sum
  // is used (here: as an output, after the max).
  TSR_COMPARE(collectives(partitionFor(cg, p)), std::string("all_gather('a') all_reduce('a')"));
}

TEST_CASE_FIXTURE(EightDevices, "partialSumsAreAddedBeforeTheirCollective") {
  Mesh m = makeMesh({4}, {"a"});
  // x . w1 + x . w2 with the contraction split: two partial sums, added, then one all_reduce; a scalar chain
  // sum(p) + sum(q) + sum(r) over split and replicated arrays (a global norm's shape): one all_reduce.
  auto cg = traceFn([](const std::vector<Array>& x) {
    return std::vector<Array>{matmul(x[0], x[1]) + matmul(x[0], x[2]),
                              (sum(square(x[1])) + sum(square(x[3]))) + sum(square(x[2]))};
  }, {f32({4, 16}), f32({16, 8}), f32({16, 8}), f32({5, 3})});
  std::vector<std::string> specs = {"None,a", "a,None", "a,None", ""};
  auto p = must(planFor(cg, m, specs));
  PartitionResult r = partitionFor(cg, p);
  TSR_COMPARE(collectives(r), std::string("all_reduce('a') all_reduce('a')"));
  // The replicated term joins the partial chain on one device of the group only: the sums are right.
  std::mt19937 rng(5);
  std::vector<Array> inputs = {randomArray(rng, {4, 16}), randomArray(rng, {16, 8}), randomArray(rng, {16, 8}),
                               randomArray(rng, {5, 3})};
  auto reference = must(evalGraph(cg, inputs));
  ShardingAnnotations ann;
  std::vector<Array> placed;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ann.inputs.push_back(spec(m, specs[i], inputs[i].shape()));
    placed.push_back(must(spmd::devicePut(inputs[i], named(m, specs[i]))));
  }
  auto exe = must(spmd::SpmdExecutable::compile(cg.graph, m, ann, spmd::SpmdOptions{.name = "partials", .donatable = {}}));
  auto outs = must(exe->run(placed));
  for (size_t o = 0; o < outs.size(); ++o)
    REQUIRE_MESSAGE(maxRelDiff(outs[o].toDoubles(), reference[o].toDoubles()) < 1e-5, "output " << o);
}

// Jit's donated arguments in an SPMD program: each device's block becomes its output block (an update in
// place), and the array given up is deleted; one the caller still holds is neither.
TEST_CASE_FIXTURE(EightDevices, "donatedShardsAreUpdatedInPlace") {
  Mesh m = makeMesh({4}, {"a"});
  Jit f = jit([](const Tree& args, const StaticArgs&) {
    return Tree::dict({{"p", Tree(args.find("p")->leaf() - args.find("g")->leaf() * 0.5)}});
  }, "sgd");
  f.setDonatedArgs({"p"});
  std::mt19937 rng(3);
  Array p0 = randomArray(rng, {8, 4}), g0 = randomArray(rng, {8, 4});
  std::vector<double> expect;
  for (size_t i = 0; i < 32; ++i) expect.push_back(p0.toDoubles()[i] - 0.5 * g0.toDoubles()[i]);
  Array g = must(spmd::devicePut(g0, named(m, "a")));
  Tree args = Tree::dict({{"p", Tree(must(spmd::devicePut(p0, named(m, "a"))))}, {"g", Tree(g)}});
  Tree copy = args;
  std::vector<const void*> before;
  for (int d : m.devices) before.push_back(args.find("p")->leaf().shards()->shards[static_cast<size_t>(d)]->data());
  Tree out = must(f.call(std::move(args)));
  const Array& p1 = out.find("p")->leaf();
  REQUIRE(p1.isSharded());
  for (size_t d = 0; d < before.size(); ++d)
    TSR_COMPARE(static_cast<const void*>(p1.shards()->shards[d]->data()), before[d]);  // devices 0..3
  REQUIRE(maxRelDiff(p1.toDoubles(), expect) < 1e-6);
  REQUIRE(!copy.find("p")->leaf().isConcrete());  // deleted, as in JAX
  REQUIRE(g.isConcrete());                        // not donated
  // A second handle keeps the array: it is read, not overwritten.
  Array held = p1;
  Tree out2 = must(f.call(Tree::dict({{"p", Tree(held)}, {"g", Tree(g)}})));
  REQUIRE(held.isConcrete());
  REQUIRE(out2.find("p")->leaf().shards()->shards[0]->data() != held.shards()->shards[0]->data());
  REQUIRE(maxRelDiff(held.toDoubles(), expect) < 1e-6);
}

TEST_CASE_FIXTURE(EightDevices, "reshapeSplitsTheMajorDimOfABlock") {
  Mesh m = makeMesh({4, 2}, {"a", "b"});
  // [B, T, C] -> [B, T, H, D]: C split over 'b' becomes H split over 'b' (heads).
  auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{reshape(x[0], {4, 6, 2, 8})}; },
                    {f32({4, 6, 16})});
  auto p = must(planFor(cg, m, {"a,None,b"}));
  TSR_COMPARE(shardingOf(p, cg.graph.outputs()[0]), std::string("P('a', None, 'b', None)"));
  TSR_COMPARE(collectives(partitionFor(cg, p)), std::string(""));
}

TEST_CASE_FIXTURE(EightDevices, "transposeAndBroadcastFollowTheirDims") {
  Mesh m = makeMesh({4, 2}, {"a", "b"});
  auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{add(transpose(x[0]), x[1])}; },
                    {f32({8, 4}), f32({8})});
  // x [8, 4] split ('a', 'b') -> x^T [4, 8] split ('b', 'a'); the free bias [8] broadcast along the rows
  // learns 'a' backwards from the add.
  auto p = must(planFor(cg, m, {"a,b", "-"}));
  TSR_COMPARE(shardingOf(p, cg.graph.outputs()[0]), std::string("P('b', 'a')"));
  TSR_COMPARE(shardingOf(p, cg.graph.inputs()[1]), std::string("P('a')"));
  REQUIRE(p.origins[static_cast<size_t>(cg.graph.inputs()[1])].kind == ShardingOrigin::Kind::Backward);
}

TEST_CASE_FIXTURE(EightDevices, "gatherKeepsIndexAndFeatureSplits") {
  Mesh m = makeMesh({4, 2}, {"a", "b"});
  auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{take(x[0], x[1], 0)}; },
                    {f32({32, 8}), Aval{Shape{4, 6}, DType::I32}});
  auto p = must(planFor(cg, m, {"None,b", "a,None"}));
  TSR_COMPARE(shardingOf(p, cg.graph.outputs()[0]), std::string("P('a', None, 'b')"));
  TSR_COMPARE(collectives(partitionFor(cg, p)), std::string(""));
}

// scatter, scatter_mul, scatter_min, scatter_max: x's dims other than the scattered axis split with no
// communication; updates split along their index dims are gathered first (unlike scatter_add's, they cannot be
// completed by a sum). Either way the partitioned program gives what one device gives, with repeated and
// out-of-range indices.
TEST_CASE_FIXTURE(EightDevices, "scattersSplitFeaturesAndGatherIndexSplits") {
  Mesh m = makeMesh({4, 2}, {"a", "b"});
  using ScatterFn = Array (*)(const Array&, const Array&, const Array&, int64_t, int64_t, std::source_location);
  const std::pair<const char*, ScatterFn> rows[] = {
      {"scatter", &scatter}, {"scatter_mul", &scatterMul}, {"scatter_min", &scatterMin}, {"scatter_max", &scatterMax}};
  std::mt19937 rng(11);
  Array idx = Array::fromVector(std::vector<int32_t>{3, 0, 3, 9, 5, -1, 0, 3}, Shape{8});
  for (const auto& [name, fn] : rows) {
    SUBCASE(name) {
      ScatterFn op = fn;
      auto cg = traceFn(
          [op](const std::vector<Array>& x) {
            return std::vector<Array>{op(x[0], x[1], x[2], 0, 0, std::source_location::current())};
          },
          {f32({6, 8}), Aval{Shape{8}, DType::I32}, f32({8, 8})});
      std::vector<Array> inputs = {randomArray(rng, {6, 8}), idx, randomArray(rng, {8, 8})};
      auto reference = must(evalGraph(cg, inputs));
      PartitionResult split;
      compareWithOneDevice(runSharded(cg, m, {"None,a", "None", "None,a"}, inputs, &split), reference);
      TSR_COMPARE(collectives(split), std::string(""));
      PartitionResult gathered;
      compareWithOneDevice(runSharded(cg, m, {"None,None", "a", "a,None"}, inputs, &gathered), reference);
      REQUIRE_MESSAGE(collectives(gathered).find("all_gather('a')") != std::string::npos, collectives(gathered));
    }
  }
}

TEST_CASE_FIXTURE(EightDevices, "conflictingAnnotationsNameBothSpecsAndTheOp") {
  Mesh m = makeMesh({4, 2}, {"a", "b"});
  auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{add(x[0], x[1])}; },
                    {f32({8, 8}), f32({8, 8})});
  auto p = planFor(cg, m, {"a,None", "b,None"});
  REQUIRE(!p.ok());
  const std::string& msg = p.error().message;
  REQUIRE_MESSAGE((contains(msg, "add") && contains(msg, "P('a', None)") && contains(msg, "P('b', None)") &&
                   contains(msg, "conflicting")),
                  msg);
}

// A user's sharding that does not divide its dim is an error, as jax.device_put and with_sharding_constraint
// refuse it: the message names the op or array, its shape, the dim and the mesh axis with its size. The same
// sharding on a dim it divides runs.
TEST_CASE_FIXTURE(EightDevices, "userShardingsThatDoNotDivideAreErrors") {
  Mesh m = makeMesh({2, 4}, {"data", "model"});
  std::mt19937 rng(3);
  Array odd = randomArray(rng, {15, 8});
  auto put = spmd::devicePut(odd, named(m, "data"));
  REQUIRE(!put.ok());
  REQUIRE_MESSAGE(contains(put.error().message, "P('data') splits dim 0 of [15,8] into 2 shards, which does not "
                                                "divide 15 (mesh axis 'data' has size 2)"),
                  put.error().message);
  auto constrained = jit(
      [&](const std::vector<Array>& x) {
        return std::vector<Array>{spmd::withShardingConstraint(sin(x[0]), named(m, "None,model"))};
      },
      "f");
  auto bad = constrained({randomArray(rng, {8, 6})});
  REQUIRE(!bad.ok());
  const std::string& msg = bad.error().message;
  REQUIRE_MESSAGE((contains(msg, "sharding_constraint") &&
                   contains(msg, "P(None, 'model') splits dim 1 of [8,6] into 4 shards, which does not divide 6 "
                                 "(mesh axis 'model' has size 4)")),
                  msg);
  // Dims the specs divide: split as asked, the values unchanged.
  Array even = randomArray(rng, {16, 8});
  Array split = must(spmd::devicePut(even, named(m, "data")));
  TSR_COMPARE(split.sharding()->spec.toString(), std::string("P('data', None)"));
  REQUIRE(split.toDoubles() == even.toDoubles());
  Array x = randomArray(rng, {8, 12});
  auto ok = must(constrained({x}));
  TSR_COMPARE(ok[0].sharding()->spec.toString(), std::string("P(None, 'model')"));
  REQUIRE(maxRelDiff(ok[0].toDoubles(), sin(x).toDoubles()) < 1e-6);
}

// ---- reshards ----

TEST_CASE_FIXTURE(EightDevices, "reshardsUseTheCollectiveTheMoveNeeds") {
  Mesh m = makeMesh({4, 2}, {"a", "b"});
  auto identity = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{neg(x[0])}; }, {f32({8, 8})});
  auto moved = [&](const std::string& from, const std::string& to) {
    return collectives(partitionFor(identity, must(planFor(identity, m, {from}, {to}))));
  };
  TSR_COMPARE(moved("a,None", "None,a"), std::string("all_to_all('a')"));
  TSR_COMPARE(moved("a,b", "a,None"), std::string("all_gather('b')"));
  TSR_COMPARE(moved("None,None", "a,b"), std::string(""));  // a local slice
  TSR_COMPARE(moved("(a,b),None", "(b,a),None"), std::string("collective_permute(('a', 'b'))"));
}

// ---- partitioned programs equal the whole program ----

TEST_CASE_FIXTURE(EightDevices, "randomGraphsEqualOneDevice") {
  struct Row {
    const char* name;
    std::vector<int64_t> meshShape;
  };
  const Row rows[] = {
      {"1", {1}},
      {"2", {2}},
      {"4", {4}},
      {"8", {8}},
      {"2x2", {2, 2}},
      {"4x2", {4, 2}},
  };
  for (const Row& row : rows) {
    SUBCASE(row.name) {
      const std::vector<int64_t>& shape = row.meshShape;
      std::vector<std::string> axes = shape.size() == 1 ? std::vector<std::string>{"x"} : std::vector<std::string>{"x", "y"};
      Mesh m = makeMesh(shape, axes);
      std::mt19937 rng(1234 + static_cast<unsigned>(m.size()) * 7 + static_cast<unsigned>(shape.size()));
      int totalCollectives = 0;
      for (int trial = 0; trial < 12; ++trial) {
        // Random specs for three inputs, [16, 8], [8, 16] and [16, 8].
        auto randomSpec = [&](int rank) {
          std::vector<std::string> dims(static_cast<size_t>(rank), "None");
          std::vector<std::string> free = axes;
          std::shuffle(free.begin(), free.end(), rng);
          for (const auto& a : free) {
            int d = static_cast<int>(rng() % static_cast<unsigned>(rank + 1));
            if (d == rank) continue;  // this axis stays unused
            dims[static_cast<size_t>(d)] = dims[static_cast<size_t>(d)] == "None" ? a : "(" + dims[static_cast<size_t>(d)] + "," + a + ")";
          }
          std::string s;
          for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + dims[i];
          return s;
        };
        std::vector<std::string> specs = {randomSpec(2), randomSpec(2), randomSpec(2)};
        unsigned opsSeed = static_cast<unsigned>(rng());
        auto f = [opsSeed](const std::vector<Array>& x) {
          std::mt19937 r(opsSeed);
          std::vector<Array> live = x;  // [16, 8], [8, 16], [16, 8]
          for (int step = 0; step < 8; ++step) {
            const Array a = live[r() % live.size()];
            const Array b = live[r() % live.size()];
            switch (r() % 8) {
              case 0: live.push_back(tanh(a)); break;
              case 1: if (a.shape() == b.shape()) live.push_back(add(a, mul(b, b))); break;
              case 2: if (a.dim(1) == b.dim(0)) live.push_back(matmul(a, b)); break;
              case 3: live.push_back(transpose(a)); break;
              case 4: live.push_back(add(a, sum(a, {0}))); break;  // a column sum broadcast back over rows
              case 5: live.push_back(reshape(reshape(a, {a.numel()}), {a.dim(0), a.dim(1)})); break;
              case 6: live.push_back(mul(a, sum(a, {1}, true))); break;
              case 7: live.push_back(sin(a)); break;
            }
          }
          return std::vector<Array>{live[live.size() - 1], live[live.size() - 2], sum(live.back())};
        };
        auto cg = traceFn(f, {f32({16, 8}), f32({8, 16}), f32({16, 8})});
        std::vector<Array> inputs = {randomArray(rng, {16, 8}), randomArray(rng, {8, 16}), randomArray(rng, {16, 8})};
        auto reference = must(evalGraph(cg, inputs));

        ShardingAnnotations ann;
        std::vector<Array> placed;
        for (size_t i = 0; i < inputs.size(); ++i) {
          ann.inputs.push_back(spec(m, specs[i], inputs[i].shape()));
          placed.push_back(must(spmd::devicePut(inputs[i], named(m, specs[i]))));
        }
        auto exe = must(spmd::SpmdExecutable::compile(cg.graph, m, ann, spmd::SpmdOptions{.name = "random", .donatable = {}}));
        totalCollectives += static_cast<int>(exe->partitioned().collectives.size());
        auto outs = must(exe->run(placed));
        for (size_t o = 0; o < outs.size(); ++o) {
          double diff = maxRelDiff(outs[o].toDoubles(), reference[o].toDoubles());
          REQUIRE_MESSAGE(diff < 1e-4, "trial " << trial << " output " << o << " specs " << specs[0] << " | "
                                                << specs[1] << " | " << specs[2] << ": relative difference " << diff
                                                << "\n"
                                                << ir::print(exe->program(), ops::registry()));
        }
      }
      if (m.size() > 1) REQUIRE(totalCollectives > 0);
    }
  }
}

// ---- the seed tutorial's first steps, eagerly ----

TEST_CASE_FIXTURE(EightDevices, "sinOverAShardedArrayKeepsTheSharding") {
  Mesh m = makeMesh({4, 2}, {"a", "b"});
  std::mt19937 rng(7);
  Array x = randomArray(rng, {8192, 8192 / 64});
  Array xs = must(spmd::devicePut(x, named(m, "a,b")));
  REQUIRE(xs.isSharded());
  TSR_COMPARE(int(xs.shards()->shards.size()), 8);
  TSR_COMPARE(xs.shards()->shards[3]->size(), int64_t(2048 * 64 * 4));  // [8192 / 4, 128 / 2] floats
  Array y = sin(xs);
  REQUIRE(y.isSharded());
  TSR_COMPARE(y.sharding()->spec.toString(), std::string("P('a', 'b')"));
  TSR_COMPARE(maxRelDiff(y.toDoubles(), sin(x).toDoubles()), 0.0);
  auto grid = must(spmd::visualizeArraySharding(y));
  REQUIRE_MESSAGE(grid.find("CPU 7") != std::string::npos, grid.c_str());
}

TEST_CASE_FIXTURE(EightDevices, "jitFollowsTheArgumentsShardings") {
  Mesh m = makeMesh({4, 2}, {"a", "b"});
  std::mt19937 rng(9);
  Array x = randomArray(rng, {32, 16}), w = randomArray(rng, {16, 8});
  auto f = jit([](const std::vector<Array>& a) { return std::vector<Array>{tanh(matmul(a[0], a[1]))}; }, "f");
  auto whole = must(f({x, w}));
  auto split = must(f({must(spmd::devicePut(x, named(m, "a,b"))), must(spmd::devicePut(w, named(m, "b,None")))}));
  REQUIRE(split[0].isSharded());
  TSR_COMPARE(split[0].sharding()->spec.toString(), std::string("P('a', None)"));
  REQUIRE(maxRelDiff(split[0].toDoubles(), whole[0].toDoubles()) < 1e-5);
  TSR_COMPARE(f.cacheSize(), size_t(2));
}

// ---- scan and cond: their nested graphs partitioned with the mesh ----

// A scan over a batch split on 'data' (carry h [8, 4] split on its rows), whose body is an elementwise op and
// a matmul with a replicated weight: each device loops over its rows alone, with no collective at all.
TEST_CASE_FIXTURE(EightDevices, "scanOverASplitBatchNeedsNoCollective") {
  Mesh m = makeMesh({2}, {"data"});
  auto cg = traceFn([](const std::vector<Array>& x) {  // h0 [8, 4], w [4, 4], b [3, 4] (one bias per step)
    ArrayFn body = [](const std::vector<Array>& in) {  // (w, h, b_t) -> (h', sum(h'^2) per row)
      Array h = tanh(matmul(in[1], in[0]) + in[2]) + in[1] * 0.5;
      return std::vector<Array>{h, sum(h * h, {1})};
    };
    return scanFlat(body, {x[1]}, {x[0]}, {x[2]}, 3, false);
  }, {f32({8, 4}), f32({4, 4}), f32({3, 4})});
  const std::vector<std::string> specs = {"data,None", "", ""};
  auto p = must(planFor(cg, m, specs));
  TSR_COMPARE(shardingOf(p, cg.graph.outputs()[0]), std::string("P('data', None)"));  // the carry, as it entered
  TSR_COMPARE(shardingOf(p, cg.graph.outputs()[1]), std::string("P(None, 'data')"));  // ys [3, 8]: the steps whole
  // The body's plan is listed under the scan: its carry enters split as the scan's operand is.
  const std::string described = describePlan(cg.graph, ops::registry(), p);
  REQUIRE_MESSAGE((contains(described, "  body:\n") &&
                   contains(described, "    %1 = input 1 f32[8,4] P('data', None)  annotation")),
                  described);
  TSR_COMPARE(collectives(partitionFor(cg, p)), std::string(""));

  std::mt19937 rng(11);
  std::vector<Array> inputs = {randomArray(rng, {8, 4}), randomArray(rng, {4, 4}), randomArray(rng, {3, 4})};
  PartitionResult r;
  auto outs = runSharded(cg, m, specs, inputs, &r);
  TSR_COMPARE(collectives(r), std::string(""));
  int scans = 0;
  for (const ir::Node& n : r.local.nodes()) scans += n.op == ir::OpCode::Scan;
  TSR_COMPARE(scans, 1);
  compareWithOneDevice(outs, must(evalGraph(cg, inputs)));
}

// A carry the body leaves split otherwise than it entered (transposed) finds its fixed point replicated: it is
// gathered once before the loop, never inside it. An x split along the scanned dim is gathered there too.
TEST_CASE_FIXTURE(EightDevices, "scanCarriesReachAFixedPoint") {
  Mesh m = makeMesh({2}, {"data"});
  auto cg = traceFn([](const std::vector<Array>& x) {  // h0 [4, 4], xs [4, 4, 4]
    ArrayFn body = [](const std::vector<Array>& in) { return std::vector<Array>{transpose(in[0]) + in[1]}; };
    return scanFlat(body, {}, {x[0]}, {x[1]}, 4, false);
  }, {f32({4, 4}), f32({4, 4, 4})});
  const std::vector<std::string> specs = {"data,None", "data,None,None"};
  auto p = must(planFor(cg, m, specs));
  TSR_COMPARE(shardingOf(p, cg.graph.outputs()[0]), std::string("P(None, None)"));
  PartitionResult r = partitionFor(cg, p);
  TSR_COMPARE(collectives(r), std::string("all_gather('data') all_gather('data')"));
  for (const auto& c : r.collectives)
    REQUIRE_MESSAGE(c.reason.find("scan operand") != std::string::npos, c.reason.c_str());
  std::mt19937 rng(12);
  std::vector<Array> inputs = {randomArray(rng, {4, 4}), randomArray(rng, {4, 4, 4})};
  compareWithOneDevice(runSharded(cg, m, specs, inputs), must(evalGraph(cg, inputs)));
}

// Gradient accumulation over microbatches split on 'data': the accumulator starts as zeros and adds partial
// sums (x_t^T . tanh(x_t . w) contracts the split rows), so it stays a partial sum through the loop and one
// all_reduce completes it after the loop, not one per step.
TEST_CASE_FIXTURE(EightDevices, "scanAccumulatesPartialSumsInItsCarry") {
  Mesh m = makeMesh({2}, {"data"});
  auto cg = traceFn([](const std::vector<Array>& x) {  // w [4, 4], xs [3, 8, 4]
    ArrayFn body = [](const std::vector<Array>& in) {  // (w, acc, x_t) -> (acc')
      return std::vector<Array>{in[1] + matmul(transpose(in[2]), tanh(matmul(in[2], in[0])))};
    };
    return scanFlat(body, {x[0]}, {zerosLike(x[0])}, {x[1]}, 3, false);
  }, {f32({4, 4}), f32({3, 8, 4})});
  const std::vector<std::string> specs = {"", "None,data,None"};
  PartitionResult r = partitionFor(cg, must(planFor(cg, m, specs)));
  TSR_COMPARE(collectives(r), std::string("all_reduce('data')"));
  REQUIRE_MESSAGE(r.collectives[0].reason.find("in the body") == std::string::npos, r.collectives[0].reason.c_str());
  std::mt19937 rng(14);
  std::vector<Array> inputs = {randomArray(rng, {4, 4}), randomArray(rng, {3, 8, 4})};
  compareWithOneDevice(runSharded(cg, m, specs, inputs), must(evalGraph(cg, inputs)));
}

// A body that cannot be planned on the mesh (here a constraint on another mesh) leaves the scan whole on every
// device: its split operand is gathered, and the collective says why.
TEST_CASE_FIXTURE(EightDevices, "scanThatCannotBePlannedRunsWholeAndSaysWhy") {
  Mesh m = makeMesh({2}, {"data"});
  Mesh other = makeMesh({2}, {"model"});
  auto cg = traceFn([&](const std::vector<Array>& x) {  // h0 [8, 4]
    ArrayFn body = [&](const std::vector<Array>& in) {
      return std::vector<Array>{spmd::withShardingConstraint(sin(in[0]), named(other, "model,None"))};
    };
    return scanFlat(body, {}, {x[0]}, {}, 2, false);
  }, {f32({8, 4})});
  auto p = must(planFor(cg, m, {"data,None"}));
  PartitionResult r = partitionFor(cg, p);
  TSR_COMPARE(collectives(r), std::string("all_gather('data')"));
  const std::string& why = r.collectives[0].reason;
  REQUIRE_MESSAGE(
      (why.find("scan runs whole on every device") != std::string::npos && why.find("differs") != std::string::npos),
      why.c_str());
}

// A cond whose branches are elementwise keeps the batch split: no collective, either branch.
TEST_CASE_FIXTURE(EightDevices, "condWithElementwiseBranchesKeepsTheSplit") {
  Mesh m = makeMesh({2}, {"data"});
  auto cg = traceFn([](const std::vector<Array>& x) {  // pred i32[], x [8, 4]
    ArrayFn yes = [](const std::vector<Array>& in) { return std::vector<Array>{sin(in[0]) * 2.0}; };
    ArrayFn no = [](const std::vector<Array>& in) { return std::vector<Array>{cos(in[0]) + 1.0}; };
    return condFlat(x[0], yes, no, {x[1]});
  }, {Aval{Shape{}, DType::I32}, f32({8, 4})});
  const std::vector<std::string> specs = {"", "data,None"};
  auto p = must(planFor(cg, m, specs));
  TSR_COMPARE(shardingOf(p, cg.graph.outputs()[0]), std::string("P('data', None)"));
  TSR_COMPARE(collectives(partitionFor(cg, p)), std::string(""));
  std::mt19937 rng(13);
  for (int pred : {0, 1}) {
    std::vector<Array> inputs = {Array::scalar(pred, DType::I32), randomArray(rng, {8, 4})};
    compareWithOneDevice(runSharded(cg, m, specs, inputs), must(evalGraph(cg, inputs)));
  }
}

// A GPT-2 whose blocks are one scan, trained data-parallel on 2 devices: the losses equal one device's, and the
// only collectives are one all_reduce per gradient (a stacked block parameter's after the backward loop) and
// one for the loss: the batch is never gathered.
TEST_CASE_FIXTURE(EightDevices, "scannedGptTrainsDataParallel") {
  TrainRun single = trainScannedGpt([](const std::string&, const Array& a) { return a; });
  REQUIRE(single.losses[2] < single.losses[0]);
  Mesh m = makeMesh({2}, {"data"});
  TrainRun r = trainScannedGpt([&](const std::string& path, const Array& a) {
    return must(spmd::devicePut(a, named(m, path.rfind("batch.", 0) == 0 ? "data" : "")));
  });
  std::printf("scanned GPT-2, 2-way data parallel: losses %.8f %.8f %.8f; collectives:\n%s", r.losses[0],
              r.losses[1], r.losses[2], r.listing.c_str());
  for (int s = 0; s < 3; ++s) {
    double a = single.losses[static_cast<size_t>(s)], b = r.losses[static_cast<size_t>(s)];
    REQUIRE_MESSAGE(std::abs(a - b) <= 1e-5 * std::abs(a),
                    "step " << s << ": one device " << std::setprecision(10) << a << ", sharded " << b);
  }
  TSR_COMPARE(r.collectives.size(), size_t(1));
  TSR_COMPARE(r.collectives["all_reduce('data')"], r.leaves + 1);
}

// The same on a 2x2 mesh with the MLPs Megatron-split over 'model' (c_fc column-parallel, its c_proj
// row-parallel, stacked [L, ...] with the layer dim whole): each step of a loop completes its MLP's partial
// sum with an all_reduce over 'model' inside the body; nothing is gathered.
TEST_CASE_FIXTURE(EightDevices, "scannedGptTrainsDataAndModelParallel") {
  TrainRun single = trainScannedGpt([](const std::string&, const Array& a) { return a; });
  Mesh m = makeMesh({2, 2}, {"data", "model"});
  const std::map<std::string, std::string> rules = {{"h.c_fc.weight", "None,None,model"},
                                                    {"h.c_fc.bias", "None,model"},
                                                    {"h.mlp_proj.weight", "None,model,None"},
                                                    {"batch.tokens", "data"},
                                                    {"batch.labels", "data"}};
  TrainRun r = trainScannedGpt([&](const std::string& path, const Array& a) {
    auto it = rules.find(path);
    return must(spmd::devicePut(a, named(m, it == rules.end() ? "" : it->second)));
  });
  std::printf("scanned GPT-2 on 2x2: losses %.8f %.8f %.8f; collectives:\n%s", r.losses[0], r.losses[1],
              r.losses[2], r.listing.c_str());
  for (int s = 0; s < 3; ++s) {
    double a = single.losses[static_cast<size_t>(s)], b = r.losses[static_cast<size_t>(s)];
    REQUIRE_MESSAGE(std::abs(a - b) <= 1e-5 * std::abs(a),
                    "step " << s << ": one device " << std::setprecision(10) << a << ", sharded " << b);
  }
  // 'model': one in each loop's body (the forward scan, the vjp's forward scan that keeps the carries, the
  // backward scan); 'data': the gradients and the loss, as on the 1-D mesh.
  TSR_COMPARE(r.collectives.size(), size_t(2));
  TSR_COMPARE(r.collectives["all_reduce('model')"], 3);
  TSR_COMPARE(r.collectives["all_reduce('data')"], r.leaves + 1);
}

TEST_CASE_FIXTURE(EightDevices, "tooFewDevicesIsAClearError") {
  Mesh m = makeMesh({16}, {"a"});
  auto r = spmd::devicePut(Array::zeros({16}), named(m, "a"));
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find("TESSERA_CPU_DEVICES") != std::string::npos, r.error().message.c_str());
}

namespace {

// A backend with a processor per device, as the CUDA backend has a GPU each: it records the local device each
// executable is compiled for and the device each one runs for, and runs the CPU backend's program.
struct PerDeviceLog {
  std::mutex mutex;
  std::vector<int> compiledFor;
  std::map<int, std::set<int>> ranFor;  // local device compiled for -> positions that ran it
};
PerDeviceLog& perDeviceLog() {
  static PerDeviceLog log;
  return log;
}

class PerDeviceExecutable final : public runtime::Executable {
 public:
  PerDeviceExecutable(std::unique_ptr<runtime::Executable> cpu, int localDevice)
      : m_cpu(std::move(cpu)), m_localDevice(localDevice) {}
  Result<std::vector<runtime::BufferPtr>> run(std::span<const runtime::BufferPtr> inputs,
                                              const std::vector<bool>& donated) override {
    {
      std::lock_guard lock(perDeviceLog().mutex);
      perDeviceLog().ranFor[m_localDevice].insert(dist::currentDevice()->position);
    }
    return m_cpu->run(inputs, donated);
  }
  std::string summary() const override { return ", per device"; }

 private:
  std::unique_ptr<runtime::Executable> m_cpu;
  int m_localDevice;
};

class PerDeviceBackend final : public runtime::Backend {
 public:
  std::string name() const override { return "per_device_test"; }
  Result<std::unique_ptr<runtime::Executable>> compile(const ir::Graph& g, const ir::OpRegistry& reg,
                                                       const runtime::CompileOptions& options) override {
    {
      std::lock_guard lock(perDeviceLog().mutex);
      perDeviceLog().compiledFor.push_back(options.localDevice);
    }
    TSR_ASSIGN(std::unique_ptr<runtime::Executable> cpu, runtime::compileOn("cpu", g, reg, options));
    return std::unique_ptr<runtime::Executable>(
        std::make_unique<PerDeviceExecutable>(std::move(cpu), options.localDevice));
  }
};

}  // namespace

// A backend other than the CPU's compiles the per-device program once for each local device of the mesh (by its
// index among the process's devices: the CUDA backend's GPU per device), and each device runs its own; the
// results (a data-parallel sum: one all_reduce) equal the CPU's.
TEST_CASE_FIXTURE(EightDevices, "aBackendWithADevicePerPositionCompilesForEach") {
  runtime::backends().add(std::make_unique<PerDeviceBackend>());
  Mesh m = makeMesh({4}, {"a"});
  auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{sum(sin(x[0]))}; }, {f32({8, 3})});
  std::mt19937 rng(5);
  Array x = randomArray(rng, {8, 3});
  ShardingAnnotations ann;
  ann.inputs.push_back(spec(m, "a", x.shape()));
  Array placed = must(spmd::devicePut(x, named(m, "a")));
  auto onCpu = must(spmd::SpmdExecutable::compile(cg.graph, m, ann, spmd::SpmdOptions{.name = "cpu", .donatable = {}}));
  auto perDevice = must(spmd::SpmdExecutable::compile(
      cg.graph, m, ann, spmd::SpmdOptions{.name = "per_device", .device = "per_device_test", .donatable = {}}));
  std::vector<int> compiled = perDeviceLog().compiledFor;
  std::sort(compiled.begin(), compiled.end());
  TSR_COMPARE(compiled, (std::vector<int>{0, 1, 2, 3}));  // the mesh's devices, not all 8
  auto want = must(onCpu->run({placed}));
  auto got = must(perDevice->run({placed}));
  TSR_COMPARE(must(spmd::fetchWhole(got[0])).toDoubles(), must(spmd::fetchWhole(want[0])).toDoubles());
  for (int d = 0; d < 4; ++d) TSR_COMPARE(perDeviceLog().ranFor[d], (std::set<int>{d}));
}
