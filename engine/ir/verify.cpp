#include "engine/ir/graph.h"

namespace tsr::ir {

Status verify(const Graph& g, const OpRegistry& reg) { return {}; }

}  // namespace tsr::ir
