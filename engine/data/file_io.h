#pragma once
// Files for the data library: read-only memory maps and atomic writes (temp file + fsync + rename), so a crash
// never leaves a half-written tokenizer or token file under the final name.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/result.h"

namespace tsr::data {

// A whole file mapped read-only. Move-only; an empty file maps to an empty view.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static Result<MappedFile> open(const std::string& path);

  std::string_view bytes() const { return {static_cast<const char*>(m_data), m_size}; }
  const uint8_t* data() const { return static_cast<const uint8_t*>(m_data); }
  size_t size() const { return m_size; }
  const std::string& path() const { return m_path; }

 private:
  void* m_data = nullptr;
  size_t m_size = 0;
  std::string m_path;
};

// Reads a whole file into a string (for small files: tokenizer definitions, states).
Result<std::string> readFile(const std::string& path);

// Writes a file under a temporary name in the same folder, fsyncs it, renames it over `path` and fsyncs the
// folder. Readers see either the old file or the whole new one.
class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  ~AtomicFileWriter();  // removes the temporary file unless commit() succeeded
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  static Result<AtomicFileWriter> create(const std::string& path);

  Status write(const void* bytes, size_t n);
  Status write(std::string_view bytes) { return write(bytes.data(), bytes.size()); }
  Status writeAt(uint64_t offset, const void* bytes, size_t n);  // overwrite earlier bytes (headers)
  uint64_t bytesWritten() const { return m_written; }
  Status commit();

  const std::string& path() const { return m_path; }

 private:
  void discard();
  int m_fd = -1;
  std::string m_path;
  std::string m_tempPath;
  uint64_t m_written = 0;
};

Status writeFileAtomically(const std::string& path, std::string_view bytes);

// Removes the temporary files that atomic writes left in `dir` when their process died before the rename
// ("NAME.tmp-PID-N", ".NAME.tmp-PID-XXXXXX"): those whose process is gone. Returns their paths.
std::vector<std::string> removeOrphanTempFiles(const std::string& dir);

}  // namespace tsr::data
