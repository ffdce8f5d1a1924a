#pragma once
// Passes added from outside the core pipeline (by plugins): each names the point of the pipeline where it runs.
//   start          before the cleanup group (standard and compiler pipelines)
//   after_cleanup  after the cleanup group, before fusion (standard and compiler pipelines, so jit runs it too)
//   end            after fusion (compiler pipeline only); the fusion plan refers to the graph, so a pass here
//                  must not change it (one that does fails the pipeline with a message naming it)
// At one point, passes run in registration order.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/passes/pass.h"

namespace tsr::passes {

enum class PipelinePoint : uint8_t { Start, AfterCleanup, End };
const char* pipelinePointName(PipelinePoint p);
// "start", "after_cleanup" or "end"; anything else is an error that lists the three.
Result<PipelinePoint> parsePipelinePoint(std::string_view name);

struct PassRegistration {
  std::string name;  // the pass's name(), as the pipeline report shows it
  PipelinePoint point = PipelinePoint::AfterCleanup;
  std::function<std::unique_ptr<Pass>()> make;
  std::string origin;  // who added it (a plugin's path), for listings
};

// Fails on an empty name, a missing factory, or a name that is already registered.
Status registerPass(PassRegistration pass);
// Every registered pass, in registration order.
std::vector<PassRegistration> registeredPasses();
// Appends the passes registered at `point` to pm.
void addRegisteredPasses(PassManager& pm, PipelinePoint point);

}  // namespace tsr::passes
