// Meshes, PartitionSpecs and device layouts, checked against layouts worked out by hand from the definitions
// in jax.sharding (the distributed-arrays tutorial's 4x2 mesh), and the drawing of visualizeSharding.
#include <QtTest>

#include "engine/sharding/sharding.h"

using namespace tsr;
using namespace tsr::sharding;

namespace {

NamedSharding make(std::vector<int64_t> meshShape, std::vector<std::string> axes, const std::string& spec) {
  auto m = Mesh::create(std::move(meshShape), std::move(axes));
  if (!m.ok()) qFatal("%s", m.error().message.c_str());
  auto p = PartitionSpec::parse(spec);
  if (!p.ok()) qFatal("%s", p.error().message.c_str());
  auto s = NamedSharding::create(*m, *p);
  if (!s.ok()) qFatal("%s", s.error().message.c_str());
  return *s;
}

// The shard a device holds.
Shard shardOf(const std::vector<Shard>& layout, int device) {
  for (const auto& s : layout)
    if (std::find(s.devices.begin(), s.devices.end(), device) != s.devices.end()) return s;
  qFatal("device %d holds nothing", device);
}

}  // namespace

class TestSharding : public QObject {
  Q_OBJECT
 private slots:
  void specsParseAndPrint() {
    auto p = PartitionSpec::parse("a,b");
    QVERIFY(p.ok());
    QCOMPARE(QString::fromStdString(p->toString()), QString("P('a', 'b')"));
    auto t = PartitionSpec::parse("('a', 'b'), None");
    QVERIFY(t.ok());
    QCOMPARE(int(t->dims.size()), 2);
    QCOMPARE(t->dims[0], (std::vector<std::string>{"a", "b"}));
    QVERIFY(t->dims[1].empty());
    QCOMPARE(QString::fromStdString(t->toString()), QString("P(('a', 'b'), None)"));
    auto empty = PartitionSpec::parse("");
    QVERIFY(empty.ok() && empty->dims.empty());
    for (const char* bad : {"a,,b", "(a,b", "a b", "(None)"}) {
      auto e = PartitionSpec::parse(bad);
      QVERIFY2(!e.ok(), bad);
      QVERIFY2(e.error().message.find("column") != std::string::npos, e.error().message.c_str());
    }
  }

  void meshesAreChecked() {
    QVERIFY(!Mesh::create({4, 2}, {"a"}).ok());
    QVERIFY(!Mesh::create({4, 2}, {"a", "a"}).ok());
    QVERIFY(!Mesh::create({4, 0}, {"a", "b"}).ok());
    QVERIFY(!Mesh::create({2}, {"a"}, {0, 0}).ok());
    auto m = Mesh::create({4, 2}, {"a", "b"});
    QVERIFY(m.ok());
    QCOMPARE(m->coordinates(5), (std::vector<int64_t>{2, 1}));
    auto unknown = NamedSharding::create(*m, *PartitionSpec::parse("a,c"));
    QVERIFY(!unknown.ok());
    QVERIFY(unknown.error().message.find("'c' is not in Mesh('a': 4, 'b': 2)") != std::string::npos);
    auto twice = NamedSharding::create(*m, *PartitionSpec::parse("a,a"));
    QVERIFY(!twice.ok());
    QVERIFY(twice.error().message.find("shards both dim 0 and dim 1") != std::string::npos);
  }

  // A mesh whose device count overflows 64 bits: an error (it used to wrap to -2 and abort resizing to it).
  void hugeMeshesAreErrors() {
    auto huge = Mesh::create({9223372036854775807, 2}, {"a", "b"});
    QVERIFY(!huge.ok());
    QVERIFY2(huge.error().message.find("9223372036854775807 x 2, more than the limit of 1048576") != std::string::npos,
             huge.error().message.c_str());
    auto wraps = Mesh::create({4294967296, 4294967296}, {"a", "b"});  // 2^64: exactly 0 once wrapped
    QVERIFY(!wraps.ok());
    QVERIFY(Mesh::create({1024, 1024}, {"a", "b"}).ok());
    QVERIFY(!Mesh::create({1024, 1025}, {"a", "b"}).ok());
  }

  // A sharding made without create() (as a rule checked against an older mesh) whose spec names an axis the
  // mesh lacks: check() says so (it used to divide by that axis's size, zero: SIGFPE).
  void specNamingAMissingAxisIsAnError() {
    auto m = Mesh::create({8}, {"data"});
    QVERIFY(m.ok());
    NamedSharding ns{*m, *PartitionSpec::parse("None, model")};
    auto st = ns.check(Shape({784, 1024}));
    QVERIFY(!st.ok());
    QCOMPARE(st.error().message, std::string("P(None, 'model'): axis 'model' is not in Mesh('data': 8)"));
    QVERIFY(!ns.layout(Shape({784, 1024})).ok());
  }

  void tutorialLayouts() {
    // P('a', 'b') on 4x2: device d holds rows (d / 2) * 2048 and columns (d % 2) * 4096.
    NamedSharding ab = make({4, 2}, {"a", "b"}, "a,b");
    Shape x({8192, 8192});
    auto layout = ab.layout(x);
    QVERIFY(layout.ok());
    QCOMPARE(int(layout->size()), 8);
    for (int d = 0; d < 8; ++d) {
      Shard s = shardOf(*layout, d);
      QCOMPARE(s.devices, std::vector<int>{d});
      QCOMPARE(s.start, (std::vector<int64_t>{(d / 2) * 2048, (d % 2) * 4096}));
      QCOMPARE(s.limit, (std::vector<int64_t>{(d / 2) * 2048 + 2048, (d % 2) * 4096 + 4096}));
    }
    QCOMPARE(ab.shardShape(x), Shape({2048, 4096}));
    // P('a', None): replicated over 'b', so devices 2k and 2k+1 hold the same rows.
    NamedSharding a = make({4, 2}, {"a", "b"}, "a");
    auto rows = a.layout(x);
    QCOMPARE(int(rows->size()), 4);
    QCOMPARE(shardOf(*rows, 5).devices, (std::vector<int>{4, 5}));
    QCOMPARE(shardOf(*rows, 5).start, (std::vector<int64_t>{4096, 0}));
    // P(None, ('a', 'b')) on a 1x... : 'a' major, 'b' minor: device d holds column block d.
    NamedSharding tuple = make({4, 2}, {"a", "b"}, "None,(a,b)");
    auto cols = tuple.layout(Shape({16, 64}));
    for (int d = 0; d < 8; ++d) QCOMPARE(shardOf(*cols, d).start[1], int64_t(d * 8));
    // ('b', 'a'): 'b' major: device (i, j) holds block j * 4 + i.
    NamedSharding swapped = make({4, 2}, {"a", "b"}, "(b,a)");
    auto sw = swapped.layout(Shape({64}));
    for (int d = 0; d < 8; ++d) QCOMPARE(shardOf(*sw, d).index[0], int64_t((d % 2) * 4 + d / 2));
    // Fully replicated: one shard on every device.
    NamedSharding rep = make({4, 2}, {"a", "b"}, "");
    auto r = rep.layout(x);
    QCOMPARE(int(r->size()), 1);
    QCOMPARE(int((*r)[0].devices.size()), 8);
  }

  void unevenAndOverlongSpecsAreErrors() {
    NamedSharding a = make({8}, {"a"}, "a");
    auto e = a.layout(Shape({100}));
    QVERIFY(!e.ok());
    QVERIFY(e.error().message.find("into 8 shards, which does not divide 100") != std::string::npos);
    NamedSharding ab = make({4, 2}, {"a", "b"}, "a,b");
    QVERIFY(!ab.layout(Shape({64})).ok());
  }

  void drawingLooksLikeJax() {
    NamedSharding ab = make({4, 2}, {"a", "b"}, "a,b");
    auto text = visualizeSharding(Shape({8192, 8192}), ab);
    QVERIFY(text.ok());
    QString t = QString::fromStdString(*text);
    // Four rows of two boxes, devices in mesh order.
    for (int d = 0; d < 8; ++d) QCOMPARE(t.count(QString("CPU %1 ").arg(d)), 1);
    QCOMPARE(t.count("┼"), 3);
    QVERIFY(t.indexOf("CPU 0") < t.indexOf("CPU 1") && t.indexOf("CPU 1") < t.indexOf("CPU 2"));
    // Replicated blocks list their devices.
    auto rows = visualizeSharding(Shape({8192, 8192}), make({4, 2}, {"a", "b"}, "a"));
    QVERIFY(rows.ok());
    QVERIFY(QString::fromStdString(*rows).contains("CPU 6,7"));
    QCOMPARE(QString::fromStdString(*rows).count("├"), 3);
    // Rank 3: the grid of the sharded dims, named.
    auto r3 = visualizeSharding(Shape({8, 16, 32}), make({4, 2}, {"a", "b"}, "a,None,b"));
    QVERIFY(r3.ok());
    QVERIFY(QString::fromStdString(*r3).contains("rows: dim 0, columns: dim 2"));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_APPLESS_MAIN, TestSharding)
#include "test_sharding.moc"
