#include "engine/backends/cpu/backend.h"

#include "engine/backends/cpu/executable.h"
#include "engine/core/env_options.h"
#include "engine/passes/fusion.h"

namespace tsr::cpu {

namespace {

class CpuBackend final : public runtime::Backend {
 public:
  std::string name() const override { return "cpu"; }
  Result<std::unique_ptr<runtime::Executable>> compile(const ir::Graph& g, const ir::OpRegistry& reg,
                                                       const runtime::CompileOptions& options) override {
    TSR_ASSIGN(passes::FusionPlan plan, passes::planFusion(g, reg));
    CompileOptions co;
    co.name = options.name;
    co.donatable = options.donatable;
    co.native = options.native;
    co.bf16ExcessPrecision = envOptions().bf16ExcessPrecision;
    TSR_ASSIGN(std::unique_ptr<Executable> exe, Executable::compile(g, reg, plan, co));
    return std::unique_ptr<runtime::Executable>(std::move(exe));
  }
};

}  // namespace

void registerCpuBackend(runtime::BackendRegistry& registry) { registry.add(std::make_unique<CpuBackend>()); }

}  // namespace tsr::cpu
