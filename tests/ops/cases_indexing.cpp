#include "tests/ops/harness.h"

namespace tsr::test {

void addIndexingCases(std::vector<OpCase>& cases, std::mt19937& rng) {}

}  // namespace tsr::test
