#include "engine/ir/graph.h"

namespace tsr::ir {

Result<Graph> parse(std::string_view text, const OpRegistry& reg) { return makeError("parser not written"); }

}  // namespace tsr::ir
