// The IR text form, e.g.
//   func @mlp(%0: f32[8,784], %1: f32[784,1024]) -> (f32[8,1024]) {
//     %2 = dot_general(%0, %1) {lhs_contracting=[1], rhs_contracting=[0], lhs_batch=[], rhs_batch=[]} : f32[8,1024] loc("layers.0", "mlp.cpp":42)
//     %3 = relu(%2) : f32[8,1024] loc("layers.0")
//     return %3
//   }
// Values are renumbered densely in definition order, so print(parse(print(g))) == print(g).
// A nested graph (a scan's body, a cond's branches) prints as a function of its own inside the attribute,
// indented one level deeper, its values numbered from %0 within it:
//   %3, %4 = scan(%0, %1, %2) {length=12, num_consts=0, num_carry=1, reverse=0, body={
//     func @body(%0: f32[8,256], %1: f32[256,256]) -> (f32[8,256]) {
//       %2 = dot_general(%0, %1) {...} : f32[8,256]
//       return %2
//     }
//   }} : f32[8,256]
// The printer never fails: a malformed graph prints with "%?N" for ids it cannot name, which the parser rejects.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/ir/text_format.h"

namespace tsr::ir {

namespace {

void printGraph(std::string& out, const Graph& g, const OpRegistry& reg, const std::string& indent,
                std::vector<int>* nodeLines = nullptr);

// Walks an attrs struct's fields() and writes "{key=value, ...}"; nothing for a struct without fields.
// `indent` is the indentation of the node's line, for nested graphs.
class AttrPrinter {
 public:
  AttrPrinter(std::string& out, const OpRegistry& reg, const std::string& indent)
      : m_out(out), m_reg(reg), m_indent(indent) {}

  void operator()(std::string_view key, const int64_t& v) { field(key, std::to_string(v)); }
  void operator()(std::string_view key, const bool& v) { field(key, v ? "1" : "0"); }
  void operator()(std::string_view key, const GraphPtr& v) {
    std::string body = "{\n";
    if (v) printGraph(body, *v, m_reg, m_indent + "  ");
    field(key, body + m_indent + "}");
  }
  void operator()(std::string_view key, const Ints& v) { field(key, "[" + joinInts(v, ", ") + "]"); }
  void operator()(std::string_view key, const DType& v) { field(key, std::string(dtypeName(v))); }
  void operator()(std::string_view key, const Literal& v) { field(key, formatLiteral(v)); }
  void operator()(std::string_view key, const std::string& v) { field(key, quoteString(v)); }

  void finish() {
    if (!m_first) m_out += '}';
  }

 private:
  void field(std::string_view key, const std::string& value) {
    m_out += m_first ? " {" : ", ";
    m_first = false;
    m_out += key;
    m_out += '=';
    m_out += value;
  }

  std::string& m_out;
  const OpRegistry& m_reg;
  const std::string& m_indent;
  bool m_first = true;
};

// Dense printed numbers: inputs first, then node results in order.
class ValueNames {
 public:
  explicit ValueNames(const Graph& g) : m_number(static_cast<size_t>(g.numValues()), -1) {
    for (ValueId v : g.inputs()) assign(v);
    for (const Node& n : g.nodes())
      for (ValueId v : n.results) assign(v);
  }

  std::string name(ValueId v) const {
    if (v >= 0 && static_cast<size_t>(v) < m_number.size() && m_number[static_cast<size_t>(v)] >= 0)
      return "%" + std::to_string(m_number[static_cast<size_t>(v)]);
    return "%?" + std::to_string(v);
  }

 private:
  void assign(ValueId v) {
    if (v >= 0 && static_cast<size_t>(v) < m_number.size() && m_number[static_cast<size_t>(v)] < 0)
      m_number[static_cast<size_t>(v)] = m_next++;
  }

  std::vector<int64_t> m_number;  // value id -> printed number, -1 when the graph never defines it
  int64_t m_next = 0;
};

std::string typeOf(const Graph& g, ValueId v) {
  return v >= 0 && v < g.numValues() ? g.aval(v).toString() : "?";
}

std::string formatLoc(const Provenance& p) {
  if (p.modulePath.empty() && p.file.empty() && p.line == 0) return "";
  std::string s = " loc(" + quoteString(p.modulePath);
  if (!p.file.empty() || p.line != 0) s += ", " + quoteString(p.file) + ":" + std::to_string(p.line);
  return s + ")";
}

std::string opName(const OpRegistry& reg, OpCode code) {
  if (const OpDef* def = reg.find(code)) return def->name;
  if (static_cast<uint32_t>(code) < kNumCoreOps) return coreOpName(code);
  return "unregistered_op_" + std::to_string(static_cast<uint32_t>(code));
}

template <class F>
std::string joinMapped(const std::vector<ValueId>& ids, F&& f) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ", ";
    s += f(ids[i]);
  }
  return s;
}

void printNode(std::string& out, const Graph& g, const OpRegistry& reg, const ValueNames& names, const Node& n,
               const std::string& indent) {
  auto name = [&](ValueId v) { return names.name(v); };
  out += indent;
  if (!n.results.empty()) out += joinMapped(n.results, name) + " = ";
  out += opName(reg, n.op) + "(" + joinMapped(n.operands, name) + ")";
  // fields() is not const; printing a copy keeps the walk generic (a Literal copy shares its bytes).
  Attrs attrs = n.attrs;
  AttrPrinter printer(out, reg, indent);
  std::visit([&](auto& a) { a.fields(printer); }, attrs);
  printer.finish();
  if (!n.results.empty()) out += " : " + joinMapped(n.results, [&](ValueId v) { return typeOf(g, v); });
  out += formatLoc(n.prov);
  out += '\n';
}

// The function at `indent`, its nodes one level deeper; each node's first line into *nodeLines when given.
void printGraph(std::string& out, const Graph& g, const OpRegistry& reg, const std::string& indent,
                std::vector<int>* nodeLines) {
  ValueNames names(g);
  out += indent + "func @" + (isBareName(g.name) ? g.name : quoteString(g.name)) + "(";
  out += joinMapped(g.inputs(), [&](ValueId v) { return names.name(v) + ": " + typeOf(g, v); });
  out += ") -> (" + joinMapped(g.outputs(), [&](ValueId v) { return typeOf(g, v); }) + ") {\n";
  std::string inner = indent + "  ";
  int line = 0;
  size_t counted = 0;
  if (nodeLines) nodeLines->clear();
  for (const Node& n : g.nodes()) {
    if (nodeLines) {
      line += static_cast<int>(std::count(out.begin() + static_cast<std::ptrdiff_t>(counted), out.end(), '\n'));
      counted = out.size();
      nodeLines->push_back(line);
    }
    printNode(out, g, reg, names, n, inner);
  }
  out += inner + "return";
  if (!g.outputs().empty()) out += " " + joinMapped(g.outputs(), [&](ValueId v) { return names.name(v); });
  out += "\n" + indent + "}\n";
}

}  // namespace

std::string print(const Graph& g, const OpRegistry& reg, std::vector<int>* nodeLines) {
  std::string out;
  printGraph(out, g, reg, "", nodeLines);
  return out;
}

}  // namespace tsr::ir
