#pragma once
// Token files: a token stream on disk, memory-mapped for reading.
//
// Format (version 1, little-endian), 64-byte header then the tokens:
//   offset  0  char[8]  magic "TSRTOKEN"
//           8  u32      version (1)
//          12  u32      bytes per token: 2 (u16) or 4 (u32)
//          16  u64      number of tokens
//          24  u32      vocabulary size (0 when unknown); every token is below it
//          28  u32[9]   zero
//          64  tokens
// Files are written under a temporary name, fsynced and renamed, so a token file is complete or absent.
// Reading also accepts llm.c's format (256 x i32 header: magic 20240520, version 1 = u16 / 2 = u32 tokens,
// count; tokens from byte 1024), so its tinyshakespeare / fineweb .bin files load as they are.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/data/bpe.h"
#include "engine/data/file_io.h"

namespace tsr::data {

inline constexpr char kTokenFileMagic[8] = {'T', 'S', 'R', 'T', 'O', 'K', 'E', 'N'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderBytes = 64;

class TokenFile {
 public:
  static Result<TokenFile> open(const std::string& path);

  int64_t size() const { return m_count; }
  int tokenBytes() const { return m_tokenBytes; }
  uint32_t vocabSize() const { return m_vocabSize; }  // 0 when the file does not say
  const std::string& path() const { return m_file.path(); }

  uint32_t operator[](int64_t i) const {
    const uint8_t* p = m_tokens + i * m_tokenBytes;
    if (m_tokenBytes == 2) return static_cast<uint32_t>(p[0] | (p[1] << 8));
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
           (static_cast<uint32_t>(p[3]) << 24);
  }
  // Copies tokens [start, start + n) as i32 (the dtype batches use). The range must lie inside the file.
  void read(int64_t start, int64_t n, int32_t* out) const;
  std::vector<uint32_t> read(int64_t start, int64_t n) const;

 private:
  MappedFile m_file;
  const uint8_t* m_tokens = nullptr;
  int64_t m_count = 0;
  int m_tokenBytes = 2;
  uint32_t m_vocabSize = 0;
};

// Streams tokens into a new token file. Nothing appears under `path` until finish(); an unfinished writer
// removes its temporary file.
class TokenFileWriter {
 public:
  // tokenBytes 0 picks u16 when vocabSize fits in it (<= 65536), else u32.
  static Result<TokenFileWriter> create(const std::string& path, uint32_t vocabSize, int tokenBytes = 0);

  Status append(std::span<const uint32_t> tokens);
  Status finish();
  int64_t size() const { return m_count; }

 private:
  AtomicFileWriter m_out;
  int m_tokenBytes = 2;
  uint32_t m_vocabSize = 0;
  int64_t m_count = 0;
  std::vector<uint8_t> m_buffer;
};

Status writeTokenFile(const std::string& path, std::span<const uint32_t> tokens, uint32_t vocabSize,
                      int tokenBytes = 0);

struct TokenizeOptions {
  SpecialTokens special = SpecialTokens::Allowed;  // "<|endoftext|>" in the text separates documents
  bool appendEndOfText = false;                    // end the stream with <|endoftext|>
};

// Encodes a text file (memory-mapped, streamed to the output in blocks) into a token file. Returns the number
// of tokens written.
Result<int64_t> tokenizeFile(const std::string& textPath, const BpeTokenizer& tokenizer, const std::string& outPath,
                             const TokenizeOptions& options = {});

}  // namespace tsr::data
