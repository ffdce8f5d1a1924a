#include "engine/core/toml_text.h"

#include <cctype>

#include <fmt/format.h>

namespace tsr {

namespace {

// The last character before position i on its line that is not a space or tab; '\n' when there is none.
char previousOnLine(std::string_view text, size_t i) {
  while (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\r')) --i;
  return i == 0 ? '\n' : text[i - 1];
}

// Whether only spaces and tabs precede position i on its line.
bool atLineStart(std::string_view text, size_t i) {
  while (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t')) --i;
  return i == 0 || text[i - 1] == '\n';
}

enum class Mode { Code, Comment, Basic, Literal, MultiBasic, MultiLiteral };

// The code point of the UTF-8 sequence at text[i], advancing i past it; U+FFFD and one byte for a byte that
// does not begin a well-formed sequence (overlong forms and surrogates included).
char32_t decodeUtf8(std::string_view text, size_t& i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  const int length = lead >= 0xf5 ? 0 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc2 ? 2 : 0;
  if (length == 0 || i + length > text.size()) return ++i, U'\uFFFD';
  char32_t cp = lead & (0x7f >> length);
  for (int k = 1; k < length; ++k) {
    const auto next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xc0) != 0x80) return ++i, U'\uFFFD';
    cp = (cp << 6) | (next & 0x3f);
  }
  const char32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < smallest[length] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return ++i, U'\uFFFD';
  i += length;
  return cp;
}

}  // namespace

std::string tomlString(std::string_view text, bool asciiOnly) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80 && asciiOnly) {
      const char32_t cp = decodeUtf8(text, i);
      out += cp > 0xffff ? fmt::format("\\U{:08X}", uint32_t(cp)) : fmt::format("\\u{:04X}", uint32_t(cp));
      continue;
    }
    ++i;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\u{:04X}", unsigned(c));
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

Status checkTomlText(std::string_view text, const std::string& source, bool asciiOnly) {
  int line = 1, column = 0;
  Mode mode = Mode::Code;
  bool inValue = false;     // after a key's '=' (Code mode): quotes start strings only where a value can
  std::string nest;         // the open arrays '[' and inline tables '{', innermost last
  auto at = [&](size_t i, std::string_view s) { return text.substr(i, s.size()) == s; };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    ++column;
    if (c == '\n') {
      ++line;
      column = 0;
      // Single-line strings and comments end with the line (an unterminated string is toml++'s to report).
      if (mode == Mode::Comment || mode == Mode::Basic || mode == Mode::Literal) mode = Mode::Code;
      if (nest.empty()) inValue = false;
      continue;
    }
    if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
      return makeError("{}:{}:{}: control character U+{:04X} (TOML allows none but tab)", source, line, column,
                       unsigned(c));
    if (c >= 0x80) {
      if (asciiOnly)
        return makeError("{}:{}:{}: a non-ASCII byte (this file is ASCII: write such characters in strings as \\uXXXX)",
                         source, line, column);
      if (mode == Mode::Code)
        return makeError("{}:{}:{}: a non-ASCII character outside a string or comment (TOML allows them only there)",
                         source, line, column);
      if ((c & 0xc0) != 0x80) continue;  // a lead byte; continuation bytes do not advance the column
      --column;
      continue;
    }
    switch (mode) {
      case Mode::Comment: break;
      case Mode::Basic:
        if (c == '\\') ++i, ++column;
        else if (c == '"') mode = Mode::Code;
        break;
      case Mode::Literal:
        if (c == '\'') mode = Mode::Code;
        break;
      case Mode::MultiBasic:
        if (c == '\\') ++i, ++column;
        else if (at(i, "\"\"\"")) mode = Mode::Code, i += 2, column += 2;
        break;
      case Mode::MultiLiteral:
        if (at(i, "'''")) mode = Mode::Code, i += 2, column += 2;
        break;
      case Mode::Code:
        // A string starts a key (at the line's start, after '.' or '{' or ','), a value (after '=', '[' or ',')
        // or a table name (after '['); a quote anywhere else is inside a bare value such as `2--"x 3`, which
        // toml++ asserts on while it guesses the value's type, instead of reporting it.
        if (c == '"' || c == '\'') {
          const char before = previousOnLine(text, i);
          const bool dottedKey = before == '.' && !inValue;  // a."b" = 1; in a value, 0.'x' is not a string
          if (before != '\n' && before != '=' && before != '[' && before != ',' && before != '{' && !dottedKey)
            return makeError("{}:{}:{}: a quote inside a bare value (a string is quoted from its start)", source,
                             line, column);
        }
        // Where keys end and values begin: after '=', until the line ends outside brackets, or an inline table
        // starts or moves to its next key.
        if (c == '=') inValue = true;
        if (c == '{') nest.push_back('{'), inValue = false;
        if (c == '[' && !atLineStart(text, i)) nest.push_back('[');
        if ((c == ']' || c == '}') && !nest.empty()) nest.pop_back();
        if (c == ',' && !nest.empty() && nest.back() == '{') inValue = false;
        // After '=' (on the same line) and after an array's '[' or ',' (on any line, past comments), a value or the
        // array's end follows; toml++ asserts instead of reporting a '}', ',' or '=' there (`x = [[}`, `[1,,2]`,
        // `x = [\n}`).
        if (c == '=' || c == ',' || (c == '[' && !atLineStart(text, i))) {
          const bool inArray = c != '=' && (c == '[' || (!nest.empty() && nest.back() == '['));
          size_t k = i + 1;
          int kLine = line, kColumn = column + 1;
          while (k < text.size()) {
            if (text[k] == ' ' || text[k] == '\t' || text[k] == '\r') {
              ++k, ++kColumn;
            } else if (inArray && text[k] == '\n') {
              ++k, ++kLine, kColumn = 1;
            } else if (inArray && text[k] == '#') {
              while (k < text.size() && text[k] != '\n') ++k;
            } else {
              break;
            }
          }
          const char next = k < text.size() ? text[k] : '\n';
          if (next == '}' || next == ',' || next == '=' || (c == '=' && (next == ']' || next == '\n' || next == '#')))
            return makeError("{}:{}:{}: a value is missing before {}", source, kLine, kColumn,
                             next == '\n' ? std::string("the line's end") : next == '#' ? std::string("a comment")
                                                                            : fmt::format("'{}'", next));
        }
        if (c == '#') {
          mode = Mode::Comment;
        } else if (at(i, "\"\"\"")) {
          mode = Mode::MultiBasic, i += 2, column += 2;
        } else if (at(i, "'''")) {
          mode = Mode::MultiLiteral, i += 2, column += 2;
        } else if (c == '"') {
          mode = Mode::Basic;
        } else if (c == '\'') {
          mode = Mode::Literal;
        } else if (c == '[' && atLineStart(text, i)) {
          // A table header must begin with a key (toml++ asserts instead of reporting one that does not).
          size_t k = i + 1;
          if (k < text.size() && text[k] == '[') ++k;  // [[array of tables]]
          while (k < text.size() && (text[k] == ' ' || text[k] == '\t')) ++k;
          const char first = k < text.size() ? text[k] : '\n';
          if (!(std::isalnum(static_cast<unsigned char>(first)) || first == '_' || first == '-' || first == '"' ||
                first == '\''))
            return makeError("{}:{}:{}: a table header must begin with a key", source, line, column);
        }
        break;
    }
  }
  return {};
}

}  // namespace tsr
