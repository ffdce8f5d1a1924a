#pragma once
// Which process trains a run. The process that trains a run (a new run, or one it resumes) holds the run's lease
// for as long as it trains it, so that a second process cannot resume the same run and write its metrics and its
// checkpoint too. The lease is an advisory write lock on byte N of a lock file beside the store
// (<store>-leases, N the run's id): Linux's open-file-description lock (F_OFD_SETLK), which the kernel drops
// when the process ends however it ends (exit, SIGKILL, a crash), so a killed trainer never leaves a stale lease
// and there is no heartbeat to wait out. It works wherever the store itself does: SQLite locks the store with the
// same kind of lock, on the same file system (NFS included, through its lock manager), so processes on two
// machines that share a store see each other's leases, which a pid could not tell.
#include <cstdint>
#include <optional>
#include <string>

#include "engine/core/result.h"

namespace tsr::store {

// <store>-leases: the lock file of the store at storePath.
std::string leaseFilePath(const std::string& storePath);

class RunLease {
 public:
  // Takes run `run`'s lease for this lease object; nullopt when another one holds it (another process, or
  // another RunLease of this process). An error when the lock file cannot be made or locked.
  static Result<std::optional<RunLease>> tryTake(const std::string& storePath, int64_t run);
  // Whether some lease holds run `run` now; false when the store has no lock file yet.
  static Result<bool> held(const std::string& storePath, int64_t run);

  RunLease(RunLease&& other) noexcept;
  RunLease& operator=(RunLease&& other) noexcept;
  RunLease(const RunLease&) = delete;
  RunLease& operator=(const RunLease&) = delete;
  ~RunLease();  // releases it

  int64_t run() const { return m_run; }

 private:
  RunLease(int fd, int64_t run) : m_fd(fd), m_run(run) {}
  int m_fd = -1;
  int64_t m_run = 0;
};

}  // namespace tsr::store
