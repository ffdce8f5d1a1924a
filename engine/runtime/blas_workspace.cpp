#include "engine/runtime/blas_workspace.h"

#include <cblas.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

namespace tsr::runtime {

namespace {

// OpenBLAS's BUFFER_SIZE for x86-64 (128 MiB) and the page it adds to it.
constexpr size_t kWorkspaceBytes = (size_t(128) << 20) + 4096;

std::string addressSpaceLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return "no address-space limit";
  return fmt::format("address-space limit {} MiB (ulimit -v)", static_cast<uint64_t>(r.rlim_cur) >> 20);
}

}  // namespace

Status reserveBlasWorkspace(int threads) {
  threads = threads < 1 ? 1 : threads;
  thread_local int reservedFor = 0;  // the most threads this thread has checked for
  if (threads <= reservedFor) return {};
  const size_t bytes = kWorkspaceBytes * static_cast<size_t>(threads);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return makeError("out of memory: OpenBLAS needs {} MiB of workspace for {} GEMM thread{} and mapping it failed "
                     "({}; {}); raise the limit, or use fewer threads (TESSERA_NUM_THREADS)",
                     bytes >> 20, threads, threads == 1 ? "" : "s", std::strerror(errno), addressSpaceLimit());
  ::munmap(p, bytes);
  reservedFor = threads;
  return {};
}

namespace {
std::mutex& blasThreadsMutex() {
  static std::mutex m;
  return m;
}
}  // namespace

BlasThreads::BlasThreads(int threads) : m_lock(blasThreadsMutex()), m_status(reserveBlasWorkspace(threads)) {
  if (!m_status.ok()) return;
  m_saved = openblas_get_num_threads();
  openblas_set_num_threads(threads < 1 ? 1 : threads);
}

BlasThreads::~BlasThreads() {
  if (m_status.ok()) openblas_set_num_threads(m_saved);
}

}  // namespace tsr::runtime
