#pragma once
// The kernel profiler. Every kernel launch of an executable (a fused kernel, a GEMM, a reference-interpreter
// node) records where it ran, what it ran, when, and how much work it did. Events carry a fusion id that links
// back to the nodes of the compiled graph: the executable registers a table of its kernels (FusionInfo) once
// per profiler. Exported as Chrome/Perfetto trace JSON and to the run store's profiles/kernel_events.
//
// Recording is off unless a Profiler is installed with ProfilerScope; the cost of an idle check is one atomic
// load per launch.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tsr::runtime {

// One kernel launch.
struct ProfileEvent {
  std::string device = "cpu:0";  // "cpu:0", "cuda:0"
  int64_t stream = 0;            // CPU: the worker thread that ran it (0 = the calling thread); GPU: the stream
  std::string name;              // "fusion.3 loop[add,mul,gelu]", "dot_general 256x768x2304"
  int64_t fusion = -1;           // FusionInfo::id of the kernel; -1 when it has none
  int64_t startNs = 0;           // Profiler::nowNs() clock (steady clock, ns)
  int64_t durationNs = 0;
  double flops = 0;
  double bytes = 0;  // bytes read + written
  // A collective (all_reduce, all_gather, ...) over a group of more than one device: its number among this
  // device's collectives since the profiler started (Profiler::nextCollective), and the group's positions. Every
  // device runs the same program, so the k-th collective of each member of a group is the same instance.
  int64_t collective = -1;
  std::vector<int> group;
};

// One kernel of an executable, registered before its first event: the nodes it runs.
struct FusionInfo {
  int64_t id = -1;            // unique in the process (Profiler::reserveIds)
  std::string executable;     // the compiled graph's name, e.g. "train_step"
  std::string name;           // the kernel name used by events
  std::string kind;           // "loop", "reduction", "gemm", "opaque", "copy"
  std::vector<int> nodes;     // node ids in the executable's graph (after the fusion pass)
  std::vector<std::string> ops;  // op names of those nodes, in order
  std::string modulePath;     // the common module path of the nodes ("h.3.attn"), empty when mixed
};

// The kernel table of one executable as a profiler knows it: the kernels (ids base .. base + n - 1) and the
// work each launch does, for executables whose launches always do the same work (the reference interpreter).
struct KernelTable {
  int64_t base = 0;
  std::vector<FusionInfo> kernels;
  std::vector<double> flops;  // per kernel
  std::vector<double> bytes;
};

// The bytes of buffers in use in the process (runtime::Buffer), sampled at each allocation and release while a
// profiler records: the measured side of a step's memory. `rank` is the process's under mpirun (a profiler
// records 0; merging the ranks' traces sets it).
struct MemorySample {
  int64_t tNs = 0;
  int64_t bytes = 0;
  int rank = 0;
};

// A step boundary or other named span on the host (e.g. "step 12") of one process (rank, as MemorySample's),
// shown as its own track.
struct ProfileMark {
  std::string name;
  int64_t startNs = 0;
  int64_t durationNs = 0;
  int rank = 0;
};

class Profiler {
 public:
  Profiler();
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  static int64_t nowNs();
  // The profiler recording in this process, or nullptr.
  static Profiler* active() { return s_active.load(std::memory_order_acquire); }
  // A block of n process-unique fusion ids, for an executable's kernel table.
  static int64_t reserveIds(int64_t n);

  // Thread-safe.
  void record(ProfileEvent e);
  // The number of `device`'s next collective (0, 1, ... from this profiler's start).
  int64_t nextCollective(const std::string& device);
  void mark(ProfileMark m);
  void memory(MemorySample m);
  // Registers the kernels of one executable; a second call with ids already registered is ignored.
  void registerFusions(const std::vector<FusionInfo>& kernels);
  bool hasFusion(int64_t id) const;
  // The kernel table of the executable identified by `key` (e.g. its address mixed with a fingerprint of its
  // contents), built by `build` and registered on first use; later calls return the same table.
  std::shared_ptr<const KernelTable> kernelTable(uint64_t key, const std::function<KernelTable()>& build);

  std::vector<ProfileEvent> events() const;  // in recording order
  std::vector<ProfileMark> marks() const;
  std::vector<MemorySample> memorySamples() const;  // in time order
  std::vector<FusionInfo> fusions() const;
  void clear();

 private:
  friend class ProfilerScope;
  static std::atomic<Profiler*> s_active;
  mutable std::mutex m_mutex;
  std::vector<ProfileEvent> m_events;
  std::vector<ProfileMark> m_marks;
  std::vector<MemorySample> m_memory;
  std::vector<FusionInfo> m_fusions;
  std::map<uint64_t, std::shared_ptr<const KernelTable>> m_tables;
  std::map<std::string, int64_t> m_collectives;  // per device: collectives numbered so far
};

// Installs a profiler as the active one for its lifetime (scopes nest: the previous one comes back).
class ProfilerScope {
 public:
  explicit ProfilerScope(Profiler& p);
  ~ProfilerScope();
  ProfilerScope(const ProfilerScope&) = delete;
  ProfilerScope& operator=(const ProfilerScope&) = delete;

 private:
  Profiler* m_previous;
};

}  // namespace tsr::runtime
