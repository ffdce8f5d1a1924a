// verify() rejects each kind of malformed graph with a message naming the node; parse() rejects each kind of
// malformed text with line:column and a precise message; and no truncation or mutation of a valid text
// makes the parser crash, throw or hang.
#include "tests/check.h"

#include <functional>

#include "engine/core/check.h"
#include "engine/ir/graph.h"
#include "engine/ops/registry.h"
#include "tests/ir/ir_test_ops.h"

using namespace tsr;
using namespace tsr::ir;
using tsr::test::avalOf;
using tsr::test::irTestRegistry;
using tsr::test::literalFromBits;

namespace {

const Aval kX = avalOf(DType::F32, {2, 3});
const Aval kKey = avalOf(DType::U32, {4});

// x, y: f32[2,3]; %2 = add(x, y); %3 = relu(%2); returns %3.
Graph validGraph() {
  Graph g;
  ValueId x = g.addInput(kX), y = g.addInput(kX);
  ValueId s = g.addNodeWithAvals(OpCode::Add, {x, y}, NoAttrs{}, {kX}, Provenance{"blocks.0.mlp", "m.cpp", 3})[0];
  ValueId r = g.addNodeWithAvals(OpCode::Relu, {s}, NoAttrs{}, {kX})[0];
  g.setOutputs({r});
  return g;
}

struct GraphCase {
  const char* label;
  std::function<Graph()> build;
  const char* message;  // expected substring of verify's error
};

std::vector<GraphCase> malformedGraphs() {
  return {
      {"wrong result aval",
       [] {
         Graph g;
         ValueId x = g.addInput(kX);
         g.addNodeWithAvals(OpCode::Add, {x, x}, NoAttrs{}, {avalOf(DType::F32, {2, 4})}, Provenance{"blocks.0.mlp", "", 0});
         return g;
       },
       "node 0 (add @ blocks.0.mlp): result 0 has aval f32[2,4] but add infers f32[2,3]"},
      {"wrong attrs kind",
       [] {
         Graph g;
         ValueId x = g.addInput(kX);
         g.addNodeWithAvals(OpCode::Add, {x, x}, ConvertAttrs{DType::I32}, {kX});
         return g;
       },
       "node 0 (add): attributes are ConvertAttrs but add takes NoAttrs"},
      {"operand used before its definition",
       [] {
         Graph g = validGraph();
         g.mutableNodes()[0].operands[1] = 3;  // %3 is node 1's result
         return g;
       },
       "node 0 (add @ blocks.0.mlp, m.cpp:3): operand 1 %3 is used before its definition by node 1"},
      {"operand uses its own result",
       [] {
         Graph g = validGraph();
         g.mutableNodes()[1].operands[0] = 3;
         return g;
       },
       "node 1 (relu): operand 0 %3 is used before definition"},
      {"operand out of range",
       [] {
         Graph g = validGraph();
         g.mutableNodes()[1].operands[0] = 99;
         return g;
       },
       "node 1 (relu): operand 0 is %99, out of range (the graph has 4 values)"},
      {"negative operand id",
       [] {
         Graph g = validGraph();
         g.mutableNodes()[0].operands[0] = kNone;
         return g;
       },
       "operand 0 is %-1, out of range"},
      {"too many operands",
       [] {
         Graph g;
         ValueId x = g.addInput(kX);
         g.addNodeWithAvals(OpCode::Add, {x, x, x}, NoAttrs{}, {kX});
         return g;
       },
       "node 0 (add): add expects 2 operands, got 3"},
      {"variadic op without operands",
       [] {
         Graph g;
         g.addNodeWithAvals(OpCode::Concatenate, {}, ConcatenateAttrs{0}, {kX});
         return g;
       },
       "concatenate expects at least 1 operands, got 0"},
      {"wrong result count",
       [] {
         Graph g;
         ValueId k = g.addInput(kKey);
         g.addNodeWithAvals(OpCode::Threefry2x32, {k, k, k, k}, NoAttrs{}, {kKey});
         return g;
       },
       "node 0 (threefry2x32): node has 1 results but threefry2x32 has 2"},
      {"results swapped",
       [] {
         Graph g;
         ValueId k = g.addInput(kKey);
         g.addNodeWithAvals(OpCode::Threefry2x32, {k, k, k, k}, NoAttrs{}, {kKey, kKey});
         std::swap(g.mutableNodes()[0].results[0], g.mutableNodes()[0].results[1]);
         return g;
       },
       "result 0 %2 records producer node 0 result 1"},
      {"result defined twice",
       [] {
         Graph g = validGraph();
         g.mutableNodes()[1].results[0] = 2;  // node 0 defines %2
         return g;
       },
       "node 1 (relu): result 0 %2 is already defined"},
      {"result out of range",
       [] {
         Graph g = validGraph();
         g.mutableNodes()[1].results[0] = 7;
         return g;
       },
       "node 1 (relu): result 0 is %7, out of range"},
      {"unregistered op",
       [] {
         Graph g;
         ValueId x = g.addInput(kX);
         g.addNodeWithAvals(OpCode::DotGeneral, {x, x}, DotGeneralAttrs{}, {kX});
         return g;
       },
       "node 0 (dot_general): op is not registered"},
      {"infer rule fails",
       [] {
         Graph g;
         ValueId x = g.addInput(kX), y = g.addInput(avalOf(DType::F32, {3}));
         g.addNodeWithAvals(OpCode::Add, {x, y}, NoAttrs{}, {kX}, Provenance{"", "m.cpp", 9});
         return g;
       },
       "node 0 (add @ m.cpp:9): add: operands must have equal avals, got f32[2,3] and f32[3]"},
      {"literal with too few bytes",
       [] {
         Graph g;
         Literal lit = literalFromBits(DType::F32, {1}, {0});
         lit.aval = avalOf(DType::F32, {2});
         g.addNodeWithAvals(OpCode::Constant, {}, ConstantAttrs{lit}, {lit.aval});
         return g;
       },
       "node 0 (constant): attribute 'value': literal f32[2] holds 4 bytes, expected 8"},
      {"output out of range",
       [] {
         Graph g = validGraph();
         g.setOutputs({3, 42});
         return g;
       },
       "output 1 is %42, out of range"},
      {"output never defined",
       [] {
         Graph g = validGraph();
         g.mutableNodes().pop_back();
         return g;
       },
       "output 0 %3 is never defined"},
      {"orphan value",
       [] {
         Graph g = validGraph();
         g.mutableNodes().pop_back();
         g.setOutputs({2});
         return g;
       },
       "value %3 is never defined"},
      {"input with a negative dimension",
       [] {
         Graph g;
         g.addInput(avalOf(DType::F32, {2, -1}));
         return g;
       },
       "input 0 (%0): f32[2,-1] has a negative dimension"},
  };
}

struct TextCase {
  const char* text;
  const char* message;  // expected substring of parse's error, with line:column
};

// Each text is one edit away from a valid function; the message is the first error in reading order.
std::vector<TextCase> malformedTexts() {
  const char* ok2 = "  return %2\n}\n";
  auto fn = [](std::string body) {
    return "func @f(%0: f32[2,3], %1: f32[2,3]) -> (f32[2,3]) {\n" + body;
  };
  static std::vector<std::string> texts;  // keeps the c_str()s below alive
  texts.clear();
  std::vector<std::pair<std::string, const char*>> cases = {
      {"", "1:1: expected 'func', found end of input"},
      {"fun @f() -> () {\n  return\n}\n", "1:1: expected 'func', found 'fun'"},
      {"func f() -> () {\n  return\n}\n", "1:6: expected '@' and the function name, found 'f'"},
      {"func @f(%0: f32[2,3) -> () {\n  return\n}\n", "1:20: expected ']' or ',', found ')'"},
      {"func @f(%0: f33[2]) -> () {\n  return\n}\n", "1:13: unknown dtype 'f33'"},
      {"func @f(%0: f32[2,-3]) -> () {\n  return\n}\n", "1:19: negative dimension -3"},
      {"func @f(%0: f32[99999999999999999999]) -> () {\n  return\n}\n",
       "1:17: integer overflow: 99999999999999999999 does not fit in int64"},
      {"func @f(%0: f32[4294967296,4294967296]) -> () {\n  return\n}\n",
       "1:13: f32[4294967296,4294967296] has more elements than fit in int64"},
      {"func @f(%0: f32[2], %0: f32[2]) -> () {\n  return\n}\n", "1:21: redefinition of %0 (first defined at 1:9)"},
      {"func @f(%0 f32[2]) -> () {\n  return\n}\n", "1:12: expected ':', found 'f32'"},
      {"func @f() (f32[2]) {\n  return\n}\n", "1:11: expected '->', found '('"},
      {fn("  %2 = add(%0, %1) : f32[2,3]\n") + ok2 + "xyz", "5:1: unexpected 'xyz' after the function"},
      {fn("  %2 = add(%0, %1) : f32[2,3]\n") + "  return %2\n", "4:1: expected '}', found end of input"},
      {fn("  %2 = add(%0, %1) : f32[2,3]\n}\n"), "3:1: expected 'return', found '}'"},
      {fn("  %2 = dot_genral(%0, %1) : f32[2,3]\n") + ok2, "2:8: unknown op 'dot_genral'"},
      {fn("  %2 = add(%0, %7) : f32[2,3]\n") + ok2, "2:16: value %7 used before definition"},
      {fn("  %2 = add(%0, %2) : f32[2,3]\n") + ok2, "2:16: value %2 used before definition"},
      {fn("  %1 = add(%0, %0) : f32[2,3]\n") + ok2, "2:3: redefinition of %1 (first defined at 1:23)"},
      {fn("  %2, %2 = threefry2x32(%0, %0, %0, %0) : u32[4], u32[4]\n") + ok2,
       "2:7: redefinition of %2 (first defined at 2:3)"},
      {fn("  %2, %3 = add(%0, %1) : f32[2,3], f32[2,3]\n") + ok2,
       "2:12: wrong result count: add has 1 result but 2 values named"},
      {fn("  %2 = threefry2x32(%0, %0, %0, %0) : u32[4]\n") + ok2,
       "2:8: wrong result count: threefry2x32 has 2 results but 1 value named"},
      {fn("  %2 = add(%0) : f32[2,3]\n") + ok2, "2:8: add expects 2 operands, got 1"},
      {fn("  %2 = add(%0, %1) : f32[2,4]\n") + ok2, "2:22: result 0 has type f32[2,4] but add infers f32[2,3]"},
      {fn("  %2 = add(%0, %1)\n") + ok2, "3:3: expected ':', found 'return'"},
      {fn("  %2 add(%0, %1) : f32[2,3]\n") + ok2, "2:6: expected '=', found 'add'"},
      {fn("  %2 = add(%0, %1 : f32[2,3]\n") + ok2, "2:19: expected ')', found ':'"},
      {fn("  %2 = add(%0, %1) {axis=1} : f32[2,3]\n") + ok2, "2:21: add takes no attributes, found 'axis'"},
      {fn("  %2 = relu(%0) : f32[2,3] loc(\"blocks.0\n") + ok2, "2:32: unterminated string"},
      {fn("  %2 = relu(%0) : f32[2,3] loc(\"a\\qb\")\n") + ok2,
       "2:34: invalid escape in string: '\\' followed by 'q'"},
      {fn("  %2 = relu(%0) : f32[2,3] loc(\"a\", \"m.cpp\")\n") + ok2, "2:44: expected ':', found ')'"},
      {fn("  %2 = relu(%0) : f32[2,3] loc(\"a\", \"m.cpp\":1e3)\n") + ok2, "2:45: malformed integer '1e3'"},
      {fn("  %2 = relu(%0) $ f32[2,3]\n") + ok2, "2:17: unexpected '$'"},
      {fn("  %2 = relu(% 0) : f32[2,3]\n") + ok2, "2:13: expected a name after '%'"},
      {fn("  %2 = relu(%0) : f32[2,3]\n") + "  return %2, %0\n}\n",
       "3:3: return has 2 values but the signature declares 1 result"},
      {"func @f(%0: f32[2]) -> (f32[3]) {\n  return %0\n}\n",
       "2:10: returned %0 has type f32[2] but the signature declares f32[3]"},
      // Attributes: keys exactly the struct's fields, in order.
      {fn("  %2 = slice(%0) : f32[2,3]\n") + ok2, "2:18: expected '{' with the attributes of slice, found ':'"},
      {fn("  %2 = slice(%0) {starts=[0, 0], limits=[2, 3]} : f32[2,3]\n") + ok2,
       "2:47: missing attribute 'strides' for slice"},
      {fn("  %2 = slice(%0) {starts=[0, 0], limts=[2, 3], strides=[1, 1]} : f32[2,3]\n") + ok2,
       "2:34: unknown attribute 'limts' for slice (expected 'limits')"},
      {fn("  %2 = slice(%0) {limits=[2, 3], starts=[0, 0], strides=[1, 1]} : f32[2,3]\n") + ok2,
       "2:19: attribute 'limits' of slice out of order: expected 'starts'"},
      {fn("  %2 = slice(%0) {starts=[0, 0], limits=[2, 3], strides=[1, 1], strides=[1, 1]} : f32[2,3]\n") + ok2,
       "2:65: duplicate attribute 'strides' for slice"},
      {fn("  %2 = slice(%0) {starts=[0, 0], limits=[2, 3], strides=[1, 1], axis=0} : f32[2,3]\n") + ok2,
       "2:65: unknown attribute 'axis' for slice"},
      {fn("  %2 = slice(%0) {starts=[0, 0 limits=[2, 3], strides=[1, 1]} : f32[2,3]\n") + ok2,
       "2:32: expected ']' or ',', found 'limits'"},
      {fn("  %2 = slice(%0) {starts=[0, 99999999999999999999], limits=[2, 3], strides=[1, 1]} : f32[2,3]\n") +
           ok2,
       "2:30: integer overflow"},
      {fn("  %2 = convert(%0) {dtype=f31} : f32[2,3]\n") + ok2, "2:27: unknown dtype 'f31'"},
      // Literals.
      {fn("  %2 = constant() {value=dense<f32[3]>[1, 2]} : f32[3]\n") + ok2, "2:44: f32[3] needs 3 elements, got 2"},
      {fn("  %2 = constant() {value=dense<f32[1]>[1, 2]} : f32[1]\n") + ok2,
       "2:43: too many elements for f32[1]: expected 1"},
      {fn("  %2 = constant() {value=dense<f32[1]>[1.2.3]} : f32[1]\n") + ok2,
       "2:40: malformed number '1.2.3' for f32"},
      {fn("  %2 = constant() {value=dense<f32[1]>[1e999]} : f32[1]\n") + ok2, "2:40: '1e999' is out of range for f32"},
      {fn("  %2 = constant() {value=dense<u8[1]>[300]} : u8[1]\n") + ok2, "2:39: '300' is out of range for u8"},
      {fn("  %2 = constant() {value=dense<u8[1]>[-1]} : u8[1]\n") + ok2, "2:39: negative value '-1' for u8"},
      {fn("  %2 = constant() {value=dense<bf16[1]>[0x1ffff]} : bf16[1]\n") + ok2,
       "2:41: '0x1ffff' does not fit in bf16 (16 bits)"},
      {fn("  %2 = constant() {value=dense<bool[1]>[1]} : bool[1]\n") + ok2,
       "2:41: expected true or false for bool, found '1'"},
      {fn("  %2 = constant() {value=dense<f32[1]>[-]} : f32[1]\n") + ok2, "2:41: expected inf after '-', found ']'"},
      {fn("  %2 = constant() {value=dense<f32[2]>hex\"0000803f\"} : f32[2]\n") + ok2,
       "2:42: hex literal has 8 digits but f32[2] needs 8 bytes (16 digits)"},
      {fn("  %2 = constant() {value=dense<f32[1]>hex\"0000803g\"} : f32[1]\n") + ok2,
       "2:42: invalid hex digit in hex literal"},
      {fn("  %2 = constant() {value=dense<f32[1]>[1]} : f32[2]\n") + ok2,
       "2:46: result 0 has type f32[2] but constant infers f32[1]"},
      {fn("  %2 = constant() {value=dense<f32[1]>(1)} : f32[1]\n") + ok2, "2:39: expected '[', found '('"},
  };
  for (auto& [text, msg] : cases) texts.push_back(text);
  std::vector<TextCase> out;
  for (size_t i = 0; i < cases.size(); ++i) out.push_back({texts[i].c_str(), cases[i].second});
  return out;
}

// A text that uses every construct of the format: all field types, listed and hex literals, multi-result
// ops, provenance with escapes, several outputs.
std::string richText() {
  Graph g;
  g.name = "rich";
  ValueId x = g.addInput(avalOf(DType::F32, {4, 6}));
  ValueId k = g.addInput(kKey);
  const OpRegistry& reg = irTestRegistry();
  ValueId s = (*g.addNode(reg, OpCode::Slice, {x}, SliceAttrs{{1, 0}, {3, 6}, {1, 2}}, {"a.b", "m.cpp", 12}))[0];
  ValueId r = (*g.addNode(reg, OpCode::Relu, {s}, NoAttrs{}, {"q\"uote\\", "", 0}))[0];
  Literal small = literalFromBits(DType::F32, {2, 3}, {0x7fc00001u, 0x80000000u, 0x3fc00000u, 1u, 0x7f800000u, 0});
  ValueId c = (*g.addNode(reg, OpCode::Constant, {}, ConstantAttrs{small}))[0];
  ValueId a = (*g.addNode(reg, OpCode::Add, {r, c}, NoAttrs{}))[0];
  Literal big = literalFromBits(DType::BF16, {20}, std::vector<uint64_t>(20, 0x3f80u));
  ValueId b = (*g.addNode(reg, OpCode::Constant, {}, ConstantAttrs{big}, {"", "big.cpp", 1}))[0];
  ValueId i = (*g.addNode(reg, OpCode::Iota, {}, IotaAttrs{{2, 3}, DType::F32, 1}))[0];
  ValueId cat = (*g.addNode(reg, OpCode::Concatenate, {a, i}, ConcatenateAttrs{-1}))[0];
  auto bits = *g.addNode(reg, OpCode::Threefry2x32, {k, k, k, k}, NoAttrs{});
  ValueId conv = (*g.addNode(reg, OpCode::Convert, {bits[1]}, ConvertAttrs{DType::I64}))[0];
  g.setOutputs({cat, bits[0], conv, b});
  TSR_CHECK(verify(g, reg).ok());
  return print(g, reg);
}

// The first five failures, for a failure message.
std::string firstFailures(const std::vector<std::string>& failures) {
  const size_t n = std::min<size_t>(5, failures.size());
  return test::join({failures.begin(), failures.begin() + static_cast<std::ptrdiff_t>(n)}, "\n----\n");
}

// Parses every truncation and many one-character edits of `text`; returns how many parses ran. A parse
// that succeeds must print stably. Crashes and hangs fail the test by themselves.
int fuzzText(const std::string& text, const OpRegistry& reg, std::vector<std::string>& failures) {
  int runs = 0;
  auto check = [&](const std::string& t) {
    ++runs;
    auto g = parse(t, reg);
    if (!g.ok()) {
      if (g.error().message.empty()) failures.push_back("empty error message for:\n" + t);
      return;
    }
    std::string once = print(*g, reg);
    auto again = parse(once, reg);
    if (!again.ok() || print(*again, reg) != once) failures.push_back("unstable print for:\n" + t);
  };
  const std::string replacements = std::string("%@\"\\[]{}()<>,:=-0159ex_ \n") + '\0' + '\x80';
  for (size_t i = 0; i <= text.size(); ++i) {
    check(text.substr(0, i));
    if (i == text.size()) break;
    std::string deleted = text;
    deleted.erase(i, 1);
    check(deleted);
    for (char c : replacements) {
      std::string edited = text;
      edited[i] = c;
      check(edited);
      std::string inserted = text;
      inserted.insert(inserted.begin() + static_cast<std::ptrdiff_t>(i), c);
      check(inserted);
    }
  }
  return runs;
}

}  // namespace

TEST_CASE("validGraphPasses") {
  Status st = verify(validGraph(), irTestRegistry());
  REQUIRE_MESSAGE(st.ok(), st.error().message);
}

TEST_CASE("malformedGraphsAreRejected") {
  for (const GraphCase& c : malformedGraphs()) {
    Status st = verify(c.build(), irTestRegistry());
    REQUIRE_MESSAGE(!st.ok(), c.label);
    REQUIRE_MESSAGE(st.error().message.find(c.message) != std::string::npos,
                    c.label << ": got '" << st.error().message << "', expected '" << c.message << "'");
  }
}

TEST_CASE("malformedTextsAreRejected") {
  std::vector<std::string> failures;
  for (const TextCase& c : malformedTexts()) {
    auto g = parse(c.text, irTestRegistry());
    if (g.ok()) failures.push_back(std::string("accepted:\n") + c.text);
    else if (g.error().message.find(c.message) == std::string::npos)
      failures.push_back("got '" + g.error().message + "', expected '" + c.message + "' for:\n" + c.text);
  }
  for (const std::string& f : failures) MESSAGE(f);
  REQUIRE_MESSAGE(failures.empty(), failures.size() << " texts gave the wrong message");
}

// The parser's final verify() also guards text that names a registered op with a broken infer rule.
TEST_CASE("parserRunsVerify") {
  auto g = parse("func @f(%0: u32[4]) -> (u32[4]) {\n  %1, %2 = threefry2x32(%0, %0, %0, %0) : u32[4], u32[4]\n"
                 "  return %2\n}\n",
                 irTestRegistry());
  REQUIRE_MESSAGE(g.ok(), g.error().message);
  TSR_COMPARE(g->outputs(), std::vector<ValueId>{2});
}

TEST_CASE("fuzzedTextNeverCrashes") {
  std::vector<std::string> failures;
  std::string text = richText();
  int runs = fuzzText(text, irTestRegistry(), failures);
  REQUIRE_MESSAGE(failures.empty(), firstFailures(failures));
  REQUIRE(runs > 20 * static_cast<int>(text.size()));
}

// The same against the real registry, one graph per registered op from test_ir_text's table: here the
// ops' own infer rules meet mutated shapes and attributes.
TEST_CASE("fuzzedRealOpsNeverCrash") {
  const OpRegistry& reg = ops::registry();
  auto table = test::coreOpExamples();
  std::vector<std::string> failures;
  int runs = 0;
  for (const OpDef& def : reg.all()) {
    auto it = table.find(def.name);
    Graph g;
    if (it == table.end() || !test::buildOpGraph(reg, def, it->second, {"m", "f.cpp", 1}, g).empty()) continue;
    runs += fuzzText(print(g, reg), reg, failures);
  }
  REQUIRE_MESSAGE(failures.empty(), firstFailures(failures));
  MESSAGE(runs << " parses of mutated texts of " << static_cast<int>(reg.all().size()) << " registered ops");
}
