#pragma once
// jit: traces a function once per distinct signature (input tree structure, avals, shardings, static
// arguments), compiles the graph with the one compile sequence (compile.h) and caches the executable. Arguments split over a mesh (devicePut) make the
// program SPMD: shardings propagate through the graph, which is partitioned into one per-device program with
// its collectives and run on every device; outputs come back sharded. TESSERA_LOG_COMPILES=1 logs each compile with its time and each cache
// miss with its reason.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "engine/compile/compile.h"
#include "engine/transform/array.h"
#include "engine/transform/trace.h"

namespace tsr {

using StaticValue = std::variant<int64_t, double, bool, std::string>;
using StaticArgs = std::map<std::string, StaticValue>;
std::string staticValueToString(const StaticValue& v);

struct JitStats {
  int hits = 0;
  int misses = 0;
  double compileSeconds = 0;  // total time spent tracing and compiling
};

class Jit {
 public:
  using Fn = std::function<Tree(const Tree& args, const StaticArgs& statics)>;

  Jit(Fn f, std::string name);

  // Runs the compiled function; compiles first on a cache miss. Errors in the user function (shapes, axes)
  // come back as an Error naming the op and call site.
  Result<Tree> call(const Tree& args, const StaticArgs& statics = {});
  Result<std::vector<Array>> operator()(const std::vector<Array>& args, const StaticArgs& statics = {});

  // The traced graph for these argument avals (like jax.jit(f).lower(...)), without running it.
  Result<ClosedGraph> lower(const TreeOf<Aval>& avals, const StaticArgs& statics = {});

  // The SPMD program call() would compile for these arguments (some of them sharded), without running or
  // caching it: its sharding plan, per-device program and collectives (tessera shard plan).
  Result<std::shared_ptr<spmd::SpmdExecutable>> lowerSpmd(const Tree& args, const StaticArgs& statics = {});

  // Donation (jax.jit's donate_argnames): the leaves under these top-level argument names (dict keys, or list
  // indices written as numbers) may have their buffers overwritten by outputs of the same size: an optimizer
  // step updates the parameters in place. A buffer is taken only when no other Array shares it; the donated
  // arrays are deleted by the call (as in JAX), so a copy of the caller's tree that still refers to them fails
  // when used instead of seeing the updated values.
  void setDonatedArgs(std::vector<std::string> names) { m_donated = std::move(names); }
  // Handles to each argument array that the caller holds besides the tree it passes (a language binding's own
  // object for the array: 1). An array with more handles than these is shared and is never donated.
  void setCallerHandles(int n) { m_callerHandles = n; }
  // Run graphs with the reference interpreter instead of the compiled CPU executable (also TESSERA_EXECUTOR=
  // interpreter).
  void setUseInterpreter(bool on) { m_interpret = on; }
  // Where compiled graphs run: "cpu" (default), or "cuda" for GPU 0 through the CUDA backend, with the
  // arguments copied to the device and the results back at every call (also TESSERA_DEVICE=cuda); any other
  // backend registered with the runtime by that name. Sharded programs and the interpreter stay on the CPU.
  void setDevice(std::string device) { m_device = std::move(device); }

  const JitStats& stats() const { return m_stats; }
  // Why the most recent call missed the cache ("first call", "argument 1: shape f32[8] -> f32[16]", ...).
  const std::string& lastMissReason() const { return m_lastMissReason; }
  size_t cacheSize() const { return m_cache.size(); }
  // The partitioned program the most recent call ran, when its arguments were sharded (else null): its
  // sharding plan, per-device program and collectives.
  const spmd::SpmdExecutable* lastSpmd() const { return m_lastSpmd; }
  const std::string& name() const { return m_name; }

 private:
  struct Key {
    TreeDef tree;
    std::vector<Aval> avals;
    std::vector<std::string> shardings;  // per argument leaf: its NamedSharding, "" on one device
    StaticArgs statics;
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    Key key;
    std::vector<std::string> paths;
    std::shared_ptr<const ClosedGraph> graph;
    std::shared_ptr<runtime::Executable> exe;    // a backend's (cpu, cuda); null when interpreting or SPMD
    std::shared_ptr<spmd::SpmdExecutable> spmd;  // arguments split over a mesh: the partitioned program
    std::vector<bool> donatable;           // per argument leaf
  };
  std::string explainMiss(const Key& key, const std::vector<std::string>& paths) const;
  // lower() and then the cleanup passes, as every compile does.
  Result<ClosedGraph> lowerOptimized(const TreeOf<Aval>& avals, const StaticArgs& statics, size_t* tracedNodes = nullptr);
  // The compile sequence's options for this function: its name, device and executor; donatable: per graph
  // input, as setDonatedArgs names them (empty: none).
  compile::Options compileOptions(std::vector<bool> donatable) const;

  Fn m_fn;
  std::string m_name;
  std::vector<Entry> m_cache;
  JitStats m_stats;
  std::string m_lastMissReason;
  std::vector<std::string> m_donated;
  int m_callerHandles = 0;
  bool m_interpret = false;
  std::string m_device;  // "" : TESSERA_DEVICE, else cpu
  const spmd::SpmdExecutable* m_lastSpmd = nullptr;
};

// Where compile logs go. By default: stderr when TESSERA_LOG_COMPILES=1, else nowhere. A sink set here
// receives every line whatever the variable says (the IDE's console and tests use it); nullptr restores it.
void setCompileLogSink(std::function<void(const std::string& line)> sink);

Jit jit(Jit::Fn f, std::string name = "jit");
Jit jit(std::function<std::vector<Array>(const std::vector<Array>&)> f, std::string name = "jit");

}  // namespace tsr
