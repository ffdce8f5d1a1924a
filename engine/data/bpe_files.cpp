// Reading and writing GPT-2's tokenizer files (encoder.json + vocab.bpe).
#include <filesystem>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "engine/data/bpe.h"
#include "engine/data/file_io.h"

namespace tsr::data {

namespace {

// Ids beyond this are surely a mistake, and would make the id table huge.
constexpr int64_t kMaxTokenId = (int64_t{1} << 26) - 1;

std::string quote(std::string_view s, size_t max = 60) {
  return s.size() <= max ? fmt::format("\"{}\"", s) : fmt::format("\"{}...\"", s.substr(0, max));
}

}  // namespace

Result<BpeTokenizer> BpeTokenizer::parse(std::string_view encoderJson, std::string_view vocabBpe,
                                         std::string_view encoderName, std::string_view vocabName) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(encoderJson);
  } catch (const nlohmann::json::exception& e) {
    return makeError("{}: not valid JSON: {}", encoderName, e.what());
  }
  if (!j.is_object()) return makeError("{}: expected a JSON object of token -> id", encoderName);

  BpeTokenizer t;
  std::unordered_map<std::string, TokenId> idOf;  // token bytes -> id
  idOf.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxTokenId)
      return makeError("{}: the id of token {} is {}, not an integer in 0..{}", encoderName, quote(key), v.dump(),
                       kMaxTokenId);
    auto bytes = unicodeToBytes(key);
    if (!bytes)
      return makeError("{}: token {} has a character outside GPT-2's byte alphabet (bytes_to_unicode)",
                       encoderName, quote(key));
    auto id = static_cast<size_t>(v.get<int64_t>());
    if (id >= t.m_tokens.size()) {
      t.m_tokens.resize(id + 1);
      t.m_present.resize(id + 1, 0);
    }
    if (t.m_present[id])
      return makeError("{}: id {} is given to both {} and {}", encoderName, id, quote(bytesToUnicode(t.m_tokens[id])),
                       quote(key));
    t.m_present[id] = 1;
    t.m_tokens[id] = *bytes;
    idOf.emplace(std::move(*bytes), static_cast<TokenId>(id));
  }
  for (int b = 0; b < 256; ++b)
    if (!idOf.contains(std::string(1, static_cast<char>(b))))
      return makeError("{}: byte 0x{:02x} (spelled {}) has no token; byte-level BPE needs all 256 bytes",
                       encoderName, b, quote(byteToUnicode(static_cast<uint8_t>(b))));

  std::vector<uint8_t> isMergeResult(t.m_tokens.size(), 0);
  size_t lineNo = 0;
  size_t pos = 0;
  while (pos < vocabBpe.size()) {
    size_t end = vocabBpe.find('\n', pos);
    if (end == std::string_view::npos) end = vocabBpe.size();
    std::string_view line = vocabBpe.substr(pos, end - pos);
    pos = end + 1;
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (lineNo == 1 && line.starts_with("#"))) continue;  // "#version: 0.2", trailing newline
    size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      return makeError("{}:{}: expected two tokens separated by one space, got {}", vocabName, lineNo, quote(line));
    TokenId parts[2];
    std::string_view spelled[2] = {line.substr(0, space), line.substr(space + 1)};
    std::string merged;
    for (int k = 0; k < 2; ++k) {
      auto bytes = unicodeToBytes(spelled[k]);
      auto it = bytes ? idOf.find(*bytes) : idOf.end();
      if (it == idOf.end())
        return makeError("{}:{}: {} is not a token in {}", vocabName, lineNo, quote(spelled[k]), encoderName);
      parts[k] = it->second;
      merged += *bytes;
    }
    auto it = idOf.find(merged);
    if (it == idOf.end())
      return makeError("{}:{}: merging {} and {} gives {}, which is not a token in {}", vocabName, lineNo,
                       quote(spelled[0]), quote(spelled[1]), quote(bytesToUnicode(merged)), encoderName);
    isMergeResult[it->second] = 1;
    t.m_merges.emplace_back(parts[0], parts[1]);
  }

  for (size_t id = 0; id < t.m_tokens.size(); ++id)
    if (t.m_present[id] && !isMergeResult[id] && isSpecialTokenText(t.m_tokens[id]))
      t.m_specials.emplace_back(t.m_tokens[id], static_cast<TokenId>(id));
  TSR_TRY(t.build());
  return t;
}

Result<BpeTokenizer> BpeTokenizer::load(const std::string& encoderJsonPath, const std::string& vocabBpePath) {
  TSR_ASSIGN(std::string encoder, readFile(encoderJsonPath));
  TSR_ASSIGN(std::string vocab, readFile(vocabBpePath));
  return parse(encoder, vocab, encoderJsonPath, vocabBpePath);
}

Result<BpeTokenizer> BpeTokenizer::loadDirectory(const std::string& dir) {
  std::filesystem::path d(dir);
  return load((d / "encoder.json").string(), (d / "vocab.bpe").string());
}

std::string BpeTokenizer::encoderJson() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (size_t id = 0; id < m_tokens.size(); ++id)
    if (m_present[id]) j[bytesToUnicode(m_tokens[id])] = id;
  return j.dump() + "\n";
}

std::string BpeTokenizer::vocabBpe() const {
  std::string s = "#version: 0.2\n";
  for (auto [a, b] : m_merges) {
    s += bytesToUnicode(m_tokens[a]);
    s += ' ';
    s += bytesToUnicode(m_tokens[b]);
    s += '\n';
  }
  return s;
}

Status BpeTokenizer::save(const std::string& encoderJsonPath, const std::string& vocabBpePath) const {
  TSR_TRY(writeFileAtomically(encoderJsonPath, encoderJson()));
  return writeFileAtomically(vocabBpePath, vocabBpe());
}

Status BpeTokenizer::saveDirectory(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return makeError("{}: cannot create the folder: {}", dir, ec.message());
  std::filesystem::path d(dir);
  return save((d / "encoder.json").string(), (d / "vocab.bpe").string());
}

}  // namespace tsr::data
