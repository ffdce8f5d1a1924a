// sharding_constraint: the identity, carrying the sharding its result must have. Sharding propagation treats
// its result as annotated (as jax.lax.with_sharding_constraint); the partitioner replaces it by the reshard
// it asks for; a one-device program copies.
#include <cstring>

#include <fmt/format.h>

#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/ops/shard_rules.h"
#include "engine/sharding/sharding.h"
#include "engine/transform/trace.h"

namespace tsr::ops {
namespace {

constexpr const char* kOp = "sharding_constraint";

Result<std::vector<Aval>> inferConstraint(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity(kOp, ops, 1));
  const auto& a = attrsAs<ir::ShardingConstraintAttrs>(attrs);
  auto spec = sharding::PartitionSpec::parse(a.spec);
  if (!spec.ok()) return opError(kOp, ops, spec.error().message);
  if (static_cast<int>(spec->dims.size()) > ops[0].rank())
    return opError(kOp, ops, fmt::format("spec '{}' has {} dims, more than the operand's rank", a.spec, spec->dims.size()));
  return std::vector<Aval>{ops[0]};
}

void copyKernel(const ir::CpuKernelArgs& args) {
  if (args.outputs[0].aval.bytes())
    std::memcpy(args.outputs[0].data, args.inputs[0].data, static_cast<size_t>(args.outputs[0].aval.bytes()));
}

// The cotangent is constrained the same way (as JAX transposes with_sharding_constraint).
std::vector<Array> vjpConstraint(const ir::VjpArgs& a) {
  if (!a.cotangents[0].valid()) return {Array()};
  return {bind1(ir::OpCode::ShardingConstraint, {a.cotangents[0]}, a.attrs, std::source_location::current())};
}

// Under vmap the batch dim is not split: the spec gets a None there.
ir::BatchResult batchConstraint(const ir::BatchArgs& a) {
  ir::ShardingConstraintAttrs attrs = attrsAs<ir::ShardingConstraintAttrs>(a.attrs);
  Array x = moveBatchDim(a.operands[0], a.batchDims[0], 0, a.batchSize);
  auto spec = sharding::PartitionSpec::parse(attrs.spec);
  if (spec.ok()) {
    spec->dims.insert(spec->dims.begin(), std::vector<std::string>{});
    attrs.spec = spec->toString();
  }
  return {{bind1(ir::OpCode::ShardingConstraint, {x}, attrs, std::source_location::current())}, {0}};
}

}  // namespace

void registerShardingOps(ir::OpRegistry& reg) {
  ir::OpDef d = coreOp(ir::OpCode::ShardingConstraint, "sharding", ir::FusionKind::Opaque, 1);
  d.infer = inferConstraint;
  d.cost = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) { return movementCost(in, out); };
  d.cpu = copyKernel;
  d.vjp = vjpConstraint;
  d.batch = batchConstraint;
  d.shard = elementwiseShardRule();
  addCoreOp(reg, std::move(d));
}

}  // namespace tsr::ops
