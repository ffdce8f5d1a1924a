#include "engine/ir/graph.h"

namespace tsr::ir {

std::string print(const Graph& g, const OpRegistry& reg) { return ""; }

}  // namespace tsr::ir
