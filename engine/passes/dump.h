#pragma once
// Runs a pipeline and writes what happened into a folder, for `tessera compile --dump DIR`:
//   00_input.tir, 00_input.dot      the graph as given (text form, Graphviz)
//   NN_<pass>.tir, NN_<pass>.dot    the graph after step NN (1-based, in pipeline order)
//   timings.json                    PipelineReport::toJson(): per-step pass, time, changed, node counts
//   pipeline.txt                    the same as a table
//   NN_fusion.kernels.txt           after the fusion pass: one line per kernel (the .dot draws kernels as clusters)
//   decisions.txt                   the decision log, one decision per line (fusion's reasons included)
//   <report>                        each report a pass added (PassContext::addReport), e.g. op_stats.txt
// Step files are written as the steps finish, so a pipeline that fails leaves the steps before the failure.
#include <string>

#include "engine/passes/pass.h"

namespace tsr::passes {

struct DumpResult {
  ir::Graph graph;  // the optimised graph
  PipelineReport report;
};

// Runs pm on a copy of g with snapshots on; pm's options are restored afterwards.
Result<DumpResult> dumpPipeline(const ir::Graph& g, const std::string& dir, PassManager& pm, PassContext& ctx);
// The compiler pipeline (pipeline.h: cleanup, then fusion) with verification on.
Result<DumpResult> dumpPipeline(const ir::Graph& g, const std::string& dir, const ir::OpRegistry& reg);

}  // namespace tsr::passes
