// The IR text form: print -> parse -> print is identical and the parsed graph equals the original, for a
// small graph of every registered op (coreOpExamples() must cover each one), and for the edge cases of the
// format: literals (listed and hex, special floats, bf16/f16), multi-result ops, outputs, provenance, names.
#include "tests/check.h"

#include <cstring>
#include <random>

#include "engine/ir/graph.h"
#include "engine/ops/registry.h"
#include "tests/ir/ir_test_ops.h"

using namespace tsr;
using namespace tsr::ir;
using tsr::test::avalOf;
using tsr::test::irTestRegistry;
using tsr::test::literalFromBits;

namespace {

// "" when the graphs are equal value for value (ids, avals, producers), node for node and output for output.
std::string graphDiff(const Graph& a, const Graph& b) {
  if (a.name != b.name) return "name " + a.name + " vs " + b.name;
  if (a.inputs() != b.inputs()) return "inputs differ";
  if (a.outputs() != b.outputs()) return "outputs differ";
  if (a.numValues() != b.numValues()) return "value counts differ";
  for (ValueId v = 0; v < a.numValues(); ++v) {
    const ValueInfo &x = a.value(v), &y = b.value(v);
    if (!(x.aval == y.aval) || x.producer != y.producer || x.resultIndex != y.resultIndex)
      return "value %" + std::to_string(v) + " differs";
  }
  if (a.nodes().size() != b.nodes().size()) return "node counts differ";
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const Node &x = a.nodes()[i], &y = b.nodes()[i];
    if (x.op != y.op) return "node " + std::to_string(i) + ": ops differ";
    if (!(x.attrs == y.attrs)) return "node " + std::to_string(i) + ": attrs differ";
    if (x.operands != y.operands || x.results != y.results) return "node " + std::to_string(i) + ": ids differ";
    if (!(x.prov == y.prov)) return "node " + std::to_string(i) + ": provenance differs";
  }
  return "";
}

// "" when print -> parse -> print is identical and the parsed graph equals g (which must be dense: ids
// in definition order, as the builders here make them).
std::string roundTripError(const Graph& g, const OpRegistry& reg) {
  std::string text = print(g, reg);
  auto parsed = parse(text, reg);
  if (!parsed.ok()) return "parse failed: " + parsed.error().message + "\n" + text;
  std::string again = print(*parsed, reg);
  if (again != text) return "reprinted text differs:\n" + text + "---\n" + again;
  std::string diff = graphDiff(g, *parsed);
  if (!diff.empty()) return "parsed graph differs: " + diff + "\n" + text;
  return "";
}

Provenance provenanceFor(size_t i, const std::string& op) {
  switch (i % 3) {
    case 0: return Provenance{"blocks.0." + op, "model.cpp", static_cast<int>(40 + i)};
    case 1: return Provenance{"layers." + op, "", 0};
    default: return Provenance{};
  }
}

Graph constantGraph(const std::vector<Literal>& literals) {
  Graph g;
  g.name = "literals";
  std::vector<ValueId> outs;
  for (const Literal& lit : literals) {
    auto ids = g.addNodeWithAvals(OpCode::Constant, {}, ConstantAttrs{lit}, {lit.aval});
    outs.push_back(ids[0]);
  }
  g.setOutputs(outs);
  return g;
}

}  // namespace

TEST_CASE("tableCoversEveryCoreOp") {
  auto table = test::coreOpExamples();
  std::vector<std::string> missing;
  for (uint32_t c = 0; c < kNumCoreOps; ++c)
    if (!table.count(coreOpName(static_cast<OpCode>(c)))) missing.push_back(coreOpName(static_cast<OpCode>(c)));
  REQUIRE_MESSAGE(missing.empty(), "core ops without an example: " << test::join(missing, ", "));
  TSR_COMPARE(table.size(), static_cast<size_t>(kNumCoreOps));
}

// For every registered op (whatever the families have registered so far): a valid one-node graph that
// verifies, round-trips, and whose parse equals the original.
TEST_CASE("everyRegisteredOpRoundTrips") {
  const OpRegistry& reg = ops::registry();
  auto table = test::coreOpExamples();
  std::vector<std::string> failures;
  size_t i = 0;
  for (const OpDef& def : reg.all()) {
    auto it = table.find(def.name);
    if (it == table.end()) {
      failures.push_back(def.name + ": no example in the test table");
      continue;
    }
    Graph g;
    std::string err = test::buildOpGraph(reg, def, it->second, provenanceFor(i++, def.name), g);
    if (err.empty()) {
      Status st = verify(g, reg);
      if (!st.ok()) err = "verify: " + st.error().message;
    }
    if (err.empty()) err = roundTripError(g, reg);
    if (!err.empty()) failures.push_back(def.name + ": " + err);
  }
  MESSAGE((static_cast<int>(reg.all().size()) - static_cast<int>(failures.size())) << " registered ops round-tripped");
  REQUIRE_MESSAGE(failures.empty(), test::join(failures, "\n"));
}

// print's node -> line map, for a graph of every core op (scan and cond print nested functions over several
// lines): each node's line is the top-level line that applies its op, found here by reading the text.
TEST_CASE("nodeLinesPointAtTheirNodes") {
  const OpRegistry& reg = ops::registry();
  auto table = test::coreOpExamples();
  Graph g;
  size_t i = 0;
  for (const OpDef& def : reg.all()) {  // one node of each op (its first valid example) on inputs of its own
    if (static_cast<uint32_t>(def.code) >= kNumCoreOps) continue;
    for (const test::OpExample& ex : table.at(def.name)) {
      std::vector<ValueId> ins;
      for (const Aval& a : ex.operands) ins.push_back(g.addInput(a));
      if (g.addNode(reg, def.code, ins, ex.attrs, provenanceFor(i++, def.name)).ok()) break;
    }
  }
  REQUIRE(g.nodes().size() > 70);
  std::vector<int> lines;
  const std::string text = print(g, reg, &lines);
  TSR_COMPARE(print(g, reg), text);
  TSR_COMPARE(lines.size(), g.nodes().size());
  std::vector<std::string> textLines;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    textLines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  int multiLine = 0;
  for (size_t k = 0; k < lines.size(); ++k) {
    const std::string& l = textLines.at(static_cast<size_t>(lines[k]));
    const std::string op = reg.get(g.nodes()[k].op).name + "(";
    REQUIRE_MESSAGE((l.rfind("  ", 0) == 0 && l[2] != ' ' && l.find(op) != std::string::npos),
                    "node " << k << " (" << op.c_str() << ") at line " << lines[k] << ": " << l.c_str());
    if (k > 0) REQUIRE(lines[k] > lines[k - 1]);
    multiLine += k > 0 && lines[k] > lines[k - 1] + 1;
  }
  REQUIRE(multiLine >= 2);  // scan's and cond's bodies lie between nodes
}

// The format itself, pinned: renumbering, attrs, literals, results, outputs and provenance.
TEST_CASE("printsTheDocumentedForm") {
  Graph g;
  g.name = "demo";
  ValueId c = g.addNodeWithAvals(OpCode::Constant, {}, ConstantAttrs{Literal::scalar(DType::F32, 0.5)},
                                 {avalOf(DType::F32, {})})[0];
  ValueId x = g.addInput(avalOf(DType::F32, {4, 6}));  // added after the constant: printed first as %0
  ValueId s = g.addNodeWithAvals(OpCode::Slice, {x}, SliceAttrs{{1, 0}, {3, 6}, {1, 2}},
                                 {avalOf(DType::F32, {2, 3})}, Provenance{"layers.0", "mlp.cpp", 42})[0];
  ValueId r = g.addNodeWithAvals(OpCode::Relu, {s}, NoAttrs{}, {avalOf(DType::F32, {2, 3})},
                                 Provenance{"layers.0", "", 0})[0];
  g.setOutputs({r, c});
  REQUIRE(verify(g, irTestRegistry()).ok());
  const std::string expected =
      "func @demo(%0: f32[4,6]) -> (f32[2,3], f32[]) {\n"
      "  %1 = constant() {value=dense<f32[]>[0.5]} : f32[]\n"
      "  %2 = slice(%0) {starts=[1, 0], limits=[3, 6], strides=[1, 2]} : f32[2,3] loc(\"layers.0\", \"mlp.cpp\":42)\n"
      "  %3 = relu(%2) : f32[2,3] loc(\"layers.0\")\n"
      "  return %3, %1\n"
      "}\n";
  TSR_COMPARE(print(g, irTestRegistry()), expected);
  auto parsed = parse(expected, irTestRegistry());
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message);
  TSR_COMPARE(print(*parsed, irTestRegistry()), expected);
  TSR_COMPARE(parsed->inputs().size(), size_t{1});
  TSR_COMPARE(parsed->nodes()[1].prov, (Provenance{"layers.0", "mlp.cpp", 42}));
}

TEST_CASE("specialFloatsRoundTripBitExactly") {
  // f32: nan, -nan, a payload nan, a signalling nan, inf, -inf, -0, 0, the smallest denormal, max, 0.1
  Literal f = literalFromBits(DType::F32, {11}, {0x7fc00000u, 0xffc00000u, 0x7fc00001u, 0x7f800001u, 0x7f800000u,
                                                 0xff800000u, 0x80000000u, 0u, 1u, 0x7f7fffffu, 0x3dcccccdu});
  Literal d = literalFromBits(DType::F64, {6}, {0x7ff8000000000000ull, 0x7ff8000000000123ull, 0x8000000000000000ull,
                                                1ull, 0xfff0000000000000ull, 0x3fb999999999999aull});
  // bf16 / f16: nan, payload nan, -0, smallest denormal, inf, -inf, 1/3 rounded
  Literal bf = literalFromBits(DType::BF16, {7}, {0x7fc0u, 0x7fc1u, 0x8000u, 0x0001u, 0x7f80u, 0xff80u, 0x3eabu});
  Literal h = literalFromBits(DType::F16, {7}, {0x7e00u, 0x7e01u, 0x8000u, 0x0001u, 0x7c00u, 0xfc00u, 0x3555u});
  Literal ints = literalFromBits(DType::I32, {3}, {0x80000000u, 0x7fffffffu, 0xffffffffu});
  Literal longs = literalFromBits(DType::I64, {2}, {0x8000000000000000ull, 0x7fffffffffffffffull});
  Literal bytes = literalFromBits(DType::U8, {2}, {0u, 255u});
  Literal words = literalFromBits(DType::U32, {1}, {0xffffffffu});
  Literal bools = literalFromBits(DType::Bool, {3}, {1u, 0u, 2u});  // 2: not a canonical bool, kept as bits
  Graph g = constantGraph({f, d, bf, h, ints, longs, bytes, words, bools});
  REQUIRE(verify(g, irTestRegistry()).ok());
  std::string err = roundTripError(g, irTestRegistry());
  REQUIRE_MESSAGE(err.empty(), err);

  std::string text = print(g, irTestRegistry());
  for (const char* spelled :
       {"dense<f32[11]>[nan, 0xffc00000, 0x7fc00001, 0x7f800001, inf, -inf, -0, 0, 1e-45, 3.4028235e+38, 0.1]",
        "dense<f64[6]>[nan, 0x7ff8000000000123, -0, 5e-324, -inf, 0.1]",
        "dense<bf16[7]>[nan, 0x7fc1, -0, 9e-41, inf, -inf, 0.334]",
        "dense<f16[7]>[nan, 0x7e01, -0, 6e-08, inf, -inf, 0.3333]",
        "dense<i32[3]>[-2147483648, 2147483647, -1]", "dense<i64[2]>[-9223372036854775808, 9223372036854775807]",
        "dense<u8[2]>[0, 255]", "dense<u32[1]>[4294967295]", "dense<bool[3]>[true, false, 0x02]"})
    REQUIRE_MESSAGE(text.find(spelled) != std::string::npos, text);
}

TEST_CASE("largeLiteralsPrintAsHex") {
  std::mt19937 rng(7);
  std::vector<uint64_t> bits(1000);
  for (auto& b : bits) b = rng();
  bits[3] = 0x7fc00001u;  // NaN payloads survive in hex too
  Literal big = literalFromBits(DType::F32, {10, 100}, bits);
  Literal listed = literalFromBits(DType::F32, {16}, std::vector<uint64_t>(16, 0x3f800000u));
  Literal first = literalFromBits(DType::F32, {17}, std::vector<uint64_t>(17, 0x3f800000u));
  Literal empty = literalFromBits(DType::F32, {0, 3}, {});
  Graph g = constantGraph({big, listed, first, empty});
  std::string err = roundTripError(g, irTestRegistry());
  REQUIRE_MESSAGE(err.empty(), err);
  std::string text = print(g, irTestRegistry());
  REQUIRE(text.find("dense<f32[10,100]>hex\"") != std::string::npos);
  REQUIRE(text.find("dense<f32[16]>[1, 1,") != std::string::npos);
  REQUIRE(text.find("dense<f32[17]>hex\"0000803f0000803f") != std::string::npos);  // little-endian bytes
  REQUIRE(text.find("dense<f32[0,3]>[]") != std::string::npos);
}

TEST_CASE("multiResultOpsAndOutputs") {
  Graph g;
  g.name = "rng";
  std::vector<ValueId> k;
  for (int i = 0; i < 4; ++i) k.push_back(g.addInput(avalOf(DType::U32, {4})));
  auto r = g.addNode(irTestRegistry(), OpCode::Threefry2x32, k, NoAttrs{}, Provenance{"", "rng.cpp", 7});
  REQUIRE(r.ok());
  // Results in swapped order, an input, and a value returned twice.
  g.setOutputs({(*r)[1], (*r)[0], k[2], (*r)[1]});
  std::string text = print(g, irTestRegistry());
  REQUIRE_MESSAGE(text.find("  %4, %5 = threefry2x32(%0, %1, %2, %3) : u32[4], u32[4] loc(\"\", \"rng.cpp\":7)\n") !=
                      std::string::npos,
                  text.c_str());
  REQUIRE_MESSAGE(text.find("  return %5, %4, %2, %5\n") != std::string::npos, text.c_str());
  std::string err = roundTripError(g, irTestRegistry());
  REQUIRE_MESSAGE(err.empty(), err);
}

TEST_CASE("provenanceAndNamesWithOddCharacters") {
  Graph g;
  g.name = "my model \"v2\"\n";
  ValueId x = g.addInput(avalOf(DType::F32, {2}));
  std::string bytes = "tab\there, quote\" back\\slash, bell\x07, del\x7f, utf8 \xc3\xa9";
  ValueId a = g.addNodeWithAvals(OpCode::Relu, {x}, NoAttrs{}, {g.aval(x)}, Provenance{bytes, bytes, 3})[0];
  ValueId b = g.addNodeWithAvals(OpCode::Relu, {a}, NoAttrs{}, {g.aval(x)}, Provenance{"", "", 0})[0];
  ValueId c = g.addNodeWithAvals(OpCode::Relu, {b}, NoAttrs{}, {g.aval(x)}, Provenance{"", "", -5})[0];
  ValueId e = g.addNodeWithAvals(OpCode::Relu, {c}, NoAttrs{}, {g.aval(x)}, Provenance{"p", "f.cpp", 0})[0];
  g.setOutputs({e});
  std::string text = print(g, irTestRegistry());
  REQUIRE_MESSAGE(text.find("func @\"my model \\\"v2\\\"\\n\"(") == 0, text.c_str());
  REQUIRE_MESSAGE(text.find("  %2 = relu(%1) : f32[2]\n") != std::string::npos, text.c_str());  // empty: no loc
  REQUIRE_MESSAGE(text.find("\\x07") != std::string::npos, text.c_str());
  std::string err = roundTripError(g, irTestRegistry());
  REQUIRE_MESSAGE(err.empty(), err);
}

TEST_CASE("allFieldTypesAndEmptyGraphs") {
  Graph g;
  auto iota = g.addNode(irTestRegistry(), OpCode::Iota, {}, IotaAttrs{{3, 4}, DType::U8, 1});
  REQUIRE(iota.ok());
  auto conv = g.addNode(irTestRegistry(), OpCode::Convert, *iota, ConvertAttrs{DType::BF16});
  REQUIRE(conv.ok());
  auto cat = g.addNode(irTestRegistry(), OpCode::Concatenate, {(*conv)[0], (*conv)[0], (*conv)[0]},
                       ConcatenateAttrs{-1});
  REQUIRE(cat.ok());
  g.setOutputs(*cat);
  std::string err = roundTripError(g, irTestRegistry());
  REQUIRE_MESSAGE(err.empty(), err);

  Graph empty;
  TSR_COMPARE(print(empty, irTestRegistry()), std::string("func @main() -> () {\n  return\n}\n"));
  err = roundTripError(empty, irTestRegistry());
  REQUIRE_MESSAGE(err.empty(), err);

  Graph identity;
  ValueId x = identity.addInput(avalOf(DType::I64, {}));
  identity.setOutputs({x, x});
  err = roundTripError(identity, irTestRegistry());
  REQUIRE_MESSAGE(err.empty(), err);
}

// Hand-written text may use other value names, comments and spacing; printing canonicalises it.
TEST_CASE("parsesHandWrittenText") {
  const char* text = R"(// a comment
    func @f(%x: f32[2,3],
            %y: f32[2,3]) -> (f32[2,3]) {
      %sum = add(%x, %y) {} : f32[2,3]   // "{}" is accepted for ops without attributes
      %c = constant() {value=dense<bf16[3]>[0.1, -inf, 0x7fc1]} : bf16[3]
      return %sum
    })";
  auto g = parse(text, irTestRegistry());
  REQUIRE_MESSAGE(g.ok(), g.error().message);
  TSR_COMPARE(print(*g, irTestRegistry()),
              std::string("func @f(%0: f32[2,3], %1: f32[2,3]) -> (f32[2,3]) {\n"
                          "  %2 = add(%0, %1) : f32[2,3]\n"
                          "  %3 = constant() {value=dense<bf16[3]>[0.1, -inf, 0x7fc1]} : bf16[3]\n"
                          "  return %2\n"
                          "}\n"));
}
