#pragma once
// OpenBLAS takes a workspace of 128 MiB for each thread that calls it, the first time that thread does, and when
// it cannot get one (an address-space limit such as `ulimit -v`, or memory exhausted) it retries forever: the
// process hangs, deaf to SIGTERM. Before a thread's first GEMM, reserveBlasWorkspace maps that much memory for
// every thread about to call OpenBLAS and gives it back, so that a GEMM that cannot run fails with a message.
#include <mutex>

#include "engine/core/result.h"

namespace tsr::runtime {

// OK when `threads` workspaces fit (checked once per calling thread, then free); otherwise an error that names
// the bytes, the reason and the address-space limit.
Status reserveBlasWorkspace(int threads = 1);

// OpenBLAS on `threads` threads of its own for the scope's life, then its count as before. The engine's GEMMs run
// single-threaded inside its own pool; a LAPACK call on one large matrix or the SGEMM peak measurement takes
// OpenBLAS's threads this way. The count is the process's, so one scope at a time (another waits). The
// workspaces are reserved first: where they do not fit, status() says so and the count is left as it was.
class BlasThreads {
 public:
  explicit BlasThreads(int threads);
  ~BlasThreads();
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

  const Status& status() const { return m_status; }

 private:
  std::unique_lock<std::mutex> m_lock;
  Status m_status;
  int m_saved = 0;
};

}  // namespace tsr::runtime
