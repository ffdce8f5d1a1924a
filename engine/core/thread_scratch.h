#pragma once
// Scratch space of the calling thread, reused from call to call so that a hot path allocates nothing of its own:
// one slot per nesting depth, since a call may run further calls of the same kind (an op whose kernel runs ops).
// A slot is leased for the caller's scope; a T with a release() member has it called when the lease ends.
//
//   struct Views { std::vector<TensorView> in, out; };
//   ThreadScratch<Views> views;   // views->in.resize(n) keeps its capacity from the last call
#include <array>
#include <cstddef>
#include <memory>
#include <vector>

namespace tsr {

template <class T>
class ThreadScratch {
 public:
  ThreadScratch() {
    auto& s = slots();
    if (s.size() <= depth()) s.push_back(std::make_unique<T>());
    m_slot = s[depth()++].get();
  }
  ~ThreadScratch() {
    if constexpr (requires(T& t) { t.release(); }) m_slot->release();
    --depth();
  }
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;
  T& operator*() const { return *m_slot; }
  T* operator->() const { return m_slot; }

 private:
  static std::vector<std::unique_ptr<T>>& slots() {
    thread_local std::vector<std::unique_ptr<T>> s;
    return s;
  }
  static size_t& depth() {
    thread_local size_t d = 0;
    return d;
  }
  T* m_slot;
};

// N float buffers for a ThreadScratch, for kernels that widen their operands to f32: kept from call to call, since a
// fresh allocation of tens of MB faults in each 4 KB page on every call; one past 64 MB is let go as its lease ends.
template <size_t N>
struct FloatBuffers {
  static constexpr size_t kKeptFloats = size_t{16} << 20;
  std::array<std::vector<float>, N> buffers;
  // Buffer i with room for n floats (its contents are whatever it held).
  float* get(size_t i, size_t n) {
    if (buffers[i].size() < n) buffers[i].resize(n);
    return buffers[i].data();
  }
  void release() {
    for (std::vector<float>& b : buffers)
      if (b.capacity() > kKeptFloats) std::vector<float>().swap(b);
  }
};

}  // namespace tsr
