// Recursive-descent parser for the IR text form (see printer.cpp). Every error names its line:column;
// the only nesting is a region (a nested function) inside an attribute, limited to kMaxRegionDepth levels, so
// no input can recurse deeply, and the lexer always makes progress.
//   function  := 'func' '@' name '(' [param {',' param}] ')' '->' '(' [type {',' type}] ')' '{' {stmt} return '}'
//   param     := %name ':' type
//   stmt      := [%name {',' %name} '='] op '(' [%name {',' %name}] ')' [attrs] [':' type {',' type}] [loc]
//   attrs     := '{' key '=' value {',' key '=' value} '}'     (keys exactly the attrs struct's fields, in order)
//   value     := int | '[' [int {',' int}] ']' | dtype | 'dense' '<' type '>' ('[' elements ']' | 'hex' string)
//              | '{' function '}'                             (a region: its value names are its own)
//   loc       := 'loc' '(' string [',' string ':' int] ')'
//   return    := 'return' [%name {',' %name}]
#include <algorithm>
#include <charconv>
#include <exception>
#include <limits>
#include <unordered_map>
#include <utility>
#include <variant>

#include "engine/ir/graph.h"
#include "engine/ir/text_format.h"
#include "engine/ir/text_lexer.h"

namespace tsr::ir {

namespace {

template <size_t... I>
Attrs defaultAttrsAt(size_t index, std::index_sequence<I...>) {
  Attrs out;
  (void)((I == index ? (out.emplace<I>(), true) : false) || ...);
  return out;
}

// The field names of an attrs struct, in order.
struct FieldNames {
  std::vector<std::string> names;
  template <class T>
  void operator()(std::string_view key, T&) { names.emplace_back(key); }
};

std::string plural(size_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

// Regions nest at most this deep (a scan in a scan in ...), so hostile input cannot exhaust the stack.
constexpr int kMaxRegionDepth = 32;

class AttrParser;

class Parser {
 public:
  Parser(std::string_view text, const OpRegistry& reg) : m_lex(text), m_reg(reg) { bump(); }

  Result<Graph> run() {
    TSR_TRY(parseFunction());
    if (!is(TokenKind::End)) return errorAt(m_tok, fmt::format("unexpected {} after the function", describe(m_tok)));
    TSR_TRY(verify(m_graph, m_reg));
    return std::move(m_graph);
  }

 private:
  // ---- tokens

  void bump() { m_tok = m_lex.next(); }
  bool is(TokenKind k) const { return m_tok.kind == k; }
  bool isWord(std::string_view w) const { return m_tok.kind == TokenKind::Ident && m_tok.text == w; }

  // A lexical error at the token wins over whatever the parser wanted to say about it.
  static Error errorAt(const Token& t, std::string_view message) {
    if (t.kind == TokenKind::Error) return makeError("{}:{}: {}", t.line, t.col, t.str);
    return makeError("{}:{}: {}", t.line, t.col, message);
  }
  static std::string describe(const Token& t) {
    if (t.kind == TokenKind::End) return "end of input";
    std::string_view s = t.text.size() > 40 ? t.text.substr(0, 40) : t.text;
    return fmt::format("'{}{}'", s, t.text.size() > 40 ? "..." : "");
  }
  Error unexpected(std::string_view wanted) const {
    return errorAt(m_tok, fmt::format("expected {}, found {}", wanted, describe(m_tok)));
  }
  Status expect(TokenKind k) {
    if (!is(k)) return unexpected(tokenKindName(k));
    bump();
    return {};
  }
  // Between list items: ',' or else the closing token, which the caller's loop then sees.
  Status expectComma(TokenKind close) {
    if (is(TokenKind::Comma)) {
      bump();
      return {};
    }
    return unexpected(fmt::format("{} or ','", tokenKindName(close)));
  }
  Status expectWord(std::string_view w) {
    if (!isWord(w)) return unexpected(fmt::format("'{}'", w));
    bump();
    return {};
  }

  // ---- values

  static Error redefinition(const Token& name, int line, int col) {
    return errorAt(name, fmt::format("redefinition of {} (first defined at {}:{})", name.text, line, col));
  }
  Status checkNotDefined(const Token& name) {
    auto it = m_defs.find(name.str);
    if (it != m_defs.end()) return redefinition(name, it->second.line, it->second.col);
    return {};
  }
  Status define(const Token& name, ValueId id) {
    TSR_TRY(checkNotDefined(name));
    m_defs.emplace(name.str, Definition{id, name.line, name.col});
    return {};
  }
  Result<ValueId> parseUse() {
    if (!is(TokenKind::Value)) return unexpected("a value name");
    auto it = m_defs.find(m_tok.str);
    if (it == m_defs.end()) return errorAt(m_tok, fmt::format("value {} used before definition", m_tok.text));
    bump();
    return it->second.id;
  }
  Status parseUseList(std::vector<ValueId>& out, std::vector<Token>* toks = nullptr) {
    while (true) {
      if (toks) toks->push_back(m_tok);
      TSR_ASSIGN(ValueId id, parseUse());
      out.push_back(id);
      if (!is(TokenKind::Comma)) return {};
      bump();
    }
  }

  // ---- scalars, types, literals

  Result<int64_t> parseInt() {
    if (!is(TokenKind::Number)) return unexpected("an integer");
    int64_t v = 0;
    const char* last = m_tok.text.data() + m_tok.text.size();
    auto [end, ec] = std::from_chars(m_tok.text.data(), last, v);
    if (ec == std::errc::result_out_of_range)
      return errorAt(m_tok, fmt::format("integer overflow: {} does not fit in int64", m_tok.text));
    if (ec != std::errc() || end != last) return errorAt(m_tok, fmt::format("malformed integer '{}'", m_tok.text));
    bump();
    return v;
  }
  Status parseIntList(Ints& out) {
    TSR_TRY(expect(TokenKind::LBracket));
    while (!is(TokenKind::RBracket)) {
      if (!out.empty()) TSR_TRY(expectComma(TokenKind::RBracket));
      TSR_ASSIGN(int64_t v, parseInt());
      out.push_back(v);
    }
    bump();
    return {};
  }
  Result<Aval> parseType() {
    if (!is(TokenKind::Ident)) return unexpected("a type such as f32[2,3]");
    Token start = m_tok;
    auto dt = parseDType(m_tok.text);
    if (!dt) return errorAt(m_tok, fmt::format("unknown dtype '{}'", m_tok.text));
    bump();
    TSR_TRY(expect(TokenKind::LBracket));
    Aval aval;
    aval.dtype = *dt;
    while (!is(TokenKind::RBracket)) {
      if (aval.rank() > 0) TSR_TRY(expectComma(TokenKind::RBracket));
      Token dimTok = m_tok;
      TSR_ASSIGN(int64_t d, parseInt());
      if (d < 0) return errorAt(dimTok, fmt::format("negative dimension {}", d));
      aval.shape.dims().push_back(d);
    }
    bump();
    if (auto bytes = checkedBytes(aval); !bytes.ok()) return errorAt(start, bytes.error().message);
    return aval;
  }
  Result<Literal> parseLiteral() {
    TSR_TRY(expectWord("dense"));
    TSR_TRY(expect(TokenKind::Less));
    TSR_ASSIGN(Aval aval, parseType());
    TSR_TRY(expect(TokenKind::Greater));
    int64_t numel = checkedNumel(aval).value();  // parseType checked the size
    auto size = static_cast<size_t>(dtypeSize(aval.dtype));
    std::vector<uint8_t> bytes;
    if (isWord("hex")) {
      bump();
      if (!is(TokenKind::String)) return unexpected("a string of hex digits");
      const std::string& hex = m_tok.str;
      auto need = static_cast<uint64_t>(numel) * size;
      if (hex.size() % 2 != 0 || hex.size() / 2 != need)
        return errorAt(m_tok, fmt::format("hex literal has {} digits but {} needs {} bytes ({} digits)", hex.size(),
                                          aval.toString(), need, need * 2));
      if (!decodeHex(hex, bytes)) return errorAt(m_tok, "invalid hex digit in hex literal");
      bump();
    } else {
      TSR_TRY(expect(TokenKind::LBracket));
      int64_t count = 0;
      while (!is(TokenKind::RBracket)) {
        if (count > 0) TSR_TRY(expectComma(TokenKind::RBracket));
        Token elem = m_tok;
        std::string spelled;
        if (is(TokenKind::Minus)) {
          bump();
          if (!is(TokenKind::Ident)) return unexpected("inf after '-'");
          spelled = "-" + std::string(m_tok.text);
        } else if (is(TokenKind::Number) || is(TokenKind::Ident)) {
          spelled = m_tok.text;
        } else {
          return unexpected("a literal element");
        }
        if (count == numel)
          return errorAt(elem, fmt::format("too many elements for {}: expected {}", aval.toString(), numel));
        auto bits = parseElement(aval.dtype, spelled);
        if (!bits.ok()) return errorAt(elem, bits.error().message);
        uint64_t b = *bits;
        for (size_t i = 0; i < size; ++i) bytes.push_back(static_cast<uint8_t>(b >> (8 * i)));  // little-endian
        ++count;
        bump();
      }
      if (count != numel)
        return errorAt(m_tok, fmt::format("{} needs {} elements, got {}", aval.toString(), numel, count));
      bump();
    }
    Literal lit;
    lit.aval = std::move(aval);
    lit.data = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
    return lit;
  }
  Result<Provenance> parseLoc() {
    Provenance prov;
    bump();  // 'loc'
    TSR_TRY(expect(TokenKind::LParen));
    if (!is(TokenKind::String)) return unexpected("a module path string");
    prov.modulePath = m_tok.str;
    bump();
    if (is(TokenKind::Comma)) {
      bump();
      if (!is(TokenKind::String)) return unexpected("a file name string");
      prov.file = m_tok.str;
      bump();
      TSR_TRY(expect(TokenKind::Colon));
      Token lineTok = m_tok;
      TSR_ASSIGN(int64_t line, parseInt());
      if (line < std::numeric_limits<int>::min() || line > std::numeric_limits<int>::max())
        return errorAt(lineTok, fmt::format("line number {} out of range", line));
      prov.line = static_cast<int>(line);
    }
    TSR_TRY(expect(TokenKind::RParen));
    return prov;
  }

  // ---- structure

  Status parseHeader() {
    TSR_TRY(expectWord("func"));
    if (!is(TokenKind::Global)) return unexpected("'@' and the function name");
    m_graph.name = m_tok.str;
    bump();
    TSR_TRY(expect(TokenKind::LParen));
    while (!is(TokenKind::RParen)) {
      if (!m_graph.inputs().empty()) TSR_TRY(expectComma(TokenKind::RParen));
      if (!is(TokenKind::Value)) return unexpected("a parameter name such as %0");
      Token name = m_tok;
      TSR_TRY(checkNotDefined(name));
      bump();
      TSR_TRY(expect(TokenKind::Colon));
      TSR_ASSIGN(Aval aval, parseType());
      TSR_TRY(define(name, m_graph.addInput(aval)));
    }
    bump();
    TSR_TRY(expect(TokenKind::Arrow));
    TSR_TRY(expect(TokenKind::LParen));
    while (!is(TokenKind::RParen)) {
      if (!m_outputTypes.empty()) TSR_TRY(expectComma(TokenKind::RParen));
      TSR_ASSIGN(Aval aval, parseType());
      m_outputTypes.push_back(std::move(aval));
    }
    bump();
    return expect(TokenKind::LBrace);
  }

  // One function into m_graph: header, statements, return, closing brace.
  Status parseFunction() {
    TSR_TRY(parseHeader());
    while (!isWord("return")) {
      if (is(TokenKind::RBrace) || is(TokenKind::End)) return unexpected("'return'");
      TSR_TRY(parseStatement());
    }
    TSR_TRY(parseReturn());
    return expect(TokenKind::RBrace);
  }

  // "{ func @body(...) -> (...) { ... } }": a function of its own, parsed with fresh value names (a region sees
  // no value of the enclosing function) and then handed back whole.
  Status parseRegion(GraphPtr& out) {
    if (m_depth >= kMaxRegionDepth)
      return errorAt(m_tok, fmt::format("regions nested more than {} deep", kMaxRegionDepth));
    TSR_TRY(expect(TokenKind::LBrace));
    Graph outerGraph = std::exchange(m_graph, Graph{});
    auto outerTypes = std::exchange(m_outputTypes, {});
    auto outerDefs = std::exchange(m_defs, {});
    ++m_depth;
    Status st = parseFunction();
    --m_depth;
    Graph region = std::exchange(m_graph, std::move(outerGraph));
    m_outputTypes = std::move(outerTypes);
    m_defs = std::move(outerDefs);
    TSR_TRY(std::move(st));
    TSR_TRY(expect(TokenKind::RBrace));
    out = std::make_shared<const Graph>(std::move(region));
    return {};
  }

  Status parseReturn() {
    Token ret = m_tok;
    bump();
    std::vector<ValueId> outs;
    std::vector<Token> toks;
    if (is(TokenKind::Value)) TSR_TRY(parseUseList(outs, &toks));
    if (outs.size() != m_outputTypes.size())
      return errorAt(ret, fmt::format("return has {} but the signature declares {}", plural(outs.size(), "value"),
                                      plural(m_outputTypes.size(), "result")));
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!(m_graph.aval(outs[i]) == m_outputTypes[i]))
        return errorAt(toks[i], fmt::format("returned {} has type {} but the signature declares {}", toks[i].text,
                                            m_graph.aval(outs[i]).toString(), m_outputTypes[i].toString()));
    }
    m_graph.setOutputs(std::move(outs));
    return {};
  }

  // One node: "%a, %b = op(%x, %y) {attrs} : t0, t1 loc(...)".
  Status parseStatement() {
    std::vector<Token> names;
    if (is(TokenKind::Value)) TSR_TRY(parseResultNames(names));
    if (!is(TokenKind::Ident)) return unexpected("an op name");
    Token opTok = m_tok;
    const OpDef* def = m_reg.find(opTok.text);
    if (!def) return errorAt(opTok, fmt::format("unknown op '{}'", opTok.text));
    if (def->numResults >= 0 && names.size() != static_cast<size_t>(def->numResults))
      return errorAt(opTok, fmt::format("wrong result count: {} has {} but {} named", def->name,
                                        plural(static_cast<size_t>(def->numResults), "result"),
                                        plural(names.size(), "value")));
    if (def->attrsIndex >= std::variant_size_v<Attrs>)
      return errorAt(opTok, fmt::format("{} is registered with unknown attrs kind {}", def->name, def->attrsIndex));
    bump();

    std::vector<ValueId> operands;
    TSR_TRY(expect(TokenKind::LParen));
    if (!is(TokenKind::RParen)) TSR_TRY(parseUseList(operands));
    TSR_TRY(expect(TokenKind::RParen));
    bool arityOk = def->numOperands < 0 ? static_cast<int>(operands.size()) >= def->minOperands
                                        : static_cast<int>(operands.size()) == def->numOperands;
    if (!arityOk) {
      std::string want = def->numOperands < 0 ? fmt::format("at least {}", def->minOperands)
                                              : std::to_string(def->numOperands);
      return errorAt(opTok, fmt::format("{} expects {} operands, got {}", def->name, want, operands.size()));
    }
    Attrs attrs = defaultAttrsAt(def->attrsIndex, std::make_index_sequence<std::variant_size_v<Attrs>>{});
    TSR_TRY(parseAttrs(*def, attrs));

    std::vector<Aval> types;
    std::vector<Token> typeToks;
    if (!names.empty()) TSR_TRY(parseResultTypes(names.size(), types, typeToks));
    Provenance prov;
    if (isWord("loc")) {
      TSR_ASSIGN(prov, parseLoc());
    }
    TSR_TRY(checkInferred(*def, opTok, operands, attrs, types, typeToks));

    auto ids = m_graph.addNodeWithAvals(def->code, std::move(operands), std::move(attrs), std::move(types),
                                        std::move(prov));
    for (size_t i = 0; i < names.size(); ++i) TSR_TRY(define(names[i], ids[i]));
    return {};
  }

  // "%a, %b =": names not yet defined, and distinct.
  Status parseResultNames(std::vector<Token>& names) {
    while (true) {
      if (!is(TokenKind::Value)) return unexpected("a value name");
      TSR_TRY(checkNotDefined(m_tok));
      for (const Token& n : names)
        if (n.str == m_tok.str) return redefinition(m_tok, n.line, n.col);
      names.push_back(m_tok);
      bump();
      if (!is(TokenKind::Comma)) break;
      bump();
    }
    return expect(TokenKind::Equal);
  }

  // ": t0, t1", one type per named result.
  Status parseResultTypes(size_t count, std::vector<Aval>& types, std::vector<Token>& toks) {
    TSR_TRY(expect(TokenKind::Colon));
    while (true) {
      toks.push_back(m_tok);
      TSR_ASSIGN(Aval aval, parseType());
      types.push_back(std::move(aval));
      if (!is(TokenKind::Comma)) break;
      bump();
    }
    if (types.size() != count)
      return errorAt(toks.back(), fmt::format("{} named but {} given", plural(count, "result"),
                                              plural(types.size(), "type")));
    return {};
  }

  // The printed result types must be what the op's infer rule gives for the operands and attributes.
  Status checkInferred(const OpDef& def, const Token& opTok, const std::vector<ValueId>& operands,
                       const Attrs& attrs, const std::vector<Aval>& types, const std::vector<Token>& typeToks) {
    std::vector<Aval> in;
    for (ValueId v : operands) in.push_back(m_graph.aval(v));
    auto inferred = inferSafely(def, in, attrs);
    if (!inferred.ok()) return errorAt(opTok, inferred.error().message);
    if (inferred->size() != types.size())
      return errorAt(opTok, fmt::format("{} infers {} but {} given", def.name, plural(inferred->size(), "result"),
                                        plural(types.size(), "type")));
    for (size_t i = 0; i < types.size(); ++i)
      if (!(types[i] == (*inferred)[i]))
        return errorAt(typeToks[i], fmt::format("result {} has type {} but {} infers {}", i, types[i].toString(),
                                                def.name, (*inferred)[i].toString()));
    return {};
  }

  // ---- attributes

  Status parseAttrs(const OpDef& def, Attrs& attrs);
  friend class AttrParser;
  // Attribute values, one overload per field type, called by AttrParser in the struct's field order.
  Status parseValue(int64_t& v) {
    TSR_ASSIGN(v, parseInt());
    return {};
  }
  Status parseValue(Ints& v) { return parseIntList(v); }
  Status parseValue(DType& v) {
    if (!is(TokenKind::Ident)) return unexpected("a dtype");
    auto dt = parseDType(m_tok.text);
    if (!dt) return errorAt(m_tok, fmt::format("unknown dtype '{}'", m_tok.text));
    v = *dt;
    bump();
    return {};
  }
  Status parseValue(Literal& v) {
    TSR_ASSIGN(v, parseLiteral());
    return {};
  }
  Status parseValue(bool& v) {
    Token tok = m_tok;
    TSR_ASSIGN(int64_t i, parseInt());
    if (i != 0 && i != 1) return errorAt(tok, fmt::format("expected 0 or 1, found {}", i));
    v = i == 1;
    return {};
  }
  Status parseValue(GraphPtr& v) { return parseRegion(v); }
  Status parseValue(std::string& v) {
    if (!is(TokenKind::String)) return unexpected("a string");
    v = m_tok.str;
    bump();
    return {};
  }

  // "{key=" before the field at `index`, or ", key=" after the first.
  Status parseFieldKey(std::string_view key, size_t index, const std::vector<std::string>& keys,
                       std::string_view op) {
    if (index == 0) {
      if (!is(TokenKind::LBrace)) return unexpected(fmt::format("'{{' with the attributes of {}", op));
      bump();
    } else if (is(TokenKind::Comma)) {
      bump();
    } else if (!is(TokenKind::RBrace)) {
      return unexpected("',' or '}'");
    }
    if (is(TokenKind::RBrace)) return errorAt(m_tok, fmt::format("missing attribute '{}' for {}", key, op));
    if (!is(TokenKind::Ident)) return unexpected("an attribute name");
    if (m_tok.text != key) {
      bool known = std::find(keys.begin(), keys.end(), m_tok.text) != keys.end();
      if (known)
        return errorAt(m_tok, fmt::format("attribute '{}' of {} out of order: expected '{}'", m_tok.text, op, key));
      return errorAt(m_tok, fmt::format("unknown attribute '{}' for {} (expected '{}')", m_tok.text, op, key));
    }
    bump();
    return expect(TokenKind::Equal);
  }

  struct Definition {
    ValueId id;
    int line;
    int col;
  };

  Lexer m_lex;
  Token m_tok;
  const OpRegistry& m_reg;
  Graph m_graph;
  std::vector<Aval> m_outputTypes;
  std::unordered_map<std::string, Definition> m_defs;  // value name without '%' -> where it was defined
  int m_depth = 0;                                      // regions entered
};

// Walks the attrs struct's fields() and reads "key=value" for each, in order; stops at the first error.
class AttrParser {
 public:
  AttrParser(Parser& p, std::vector<std::string> keys, std::string_view op)
      : m_p(p), m_keys(std::move(keys)), m_op(op) {}

  template <class T>
  void operator()(std::string_view key, T& value) {
    if (!m_status.ok()) return;
    m_status = m_p.parseFieldKey(key, m_index++, m_keys, m_op);
    if (m_status.ok()) m_status = m_p.parseValue(value);
  }
  Status take() { return std::move(m_status); }

 private:
  Parser& m_p;
  std::vector<std::string> m_keys;
  std::string_view m_op;
  size_t m_index = 0;
  Status m_status;
};

Status Parser::parseAttrs(const OpDef& def, Attrs& attrs) {
  FieldNames names;
  std::visit([&](auto& a) { a.fields(names); }, attrs);
  if (names.names.empty()) {
    // An op without attributes prints none; "{}" is accepted, anything inside it is not.
    if (!is(TokenKind::LBrace)) return {};
    bump();
    if (is(TokenKind::Ident)) return errorAt(m_tok, fmt::format("{} takes no attributes, found '{}'", def.name, m_tok.text));
    return expect(TokenKind::RBrace);
  }
  AttrParser parser(*this, names.names, def.name);
  std::visit([&](auto& a) { a.fields(parser); }, attrs);
  TSR_TRY(parser.take());
  if (is(TokenKind::Comma)) {
    bump();
    if (is(TokenKind::Ident)) {
      bool known = std::find(names.names.begin(), names.names.end(), m_tok.text) != names.names.end();
      return errorAt(m_tok, fmt::format("{} attribute '{}' for {}", known ? "duplicate" : "unknown", m_tok.text,
                                        def.name));
    }
    return unexpected("'}'");
  }
  return expect(TokenKind::RBrace);
}

}  // namespace

Result<Graph> parse(std::string_view text, const OpRegistry& reg) {
  Parser parser(text, reg);
  return parser.run();
}

}  // namespace tsr::ir
