#pragma once
// Sharding propagation: computation follows data. Every value of a global graph gets a sharding on one mesh,
// from the annotations (the arguments' shardings, sharding constraints, requested output shardings) and then
// through each op's sharding rule (shard_rule.h), forwards from operands to results and backwards from results
// to operands, until nothing changes. Annotated values never change; a propagated dim, once split, stays so;
// values nothing reaches are replicated. Two annotations that split one factor of an op differently are an
// error naming the op and both specs.
#include <optional>
#include <string>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/sharding/sharding.h"

namespace tsr::sharding {

// A value's sharding on a mesh: per dim, the mesh axes it is split over (indices into mesh.axes, major to
// minor). `partial`: axes over which each device holds a partial sum; only the partitioner's intermediate
// results carry it, between an op and the collective that completes it.
struct TensorSharding {
  std::vector<std::vector<int>> dims;
  std::vector<int> partial;

  static TensorSharding replicated(int rank) { return {std::vector<std::vector<int>>(static_cast<size_t>(rank)), {}}; }
  static Result<TensorSharding> fromSpec(const Mesh& mesh, const PartitionSpec& spec, const Shape& shape);
  PartitionSpec toSpec(const Mesh& mesh) const;
  bool isReplicated() const;
  bool usesAxis(int axis) const;
  int64_t shards(const Mesh& mesh, int dim) const;  // the number of pieces dim is split into
  Shape localShape(const Mesh& mesh, const Shape& global) const;
  std::string toString(const Mesh& mesh) const;  // "P('a', None)", with " partial('b')" when partial
  bool operator==(const TensorSharding&) const = default;
};

// Why a value has its sharding.
struct ShardingOrigin {
  enum class Kind { Default, Annotation, Forward, Backward };
  Kind kind = Kind::Default;
  ir::NodeId node = ir::kNone;  // Forward/Backward: the op it came through
  std::string annotation;       // Annotation: "argument params.wte", "output 0", "sharding_constraint"
  std::string toString(const ir::Graph& g, const ir::OpRegistry& reg) const;
};

struct ShardingAnnotations {
  std::vector<std::optional<TensorSharding>> inputs;   // per graph input; none: free to propagate into
  std::vector<std::optional<TensorSharding>> outputs;  // per graph output; none: as propagated
  std::vector<std::string> inputNames;                 // for messages and origins ("params.wte"); optional
};

struct ShardingPlan;

// The plans of a scan's or cond's nested graphs (JAX and Shardy partition a loop body with the loop's mesh). A
// scan's body is planned with its consts and carries as the operands hold them and each x without its scanned
// dim; the carries are a fixed point (a carry leaves the body split as it entered); the results take the body's
// output shardings (each y with its scanned dim whole in front). A cond's branches are planned alike, their
// results the shardings both branches agree on. When `plans` is empty the op runs whole on every device, and
// `whole` says why.
struct RegionPlans {
  std::vector<ShardingPlan> plans;  // scan: the body; cond: the true branch, then the false branch
  std::string whole;
};

struct ShardingPlan {
  Mesh mesh;
  std::vector<TensorSharding> values;  // by ValueId
  std::vector<ShardingOrigin> origins;
  std::vector<bool> annotated;
  std::vector<RegionPlans> regions;  // by NodeId: empty for ops without nested graphs
  int sweeps = 0;  // forward + backward passes until the fixpoint
};

Result<ShardingPlan> propagateShardings(const ir::Graph& g, const ir::OpRegistry& reg, const Mesh& mesh,
                                        const ShardingAnnotations& annotations);

// Every value with its sharding and where it came from, one per line:
//   "%12 = dot_general(%3, %10) f32[8192,1024] P('batch', 'model')  propagated forward from dot_general (node 4)".
std::string describePlan(const ir::Graph& g, const ir::OpRegistry& reg, const ShardingPlan& plan);

// The mesh and sharding a sharding_constraint node asks for.
Result<Mesh> constraintMesh(const ir::ShardingConstraintAttrs& attrs);
Result<TensorSharding> constraintSharding(const ir::ShardingConstraintAttrs& attrs, const Shape& shape);
// The split a shard_map call (ir::ManualSharding) gives an operand or result: on `mesh`, the program's, or an
// error naming the call (`what`) and both meshes.
Result<TensorSharding> manualSharding(const ir::ShardingConstraintAttrs& attrs, const Mesh& mesh, const Shape& shape,
                                      const std::string& what);

// A value any device can make in any sharding without communication: a constant, an iota, or a broadcast
// of a scalar (CSE shares one zero of each shape among many ops). Propagation never spreads a split from it, and
// the partitioner makes it anew where another sharding is needed.
bool isFreeToMake(const ir::Graph& g, ir::ValueId v);

// The op's sharding rule for node n, or the conservative one (every dim whole) for ops without a rule.
Result<ir::ShardingRule> shardingRuleOf(const ir::Graph& g, const ir::Node& n, const ir::OpRegistry& reg);

}  // namespace tsr::sharding
