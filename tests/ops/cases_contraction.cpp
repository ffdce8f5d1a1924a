#include "tests/ops/harness.h"

namespace tsr::test {

void addContractionCases(std::vector<OpCase>& cases, std::mt19937& rng) {}

}  // namespace tsr::test
