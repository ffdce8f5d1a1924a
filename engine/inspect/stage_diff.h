#pragma once
// Two stages of a graph matched node by node, for the side-by-side view: a node is the same when a node of
// the other stage has its op, module path, result avals and attributes (matched in order among equals),
// changed when only its op and module path match, and otherwise removed (in the first) or added (in the second).
#include <cstdint>
#include <vector>

#include "engine/inspect/graph_stages.h"

namespace tsr::inspect {

enum class DiffStatus : uint8_t { Same, Changed, Only };

struct StageDiff {
  std::vector<DiffStatus> a, b;  // per node of each stage; Only: removed (a) or added (b)
  std::vector<ir::NodeId> matchOfA;  // the b node matched to each a node, kNone when none
  int same = 0, changed = 0, removed = 0, added = 0;
};

StageDiff diffStages(const Stage& a, const Stage& b);

}  // namespace tsr::inspect
