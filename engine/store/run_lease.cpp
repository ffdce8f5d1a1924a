#include "engine/store/run_lease.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace tsr::store {

namespace {

// Byte `run` of the lock file, for a lock of `type` (F_WRLCK, or F_UNLCK to release).
struct flock byteOf(int64_t run, short type) {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = static_cast<off_t>(run);
  l.l_len = 1;
  l.l_pid = 0;  // open-file-description locks require 0
  return l;
}

Status checkRun(int64_t run) {
  if (run <= 0) return makeError("run {} has no lease: runs are numbered from 1", run);
  return {};
}

}  // namespace

std::string leaseFilePath(const std::string& storePath) { return storePath + "-leases"; }

Result<std::optional<RunLease>> RunLease::tryTake(const std::string& storePath, int64_t run) {
  TSR_TRY(checkRun(run));
  const std::string path = leaseFilePath(storePath);
  // Close-on-exec: a program this process starts (a compiler, a launcher) must not keep the lease after it ends.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return makeError("cannot open {}, the lock file of run leases: {}", path, std::strerror(errno));
  struct flock l = byteOf(run, F_WRLCK);
  if (::fcntl(fd, F_OFD_SETLK, &l) == 0) return std::optional<RunLease>(RunLease(fd, run));
  const int err = errno;
  ::close(fd);
  if (err == EAGAIN || err == EACCES) return std::optional<RunLease>();
  return makeError("cannot lock run {} in {}: {}", run, path, std::strerror(err));
}

Result<bool> RunLease::held(const std::string& storePath, int64_t run) {
  TSR_TRY(checkRun(run));
  const std::string path = leaseFilePath(storePath);
  // Read-only is enough to ask (a reader may not write the store's folder), and no lock file is no lease.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    return makeError("cannot open {}, the lock file of run leases: {}", path, std::strerror(errno));
  }
  struct flock l = byteOf(run, F_WRLCK);
  const int rc = ::fcntl(fd, F_OFD_GETLK, &l);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return makeError("cannot ask {} about run {}: {}", path, run, std::strerror(err));
  return l.l_type != F_UNLCK;
}

RunLease::RunLease(RunLease&& other) noexcept
    : m_fd(std::exchange(other.m_fd, -1)), m_run(std::exchange(other.m_run, 0)) {}

RunLease& RunLease::operator=(RunLease&& other) noexcept {
  if (this != &other) {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = std::exchange(other.m_fd, -1);
    m_run = std::exchange(other.m_run, 0);
  }
  return *this;
}

// Closing the last descriptor of the open file description drops its locks.
RunLease::~RunLease() {
  if (m_fd >= 0) ::close(m_fd);
}

}  // namespace tsr::store
