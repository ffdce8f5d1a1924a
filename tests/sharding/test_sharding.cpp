// Meshes, PartitionSpecs and device layouts, checked against layouts worked out by hand from the definitions
// in jax.sharding (the distributed-arrays tutorial's 4x2 mesh), and the drawing of visualizeSharding.
#include "tests/check.h"

#include <algorithm>

#include "engine/sharding/sharding.h"

using namespace tsr;
using namespace tsr::sharding;

namespace {

NamedSharding make(std::vector<int64_t> meshShape, std::vector<std::string> axes, const std::string& spec) {
  auto m = Mesh::create(std::move(meshShape), std::move(axes));
  if (!m.ok()) TSR_FATAL(m.error().message);
  auto p = PartitionSpec::parse(spec);
  if (!p.ok()) TSR_FATAL(p.error().message);
  auto s = NamedSharding::create(*m, *p);
  if (!s.ok()) TSR_FATAL(s.error().message);
  return *s;
}

// The shard a device holds.
Shard shardOf(const std::vector<Shard>& layout, int device) {
  for (const auto& s : layout)
    if (std::find(s.devices.begin(), s.devices.end(), device) != s.devices.end()) return s;
  TSR_FATAL("device " << device << " holds nothing");
}

// How many times part occurs in text, overlapping occurrences included.
int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("specsParseAndPrint") {
  auto p = PartitionSpec::parse("a,b");
  REQUIRE(p.ok());
  TSR_COMPARE(p->toString(), std::string("P('a', 'b')"));
  auto t = PartitionSpec::parse("('a', 'b'), None");
  REQUIRE(t.ok());
  TSR_COMPARE(int(t->dims.size()), 2);
  TSR_COMPARE(t->dims[0], (std::vector<std::string>{"a", "b"}));
  REQUIRE(t->dims[1].empty());
  TSR_COMPARE(t->toString(), std::string("P(('a', 'b'), None)"));
  auto empty = PartitionSpec::parse("");
  REQUIRE((empty.ok() && empty->dims.empty()));
  for (const char* bad : {"a,,b", "(a,b", "a b", "(None)"}) {
    auto e = PartitionSpec::parse(bad);
    REQUIRE_MESSAGE(!e.ok(), bad);
    REQUIRE_MESSAGE(e.error().message.find("column") != std::string::npos, e.error().message.c_str());
  }
}

TEST_CASE("meshesAreChecked") {
  REQUIRE(!Mesh::create({4, 2}, {"a"}).ok());
  REQUIRE(!Mesh::create({4, 2}, {"a", "a"}).ok());
  REQUIRE(!Mesh::create({4, 0}, {"a", "b"}).ok());
  REQUIRE(!Mesh::create({2}, {"a"}, {0, 0}).ok());
  auto m = Mesh::create({4, 2}, {"a", "b"});
  REQUIRE(m.ok());
  TSR_COMPARE(m->coordinates(5), (std::vector<int64_t>{2, 1}));
  auto unknown = NamedSharding::create(*m, *PartitionSpec::parse("a,c"));
  REQUIRE(!unknown.ok());
  REQUIRE(unknown.error().message.find("'c' is not in Mesh('a': 4, 'b': 2)") != std::string::npos);
  auto twice = NamedSharding::create(*m, *PartitionSpec::parse("a,a"));
  REQUIRE(!twice.ok());
  REQUIRE(twice.error().message.find("shards both dim 0 and dim 1") != std::string::npos);
}

// A mesh whose device count overflows 64 bits: an error (it used to wrap to -2 and abort resizing to it).
TEST_CASE("hugeMeshesAreErrors") {
  auto huge = Mesh::create({9223372036854775807, 2}, {"a", "b"});
  REQUIRE(!huge.ok());
  REQUIRE_MESSAGE(
      huge.error().message.find("9223372036854775807 x 2, more than the limit of 1048576") != std::string::npos,
      huge.error().message.c_str());
  auto wraps = Mesh::create({4294967296, 4294967296}, {"a", "b"});  // 2^64: exactly 0 once wrapped
  REQUIRE(!wraps.ok());
  REQUIRE(Mesh::create({1024, 1024}, {"a", "b"}).ok());
  REQUIRE(!Mesh::create({1024, 1025}, {"a", "b"}).ok());
}

// A sharding made without create() (as a rule checked against an older mesh) whose spec names an axis the
// mesh lacks: check() says so (it used to divide by that axis's size, zero: SIGFPE).
TEST_CASE("specNamingAMissingAxisIsAnError") {
  auto m = Mesh::create({8}, {"data"});
  REQUIRE(m.ok());
  NamedSharding ns{*m, *PartitionSpec::parse("None, model")};
  auto st = ns.check(Shape({784, 1024}));
  REQUIRE(!st.ok());
  TSR_COMPARE(st.error().message, std::string("P(None, 'model'): axis 'model' is not in Mesh('data': 8)"));
  REQUIRE(!ns.layout(Shape({784, 1024})).ok());
}

TEST_CASE("tutorialLayouts") {
  // P('a', 'b') on 4x2: device d holds rows (d / 2) * 2048 and columns (d % 2) * 4096.
  NamedSharding ab = make({4, 2}, {"a", "b"}, "a,b");
  Shape x({8192, 8192});
  auto layout = ab.layout(x);
  REQUIRE(layout.ok());
  TSR_COMPARE(int(layout->size()), 8);
  for (int d = 0; d < 8; ++d) {
    Shard s = shardOf(*layout, d);
    TSR_COMPARE(s.devices, std::vector<int>{d});
    TSR_COMPARE(s.start, (std::vector<int64_t>{(d / 2) * 2048, (d % 2) * 4096}));
    TSR_COMPARE(s.limit, (std::vector<int64_t>{(d / 2) * 2048 + 2048, (d % 2) * 4096 + 4096}));
  }
  TSR_COMPARE(ab.shardShape(x), Shape({2048, 4096}));
  // P('a', None): replicated over 'b', so devices 2k and 2k+1 hold the same rows.
  NamedSharding a = make({4, 2}, {"a", "b"}, "a");
  auto rows = a.layout(x);
  TSR_COMPARE(int(rows->size()), 4);
  TSR_COMPARE(shardOf(*rows, 5).devices, (std::vector<int>{4, 5}));
  TSR_COMPARE(shardOf(*rows, 5).start, (std::vector<int64_t>{4096, 0}));
  // P(None, ('a', 'b')) on a 1x... : 'a' major, 'b' minor: device d holds column block d.
  NamedSharding tuple = make({4, 2}, {"a", "b"}, "None,(a,b)");
  auto cols = tuple.layout(Shape({16, 64}));
  for (int d = 0; d < 8; ++d) TSR_COMPARE(shardOf(*cols, d).start[1], int64_t(d * 8));
  // ('b', 'a'): 'b' major: device (i, j) holds block j * 4 + i.
  NamedSharding swapped = make({4, 2}, {"a", "b"}, "(b,a)");
  auto sw = swapped.layout(Shape({64}));
  for (int d = 0; d < 8; ++d) TSR_COMPARE(shardOf(*sw, d).index[0], int64_t((d % 2) * 4 + d / 2));
  // Fully replicated: one shard on every device.
  NamedSharding rep = make({4, 2}, {"a", "b"}, "");
  auto r = rep.layout(x);
  TSR_COMPARE(int(r->size()), 1);
  TSR_COMPARE(int((*r)[0].devices.size()), 8);
}

TEST_CASE("unevenAndOverlongSpecsAreErrors") {
  NamedSharding a = make({8}, {"a"}, "a");
  auto e = a.layout(Shape({100}));
  REQUIRE(!e.ok());
  REQUIRE(e.error().message.find("into 8 shards, which does not divide 100") != std::string::npos);
  NamedSharding ab = make({4, 2}, {"a", "b"}, "a,b");
  REQUIRE(!ab.layout(Shape({64})).ok());
}

// As jax.device_put's ValueError: an uneven split is refused (never padded, never replicated), and the message
// names the spec, the dim, the shape, the mesh axes with their sizes and what the dim must be a multiple of.
TEST_CASE("unevenSplitsNameTheDimAndTheMeshAxes") {
  Status one = make({2}, {"x"}, "x").check(Shape({15}));
  REQUIRE(!one.ok());
  TSR_COMPARE(one.error().message, std::string("P('x') splits dim 0 of [15] into 2 shards, which does not divide 15 "
                                               "(mesh axis 'x' has size 2); the dim must be a multiple of 2"));
  Status two = make({4, 2}, {"a", "b"}, "None,(a,b)").check(Shape({16, 12}));
  REQUIRE(!two.ok());
  TSR_COMPARE(two.error().message, std::string("P(None, ('a', 'b')) splits dim 1 of [16,12] into 8 shards, which does "
                                               "not divide 12 (mesh axes 'a', 'b' have sizes 4, 2); the dim must be "
                                               "a multiple of 8"));
  // The same specs on dims they divide are fine.
  REQUIRE(make({2}, {"x"}, "x").check(Shape({16})).ok());
  REQUIRE(make({4, 2}, {"a", "b"}, "None,(a,b)").check(Shape({12, 16})).ok());
  TSR_COMPARE(make({4, 2}, {"a", "b"}, "None,(a,b)").shardShape(Shape({12, 16})).toString(), std::string("[12,2]"));
}

TEST_CASE("drawingLooksLikeJax") {
  NamedSharding ab = make({4, 2}, {"a", "b"}, "a,b");
  auto text = visualizeSharding(Shape({8192, 8192}), ab);
  REQUIRE(text.ok());
  const std::string& t = *text;
  // Four rows of two boxes, devices in mesh order.
  for (int d = 0; d < 8; ++d) TSR_COMPARE(count(t, "CPU " + std::to_string(d) + " "), 1);
  TSR_COMPARE(count(t, "┼"), 3);
  REQUIRE((t.find("CPU 0") < t.find("CPU 1") && t.find("CPU 1") < t.find("CPU 2")));
  // Replicated blocks list their devices.
  auto rows = visualizeSharding(Shape({8192, 8192}), make({4, 2}, {"a", "b"}, "a"));
  REQUIRE(rows.ok());
  REQUIRE(rows->find("CPU 6,7") != std::string::npos);
  TSR_COMPARE(count(*rows, "├"), 3);
  // Rank 3: the grid of the sharded dims, named.
  auto r3 = visualizeSharding(Shape({8, 16, 32}), make({4, 2}, {"a", "b"}, "a,None,b"));
  REQUIRE(r3.ok());
  REQUIRE(r3->find("rows: dim 0, columns: dim 2") != std::string::npos);
}
