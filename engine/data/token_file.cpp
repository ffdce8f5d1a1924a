#include "engine/data/token_file.h"

#include <bit>
#include <cstring>
#include <optional>

#include "engine/core/check.h"

namespace tsr::data {

static_assert(std::endian::native == std::endian::little, "token files are read and written little-endian");

namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

Result<TokenFile> TokenFile::open(const std::string& path) {
  TokenFile f;
  TSR_ASSIGN(f.m_file, MappedFile::open(path));
  const uint8_t* p = f.m_file.data();
  const size_t size = f.m_file.size();
  size_t headerBytes;
  uint64_t count;
  if (size >= kTokenFileHeaderBytes && std::memcmp(p, kTokenFileMagic, 8) == 0) {
    auto version = load<uint32_t>(p + 8);
    if (version != kTokenFileVersion)
      return makeError("{}: token file version {} is not supported (this build reads version {})", path, version,
                       kTokenFileVersion);
    f.m_tokenBytes = static_cast<int>(load<uint32_t>(p + 12));
    if (f.m_tokenBytes != 2 && f.m_tokenBytes != 4)
      return makeError("{}: {} bytes per token; token files hold 2 (u16) or 4 (u32)", path, f.m_tokenBytes);
    count = load<uint64_t>(p + 16);
    f.m_vocabSize = load<uint32_t>(p + 24);
    headerBytes = kTokenFileHeaderBytes;
  } else if (size >= kLlmcHeaderBytes && load<int32_t>(p) == kLlmcMagic) {
    auto version = load<int32_t>(p + 4);
    if (version != 1 && version != 2)
      return makeError("{}: llm.c token file version {} is not supported (1 = u16, 2 = u32)", path, version);
    f.m_tokenBytes = version == 1 ? 2 : 4;
    count = static_cast<uint32_t>(load<int32_t>(p + 8));
    headerBytes = kLlmcHeaderBytes;
  } else {
    return makeError("{}: not a token file (no \"TSRTOKEN\" or llm.c header)", path);
  }
  const uint64_t available = (size - headerBytes) / static_cast<uint64_t>(f.m_tokenBytes);
  if (count > available)
    return makeError("{}: the header says {} tokens but the file holds only {}; the file is truncated", path, count,
                     available);
  f.m_count = static_cast<int64_t>(count);
  f.m_tokens = p + headerBytes;
  return f;
}

void TokenFile::read(int64_t start, int64_t n, int32_t* out) const {
  TSR_CHECK(start >= 0 && n >= 0 && start + n <= m_count);
  const uint8_t* p = m_tokens + start * m_tokenBytes;
  if (m_tokenBytes == 2) {
    for (int64_t i = 0; i < n; ++i) out[i] = load<uint16_t>(p + 2 * i);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(load<uint32_t>(p + 4 * i));
  }
}

std::vector<uint32_t> TokenFile::read(int64_t start, int64_t n) const {
  std::vector<int32_t> tmp(static_cast<size_t>(n));
  read(start, n, tmp.data());
  return {tmp.begin(), tmp.end()};
}

Result<TokenFileWriter> TokenFileWriter::create(const std::string& path, uint32_t vocabSize, int tokenBytes) {
  if (tokenBytes == 0) tokenBytes = vocabSize != 0 && vocabSize <= 65536 ? 2 : 4;
  if (tokenBytes != 2 && tokenBytes != 4)
    return makeError("{}: {} bytes per token; token files hold 2 (u16) or 4 (u32)", path, tokenBytes);
  if (tokenBytes == 2 && vocabSize > 65536)
    return makeError("{}: a vocabulary of {} does not fit in u16 tokens", path, vocabSize);
  TokenFileWriter w;
  TSR_ASSIGN(w.m_out, AtomicFileWriter::create(path));
  w.m_tokenBytes = tokenBytes;
  w.m_vocabSize = vocabSize;
  uint8_t header[kTokenFileHeaderBytes] = {};  // written for real by finish(), once the count is known
  TSR_TRY(w.m_out.write(header, sizeof header));
  return w;
}

Status TokenFileWriter::append(std::span<const uint32_t> tokens) {
  const uint64_t limit = m_vocabSize ? m_vocabSize : (m_tokenBytes == 2 ? 65536 : uint64_t{1} << 32);
  m_buffer.resize(tokens.size() * static_cast<size_t>(m_tokenBytes));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= limit)
      return makeError("{}: token {} (number {} in the stream) is not below the vocabulary size {}", m_out.path(),
                       tokens[i], m_count + static_cast<int64_t>(i), limit);
    if (m_tokenBytes == 2) {
      auto v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(m_buffer.data() + 2 * i, &v, 2);
    } else {
      std::memcpy(m_buffer.data() + 4 * i, &tokens[i], 4);
    }
  }
  TSR_TRY(m_out.write(m_buffer.data(), m_buffer.size()));
  m_count += static_cast<int64_t>(tokens.size());
  return {};
}

Status TokenFileWriter::finish() {
  uint8_t header[kTokenFileHeaderBytes] = {};
  std::memcpy(header, kTokenFileMagic, 8);
  uint32_t version = kTokenFileVersion, bytes = static_cast<uint32_t>(m_tokenBytes);
  auto count = static_cast<uint64_t>(m_count);
  std::memcpy(header + 8, &version, 4);
  std::memcpy(header + 12, &bytes, 4);
  std::memcpy(header + 16, &count, 8);
  std::memcpy(header + 24, &m_vocabSize, 4);
  TSR_TRY(m_out.writeAt(0, header, sizeof header));
  return m_out.commit();
}

Status writeTokenFile(const std::string& path, std::span<const uint32_t> tokens, uint32_t vocabSize, int tokenBytes) {
  TSR_ASSIGN(TokenFileWriter w, TokenFileWriter::create(path, vocabSize, tokenBytes));
  TSR_TRY(w.append(tokens));
  return w.finish();
}

Result<int64_t> tokenizeFile(const std::string& textPath, const BpeTokenizer& tokenizer, const std::string& outPath,
                             const TokenizeOptions& options) {
  TSR_ASSIGN(MappedFile text, MappedFile::open(textPath));
  std::optional<TokenId> eot;
  if (options.appendEndOfText) {
    eot = tokenizer.specialTokenId(kEndOfText);
    if (!eot) return makeError("tokenize {}: the tokenizer has no {} token to append", textPath, kEndOfText);
  }
  TSR_ASSIGN(TokenFileWriter out, TokenFileWriter::create(outPath, static_cast<uint32_t>(tokenizer.vocabSize())));
  Status status;
  std::vector<TokenId> ids;
  tokenizer.encodeTo(text.bytes(), ids, options.special, [&](std::vector<TokenId>& block) {
    if (status.ok()) status = out.append(block);
    block.clear();
  });
  if (eot && status.ok()) status = out.append(std::span<const uint32_t>(&*eot, 1));
  TSR_TRY(status);
  int64_t n = out.size();
  TSR_TRY(out.finish());
  return n;
}

}  // namespace tsr::data
