#include "engine/transform/trace.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <unordered_map>

#include <fmt/format.h>

#include "engine/core/thread_scratch.h"
#include "engine/ops/registry.h"
#include "engine/runtime/debug_nans.h"
#include "engine/runtime/eager_threads.h"
#include "engine/transform/provenance_source.h"

namespace tsr {

namespace {

thread_local std::vector<Trace*> tActiveTraces;
thread_local std::vector<std::string> tModulePath;
// A ProvenanceScope's provenance, given or asked of its source when needed.
struct ProvenanceOverride {
  ir::Provenance prov;
  const ProvenanceSource* source = nullptr;
};
thread_local std::vector<ProvenanceOverride> tProvenanceOverride;
std::atomic<uint64_t> gNextTraceId{1};

// Concrete captures at most this large become constant nodes; larger ones become graph inputs.
constexpr int64_t kMaxInlineConstant = 16;

bool isLive(const ArrayImpl* impl) {
  return std::any_of(tActiveTraces.begin(), tActiveTraces.end(),
                     [&](Trace* t) { return t == impl->trace && t->id() == impl->traceId; });
}

// A source file as the repository names it (engine/nn/resnet.cpp): the compiler is given absolute paths, or paths
// relative to the build folder (../engine/nn/resnet.cpp) where ccache's base_dir rewrites them.
std::string relativeSourcePath(const char* file) {
  std::string_view f(file);
#ifdef TSR_SOURCE_DIR
  std::string_view root(TSR_SOURCE_DIR "/");
  if (f.substr(0, root.size()) == root) f.remove_prefix(root.size());
#endif
  while (f.substr(0, 3) == "../" || f.substr(0, 2) == "./") f.remove_prefix(f[0] == '.' && f[1] == '.' ? 3 : 2);
  return std::string(f);
}

}  // namespace

void raise(Error e) { throw Exception(std::move(e)); }

ProvenanceScope::ProvenanceScope(ir::Provenance prov) { tProvenanceOverride.push_back({std::move(prov), nullptr}); }
ProvenanceScope::~ProvenanceScope() { tProvenanceOverride.pop_back(); }
LazyProvenanceScope::LazyProvenanceScope(const ProvenanceSource& source) { tProvenanceOverride.push_back({{}, &source}); }
LazyProvenanceScope::~LazyProvenanceScope() { tProvenanceOverride.pop_back(); }

ir::Provenance provenanceAt(const std::source_location& loc) {
  if (!tProvenanceOverride.empty()) {
    const ProvenanceOverride& o = tProvenanceOverride.back();
    return o.source ? o.source->provenance() : o.prov;
  }
  ir::Provenance p;
  p.modulePath = ModuleScope::currentPath();
  if (loc.line() != 0) {
    p.file = relativeSourcePath(loc.file_name());
    p.line = static_cast<int>(loc.line());
  }
  return p;
}

void raiseAt(const std::source_location& loc, Error e) {
  ir::Provenance p = provenanceAt(loc);
  raise(Error{e.message + (p.empty() ? "" : " (at " + p.toString() + ")")});
}

ModuleScope::ModuleScope(const std::string& name) { tModulePath.push_back(name); }
ModuleScope::~ModuleScope() { tModulePath.pop_back(); }
std::string ModuleScope::currentPath() {
  std::string s;
  for (const auto& p : tModulePath) s = joinPath(s, p);
  return s;
}

Trace::Trace(std::string name) : m_id(gNextTraceId++) {
  m_graph.name = std::move(name);
  m_parent = tActiveTraces.empty() ? nullptr : tActiveTraces.back();
  tActiveTraces.push_back(this);
}

Trace::~Trace() {
  auto it = std::find(tActiveTraces.begin(), tActiveTraces.end(), this);
  if (it != tActiveTraces.end()) tActiveTraces.erase(it);
}

Trace* Trace::current() { return tActiveTraces.empty() ? nullptr : tActiveTraces.back(); }

Array Trace::newInput(const Aval& aval) {
  auto impl = std::make_shared<ArrayImpl>();
  impl->aval = aval;
  impl->trace = this;
  impl->traceId = m_id;
  impl->value = m_graph.addInput(aval);
  ++m_numArgs;
  return Array(std::move(impl));
}

Result<ir::ValueId> Trace::valueOf(const Array& a) {
  if (!a.valid()) return makeError("an empty (default-constructed) Array was used as an operand");
  ArrayImpl* impl = a.impl();
  if (impl->trace == this && impl->traceId == m_id) return impl->value;
  if (impl->trace && !isLive(impl))
    return makeError("a traced value of shape {} escaped the function that created it (leaked tracer)",
                     impl->aval.toString());
  if (a.isDeleted())
    return makeError("the array ({}) was donated to a jitted function and deleted", impl->aval.toString());
  for (size_t i = 0; i < m_consts.size(); ++i)
    if (m_consts[i].impl() == impl) return m_constInputs[i];
  if (impl->buffer && impl->aval.numel() <= kMaxInlineConstant) {
    auto lit = ir::Literal::fromBytes(impl->aval, impl->buffer->data());
    auto r = m_graph.addNode(ops::registry(), ir::OpCode::Constant, {}, ir::ConstantAttrs{std::move(lit)});
    if (!r.ok()) return r.takeError();
    return (*r)[0];
  }
  // A large concrete value or a value of an outer trace: closed over as an extra input.
  ir::ValueId v = m_graph.addInput(impl->aval);
  m_consts.push_back(a);
  m_constInputs.push_back(v);
  return v;
}

Result<std::vector<Array>> Trace::record(ir::OpCode op, const std::vector<Array>& operands, ir::Attrs attrs,
                                         ir::Provenance prov) {
  std::vector<ir::ValueId> ids;
  ids.reserve(operands.size());
  for (const auto& a : operands) {
    TSR_ASSIGN(ir::ValueId v, valueOf(a));
    ids.push_back(v);
  }
  TSR_ASSIGN(std::vector<ir::ValueId> results,
             m_graph.addNode(ops::registry(), op, std::move(ids), std::move(attrs), std::move(prov)));
  std::vector<Array> out;
  for (ir::ValueId v : results) {
    auto impl = std::make_shared<ArrayImpl>();
    impl->aval = m_graph.aval(v);
    impl->trace = this;
    impl->traceId = m_id;
    impl->value = v;
    out.emplace_back(std::move(impl));
  }
  return out;
}

Result<ClosedGraph> Trace::finish(const std::vector<Array>& outputs) {
  std::vector<ir::ValueId> outs;
  for (const auto& a : outputs) {
    TSR_ASSIGN(ir::ValueId v, valueOf(a));
    outs.push_back(v);
  }
  m_graph.setOutputs(std::move(outs));
  // Captured inputs were appended while tracing; the graph's inputs are args then consts, as recorded.
  ClosedGraph cg;
  cg.graph = std::move(m_graph);
  cg.consts = std::move(m_consts);
  return cg;
}

namespace {

// Runs op on concrete operands on the CPU. `where` gives the provenance, asked only when the op fails: an eager
// op that succeeds builds no provenance (a Python call site's file name and module path are strings).
template <class Where>
std::vector<Array> runEager(ir::OpCode op, const std::vector<Array>& operands, const ir::Attrs& attrs,
                            const Where& where) {
  const ir::OpDef& def = ops::registry().get(op);
  auto fail = [&](const Error& e) -> std::vector<Array> {
    ir::Provenance prov = where();
    std::string at = prov.empty() ? "" : " (at " + prov.toString() + ")";
    raise(Error{e.message + at});
  };
  // An operand split over a mesh: the op runs on every device as a one-op SPMD program (its result keeps
  // the sharding the op's rule gives it, as in JAX).
  if (std::any_of(operands.begin(), operands.end(), [](const Array& a) { return a.valid() && a.isSharded(); })) {
    if (!shardedOpRunner()) return fail(Error{def.name + ": sharded arrays need the SPMD runtime (engine/spmd)"});
    auto r = shardedOpRunner()(op, operands, attrs);
    if (!r.ok()) return fail(r.error());
    return std::move(r).value();
  }
  // The operands' buffers and avals in this thread's scratch, reused from op to op (an Aval's copy into a slot
  // that held one keeps its storage).
  struct Scratch {
    std::vector<runtime::BufferPtr> bufs;
    std::vector<Aval> avals;
    void release() { bufs.clear(); }  // the operands' buffers are not held past the op
  };
  ThreadScratch<Scratch> lease;
  Scratch& scratch = *lease;
  scratch.bufs.resize(operands.size());
  scratch.avals.resize(operands.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    const Array& a = operands[i];
    if (!a.valid()) return fail(Error{def.name + ": an empty (default-constructed) Array was used as an operand"});
    if (a.isTracer()) return fail(Error{def.name + ": a traced value of shape " + a.aval().toString() +
                                        " escaped the function that created it (leaked tracer)"});
    if (a.isDeleted()) return fail(Error{fmt::format("{}: the array ({}) was donated to a jitted function and deleted",
                                                       def.name, a.aval().toString())});
    scratch.bufs[i] = a.buffer();
    scratch.avals[i] = a.aval();
  }
  std::vector<Aval> outAvals;
  auto outs = runtime::runEagerOp(def, scratch.bufs, scratch.avals, attrs, &outAvals);
  if (!outs.ok()) return fail(outs.error());
  std::vector<Array> result;
  result.reserve(outs->size());
  for (size_t i = 0; i < outs->size(); ++i) {
    if (runtime::debugNansEnabled())
      if (auto bad = runtime::findNonFinite(*(*outs)[i], outAvals[i]))
        return fail(Error{fmt::format("{} produced {} in result {} ({})", def.name, *bad, i, outAvals[i].toString())});
    result.push_back(Array::fromBuffer(std::move((*outs)[i]), std::move(outAvals[i])));
  }
  return result;
}

// While any trace is active, every op is recorded into the innermost one (as JAX does since omnistaging):
// concrete operands and values of outer traces are captured, so nothing is evaluated at trace time.
std::vector<Array> recordInto(Trace& target, ir::OpCode op, const std::vector<Array>& operands, ir::Attrs attrs,
                              ir::Provenance prov) {
  auto r = target.record(op, operands, std::move(attrs), std::move(prov));  // errors carry prov already
  if (!r.ok()) raise(r.takeError());
  return std::move(r).value();
}

}  // namespace

std::vector<Array> bind(ir::OpCode op, const std::vector<Array>& operands, ir::Attrs attrs,
                        const std::source_location& loc) {
  if (Trace* target = Trace::current()) return recordInto(*target, op, operands, std::move(attrs), provenanceAt(loc));
  return runEager(op, operands, attrs, [&] { return provenanceAt(loc); });
}

std::vector<Array> bind(ir::OpCode op, const std::vector<Array>& operands, ir::Attrs attrs,
                        const ir::Provenance& prov) {
  if (Trace* target = Trace::current()) return recordInto(*target, op, operands, std::move(attrs), prov);
  return runEager(op, operands, attrs, [&] { return prov; });
}

ShardedOpRunner& shardedOpRunner() {
  static ShardedOpRunner runner;
  return runner;
}

Array bind1(ir::OpCode op, const std::vector<Array>& operands, ir::Attrs attrs, const std::source_location& loc) {
  return bind(op, operands, std::move(attrs), loc)[0];
}

Result<ClosedGraph> makeGraph(const TreeFn& f, const TreeOf<Aval>& inputAvals, const std::string& name) {
  Trace trace(name);
  Tree args = inputAvals.map([&](const Aval& a) { return trace.newInput(a); });
  Tree out;
  try {
    out = f(args);
  } catch (const Exception& e) {
    return e.error();
  }
  TSR_ASSIGN(ClosedGraph cg, trace.finish(out.leaves()));
  cg.inputTree = inputAvals.def();
  cg.outputTree = out.def();
  return cg;
}

Result<ClosedGraph> makeGraph(const std::function<std::vector<Array>(const std::vector<Array>&)>& f,
                              const std::vector<Aval>& inputAvals, const std::string& name) {
  std::vector<TreeOf<Aval>> items;
  for (const auto& a : inputAvals) items.emplace_back(a);
  return makeGraph(
      [&](const Tree& args) {
        std::vector<Array> xs = args.leaves();
        std::vector<Tree> outs;
        for (auto& y : f(xs)) outs.emplace_back(std::move(y));
        return Tree::list(std::move(outs));
      },
      TreeOf<Aval>::list(std::move(items)), name);
}

Result<ir::Graph> inlineConsts(const ClosedGraph& cg) {
  const ir::Graph& g = cg.graph;
  ir::Graph out;
  out.name = g.name;
  std::vector<ir::ValueId> map(static_cast<size_t>(g.numValues()), ir::kNone);
  const size_t numArgs = static_cast<size_t>(cg.numArgs());
  for (size_t i = 0; i < numArgs; ++i) map[static_cast<size_t>(g.inputs()[i])] = out.addInput(g.aval(g.inputs()[i]));
  for (size_t i = 0; i < cg.consts.size(); ++i) {
    const Array& c = cg.consts[i];
    if (c.isTracer())
      return makeError("{}: closes over a traced value of shape {} from an enclosing trace", g.name, c.aval().toString());
    Array host = c.gathered();
    if (!host.impl()->buffer) return makeError("{}: closes over a value that is not on the host", g.name);
    ir::Literal lit = ir::Literal::fromBytes(host.aval(), host.impl()->buffer->data());
    map[static_cast<size_t>(g.inputs()[numArgs + i])] =
        out.addNodeWithAvals(ir::OpCode::Constant, {}, ir::ConstantAttrs{std::move(lit)}, {host.aval()})[0];
  }
  for (const ir::Node& n : g.nodes()) {
    std::vector<ir::ValueId> operands;
    for (ir::ValueId v : n.operands) operands.push_back(map[static_cast<size_t>(v)]);
    std::vector<Aval> avals;
    for (ir::ValueId v : n.results) avals.push_back(g.aval(v));
    std::vector<ir::ValueId> results = out.addNodeWithAvals(n.op, std::move(operands), n.attrs, std::move(avals), n.prov);
    for (size_t r = 0; r < results.size(); ++r) map[static_cast<size_t>(n.results[r])] = results[r];
  }
  std::vector<ir::ValueId> outputs;
  for (ir::ValueId v : g.outputs()) outputs.push_back(map[static_cast<size_t>(v)]);
  out.setOutputs(std::move(outputs));
  return out;
}

}  // namespace tsr
