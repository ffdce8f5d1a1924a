#include "engine/data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "engine/core/check.h"

namespace tsr::data {

struct Pretokenizer::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

// Per-thread match scratch: match data is not shareable between threads, and the JIT stack must be large
// enough for backtracking over long runs (`\s+(?!\S)` over a megabyte of spaces).
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jitStack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchScratch() {
    if (jitStack) pcre2_jit_stack_assign(context, nullptr, jitStack);
  }
  ~MatchScratch() {
    pcre2_match_context_free(context);
    if (jitStack) pcre2_jit_stack_free(jitStack);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

// Length of the UTF-8 sequence that starts at text[i] (1 for a stray byte), for stepping past empty matches.
size_t charLength(std::string_view text, size_t i) {
  auto b = static_cast<uint8_t>(text[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
  return std::min(n, text.size() - i);
}

}  // namespace

Result<Pretokenizer> Pretokenizer::create(std::string_view pattern) {
  int errorCode = 0;
  PCRE2_SIZE errorOffset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &errorCode, &errorOffset,
                                   nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(errorCode, message, sizeof message);
    return makeError("pre-tokenizer pattern: {} at offset {} in '{}'", reinterpret_cast<const char*>(message),
                     errorOffset, pattern);
  }
  // The JIT is many times faster than the interpreter; without it (no JIT on this platform) matching still works.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  Pretokenizer p;
  auto c = std::make_shared<Code>();
  c->code = code;
  p.m_code = std::move(c);
  p.m_pattern = std::string(pattern);
  return p;
}

void Pretokenizer::forEach(std::string_view text, const std::function<void(std::string_view)>& fn) const {
  MatchScratch& s = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(m_code->code, subject, text.size(), pos, 0, s.data, s.context);
    if (rc < 0) {
      // No match: only bytes that are not UTF-8 remain. Any other failure (a resource limit) cannot happen
      // with the GPT-2 pattern; for a custom pattern the rest becomes one piece, so text still round-trips.
      fn(text.substr(pos));
      return;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    size_t start = ov[0];
    size_t end = ov[1];
    TSR_CHECK(start >= pos && end >= start && end <= text.size());
    if (start > pos) fn(text.substr(pos, start - pos));  // invalid UTF-8 between matches
    if (end == start) {
      // An empty match (custom patterns only): emit one character so that the loop advances.
      end = start + charLength(text, start);
    }
    fn(text.substr(start, end - start));
    pos = end;
  }
}

std::vector<std::string_view> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  forEach(text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

namespace {

// bytes_to_unicode(): byte -> code point.
struct Alphabet {
  std::array<uint32_t, 256> codePoint{};
  std::array<int16_t, 324> byteOf{};  // code point -> byte, -1 when not in the alphabet
  std::array<uint8_t, 256> order{};   // GPT-2's token order of the bytes
  Alphabet() {
    byteOf.fill(-1);
    int n = 0;
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int k = 0;
    for (int b = 0; b < 256; ++b)
      if (printable(b)) {
        codePoint[b] = static_cast<uint32_t>(b);
        order[k++] = static_cast<uint8_t>(b);
      }
    for (int b = 0; b < 256; ++b)
      if (!printable(b)) {
        codePoint[b] = static_cast<uint32_t>(256 + n++);
        order[k++] = static_cast<uint8_t>(b);
      }
    for (int b = 0; b < 256; ++b) byteOf[codePoint[b]] = static_cast<int16_t>(b);
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

void appendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {  // the alphabet stays below U+0800
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

std::string byteToUnicode(uint8_t byte) {
  std::string s;
  appendUtf8(s, alphabet().codePoint[byte]);
  return s;
}

std::string bytesToUnicode(std::string_view bytes) {
  std::string s;
  s.reserve(bytes.size() * 2);
  for (char c : bytes) appendUtf8(s, alphabet().codePoint[static_cast<uint8_t>(c)]);
  return s;
}

std::optional<std::string> unicodeToBytes(std::string_view text) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    auto b0 = static_cast<uint8_t>(text[i]);
    uint32_t cp;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 >> 5) == 6 && i + 1 < text.size() && (static_cast<uint8_t>(text[i + 1]) >> 6) == 2) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
      if (cp < 0x80) return std::nullopt;  // overlong
      i += 2;
    } else {
      return std::nullopt;  // not UTF-8, or a code point beyond U+07FF: outside the alphabet either way
    }
    if (cp >= a.byteOf.size() || a.byteOf[cp] < 0) return std::nullopt;
    out += static_cast<char>(a.byteOf[cp]);
  }
  return out;
}

const std::array<uint8_t, 256>& gpt2ByteOrder() { return alphabet().order; }

}  // namespace tsr::data
