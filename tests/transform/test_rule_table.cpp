// The rule table: every core op that is differentiable has a vjp rule, and every core op has a batching rule.
// One failure lists every op that lacks a rule, so a missing rule cannot hide behind another.
#include "tests/check.h"

#include "engine/ops/registry.h"

using namespace tsr;

namespace {

bool isCore(const ir::OpDef& def) { return static_cast<uint32_t>(def.code) < ir::kNumCoreOps; }

std::string opList(const std::vector<std::string>& names) { return test::join(names, ", "); }

}  // namespace

TEST_CASE("everyCoreOpIsRegistered") {
  std::vector<std::string> missing;
  for (uint32_t c = 0; c < ir::kNumCoreOps; ++c)
    if (!ops::registry().find(static_cast<ir::OpCode>(c))) missing.push_back(ir::coreOpName(static_cast<ir::OpCode>(c)));
  REQUIRE_MESSAGE(missing.empty(), "core ops not registered: " << opList(missing));
}

TEST_CASE("differentiableOpsHaveVjpRules") {
  std::vector<std::string> missing;
  int differentiable = 0;
  for (const auto& def : ops::registry().all()) {
    if (!isCore(def) || !def.differentiable) continue;
    ++differentiable;
    if (!def.vjp) missing.push_back(def.name);
  }
  MESSAGE(differentiable << " differentiable core ops");
  REQUIRE_MESSAGE(missing.empty(), missing.size() << " differentiable ops without a vjp rule: " << opList(missing));
}

TEST_CASE("everyOpHasABatchingRule") {
  std::vector<std::string> missing;
  for (const auto& def : ops::registry().all())
    if (isCore(def) && !def.batch) missing.push_back(def.name);
  REQUIRE_MESSAGE(missing.empty(), missing.size() << " ops without a batching rule: " << opList(missing));
}

// Ops marked non-differentiable get zero cotangents without their vjp rule running; a rule on one of them
// is dead code and hints at a wrong flag. Reported, not failed: a zero rule there is harmless.
TEST_CASE("nonDifferentiableOpsWithVjpRules") {
  std::vector<std::string> both;
  for (const auto& def : ops::registry().all())
    if (isCore(def) && !def.differentiable && def.vjp) both.push_back(def.name);
  if (!both.empty()) MESSAGE("ops marked non-differentiable whose vjp rule never runs: " << opList(both));
}
