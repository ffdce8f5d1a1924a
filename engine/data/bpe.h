#pragma once
// Byte-level BPE, as GPT-2 does it: text is cut into pieces by a regular expression (pretokenizer.h), each
// piece's bytes start as one token per byte, and merges are applied by rank (lowest first, every occurrence
// left to right) until none applies. Tokens are byte strings, so every byte string encodes and decodes back
// exactly, valid UTF-8 or not.
//
// Files: GPT-2's own pair. encoder.json maps each token, spelled in GPT-2's byte alphabet (bytes_to_unicode),
// to its id: {"!": 0, ..., "Ġthe": 262, ..., "<|endoftext|>": 50256}. vocab.bpe is a "#version: 0.2" line,
// then one merge per line, "left right" in the same alphabet, in rank order. Tokens spelled "<|name|>" that no
// merge produces are special tokens (encode recognises them only when asked).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/result.h"
#include "engine/data/pretokenizer.h"

namespace tsr::data {

using TokenId = uint32_t;

inline constexpr std::string_view kEndOfText = "<|endoftext|>";

// How encode treats the text of special tokens such as "<|endoftext|>".
enum class SpecialTokens {
  AsText,   // ordinary text, as GPT-2's encoder.py does: "<|endoftext|>" becomes "<", "|", "endoftext", "|>"
  Allowed,  // each occurrence becomes its special token's id
};

class BpeTokenizer {
 public:
  using Merge = std::pair<TokenId, TokenId>;

  // Copies share the lookup tables (and the per-thread caches of encoded pieces). Encoding takes no lock.
  ~BpeTokenizer();
  BpeTokenizer(const BpeTokenizer&);
  BpeTokenizer& operator=(const BpeTokenizer&);
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // GPT-2's encoder.json + vocab.bpe. Errors name the file, and the line for vocab.bpe.
  static Result<BpeTokenizer> load(const std::string& encoderJsonPath, const std::string& vocabBpePath);
  static Result<BpeTokenizer> loadDirectory(const std::string& dir);  // dir/encoder.json + dir/vocab.bpe
  // The same from the files' contents; the names only label errors.
  static Result<BpeTokenizer> parse(std::string_view encoderJson, std::string_view vocabBpe,
                                    std::string_view encoderName = "encoder.json",
                                    std::string_view vocabName = "vocab.bpe");
  // A tokenizer with the 256 byte tokens as ids 0..255 in GPT-2's order, then one token per merge (the merge of
  // ids a and b is id 256 + its index), then the special tokens ("<|name|>"). What training produces.
  static Result<BpeTokenizer> fromMerges(std::span<const Merge> merges, std::span<const std::string> specialTokens);

  // Writes both files atomically.
  Status save(const std::string& encoderJsonPath, const std::string& vocabBpePath) const;
  Status saveDirectory(const std::string& dir) const;
  std::string encoderJson() const;
  std::string vocabBpe() const;

  std::vector<TokenId> encode(std::string_view text, SpecialTokens special = SpecialTokens::AsText) const;
  // Appends to `out`; `flush` (when given) is called whenever `out` holds at least flushEvery ids, so long
  // texts can stream to a file. Text is cut only where the pre-tokenizer cuts it, so streaming changes nothing.
  void encodeTo(std::string_view text, std::vector<TokenId>& out, SpecialTokens special = SpecialTokens::AsText,
                const std::function<void(std::vector<TokenId>&)>& flush = {}, size_t flushEvery = 1 << 20) const;
  // BPE of one pre-tokenized piece (no regex, no special tokens).
  void encodePiece(std::string_view piece, std::vector<TokenId>& out) const;
  // The bytes of the tokens, concatenated. An unknown id is an error that names it and its position.
  Result<std::string> decode(std::span<const TokenId> ids) const;

  int64_t vocabSize() const;  // one more than the largest id
  int64_t numMerges() const { return static_cast<int64_t>(m_merges.size()); }
  const std::vector<Merge>& merges() const { return m_merges; }  // in rank order
  std::optional<TokenId> tokenId(std::string_view bytes) const;
  std::optional<std::string_view> tokenBytes(TokenId id) const;
  std::optional<TokenId> specialTokenId(std::string_view text) const;
  const std::vector<std::pair<std::string, TokenId>>& specialTokens() const { return m_specials; }
  TokenId byteToken(uint8_t byte) const { return m_byteToken[byte]; }
  const Pretokenizer& pretokenizer() const { return m_pretokenizer; }

 private:
  struct Tables;

  BpeTokenizer();
  // Fills the lookup tables from m_tokens / m_merges; the caller has checked that every merge's parts and
  // result are tokens and that every byte has a token.
  Status build();
  void bpe(std::string_view piece, std::vector<TokenId>& out) const;
  void encodeOrdinary(std::string_view text, std::vector<TokenId>& out,
                      const std::function<void(std::vector<TokenId>&)>& flush, size_t flushEvery) const;

  std::vector<std::string> m_tokens;  // id -> bytes
  std::vector<uint8_t> m_present;     // id -> 1 when the id is used (encoder.json may leave gaps)
  std::vector<Merge> m_merges;
  std::vector<std::pair<std::string, TokenId>> m_specials;
  std::array<TokenId, 256> m_byteToken{};
  Pretokenizer m_pretokenizer;
  std::shared_ptr<const Tables> m_tables;
};

// Calls onText for the text between special tokens and onSpecial for each special token found (leftmost match;
// the longest when several start at the same byte).
void splitOnSpecialTokens(std::string_view text, const std::vector<std::pair<std::string, TokenId>>& specials,
                          const std::function<void(std::string_view)>& onText,
                          const std::function<void(TokenId)>& onSpecial);

// A special token's text must look like "<|name|>": that is how files mark them.
bool isSpecialTokenText(std::string_view text);

}  // namespace tsr::data
