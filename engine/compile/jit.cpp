#include "engine/compile/jit.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "engine/compile/compile.h"
#include "engine/compile/eval.h"
#include "engine/core/bytes.h"
#include "engine/core/env_options.h"
#include "engine/core/limits.h"
#include "engine/ir/graph.h"
#include "engine/ops/registry.h"
#include "engine/runtime/debug_nans.h"
#include "engine/spmd/spmd.h"

namespace tsr {

namespace {

std::function<void(const std::string&)>& compileLogSink() {
  static std::function<void(const std::string&)> sink;
  return sink;
}

bool logCompiles() {
  return envOptions().logCompiles || compileLogSink();
}

void logCompileLine(const std::string& line) {
  if (compileLogSink()) compileLogSink()(line);
  else std::fprintf(stderr, "[tessera] %s\n", line.c_str());
}

// Before the first run: an arena larger than what the process can still take would end in the out-of-memory
// killer mid-step. Said once per compile; the run goes on (the estimate of free memory may be pessimistic).
void warnIfArenaExceedsMemory(const std::string& name, const compile::Compiled& compiled) {
  const runtime::Executable* exe = compiled.exe ? compiled.exe.get()
                                   : compiled.spmd ? compiled.spmd->executable()
                                                   : nullptr;
  if (!exe) return;
  // Every device of this process holds an arena of its own.
  int64_t devices = 1;
  if (compiled.spmd)
    if (auto comm = spmd::devices(); comm.ok()) devices = static_cast<int64_t>((*comm)->localDevices().size());
  const int64_t arena = exe->arenaBytes() * devices;
  const int64_t available = limits::availableMemoryBytes();
  if (available < 0 || arena <= available) return;
  logCompileLine(fmt::format("warning: '{}' plans {} for its intermediates{}, more than the {} this process can still "
                             "take: the first run may fail (tessera memory PROJECT shows what is live at the peak; for a "
                             "transformer, [train] remat = \"blocks\" recomputes each block instead of keeping its "
                             "activations)",
                             name, formatBytes(arena),
                             devices > 1 ? fmt::format(" ({} devices here)", devices) : std::string(),
                             formatBytes(available)));
}

std::string describeArg(const std::vector<std::string>& paths, size_t i) {
  if (i < paths.size() && !paths[i].empty()) return fmt::format("argument {} ('{}')", i, paths[i]);
  return fmt::format("argument {}", i);
}

}  // namespace

void setCompileLogSink(std::function<void(const std::string&)> sink) { compileLogSink() = std::move(sink); }

std::string staticValueToString(const StaticValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) return "'" + x + "'";
        else if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else return fmt::format("{}", x);
      },
      v);
}

Jit::Jit(Fn f, std::string name) : m_fn(std::move(f)), m_name(std::move(name)) {}

Jit jit(Jit::Fn f, std::string name) { return Jit(std::move(f), std::move(name)); }

Jit jit(std::function<std::vector<Array>(const std::vector<Array>&)> f, std::string name) {
  return Jit(
      [f = std::move(f)](const Tree& args, const StaticArgs&) {
        std::vector<Tree> outs;
        for (auto& y : f(args.leaves())) outs.emplace_back(std::move(y));
        return Tree::list(std::move(outs));
      },
      std::move(name));
}

std::string Jit::explainMiss(const Key& key, const std::vector<std::string>& paths) const {
  if (m_cache.empty()) return "first call";
  // Explain against the most recent entry, which is what a user usually compares with.
  const Key& prev = m_cache.back().key;
  if (!(prev.tree == key.tree))
    return fmt::format("argument structure changed: {} -> {}", prev.tree.toString(), key.tree.toString());
  for (size_t i = 0; i < key.avals.size(); ++i) {
    const Aval& a = prev.avals[i];
    const Aval& b = key.avals[i];
    if (!(a.shape == b.shape))
      return fmt::format("{}: shape changed {} -> {}", describeArg(paths, i), a.toString(), b.toString());
    if (a.dtype != b.dtype)
      return fmt::format("{}: dtype changed {} -> {}", describeArg(paths, i), a.toString(), b.toString());
    if (prev.shardings[i] != key.shardings[i])
      return fmt::format("{}: sharding changed {} -> {}", describeArg(paths, i),
                         prev.shardings[i].empty() ? "one device" : prev.shardings[i],
                         key.shardings[i].empty() ? "one device" : key.shardings[i]);
  }
  for (const auto& [name, value] : key.statics) {
    auto it = prev.statics.find(name);
    if (it == prev.statics.end()) return fmt::format("static argument '{}' added", name);
    if (!(it->second == value))
      return fmt::format("static argument '{}' changed: {} -> {}", name, staticValueToString(it->second),
                         staticValueToString(value));
  }
  for (const auto& [name, value] : prev.statics)
    if (!key.statics.count(name)) return fmt::format("static argument '{}' removed", name);
  return "no cached entry matches";
}

Result<ClosedGraph> Jit::lower(const TreeOf<Aval>& avals, const StaticArgs& statics) {
  TSR_ASSIGN(ClosedGraph cg, makeGraph([&](const Tree& args) { return m_fn(args, statics); }, avals, m_name));
  TSR_TRY(ir::verify(cg.graph, ops::registry()));
  return cg;
}

Result<Tree> Jit::call(const Tree& args, const StaticArgs& statics) {
  std::vector<Array> leaves = args.leaves();
  // Called while tracing (jit inside another transformation): inline the function into the outer trace.
  for (const auto& a : leaves)
    if (a.valid() && a.isTracer()) {
      try {
        return m_fn(args, statics);
      } catch (const Exception& e) {
        return e.error();
      }
    }

  Key key;
  key.tree = args.def();
  key.statics = statics;
  for (const auto& a : leaves) {
    if (!a.valid()) return makeError("{}: an argument is an empty Array", m_name);
    key.avals.push_back(a.aval());
    std::string s;
    if (a.isSharded()) {
      s = a.sharding()->toString();
      for (int d : a.sharding()->mesh.devices) s += fmt::format(",{}", d);
    }
    key.shardings.push_back(std::move(s));
  }

  const Entry* hit = nullptr;
  for (const auto& e : m_cache)
    if (e.key == key) { hit = &e; break; }

  if (hit) {
    ++m_stats.hits;
  } else {
    ++m_stats.misses;
    std::vector<std::string> paths = args.paths();
    m_lastMissReason = explainMiss(key, paths);
    auto t0 = std::chrono::steady_clock::now();
    TreeOf<Aval> avals = args.map([](const Array& a) { return a.aval(); });
    size_t tracedNodes = 0;
    TSR_ASSIGN(ClosedGraph cg, lowerOptimized(avals, statics, &tracedNodes));
    // Steps 3 to 5 of the compile sequence (compile.h): SPMD partitioning, or a backend's executable.
    std::vector<bool> donatable(cg.graph.inputs().size(), false);
    for (size_t i = 0; i < paths.size() && i < donatable.size(); ++i)
      for (const auto& d : m_donated)
        donatable[i] = donatable[i] || paths[i] == d || paths[i].rfind(d + ".", 0) == 0;
    TSR_ASSIGN(compile::Compiled compiled, compile::compileProgram(cg, leaves, paths, compileOptions(donatable)));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m_stats.compileSeconds += secs;
    if (logCompiles()) {
      std::string sig;
      for (size_t i = 0; i < key.avals.size(); ++i) sig += (i ? ", " : "") + key.avals[i].toString();
      logCompileLine(fmt::format("cache miss for '{}': {}", m_name, m_lastMissReason));
      logCompileLine(fmt::format("compiled '{}' for ({}): {} nodes ({} traced){} in {:.2f} ms", m_name, sig,
                                 cg.graph.nodes().size(), tracedNodes,
                                 compiled.exe    ? compiled.exe->summary()
                                 : compiled.spmd ? fmt::format(", SPMD on {} with {} collectives",
                                                               compiled.spmd->mesh().toString(),
                                                               compiled.spmd->partitioned().collectives.size())
                                                 : std::string(", interpreted"),
                                 secs * 1e3));
    }
    warnIfArenaExceedsMemory(m_name, compiled);
    donatable.resize(leaves.size());
    m_cache.push_back(Entry{std::move(key), std::move(paths), std::make_shared<const ClosedGraph>(std::move(cg)),
                            std::move(compiled.exe), std::move(compiled.spmd), std::move(donatable)});
    hit = &m_cache.back();
  }

  std::vector<Array> outs;
  m_lastSpmd = hit->spmd.get();
  if (hit->spmd) {
    // Donated as on one device: the caller's tree and our copy are the only handles (SpmdExecutable checks the
    // blocks); a donated array is deleted.
    std::vector<bool> donated(leaves.size() + hit->graph->consts.size(), false);
    for (size_t i = 0; i < leaves.size(); ++i)
      donated[i] = hit->donatable[i] && !runtime::debugNansEnabled() && leaves[i].useCount() <= 2 + m_callerHandles;
    std::vector<Array> inputs = leaves;
    inputs.insert(inputs.end(), hit->graph->consts.begin(), hit->graph->consts.end());
    auto r = hit->spmd->run(inputs, donated);
    if (!r.ok()) return Error{fmt::format("{}: {}", m_name, r.error().message)};
    outs = std::move(r).value();
  } else if (hit->exe) {
    const ClosedGraph& cg = *hit->graph;
    std::vector<runtime::BufferPtr> bufs;
    std::vector<bool> donated(cg.graph.inputs().size(), false);
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (leaves[i].isDeleted())
        return makeError("{}: argument {} ({}) was donated to a jitted function and deleted", m_name, i,
                         leaves[i].aval().toString());
      if (!leaves[i].isConcrete()) return makeError("{}: argument {} is not a concrete array", m_name, i);
      // Donated only when the caller's tree and our copy are the only handles, and the handle the only owner.
      // With debug NaNs the graph may be re-run op by op on the same arguments, so nothing is donated.
      donated[i] = hit->exe->donates() && hit->donatable[i] && !runtime::debugNansEnabled() &&
                   leaves[i].useCount() <= 2 + m_callerHandles && leaves[i].buffer().use_count() == 1;
      bufs.push_back(leaves[i].buffer());
    }
    for (const auto& c : cg.consts) bufs.push_back(c.buffer());
    TSR_ASSIGN(std::vector<runtime::BufferPtr> res, hit->exe->run(bufs, donated));
    // Donated arrays are deleted, as in JAX: another handle to them (a copy of the caller's tree) now fails
    // loudly instead of reading the updated values.
    for (size_t i = 0; i < leaves.size(); ++i)
      if (donated[i]) leaves[i].impl()->buffer.reset();
    for (size_t i = 0; i < res.size(); ++i) outs.push_back(Array::fromBuffer(res[i], cg.graph.aval(cg.graph.outputs()[i])));
  } else {
    TSR_ASSIGN(outs, evalGraph(*hit->graph, leaves));
  }
  if (runtime::debugNansEnabled() && !hit->spmd) {
    for (size_t i = 0; i < outs.size(); ++i) {
      auto bad = runtime::findNonFinite(*outs[i].buffer(), outs[i].aval());
      if (!bad) continue;
      // Re-run op by op to name the op that produced it.
      auto rerun = evalGraph(*hit->graph, leaves, runtime::InterpretOptions{.checkNonFinite = true});
      if (!rerun.ok()) return Error{fmt::format("{}: {}", m_name, rerun.error().message)};
      return makeError("{}: output {} holds {} (no op produced it: it comes from an input)", m_name, i, *bad);
    }
  }
  return Tree::unflatten(hit->graph->outputTree, std::move(outs));
}

Result<ClosedGraph> Jit::lowerOptimized(const TreeOf<Aval>& avals, const StaticArgs& statics, size_t* tracedNodes) {
  TSR_ASSIGN(ClosedGraph cg, lower(avals, statics));
  if (tracedNodes) *tracedNodes = cg.graph.nodes().size();
  // The compiler's cleanup passes (simplify, constant folding, CSE, DCE) run before the graph is executed.
  auto optimized = compile::optimize(cg.graph);
  if (!optimized.ok()) return Error{fmt::format("{}: {}", m_name, optimized.error().message)};
  return cg;
}

Result<std::shared_ptr<spmd::SpmdExecutable>> Jit::lowerSpmd(const Tree& args, const StaticArgs& statics) {
  TSR_ASSIGN(ClosedGraph cg, lowerOptimized(args.map([](const Array& a) { return a.aval(); }), statics));
  return compile::compileSpmd(cg, args.leaves(), args.paths(), compileOptions({}));
}

compile::Options Jit::compileOptions(std::vector<bool> donatable) const {
  compile::Options o;
  o.name = m_name;
  o.device = m_device.empty() ? envOptions().device : m_device;
  o.interpret = m_interpret || envOptions().interpreter;
  o.donatable = std::move(donatable);
  o.native = true;
  return o;
}

Result<std::vector<Array>> Jit::operator()(const std::vector<Array>& args, const StaticArgs& statics) {
  std::vector<Tree> items;
  for (const auto& a : args) items.emplace_back(a);
  TSR_ASSIGN(Tree out, call(Tree::list(std::move(items)), statics));
  return out.leaves();
}

}  // namespace tsr
