#pragma once
// Graphviz DOT for a graph: one box per node labelled with its op and result avals, graph inputs and outputs
// as ellipses, edges from producer to consumer (labelled with the result index for multi-result ops), and
// nodes grouped into nested clusters by the module path of their provenance ("layers" > "layers.0").
// The IDE lays graphs out itself; this is for `tessera compile --dump` and for `dot -Tsvg`.
#include <string>

#include "engine/ir/graph.h"

namespace tsr::passes {

struct FusionPlan;

struct DotOptions {
  bool clusters = true;      // group by module path
  bool showLiterals = true;  // a scalar constant shows its value
  // When given, nodes are grouped into one cluster per fused kernel (labelled with its name and kind), and
  // views that kernels read through are drawn dashed.
  const FusionPlan* fusion = nullptr;
};

std::string toDot(const ir::Graph& g, const ir::OpRegistry& reg, const DotOptions& options = {});

}  // namespace tsr::passes
