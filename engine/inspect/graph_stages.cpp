#include "engine/inspect/graph_stages.h"

#include <fmt/format.h>

#include "engine/backends/cpu/native_codegen.h"
#include "engine/ops/registry.h"
#include "engine/passes/pipeline.h"

namespace tsr::inspect {

Stage makeStage(std::string name, std::shared_ptr<const ir::Graph> graph) {
  Stage s;
  s.name = std::move(name);
  s.text = ir::print(*graph, ops::registry(), &s.nodeLines);
  s.graph = std::move(graph);
  return s;
}

bool sameGraph(const Stage& a, const Stage& b) {
  return a.graph == b.graph || (a.graph->nodes().size() == b.graph->nodes().size() && a.text == b.text);
}

KernelTable compileKernelTable(const ir::Graph& g, const passes::FusionPlan& plan) {
  KernelTable table;
  table.kernelOfGroup.assign(plan.groups.size(), -1);
  auto exe = cpu::Executable::compile(g, ops::registry(), plan, {});
  if (!exe.ok()) {
    table.error = exe.error().message;
    return table;
  }
  table.kernels = (*exe)->kernels();
  table.memory = (*exe)->memory();
  table.valueSlots = (*exe)->valueSlots();
  for (const auto& lk : (*exe)->loweredKernels()) {
    auto src = cpu::generateNative(lk);
    table.native.push_back(src.ok() ? src->code : std::string());
  }
  for (size_t i = 0; i < table.kernels.size(); ++i) {
    const auto& nodes = table.kernels[i].nodes;
    if (nodes.empty()) continue;
    int gi = plan.groupOfNode[static_cast<size_t>(nodes.front())];
    if (gi >= 0) table.kernelOfGroup[static_cast<size_t>(gi)] = static_cast<int>(i);
  }
  return table;
}

Result<std::vector<Stage>> compileStages(std::shared_ptr<const ir::Graph> traced, const StagesOptions& options) {
  const auto& reg = ops::registry();
  passes::PipelineOptions po;
  po.verify = false;
  po.snapshots = true;
  int total = 1;
  bool cancelled = false;
  po.onStep = [&](int step, const passes::PassStep&) {
    if (options.progress) options.progress(step + 1, total);
    if (options.cancel && options.cancel->load()) cancelled = true;
  };
  passes::PassManager pm = passes::compilerPipeline(po);
  total = static_cast<int>(pm.describe().size());
  passes::PassContext ctx(reg);
  ir::Graph work = *traced;
  TSR_ASSIGN(passes::PipelineReport report, pm.run(work, ctx));
  if (cancelled) return makeError("cancelled");

  std::vector<Stage> stages;
  stages.push_back(makeStage("traced", traced));
  // Decisions of step k refer to the graph step k received: the last stage kept before it; the fusion pass
  // leaves that graph unchanged, so its decisions belong to the fusion stage itself.
  std::vector<int> stageOfStep(report.steps.size(), 0);
  for (size_t k = 0; k < report.steps.size(); ++k) {
    stageOfStep[k] = static_cast<int>(stages.size()) - 1;
    const passes::PassStep& st = report.steps[k];
    bool fusion = st.pass == "fusion" && ctx.fusionPlan();
    if (!fusion && (!st.changed || !st.after.graph)) continue;
    std::string name = st.group.empty()
                           ? fmt::format("{} {}", k + 1, st.pass)
                           : fmt::format("{} {} ({}, round {})", k + 1, st.pass, st.group, st.iteration + 1);
    Stage s;
    s.name = name;
    s.graph = st.after.graph ? st.after.graph : std::make_shared<const ir::Graph>(work);
    if (st.after.graph) {
      s.text = st.after.text;
      s.nodeLines = st.after.nodeLines;
    } else {
      s.text = ir::print(work, reg, &s.nodeLines);
    }
    s.seconds = st.seconds;
    if (fusion) {
      s.fusion = ctx.fusionPlan();
      s.kernels = std::make_shared<const KernelTable>(compileKernelTable(*s.graph, *s.fusion));
      stageOfStep[k] = static_cast<int>(stages.size());
    }
    stages.push_back(std::move(s));
  }
  for (const passes::Decision& d : ctx.log().all()) {
    if (d.step < 0 || static_cast<size_t>(d.step) >= stageOfStep.size() || !d.region.empty()) continue;
    stages[static_cast<size_t>(stageOfStep[static_cast<size_t>(d.step)])].decisions.push_back(d);
  }
  stages.back().reports = ctx.reports();
  return stages;
}

}  // namespace tsr::inspect
