#include "engine/ops/registry.h"

#include <mutex>

#include "engine/core/check.h"

namespace tsr::ops {

void registerCoreOps(ir::OpRegistry& reg) {
  registerElementwiseOps(reg);
  registerLayoutOps(reg);
  registerReductionOps(reg);
  registerCumulativeOps(reg);
  registerSortOps(reg);
  registerContractionOps(reg);
  registerIndexingOps(reg);
  registerScatterOps(reg);
  registerMiscOps(reg);
  registerControlFlowOps(reg);
  registerCustomVjpOps(reg);
  registerRematOps(reg);
  registerCollectiveOps(reg);
  registerShardingOps(reg);
  registerConvolutionOps(reg);
  registerWindowOps(reg);
  registerAttentionOps(reg);
  registerBatchNormOps(reg);
  registerCrossEntropyOps(reg);
  registerLinalgOps(reg);
  registerHostCallbackOps(reg);
}

ir::OpRegistry& registry() {
  static ir::OpRegistry reg;
  static std::once_flag once;
  std::call_once(once, [] { registerCoreOps(reg); });
  return reg;
}

}  // namespace tsr::ops
