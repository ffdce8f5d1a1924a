#include "engine/runtime/buffer.h"
#include "engine/runtime/eager_threads.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <cstring>
#include <exception>
#include <memory>

#include <fmt/format.h>

#include "engine/core/thread_scratch.h"
#include "engine/runtime/profiler.h"

namespace tsr::runtime {

namespace {

// A caching allocator: freed blocks wait in power-of-two size classes for the next request of their class, so
// a training step reuses the previous step's memory instead of mapping fresh pages (which costs as much system
// time as the kernels take). At most kMaxCachedBytes stay cached.
class BlockCache {
 public:
  static constexpr size_t kMaxCachedBytes = size_t(2) << 30;

  static size_t classSize(size_t bytes) { return std::bit_ceil(std::max<size_t>(bytes, 64)); }

  void* take(size_t size) {
    {
      std::lock_guard lock(m_mutex);
      auto& blocks = m_free[std::countr_zero(size)];
      if (!blocks.empty()) {
        void* p = blocks.back();
        blocks.pop_back();
        m_cached -= size;
        return p;
      }
    }
    return std::aligned_alloc(64, size);
  }

  void give(void* p, size_t size) {
    {
      std::lock_guard lock(m_mutex);
      if (m_cached + size <= kMaxCachedBytes) {
        m_free[std::countr_zero(size)].push_back(p);
        m_cached += size;
        return;
      }
    }
    std::free(p);
  }

 private:
  std::mutex m_mutex;
  std::array<std::vector<void*>, 64> m_free;
  size_t m_cached = 0;
};

BlockCache& blockCache() {
  // Never destroyed: buffers held by static objects may be freed after main returns.
  static auto* cache = new BlockCache;
  return *cache;
}

// Trivially destructible: buffers held by static objects may be freed after main returns.
std::atomic<int64_t> g_liveBytes{0};

// Called after each allocation and release: the samples a profile's memory track is made of.
void noteLiveBytes(int64_t bytes) {
  if (Profiler* p = Profiler::active()) p->memory(MemorySample{Profiler::nowNs(), bytes});
}

}  // namespace

int64_t liveBufferBytes() { return g_liveBytes.load(std::memory_order_relaxed); }

Buffer::~Buffer() {
  blockCache().give(m_data, m_capacity);
  noteLiveBytes(g_liveBytes.fetch_sub(m_size, std::memory_order_relaxed) - m_size);
}

Result<std::shared_ptr<Buffer>> Buffer::allocate(int64_t bytes) {
  TSR_ASSIGN(std::shared_ptr<Buffer> b, allocateUninitialized(bytes));
  std::memset(b->data(), 0, static_cast<size_t>(bytes));
  return b;
}

Result<std::shared_ptr<Buffer>> Buffer::allocateUninitialized(int64_t bytes) {
  if (bytes < 0) return makeError("cannot allocate a buffer of {} bytes", bytes);
  if (static_cast<uint64_t>(bytes) > (uint64_t(1) << 62)) return makeError("cannot allocate {} bytes", bytes);
  size_t capacity = BlockCache::classSize(static_cast<size_t>(bytes));
  void* p = blockCache().take(capacity);
  if (!p) return makeError("out of memory allocating {} bytes ({:.1f} MiB)", bytes, bytes / 1048576.0);
  noteLiveBytes(g_liveBytes.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  return std::shared_ptr<Buffer>(new Buffer(p, bytes, capacity));
}

namespace {
std::atomic<ir::ParallelForFn> g_eagerParallelFor{nullptr};
std::atomic<int (*)()> g_eagerThreads{nullptr};
}  // namespace

void lendEagerThreads(ir::ParallelForFn parallelFor, int (*threads)()) {
  g_eagerThreads.store(threads);
  g_eagerParallelFor.store(parallelFor);
}

ir::ParallelForFn eagerParallelFor() { return g_eagerParallelFor.load(std::memory_order_relaxed); }

int eagerThreads() {
  int (*threads)() = g_eagerThreads.load(std::memory_order_relaxed);
  return threads != nullptr && eagerParallelFor() != nullptr ? threads() : 1;
}

namespace {

// out = the op's loop expression over operands of one shape, all float32, 8 lanes at a time, in chunks on the
// lent threads. False (nothing done) where the op has no lowering or a dtype or shape does not fit.
bool runVectorLoop(const ir::OpDef& def, const ir::CpuKernelArgs& args) {
  if (def.fusion != ir::FusionKind::Elementwise || !def.loop.valid() || args.outputs.size() != 1) return false;
  const ir::MutableTensorView& out = args.outputs[0];
  if (out.aval.dtype != DType::F32 || args.inputs.empty() || args.inputs.size() > 3) return false;
  for (const ir::TensorView& in : args.inputs)
    if (in.aval.dtype != DType::F32 || in.aval.shape != out.aval.shape) return false;
  const ir::LoopTileFn tile = def.loop.tile[0];  // no operand uniform: all have the result's shape
  if (!tile) return false;
  constexpr int64_t kGrain = int64_t{1} << 14;
  args.forChunks(out.aval.numel(), kGrain, [&](int64_t lo, int64_t hi, int) {
    const float* x[3] = {};
    for (size_t k = 0; k < args.inputs.size(); ++k) x[k] = args.inputs[k].as<float>() + lo;
    tile(x, out.as<float>() + lo, hi - lo);
  });
  return true;
}

// runCpuOp and runEagerOp: `vector` runs float32 elementwise ops through their loop tiles.
Result<std::vector<BufferPtr>> runOp(const ir::OpDef& def, std::span<const BufferPtr> inputs,
                                     std::span<const Aval> inputAvals, const ir::Attrs& attrs,
                                     std::vector<Aval>* resultAvals, bool vector) {
  TSR_TRY(ir::checkSignature(def, inputAvals.size(), attrs));
  TSR_ASSIGN(std::vector<Aval> outAvals, ir::inferSafely(def, inputAvals, attrs));
  // The kernel's views in this thread's scratch, reused from op to op (an Aval copied into a view that held one
  // keeps its storage: an eager op allocates only its results).
  struct Views {
    std::vector<ir::TensorView> in;
    std::vector<ir::MutableTensorView> out;
  };
  ThreadScratch<Views> scratch;
  Views& views = *scratch;
  views.in.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    views.in[i].data = inputs[i]->data();
    views.in[i].aval = inputAvals[i];
  }
  std::vector<BufferPtr> outs;
  outs.reserve(outAvals.size());
  views.out.resize(outAvals.size());
  for (size_t i = 0; i < outAvals.size(); ++i) {
    // Zeroed only for a kernel that may leave elements unwritten (zeroing a large result costs as much as
    // an elementwise op on it).
    TSR_ASSIGN(BufferPtr b, def.cpuWritesWholeResult ? Buffer::allocateUninitialized(outAvals[i].bytes())
                                                     : Buffer::allocate(outAvals[i].bytes()));
    views.out[i].data = b->data();
    views.out[i].aval = outAvals[i];
    outs.push_back(std::move(b));
  }
  // Kernels of ops with bodies (scan, cond) run graphs and may fail; the failure becomes this op's error.
  try {
    ir::CpuKernelArgs args{views.in, views.out, attrs};
    args.parallelFor = eagerParallelFor();
    args.threads = eagerThreads();
    if (!vector || !runVectorLoop(def, args)) def.cpu(args);
  } catch (const std::exception& e) {
    return makeError("{}: {}", def.name, e.what());
  }
  if (resultAvals) *resultAvals = std::move(outAvals);
  return outs;
}

}  // namespace

Result<std::vector<BufferPtr>> runCpuOp(const ir::OpDef& def, std::span<const BufferPtr> inputs,
                                        std::span<const Aval> inputAvals, const ir::Attrs& attrs,
                                        std::vector<Aval>* resultAvals) {
  return runOp(def, inputs, inputAvals, attrs, resultAvals, false);
}

Result<std::vector<BufferPtr>> runEagerOp(const ir::OpDef& def, std::span<const BufferPtr> inputs,
                                          std::span<const Aval> inputAvals, const ir::Attrs& attrs,
                                          std::vector<Aval>* resultAvals) {
  return runOp(def, inputs, inputAvals, attrs, resultAvals, true);
}

}  // namespace tsr::runtime
