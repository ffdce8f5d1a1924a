#include "engine/passes/pass_registry.h"

#include <mutex>

namespace tsr::passes {

namespace {

std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}

std::vector<PassRegistration>& registry() {
  static std::vector<PassRegistration> passes;
  return passes;
}

// After fusion the graph is what the fusion plan describes: a pass there may read it, never change it.
class ReadOnlyPass : public Pass {
 public:
  explicit ReadOnlyPass(std::unique_ptr<Pass> inner) : m_inner(std::move(inner)) {}
  std::string_view name() const override { return m_inner->name(); }
  Result<bool> run(ir::Graph& g, PassContext& ctx) override {
    TSR_ASSIGN(bool changed, m_inner->run(g, ctx));
    if (changed)
      return makeError("pass '{}' (registered at 'end') changed the graph after fusion; register it at "
                       "'after_cleanup' to rewrite the graph",
                       m_inner->name());
    return false;
  }

 private:
  std::unique_ptr<Pass> m_inner;
};

}  // namespace

const char* pipelinePointName(PipelinePoint p) {
  switch (p) {
    case PipelinePoint::Start: return "start";
    case PipelinePoint::AfterCleanup: return "after_cleanup";
    case PipelinePoint::End: return "end";
  }
  return "?";
}

Result<PipelinePoint> parsePipelinePoint(std::string_view name) {
  for (PipelinePoint p : {PipelinePoint::Start, PipelinePoint::AfterCleanup, PipelinePoint::End})
    if (name == pipelinePointName(p)) return p;
  return makeError("unknown pipeline point '{}' (one of start, after_cleanup, end)", name);
}

Status registerPass(PassRegistration pass) {
  if (pass.name.empty()) return makeError("pass registration: empty name");
  if (!pass.make) return makeError("pass '{}': no factory", pass.name);
  std::lock_guard lock(registryMutex());
  for (const auto& p : registry())
    if (p.name == pass.name) return makeError("pass '{}' is already registered", pass.name);
  registry().push_back(std::move(pass));
  return {};
}

std::vector<PassRegistration> registeredPasses() {
  std::lock_guard lock(registryMutex());
  return registry();
}

void addRegisteredPasses(PassManager& pm, PipelinePoint point) {
  for (const PassRegistration& p : registeredPasses()) {
    if (p.point != point) continue;
    std::unique_ptr<Pass> pass = p.make();
    if (!pass) continue;
    if (point == PipelinePoint::End) pass = std::make_unique<ReadOnlyPass>(std::move(pass));
    pm.add(std::move(pass));
  }
}

}  // namespace tsr::passes
