#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"

namespace tsr::ops {

void registerIndexingOps(ir::OpRegistry& reg) {}

}  // namespace tsr::ops
