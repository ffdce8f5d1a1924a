#pragma once
// vmap checked op by op (tests/transform/test_vmap_ops.cpp runs every core op; plugin ops run through the same
// check): for a case, three examples are built from its inputs (example k: each operand's flat data rotated by k
// elements, so values differ but stay in the op's domain; one-element operands are varied in place: integers
// + k, floats scaled by 1 - k/4). vmap(op) on the stacked examples must equal the stack of the op run eagerly on
// each example: exactly for integers and bools, within a tight tolerance for floats. The layouts: batch axis 0
// everywhere; the batch axis last on every operand and on the result (out_axes -1); axis 1 in and out; and, for
// each operand in turn, that operand unbatched (in_axes -1).
#include <string>
#include <vector>

#include "tests/ops/harness.h"

namespace tsr::test {

struct Layout {
  std::string name;
  std::vector<int> inAxes;  // per operand: the stacked axis, or -1
  int outAxis = 0;
};

std::vector<Layout> layoutsFor(const OpCase& c);
// "" when vmap of the op in this layout equals the per-example results, else what differed.
std::string checkLayout(const OpCase& c, const Layout& layout);

}  // namespace tsr::test
