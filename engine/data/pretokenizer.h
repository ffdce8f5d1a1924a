#pragma once
// Pre-tokenization: cuts text into the pieces that BPE merges never cross, with GPT-2's regular expression
// run by PCRE2 (JIT-compiled, UTF mode with Unicode properties), and GPT-2's byte <-> unicode alphabet in
// which encoder.json and vocab.bpe spell tokens.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/result.h"

namespace tsr::data {

// GPT-2's pattern (openai/gpt-2 src/encoder.py). PCRE2 follows Unicode 14 here, Python's `regex` a newer
// Unicode, so letters and digits added after Unicode 14 (and U+180E, still a space to PCRE2) split
// differently; everything older splits as in GPT-2.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Pretokenizer {
 public:
  // Compiles `pattern` (UTF + UCP, invalid UTF-8 allowed in subjects). A bad pattern is an error that names
  // the offset in the pattern.
  static Result<Pretokenizer> create(std::string_view pattern = kGpt2Pattern);

  // Calls fn for every piece, in order; the pieces tile `text` exactly. Bytes that are not valid UTF-8 never
  // match the pattern: each maximal run of them becomes a piece of its own, so every byte string round-trips.
  void forEach(std::string_view text, const std::function<void(std::string_view)>& fn) const;
  std::vector<std::string_view> split(std::string_view text) const;

  const std::string& pattern() const { return m_pattern; }

 private:
  struct Code;
  std::shared_ptr<const Code> m_code;
  std::string m_pattern;
};

// GPT-2's bytes_to_unicode(): every byte gets a printable code point (printable Latin-1 bytes keep theirs, the
// others map to U+0100..U+0143), so a token's bytes can be written as a JSON string without spaces.
std::string byteToUnicode(uint8_t byte);           // UTF-8 of the code point for `byte`
std::string bytesToUnicode(std::string_view bytes);  // maps every byte
// The inverse: nullopt when `text` holds a code point outside the 256 of the alphabet (or is not UTF-8).
std::optional<std::string> unicodeToBytes(std::string_view text);
// The order in which GPT-2 numbers the 256 byte tokens: printable bytes first ('!'..'~', then Latin-1), then
// the rest. A trained tokenizer uses the same ids for its byte tokens, so ids 0..255 mean what they mean in GPT-2.
const std::array<uint8_t, 256>& gpt2ByteOrder();

}  // namespace tsr::data
