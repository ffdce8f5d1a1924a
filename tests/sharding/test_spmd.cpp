// Sharding propagation (per op family), the SPMD partitioner's collectives, and partitioned programs run on 8
// virtual devices against the same program run whole on one device (the interpreter), on random graphs over
// meshes of 1, 2, 4 and 8 devices and 2x2 and 4x2.
#include <QtTest>

#include <cstdio>
#include <map>
#include <random>

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

QString shardingOf(const ShardingPlan& p, ir::ValueId v) { return QString::fromStdString(p.values[static_cast<size_t>(v)].toString(p.mesh)); }

// "all_reduce('a') all_gather('b')": the collectives of a partitioned program, in order.
QString collectives(const PartitionResult& r) {
  QStringList out;
  for (const auto& c : r.collectives) out << QString::fromStdString(c.opName + "(" + c.axisNames + ")");
  return out.join(" ");
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
  QCOMPARE(outs.size(), reference.size());
  for (size_t o = 0; o < outs.size(); ++o)
    QVERIFY2(maxRelDiff(outs[o].toDoubles(), reference[o].toDoubles()) < 1e-5, qPrintable(QString("output %1").arg(o)));
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

}  // namespace

class TestSpmd : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { QVERIFY(spmd::setCpuDevices(8).ok()); }

  // ---- propagation, per op family ----

  void elementwiseKeepsTheSharding() {
    Mesh m = makeMesh({4, 2}, {"a", "b"});
    auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{sin(x[0])}; }, {f32({8, 4})});
    auto p = must(planFor(cg, m, {"a,b"}));
    QCOMPARE(shardingOf(p, cg.graph.outputs()[0]), QString("P('a', 'b')"));
    QVERIFY(p.origins[static_cast<size_t>(cg.graph.outputs()[0])].kind == ShardingOrigin::Kind::Forward);
  }

  void dotFreeDimsPassAndContractionIsPartial() {
    Mesh m = makeMesh({4, 2}, {"a", "b"});
    auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{matmul(x[0], x[1])}; },
                      {f32({16, 8}), f32({8, 4})});
    // Batch split, weight column-split: the result is split both ways, no communication.
    auto p = must(planFor(cg, m, {"a,None", "None,b"}));
    QCOMPARE(shardingOf(p, cg.graph.outputs()[0]), QString("P('a', 'b')"));
    QCOMPARE(collectives(partitionFor(cg, p)), QString(""));
    // Contracting dim split on both sides: partial sums, completed by one all_reduce over 'b'.
    auto q = must(planFor(cg, m, {"a,b", "b,None"}));
    QCOMPARE(shardingOf(q, cg.graph.outputs()[0]), QString("P('a', None)"));
    QCOMPARE(collectives(partitionFor(cg, q)), QString("all_reduce('b')"));
    // ... or by a reduce_scatter when the result is asked for split over 'b'.
    auto r = must(planFor(cg, m, {"a,b", "b,None"}, {"a,b"}));
    QCOMPARE(collectives(partitionFor(cg, r)), QString("reduce_scatter('b')"));
  }

  void reductionsGivePartialSumsOrNeedTheDimWhole() {
    Mesh m = makeMesh({8}, {"a"});
    auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{sum(x[0], {0}), max(x[0], {0})}; },
                      {f32({16, 4})});
    auto p = must(planFor(cg, m, {"a,None"}));
    // reduce_max: its axis whole -> all_gather first; reduce_sum: partial over 'a' -> all_reduce, where the sum
    // is used (here: as an output, after the max).
    QCOMPARE(collectives(partitionFor(cg, p)), QString("all_gather('a') all_reduce('a')"));
  }

  void partialSumsAreAddedBeforeTheirCollective() {
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
    QCOMPARE(collectives(r), QString("all_reduce('a') all_reduce('a')"));
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
      QVERIFY2(maxRelDiff(outs[o].toDoubles(), reference[o].toDoubles()) < 1e-5, qPrintable(QString("output %1").arg(o)));
  }

  // Jit's donated arguments in an SPMD program: each device's block becomes its output block (an update in
  // place), and the array given up is deleted; one the caller still holds is neither.
  void donatedShardsAreUpdatedInPlace() {
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
    QVERIFY(p1.isSharded());
    for (size_t d = 0; d < before.size(); ++d) QCOMPARE(static_cast<const void*>(p1.shards()->shards[d]->data()), before[d]);  // devices 0..3
    QVERIFY(maxRelDiff(p1.toDoubles(), expect) < 1e-6);
    QVERIFY(!copy.find("p")->leaf().isConcrete());  // deleted, as in JAX
    QVERIFY(g.isConcrete());                        // not donated
    // A second handle keeps the array: it is read, not overwritten.
    Array held = p1;
    Tree out2 = must(f.call(Tree::dict({{"p", Tree(held)}, {"g", Tree(g)}})));
    QVERIFY(held.isConcrete());
    QVERIFY(out2.find("p")->leaf().shards()->shards[0]->data() != held.shards()->shards[0]->data());
    QVERIFY(maxRelDiff(held.toDoubles(), expect) < 1e-6);
  }

  void reshapeSplitsTheMajorDimOfABlock() {
    Mesh m = makeMesh({4, 2}, {"a", "b"});
    // [B, T, C] -> [B, T, H, D]: C split over 'b' becomes H split over 'b' (heads).
    auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{reshape(x[0], {4, 6, 2, 8})}; },
                      {f32({4, 6, 16})});
    auto p = must(planFor(cg, m, {"a,None,b"}));
    QCOMPARE(shardingOf(p, cg.graph.outputs()[0]), QString("P('a', None, 'b', None)"));
    QCOMPARE(collectives(partitionFor(cg, p)), QString(""));
  }

  void transposeAndBroadcastFollowTheirDims() {
    Mesh m = makeMesh({4, 2}, {"a", "b"});
    auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{add(transpose(x[0]), x[1])}; },
                      {f32({8, 4}), f32({8})});
    // x [8, 4] split ('a', 'b') -> x^T [4, 8] split ('b', 'a'); the free bias [8] broadcast along the rows
    // learns 'a' backwards from the add.
    auto p = must(planFor(cg, m, {"a,b", "-"}));
    QCOMPARE(shardingOf(p, cg.graph.outputs()[0]), QString("P('b', 'a')"));
    QCOMPARE(shardingOf(p, cg.graph.inputs()[1]), QString("P('a')"));
    QVERIFY(p.origins[static_cast<size_t>(cg.graph.inputs()[1])].kind == ShardingOrigin::Kind::Backward);
  }

  void gatherKeepsIndexAndFeatureSplits() {
    Mesh m = makeMesh({4, 2}, {"a", "b"});
    auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{take(x[0], x[1], 0)}; },
                      {f32({32, 8}), Aval{Shape{4, 6}, DType::I32}});
    auto p = must(planFor(cg, m, {"None,b", "a,None"}));
    QCOMPARE(shardingOf(p, cg.graph.outputs()[0]), QString("P('a', None, 'b')"));
    QCOMPARE(collectives(partitionFor(cg, p)), QString(""));
  }

  void conflictingAnnotationsNameBothSpecsAndTheOp() {
    Mesh m = makeMesh({4, 2}, {"a", "b"});
    auto cg = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{add(x[0], x[1])}; },
                      {f32({8, 8}), f32({8, 8})});
    auto p = planFor(cg, m, {"a,None", "b,None"});
    QVERIFY(!p.ok());
    QString msg = QString::fromStdString(p.error().message);
    QVERIFY2(msg.contains("add") && msg.contains("P('a', None)") && msg.contains("P('b', None)") &&
                 msg.contains("conflicting"),
             qPrintable(msg));
  }

  // ---- reshards ----

  void reshardsUseTheCollectiveTheMoveNeeds() {
    Mesh m = makeMesh({4, 2}, {"a", "b"});
    auto identity = traceFn([](const std::vector<Array>& x) { return std::vector<Array>{neg(x[0])}; }, {f32({8, 8})});
    auto moved = [&](const std::string& from, const std::string& to) {
      return collectives(partitionFor(identity, must(planFor(identity, m, {from}, {to}))));
    };
    QCOMPARE(moved("a,None", "None,a"), QString("all_to_all('a')"));
    QCOMPARE(moved("a,b", "a,None"), QString("all_gather('b')"));
    QCOMPARE(moved("None,None", "a,b"), QString(""));  // a local slice
    QCOMPARE(moved("(a,b),None", "(b,a),None"), QString("collective_permute(('a', 'b'))"));
  }

  // ---- partitioned programs equal the whole program ----

  void randomGraphsEqualOneDevice_data() {
    QTest::addColumn<QVector<qint64>>("meshShape");
    QTest::newRow("1") << QVector<qint64>{1};
    QTest::newRow("2") << QVector<qint64>{2};
    QTest::newRow("4") << QVector<qint64>{4};
    QTest::newRow("8") << QVector<qint64>{8};
    QTest::newRow("2x2") << QVector<qint64>{2, 2};
    QTest::newRow("4x2") << QVector<qint64>{4, 2};
  }

  void randomGraphsEqualOneDevice() {
    QFETCH(QVector<qint64>, meshShape);
    std::vector<int64_t> shape(meshShape.begin(), meshShape.end());
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
        QVERIFY2(diff < 1e-4, qPrintable(QString("trial %1 output %2 specs %3 | %4 | %5: relative difference %6\n%7")
                                             .arg(trial).arg(o).arg(QString::fromStdString(specs[0]))
                                             .arg(QString::fromStdString(specs[1])).arg(QString::fromStdString(specs[2]))
                                             .arg(diff).arg(QString::fromStdString(ir::print(exe->program(), ops::registry())))));
      }
    }
    if (m.size() > 1) QVERIFY(totalCollectives > 0);
  }

  // ---- the seed tutorial's first steps, eagerly ----

  void sinOverAShardedArrayKeepsTheSharding() {
    Mesh m = makeMesh({4, 2}, {"a", "b"});
    std::mt19937 rng(7);
    Array x = randomArray(rng, {8192, 8192 / 64});
    Array xs = must(spmd::devicePut(x, named(m, "a,b")));
    QVERIFY(xs.isSharded());
    QCOMPARE(int(xs.shards()->shards.size()), 8);
    QCOMPARE(xs.shards()->shards[3]->size(), int64_t(2048 * 64 * 4));  // [8192 / 4, 128 / 2] floats
    Array y = sin(xs);
    QVERIFY(y.isSharded());
    QCOMPARE(QString::fromStdString(y.sharding()->spec.toString()), QString("P('a', 'b')"));
    QCOMPARE(maxRelDiff(y.toDoubles(), sin(x).toDoubles()), 0.0);
    auto grid = must(spmd::visualizeArraySharding(y));
    QVERIFY2(QString::fromStdString(grid).contains("CPU 7"), grid.c_str());
  }

  void jitFollowsTheArgumentsShardings() {
    Mesh m = makeMesh({4, 2}, {"a", "b"});
    std::mt19937 rng(9);
    Array x = randomArray(rng, {32, 16}), w = randomArray(rng, {16, 8});
    auto f = jit([](const std::vector<Array>& a) { return std::vector<Array>{tanh(matmul(a[0], a[1]))}; }, "f");
    auto whole = must(f({x, w}));
    auto split = must(f({must(spmd::devicePut(x, named(m, "a,b"))), must(spmd::devicePut(w, named(m, "b,None")))}));
    QVERIFY(split[0].isSharded());
    QCOMPARE(QString::fromStdString(split[0].sharding()->spec.toString()), QString("P('a', None)"));
    QVERIFY(maxRelDiff(split[0].toDoubles(), whole[0].toDoubles()) < 1e-5);
    QCOMPARE(f.cacheSize(), size_t(2));
  }

  // ---- scan and cond: their nested graphs partitioned with the mesh ----

  // A scan over a batch split on 'data' (carry h [8, 4] split on its rows), whose body is an elementwise op and
  // a matmul with a replicated weight: each device loops over its rows alone, with no collective at all.
  void scanOverASplitBatchNeedsNoCollective() {
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
    QCOMPARE(shardingOf(p, cg.graph.outputs()[0]), QString("P('data', None)"));  // the carry, as it entered
    QCOMPARE(shardingOf(p, cg.graph.outputs()[1]), QString("P(None, 'data')"));  // ys [3, 8]: the steps whole
    // The body's plan is listed under the scan: its carry enters split as the scan's operand is.
    const QString described = QString::fromStdString(describePlan(cg.graph, ops::registry(), p));
    QVERIFY2(described.contains("  body:\n") && described.contains("    %1 = input 1 f32[8,4] P('data', None)  annotation"),
             qPrintable(described));
    QCOMPARE(collectives(partitionFor(cg, p)), QString(""));

    std::mt19937 rng(11);
    std::vector<Array> inputs = {randomArray(rng, {8, 4}), randomArray(rng, {4, 4}), randomArray(rng, {3, 4})};
    PartitionResult r;
    auto outs = runSharded(cg, m, specs, inputs, &r);
    QCOMPARE(collectives(r), QString(""));
    int scans = 0;
    for (const ir::Node& n : r.local.nodes()) scans += n.op == ir::OpCode::Scan;
    QCOMPARE(scans, 1);
    compareWithOneDevice(outs, must(evalGraph(cg, inputs)));
  }

  // A carry the body leaves split otherwise than it entered (transposed) finds its fixed point replicated: it is
  // gathered once before the loop, never inside it. An x split along the scanned dim is gathered there too.
  void scanCarriesReachAFixedPoint() {
    Mesh m = makeMesh({2}, {"data"});
    auto cg = traceFn([](const std::vector<Array>& x) {  // h0 [4, 4], xs [4, 4, 4]
      ArrayFn body = [](const std::vector<Array>& in) { return std::vector<Array>{transpose(in[0]) + in[1]}; };
      return scanFlat(body, {}, {x[0]}, {x[1]}, 4, false);
    }, {f32({4, 4}), f32({4, 4, 4})});
    const std::vector<std::string> specs = {"data,None", "data,None,None"};
    auto p = must(planFor(cg, m, specs));
    QCOMPARE(shardingOf(p, cg.graph.outputs()[0]), QString("P(None, None)"));
    PartitionResult r = partitionFor(cg, p);
    QCOMPARE(collectives(r), QString("all_gather('data') all_gather('data')"));
    for (const auto& c : r.collectives) QVERIFY2(c.reason.find("scan operand") != std::string::npos, c.reason.c_str());
    std::mt19937 rng(12);
    std::vector<Array> inputs = {randomArray(rng, {4, 4}), randomArray(rng, {4, 4, 4})};
    compareWithOneDevice(runSharded(cg, m, specs, inputs), must(evalGraph(cg, inputs)));
  }

  // Gradient accumulation over microbatches split on 'data': the accumulator starts as zeros and adds partial
  // sums (x_t^T . tanh(x_t . w) contracts the split rows), so it stays a partial sum through the loop and one
  // all_reduce completes it after the loop, not one per step.
  void scanAccumulatesPartialSumsInItsCarry() {
    Mesh m = makeMesh({2}, {"data"});
    auto cg = traceFn([](const std::vector<Array>& x) {  // w [4, 4], xs [3, 8, 4]
      ArrayFn body = [](const std::vector<Array>& in) {  // (w, acc, x_t) -> (acc')
        return std::vector<Array>{in[1] + matmul(transpose(in[2]), tanh(matmul(in[2], in[0])))};
      };
      return scanFlat(body, {x[0]}, {zerosLike(x[0])}, {x[1]}, 3, false);
    }, {f32({4, 4}), f32({3, 8, 4})});
    const std::vector<std::string> specs = {"", "None,data,None"};
    PartitionResult r = partitionFor(cg, must(planFor(cg, m, specs)));
    QCOMPARE(collectives(r), QString("all_reduce('data')"));
    QVERIFY2(r.collectives[0].reason.find("in the body") == std::string::npos, r.collectives[0].reason.c_str());
    std::mt19937 rng(14);
    std::vector<Array> inputs = {randomArray(rng, {4, 4}), randomArray(rng, {3, 8, 4})};
    compareWithOneDevice(runSharded(cg, m, specs, inputs), must(evalGraph(cg, inputs)));
  }

  // A body that cannot be planned on the mesh (here a constraint on another mesh) leaves the scan whole on every
  // device: its split operand is gathered, and the collective says why.
  void scanThatCannotBePlannedRunsWholeAndSaysWhy() {
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
    QCOMPARE(collectives(r), QString("all_gather('data')"));
    const std::string& why = r.collectives[0].reason;
    QVERIFY2(why.find("scan runs whole on every device") != std::string::npos && why.find("differs") != std::string::npos,
             why.c_str());
  }

  // A cond whose branches are elementwise keeps the batch split: no collective, either branch.
  void condWithElementwiseBranchesKeepsTheSplit() {
    Mesh m = makeMesh({2}, {"data"});
    auto cg = traceFn([](const std::vector<Array>& x) {  // pred i32[], x [8, 4]
      ArrayFn yes = [](const std::vector<Array>& in) { return std::vector<Array>{sin(in[0]) * 2.0}; };
      ArrayFn no = [](const std::vector<Array>& in) { return std::vector<Array>{cos(in[0]) + 1.0}; };
      return condFlat(x[0], yes, no, {x[1]});
    }, {Aval{Shape{}, DType::I32}, f32({8, 4})});
    const std::vector<std::string> specs = {"", "data,None"};
    auto p = must(planFor(cg, m, specs));
    QCOMPARE(shardingOf(p, cg.graph.outputs()[0]), QString("P('data', None)"));
    QCOMPARE(collectives(partitionFor(cg, p)), QString(""));
    std::mt19937 rng(13);
    for (int pred : {0, 1}) {
      std::vector<Array> inputs = {Array::scalar(pred, DType::I32), randomArray(rng, {8, 4})};
      compareWithOneDevice(runSharded(cg, m, specs, inputs), must(evalGraph(cg, inputs)));
    }
  }

  // A GPT-2 whose blocks are one scan, trained data-parallel on 2 devices: the losses equal one device's, and the
  // only collectives are one all_reduce per gradient (a stacked block parameter's after the backward loop) and
  // one for the loss: the batch is never gathered.
  void scannedGptTrainsDataParallel() {
    TrainRun single = trainScannedGpt([](const std::string&, const Array& a) { return a; });
    QVERIFY(single.losses[2] < single.losses[0]);
    Mesh m = makeMesh({2}, {"data"});
    TrainRun r = trainScannedGpt([&](const std::string& path, const Array& a) {
      return must(spmd::devicePut(a, named(m, path.rfind("batch.", 0) == 0 ? "data" : "")));
    });
    std::printf("scanned GPT-2, 2-way data parallel: losses %.8f %.8f %.8f; collectives:\n%s", r.losses[0],
                r.losses[1], r.losses[2], r.listing.c_str());
    for (int s = 0; s < 3; ++s) {
      double a = single.losses[static_cast<size_t>(s)], b = r.losses[static_cast<size_t>(s)];
      QVERIFY2(std::abs(a - b) <= 1e-5 * std::abs(a), qPrintable(QString("step %1: one device %2, sharded %3").arg(s).arg(a, 0, 'g', 10).arg(b, 0, 'g', 10)));
    }
    QCOMPARE(r.collectives.size(), size_t(1));
    QCOMPARE(r.collectives["all_reduce('data')"], r.leaves + 1);
  }

  // The same on a 2x2 mesh with the MLPs Megatron-split over 'model' (c_fc column-parallel, its c_proj
  // row-parallel, stacked [L, ...] with the layer dim whole): each step of a loop completes its MLP's partial
  // sum with an all_reduce over 'model' inside the body; nothing is gathered.
  void scannedGptTrainsDataAndModelParallel() {
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
      QVERIFY2(std::abs(a - b) <= 1e-5 * std::abs(a), qPrintable(QString("step %1: one device %2, sharded %3").arg(s).arg(a, 0, 'g', 10).arg(b, 0, 'g', 10)));
    }
    // 'model': one in each loop's body (the forward scan, the vjp's forward scan that keeps the carries, the
    // backward scan); 'data': the gradients and the loss, as on the 1-D mesh.
    QCOMPARE(r.collectives.size(), size_t(2));
    QCOMPARE(r.collectives["all_reduce('model')"], 3);
    QCOMPARE(r.collectives["all_reduce('data')"], r.leaves + 1);
  }

  void tooFewDevicesIsAClearError() {
    Mesh m = makeMesh({16}, {"a"});
    auto r = spmd::devicePut(Array::zeros({16}), named(m, "a"));
    QVERIFY(!r.ok());
    QVERIFY2(QString::fromStdString(r.error().message).contains("TESSERA_CPU_DEVICES"), r.error().message.c_str());
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestSpmd)
#include "test_spmd.moc"
