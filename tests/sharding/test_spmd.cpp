// Sharding propagation (per op family), the SPMD partitioner's collectives, and partitioned programs run on 8
// virtual devices against the same program run whole on one device (the interpreter), on random graphs over
// meshes of 1, 2, 4 and 8 devices and 2x2 and 4x2.
#include <QtTest>

#include <random>

#include "engine/ops/registry.h"
#include "engine/sharding/partitioner.h"
#include "engine/sharding/propagation.h"
#include "engine/spmd/spmd.h"
#include "tests/sharding/sharding_test_util.h"
#include "engine/transform/api.h"
#include "engine/transform/eval.h"
#include "engine/transform/jit.h"
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
    auto exe = must(spmd::SpmdExecutable::compile(cg.graph, m, ann, {.name = "partials"}));
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
      auto exe = must(spmd::SpmdExecutable::compile(cg.graph, m, ann, {.name = "random"}));
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

  void tooFewDevicesIsAClearError() {
    Mesh m = makeMesh({16}, {"a"});
    auto r = spmd::devicePut(Array::zeros({16}), named(m, "a"));
    QVERIFY(!r.ok());
    QVERIFY2(QString::fromStdString(r.error().message).contains("TESSERA_CPU_DEVICES"), r.error().message.c_str());
  }
};

QTEST_GUILESS_MAIN(TestSpmd)
#include "test_spmd.moc"
