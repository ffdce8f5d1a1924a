#include "engine/data/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

namespace tsr::data {

namespace {

std::string errnoText() { return std::strerror(errno); }

// Writes all n bytes at `offset`, retrying short writes and EINTR.
Status pwriteAll(int fd, const void* bytes, size_t n, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(bytes);
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return makeError("{}: write failed: {}", path, errnoText());
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return {};
}

}  // namespace

MappedFile::~MappedFile() {
  if (m_data) ::munmap(m_data, m_size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : m_data(std::exchange(other.m_data, nullptr)), m_size(std::exchange(other.m_size, 0)),
      m_path(std::move(other.m_path)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (m_data) ::munmap(m_data, m_size);
    m_data = std::exchange(other.m_data, nullptr);
    m_size = std::exchange(other.m_size, 0);
    m_path = std::move(other.m_path);
  }
  return *this;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return makeError("{}: cannot open: {}", path, errnoText());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Error e = makeError("{}: cannot stat: {}", path, errnoText());
    ::close(fd);
    return e;
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return makeError("{}: is a directory, not a file", path);
  }
  MappedFile f;
  f.m_path = path;
  f.m_size = static_cast<size_t>(st.st_size);
  if (f.m_size > 0) {
    void* p = ::mmap(nullptr, f.m_size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      Error e = makeError("{}: cannot map {} bytes: {}", path, f.m_size, errnoText());
      ::close(fd);
      return e;
    }
    f.m_data = p;
  }
  ::close(fd);  // the mapping keeps the file alive
  return f;
}

Result<std::string> readFile(const std::string& path) {
  TSR_ASSIGN(MappedFile f, MappedFile::open(path));
  return std::string(f.bytes());
}

AtomicFileWriter::~AtomicFileWriter() { discard(); }

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : m_fd(std::exchange(other.m_fd, -1)), m_path(std::move(other.m_path)),
      m_tempPath(std::move(other.m_tempPath)), m_written(other.m_written) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    discard();
    m_fd = std::exchange(other.m_fd, -1);
    m_path = std::move(other.m_path);
    m_tempPath = std::move(other.m_tempPath);
    m_written = other.m_written;
  }
  return *this;
}

void AtomicFileWriter::discard() {
  if (m_fd >= 0) {
    ::close(m_fd);
    ::unlink(m_tempPath.c_str());
    m_fd = -1;
  }
}

Result<AtomicFileWriter> AtomicFileWriter::create(const std::string& path) {
  // A unique temporary name in the target's folder, so that the final rename stays on one file system.
  static std::atomic<uint64_t> counter{0};
  AtomicFileWriter w;
  w.m_path = path;
  w.m_tempPath = fmt::format("{}.tmp-{}-{}", path, ::getpid(), counter++);
  w.m_fd = ::open(w.m_tempPath.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (w.m_fd < 0) return makeError("{}: cannot create {}: {}", path, w.m_tempPath, errnoText());
  return w;
}

Status AtomicFileWriter::write(const void* bytes, size_t n) {
  if (m_fd < 0) return makeError("{}: write after commit", m_path);
  TSR_TRY(pwriteAll(m_fd, bytes, n, m_written, m_path));
  m_written += n;
  return {};
}

Status AtomicFileWriter::writeAt(uint64_t offset, const void* bytes, size_t n) {
  if (m_fd < 0) return makeError("{}: write after commit", m_path);
  return pwriteAll(m_fd, bytes, n, offset, m_path);
}

Status AtomicFileWriter::commit() {
  if (m_fd < 0) return makeError("{}: committed twice", m_path);
  if (::fsync(m_fd) != 0) {
    Error e = makeError("{}: fsync failed: {}", m_path, errnoText());
    discard();
    return e;
  }
  ::close(m_fd);
  m_fd = -1;
  if (::rename(m_tempPath.c_str(), m_path.c_str()) != 0) {
    Error e = makeError("{}: cannot rename {} over it: {}", m_path, m_tempPath, errnoText());
    ::unlink(m_tempPath.c_str());
    return e;
  }
  // The rename itself is durable only once the folder is synced.
  std::filesystem::path dir = std::filesystem::path(m_path).parent_path();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

std::vector<std::string> removeOrphanTempFiles(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string name = it->path().filename().string();
    const size_t tag = name.rfind(".tmp-");
    if (tag == std::string::npos) continue;
    // The writer's pid follows the tag; a writer that still runs keeps its file.
    const char* digits = name.c_str() + tag + 5;
    char* after = nullptr;
    const long pid = std::strtol(digits, &after, 10);
    if (after != digits && *after == '-' && pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    if (fs::remove(it->path(), ec)) removed.push_back(it->path().string());
    ec.clear();
  }
  return removed;
}

Status writeFileAtomically(const std::string& path, std::string_view bytes) {
  TSR_ASSIGN(AtomicFileWriter w, AtomicFileWriter::create(path));
  TSR_TRY(w.write(bytes));
  return w.commit();
}

}  // namespace tsr::data
