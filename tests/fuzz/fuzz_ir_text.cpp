// IR text: any text parses to a graph or to an error with its line and column; a graph that parses verifies
// or is refused, and prints.
#include "engine/ir/graph.h"
#include "engine/ops/registry.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& reg = tsr::ops::registry();
  auto g = tsr::ir::parse(tsr::fuzz::text(data, size), reg);
  if (g.ok() && tsr::ir::verify(*g, reg).ok()) (void)tsr::ir::print(*g, reg);
  return 0;
}
