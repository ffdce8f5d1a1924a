#pragma once
// The IR text lexer: turns the text form into tokens one at a time, each with its line and column, so the
// parser reports the first error in reading order. A lexical error is a token of kind Error carrying its
// message; the lexer never throws and always makes progress.
#include <cstdint>
#include <string>
#include <string_view>

namespace tsr::ir {

enum class TokenKind : uint8_t {
  End,
  Error,     // str: the message
  Ident,     // func, f32, dot_general, dense, nan, ...
  Value,     // %3 or %x; str: the name without '%'
  Global,    // @main or @"any name"; str: the name without '@'
  Number,    // 42, -1.5e-07, 0x7fc00001: any run of number characters; the parser converts it
  String,    // "..."; str: the unescaped bytes
  LParen,
  RParen,
  LBracket,
  RBracket,
  LBrace,
  RBrace,
  Less,
  Greater,
  Comma,
  Colon,
  Equal,
  Arrow,     // ->
  Minus,     // '-' not starting a number: -inf, -nan
};

struct Token {
  TokenKind kind = TokenKind::End;
  std::string_view text;  // the spelling in the source
  std::string str;
  int line = 1;
  int col = 1;
};

// "']'", "identifier", ... for "expected X" messages.
const char* tokenKindName(TokenKind k);

class Lexer {
 public:
  explicit Lexer(std::string_view src) : m_src(src) {}
  Token next();

 private:
  char peek(size_t ahead = 0) const { return m_pos + ahead < m_src.size() ? m_src[m_pos + ahead] : '\0'; }
  bool atEnd() const { return m_pos >= m_src.size(); }
  void advance();
  void skipSpaceAndComments();
  Token make(TokenKind kind, size_t start, int line, int col) const;
  Token error(std::string message, int line, int col) const;
  Token lexName(TokenKind kind, size_t start, int line, int col);
  Token lexNumber(size_t start, int line, int col);
  Token lexString(size_t start, int line, int col);

  std::string_view m_src;
  size_t m_pos = 0;
  int m_line = 1;
  int m_col = 1;
};

}  // namespace tsr::ir
