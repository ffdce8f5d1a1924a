#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"

namespace tsr::ops {

void registerContractionOps(ir::OpRegistry& reg) {}

}  // namespace tsr::ops
