#include "engine/ops/rule_table.h"

#include <cmath>
#include <string>
#include <variant>

#include "engine/ops/op_helpers.h"

namespace tsr::ops {

namespace {

// The example's rules, run once: infer must accept the operands, cost must be finite and non-negative, and the
// shard rule must map every dim of every operand and result (to a factor or to -1, whole).
void checkExample(const ir::OpDef& def, std::span<const Aval> operands, const ir::Attrs& attrs,
                  std::vector<std::string>& problems) {
  auto results = ir::inferSafely(def, operands, attrs);
  if (!results.ok()) {
    problems.push_back("infer rejects the example " + describeAvals(operands) + ": " + results.error().message);
    return;
  }
  if (def.numResults >= 0 && results->size() != static_cast<size_t>(def.numResults))
    problems.push_back("infer gives " + std::to_string(results->size()) + " results, the op declares " +
                       std::to_string(def.numResults));
  try {
    if (def.cost) {
      ir::Cost c = def.cost(operands, *results, attrs);
      if (!std::isfinite(c.flops) || c.flops < 0 || c.bytesRead < 0 || c.bytesWritten < 0)
        problems.push_back("the cost rule gives a negative or non-finite figure for the example");
    }
    if (def.shard) {
      auto rule = def.shard(operands, *results, attrs);
      if (!rule.ok()) {
        problems.push_back("the shard rule fails on the example: " + rule.error().message);
      } else {
        auto covers = [&](const std::vector<std::vector<int>>& dims, std::span<const Aval> avals, const char* what) {
          if (dims.size() != avals.size()) {
            problems.push_back(std::string("the shard rule maps ") + std::to_string(dims.size()) + " " + what +
                               "s, the example has " + std::to_string(avals.size()));
            return;
          }
          for (size_t i = 0; i < avals.size(); ++i) {
            if (dims[i].size() != static_cast<size_t>(avals[i].rank()))
              problems.push_back(std::string("the shard rule gives ") + what + " " + std::to_string(i) + " " +
                                 std::to_string(dims[i].size()) + " dims, it has " + std::to_string(avals[i].rank()));
            for (int f : dims[i])
              if (f < -1 || f >= static_cast<int>(rule->factors.size()))
                problems.push_back(std::string("the shard rule names factor ") + std::to_string(f) + " for " + what +
                                   " " + std::to_string(i) + ", it has " + std::to_string(rule->factors.size()));
          }
        };
        covers(rule->operandDims, operands, "operand");
        covers(rule->resultDims, *results, "result");
      }
    }
  } catch (const std::exception& e) {
    problems.push_back(std::string("a rule threw on the example: ") + e.what());
  }
}

}  // namespace

Status checkOpRules(const ir::OpDef& def, std::span<const Aval> exampleOperands, const ir::Attrs& exampleAttrs) {
  std::vector<std::string> problems;
  if (def.name.empty()) return makeError("op without a name");
  if (def.numOperands < -1) problems.push_back("numOperands must be -1 (variadic) or at least 0");
  if (def.numOperands == -1 && def.minOperands < 0) problems.push_back("minOperands must be at least 0");
  if (def.numResults < -1 || def.numResults == 0) problems.push_back("numResults must be -1 or at least 1");
  if (def.attrsIndex >= std::variant_size_v<ir::Attrs>) problems.push_back("attrsIndex is not an ir::Attrs alternative");
  if (!def.infer) problems.push_back("no infer rule");
  if (!def.cost) problems.push_back("no cost rule");
  if (!def.cpu) problems.push_back("no CPU kernel");
  if (!def.batch) problems.push_back("no batching rule");
  if (!def.shard) problems.push_back("no shard rule");
  if (def.differentiable && !def.vjp) problems.push_back("differentiable but no vjp rule");
  if (problems.empty() && !exampleOperands.empty()) {
    if (exampleAttrs.index() != def.attrsIndex) problems.push_back("the example's attrs are not the op's kind");
    else checkExample(def, exampleOperands, exampleAttrs, problems);
  }
  if (problems.empty()) return {};
  std::string msg = def.name + ": fails the rule-table check: ";
  for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
  return Error{msg};
}

}  // namespace tsr::ops
