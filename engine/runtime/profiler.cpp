#include "engine/runtime/profiler.h"

#include "engine/runtime/buffer.h"

#include <algorithm>
#include <chrono>

namespace tsr::runtime {

std::atomic<Profiler*> Profiler::s_active{nullptr};

namespace {
std::atomic<int64_t> g_nextFusionId{0};
}

Profiler::Profiler() = default;
Profiler::~Profiler() = default;

int64_t Profiler::nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t Profiler::reserveIds(int64_t n) { return g_nextFusionId.fetch_add(n); }

int64_t Profiler::nextCollective(const std::string& device) {
  std::lock_guard lock(m_mutex);
  return m_collectives[device]++;
}

void Profiler::record(ProfileEvent e) {
  std::lock_guard lock(m_mutex);
  m_events.push_back(std::move(e));
}

void Profiler::mark(ProfileMark m) {
  std::lock_guard lock(m_mutex);
  m_marks.push_back(std::move(m));
}

void Profiler::registerFusions(const std::vector<FusionInfo>& kernels) {
  std::lock_guard lock(m_mutex);
  for (const auto& k : kernels) {
    bool known = std::any_of(m_fusions.begin(), m_fusions.end(), [&](const FusionInfo& f) { return f.id == k.id; });
    if (!known) m_fusions.push_back(k);
  }
}

bool Profiler::hasFusion(int64_t id) const {
  std::lock_guard lock(m_mutex);
  return std::any_of(m_fusions.begin(), m_fusions.end(), [&](const FusionInfo& f) { return f.id == id; });
}

std::shared_ptr<const KernelTable> Profiler::kernelTable(uint64_t key, const std::function<KernelTable()>& build) {
  {
    std::lock_guard lock(m_mutex);
    if (auto it = m_tables.find(key); it != m_tables.end()) return it->second;
  }
  // Built outside the lock: building may format many names. A racing builder of the same key loses.
  auto table = std::make_shared<const KernelTable>(build());
  registerFusions(table->kernels);
  std::lock_guard lock(m_mutex);
  return m_tables.emplace(key, std::move(table)).first->second;
}

std::vector<ProfileEvent> Profiler::events() const {
  std::lock_guard lock(m_mutex);
  return m_events;
}

void Profiler::memory(MemorySample m) {
  std::lock_guard lock(m_mutex);
  m_memory.push_back(m);
}

std::vector<ProfileMark> Profiler::marks() const {
  std::lock_guard lock(m_mutex);
  return m_marks;
}

std::vector<MemorySample> Profiler::memorySamples() const {
  std::lock_guard lock(m_mutex);
  return m_memory;
}

std::vector<FusionInfo> Profiler::fusions() const {
  std::lock_guard lock(m_mutex);
  return m_fusions;
}

void Profiler::clear() {
  std::lock_guard lock(m_mutex);
  m_events.clear();
  m_marks.clear();
  m_memory.clear();
  m_fusions.clear();
  m_tables.clear();
  m_collectives.clear();
}

ProfilerScope::ProfilerScope(Profiler& p) : m_previous(Profiler::s_active.exchange(&p, std::memory_order_acq_rel)) {
  // Where the memory track starts: allocations and releases move it from here.
  p.memory(MemorySample{Profiler::nowNs(), liveBufferBytes()});
}
ProfilerScope::~ProfilerScope() { Profiler::s_active.store(m_previous, std::memory_order_release); }

}  // namespace tsr::runtime
