// sharding_constraint: the identity (run alone it copies its operand; under jit it makes the program SPMD,
// here on a one-device mesh so that the cases run in any process).
#include <fmt/format.h>

#include "tests/ops/harness.h"

namespace tsr::test {

void addShardingCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (DType t : allDTypes())
    for (const Shape& s : {Shape{4}, Shape{4, 6}}) {
      OpCase c;
      c.label = fmt::format("sharding_constraint {}", Aval{s, t}.toString());
      c.op = ir::OpCode::ShardingConstraint;
      c.attrs = ir::ShardingConstraintAttrs{{1}, "a", {0}, s.rank() == 1 ? "a" : "None,a"};
      c.inputs = {randomTensor(Aval{s, t}, rng)};
      c.reference = [](const std::vector<HostTensor>& in) { return std::vector<HostTensor>{in[0]}; };
      cases.push_back(std::move(c));
    }
}

}  // namespace tsr::test
