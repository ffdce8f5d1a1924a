#pragma once
// The rule table's requirements for one op, as a check that returns the reasons it fails: what the core ops'
// table test demands of every op (tests/transform/test_rule_table.cpp), applied to ops that plugins add before
// they reach the registry.
#include <span>
#include <vector>

#include "engine/core/result.h"
#include "engine/ir/op_def.h"

namespace tsr::ops {

// Fails, listing every problem, when the op lacks a required rule (infer, cost, CPU kernel, batch, shard, and
// vjp unless it is marked non-differentiable), has an impossible signature (operand or result counts, an attrs
// index outside ir::Attrs), or, given example operands, when its infer rule rejects them, its cost rule gives a
// negative or non-finite figure, or its shard rule does not describe every dim of every operand and result.
// Rules that throw are reported, never propagated.
Status checkOpRules(const ir::OpDef& def, std::span<const Aval> exampleOperands = {},
                    const ir::Attrs& exampleAttrs = ir::Attrs{});

}  // namespace tsr::ops
