#pragma once
// This thread's SSE control and status register (MXCSR): set while in scope, then restored. Jitted CPU code
// flushes subnormals (FlushDenormals, backends/cpu/thread_pool.h); host code it calls back must not inherit that.
#include <xmmintrin.h>

namespace tsr {

// MXCSR set to `csr` while in scope (not written where it holds that value already), then restored.
class MxcsrScope {
 public:
  explicit MxcsrScope(unsigned csr) : m_saved(_mm_getcsr()) {
    if (csr != m_saved) _mm_setcsr(csr);
  }
  ~MxcsrScope() { _mm_setcsr(m_saved); }
  MxcsrScope(const MxcsrScope&) = delete;
  MxcsrScope& operator=(const MxcsrScope&) = delete;

  static unsigned current() { return _mm_getcsr(); }  // this thread's MXCSR now
  static constexpr unsigned kFlushSubnormals = 0x8040u;  // FTZ | DAZ

 private:
  unsigned m_saved;
};

}  // namespace tsr
