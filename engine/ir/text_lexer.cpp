#include "engine/ir/text_lexer.h"

#include <fmt/format.h>

namespace tsr::ir {

namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isNameChar(char c) { return isAlpha(c) || isDigit(c) || c == '.'; }
int hexDigit(char c) {
  if (isDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string describeChar(char ch) {
  auto c = static_cast<unsigned char>(ch);
  if (c >= 0x20 && c < 0x7f) return fmt::format("'{}'", ch);
  return fmt::format("byte 0x{:02x}", c);
}

}  // namespace

const char* tokenKindName(TokenKind k) {
  switch (k) {
    case TokenKind::End: return "end of input";
    case TokenKind::Error: return "error";
    case TokenKind::Ident: return "identifier";
    case TokenKind::Value: return "value name";
    case TokenKind::Global: return "'@' name";
    case TokenKind::Number: return "number";
    case TokenKind::String: return "string";
    case TokenKind::LParen: return "'('";
    case TokenKind::RParen: return "')'";
    case TokenKind::LBracket: return "'['";
    case TokenKind::RBracket: return "']'";
    case TokenKind::LBrace: return "'{'";
    case TokenKind::RBrace: return "'}'";
    case TokenKind::Less: return "'<'";
    case TokenKind::Greater: return "'>'";
    case TokenKind::Comma: return "','";
    case TokenKind::Colon: return "':'";
    case TokenKind::Equal: return "'='";
    case TokenKind::Arrow: return "'->'";
    case TokenKind::Minus: return "'-'";
  }
  return "?";
}

void Lexer::advance() {
  if (atEnd()) return;
  if (m_src[m_pos] == '\n') {
    ++m_line;
    m_col = 1;
  } else {
    ++m_col;
  }
  ++m_pos;
}

void Lexer::skipSpaceAndComments() {
  while (!atEnd()) {
    char c = peek();
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      advance();
    } else if (c == '/' && peek(1) == '/') {
      while (!atEnd() && peek() != '\n') advance();
    } else {
      return;
    }
  }
}

Token Lexer::make(TokenKind kind, size_t start, int line, int col) const {
  Token t;
  t.kind = kind;
  t.text = m_src.substr(start, m_pos - start);
  t.line = line;
  t.col = col;
  return t;
}

Token Lexer::error(std::string message, int line, int col) const {
  Token t;
  t.kind = TokenKind::Error;
  t.str = std::move(message);
  t.line = line;
  t.col = col;
  return t;
}

Token Lexer::next() {
  skipSpaceAndComments();
  size_t start = m_pos;
  int line = m_line, col = m_col;
  if (atEnd()) return make(TokenKind::End, start, line, col);
  char c = peek();
  if (isAlpha(c)) {
    while (isNameChar(peek())) advance();
    return make(TokenKind::Ident, start, line, col);
  }
  if (c == '%') return lexName(TokenKind::Value, start, line, col);
  if (c == '@') return lexName(TokenKind::Global, start, line, col);
  if (isDigit(c) || (c == '-' && isDigit(peek(1)))) return lexNumber(start, line, col);
  if (c == '"') return lexString(start, line, col);
  advance();
  switch (c) {
    case '(': return make(TokenKind::LParen, start, line, col);
    case ')': return make(TokenKind::RParen, start, line, col);
    case '[': return make(TokenKind::LBracket, start, line, col);
    case ']': return make(TokenKind::RBracket, start, line, col);
    case '{': return make(TokenKind::LBrace, start, line, col);
    case '}': return make(TokenKind::RBrace, start, line, col);
    case '<': return make(TokenKind::Less, start, line, col);
    case '>': return make(TokenKind::Greater, start, line, col);
    case ',': return make(TokenKind::Comma, start, line, col);
    case ':': return make(TokenKind::Colon, start, line, col);
    case '=': return make(TokenKind::Equal, start, line, col);
    case '-':
      if (peek() == '>') {
        advance();
        return make(TokenKind::Arrow, start, line, col);
      }
      return make(TokenKind::Minus, start, line, col);
    default: return error("unexpected " + describeChar(c), line, col);
  }
}

// %name / @name / @"quoted name"
Token Lexer::lexName(TokenKind kind, size_t start, int line, int col) {
  char sigil = peek();
  advance();
  if (kind == TokenKind::Global && peek() == '"') {
    Token s = lexString(m_pos, m_line, m_col);
    if (s.kind == TokenKind::Error) return s;
    Token t = make(kind, start, line, col);
    t.str = std::move(s.str);
    return t;
  }
  if (!isNameChar(peek())) return error(fmt::format("expected a name after '{}'", sigil), line, col);
  while (isNameChar(peek())) advance();
  Token t = make(kind, start, line, col);
  t.str = std::string(t.text.substr(1));
  return t;
}

// Takes the whole run of characters a number could be made of ("12abc" included) so that the parser
// reports one precise "malformed number" instead of two confusing tokens.
Token Lexer::lexNumber(size_t start, int line, int col) {
  if (peek() == '-') advance();
  bool hex = peek() == '0' && (peek(1) == 'x' || peek(1) == 'X');
  while (true) {
    char c = peek();
    char prev = m_pos > start ? m_src[m_pos - 1] : '\0';
    if (isNameChar(c) || ((c == '+' || c == '-') && !hex && (prev == 'e' || prev == 'E'))) advance();
    else break;
  }
  return make(TokenKind::Number, start, line, col);
}

Token Lexer::lexString(size_t start, int line, int col) {
  advance();  // the opening quote
  std::string value;
  while (true) {
    if (atEnd() || peek() == '\n') return error("unterminated string", line, col);
    char c = peek();
    if (c == '"') {
      advance();
      break;
    }
    if (c != '\\') {
      value += c;
      advance();
      continue;
    }
    int escLine = m_line, escCol = m_col;
    advance();
    char e = peek();
    switch (e) {
      case '"': value += '"'; break;
      case '\\': value += '\\'; break;
      case 'n': value += '\n'; break;
      case 't': value += '\t'; break;
      case 'r': value += '\r'; break;
      case 'x': {
        int hi = hexDigit(peek(1)), lo = hexDigit(peek(2));
        if (hi < 0 || lo < 0) return error("invalid \\x escape in string: expected two hex digits", escLine, escCol);
        value += static_cast<char>(hi * 16 + lo);
        advance();
        advance();
        break;
      }
      default:
        if (atEnd() || e == '\n') return error("unterminated string", line, col);
        return error("invalid escape in string: '\\' followed by " + describeChar(e), escLine, escCol);
    }
    advance();
  }
  Token t = make(TokenKind::String, start, line, col);
  t.str = std::move(value);
  return t;
}

}  // namespace tsr::ir
