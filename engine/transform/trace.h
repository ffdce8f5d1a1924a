#pragma once
// Tracing: while a Trace is active, ops on its tracers are recorded into its graph instead of being run.
// Traces nest (jit inside grad inside jit); a value of an outer trace used by an inner one is captured as an
// extra input of the inner graph, the way JAX closes over constants.
#include <functional>
#include <new>
#include <source_location>
#include <string>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/transform/array.h"

namespace tsr {

// A graph with the concrete (or outer-trace) values it closed over: the graph's inputs are the explicit
// arguments followed by these constants.
struct ClosedGraph {
  ir::Graph graph;
  std::vector<Array> consts;
  TreeDef inputTree;
  TreeDef outputTree;
  int numArgs() const { return static_cast<int>(graph.inputs().size() - consts.size()); }
};

class Trace {
 public:
  explicit Trace(std::string name);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  Array newInput(const Aval& aval);
  // Records op(operands) and returns tracers for its results. Concrete operands are lifted: small ones as
  // constant nodes, others as captured inputs.
  Result<std::vector<Array>> record(ir::OpCode op, const std::vector<Array>& operands, ir::Attrs attrs,
                                    ir::Provenance prov);
  // The value of `a` inside this trace (a tracer of ours, or a lifted capture).
  Result<ir::ValueId> valueOf(const Array& a);
  // Ends tracing with these outputs.
  Result<ClosedGraph> finish(const std::vector<Array>& outputs);

  ir::Graph& graph() { return m_graph; }
  uint64_t id() const { return m_id; }

  // The innermost active trace, or nullptr while running eagerly.
  static Trace* current();

 private:
  ir::Graph m_graph;
  uint64_t m_id;
  int m_numArgs = 0;
  std::vector<Array> m_consts;
  std::vector<ir::ValueId> m_constInputs;  // the graph's placeholder inputs for m_consts
  Trace* m_parent = nullptr;
};

// Names the module whose ops follow, e.g. ModuleScope s("layers.0"); nested scopes join with '.'.
class ModuleScope {
 public:
  explicit ModuleScope(const std::string& name);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;
  static std::string currentPath();
};

ir::Provenance provenanceAt(const std::source_location& loc);

// While alive, every op recorded on this thread gets this provenance instead of its call site: transformations
// use it so that the ops a vjp or batching rule emits point at the user's op, not at the rule.
class ProvenanceScope {
 public:
  explicit ProvenanceScope(ir::Provenance prov);
  ~ProvenanceScope();
  ProvenanceScope(const ProvenanceScope&) = delete;
  ProvenanceScope& operator=(const ProvenanceScope&) = delete;
};
// Raises e with the call site appended: "... (at blocks.0.mlp @ model.cpp:42)".
[[noreturn]] void raiseAt(const std::source_location& loc, Error e);

// Applies an op: recorded into the innermost active trace, otherwise run eagerly on the CPU. Errors raise tsr::Exception naming the op, shapes and call site.
std::vector<Array> bind(ir::OpCode op, const std::vector<Array>& operands, ir::Attrs attrs,
                        const std::source_location& loc);
std::vector<Array> bind(ir::OpCode op, const std::vector<Array>& operands, ir::Attrs attrs,
                        const ir::Provenance& prov);
Array bind1(ir::OpCode op, const std::vector<Array>& operands, ir::Attrs attrs, const std::source_location& loc);

// Runs one op eagerly on operands of which some are sharded. Installed by the SPMD runtime (engine/spmd) when
// the first sharded array is made; bind calls it for any op with a sharded operand.
using ShardedOpRunner =
    std::function<Result<std::vector<Array>>(ir::OpCode op, const std::vector<Array>& operands, const ir::Attrs& attrs)>;
ShardedOpRunner& shardedOpRunner();

// Traces f on abstract inputs (like jax.make_jaxpr).
using TreeFn = std::function<Tree(const Tree&)>;
Result<ClosedGraph> makeGraph(const TreeFn& f, const TreeOf<Aval>& inputAvals, const std::string& name = "main");
Result<ClosedGraph> makeGraph(const std::function<std::vector<Array>(const std::vector<Array>&)>& f,
                              const std::vector<Aval>& inputAvals, const std::string& name = "main");

// The graph of `cg` with its closed-over constants written into it as constant nodes, so that it stands alone
// (as IR text handed to another process does): its inputs are the explicit arguments only. Sharded constants
// are gathered first; a constant that is still a tracer of an outer trace is an error.
Result<ir::Graph> inlineConsts(const ClosedGraph& cg);

// Runs f, turning a tsr::Exception into an Error, and an allocation that failed (a model too large for this
// machine) into one too.
template <class F>
auto capture(F&& f) -> Result<decltype(f())> {
  try {
    return f();
  } catch (const Exception& e) {
    return e.error();
  } catch (const std::bad_alloc&) {
    return Error{"out of memory: an allocation failed (is the model or the batch too large for this machine?)"};
  }
}

}  // namespace tsr
