#include "engine/backends/cuda/backend.h"

#include "engine/backends/cuda/device.h"
#include "engine/backends/cuda/executable.h"
#include "engine/passes/fusion.h"

namespace tsr::cuda {

namespace {

// A cuda::Executable seen from the host: inputs are copied to the device and outputs back at every run.
// Donation is not used (the device arena is the executable's own).
class HostExecutable final : public runtime::Executable {
 public:
  explicit HostExecutable(std::unique_ptr<cuda::Executable> exe) : m_exe(std::move(exe)) {}
  Result<std::vector<runtime::BufferPtr>> run(std::span<const runtime::BufferPtr> inputs,
                                              const std::vector<bool>&) override {
    return m_exe->runHost(inputs);
  }
  std::string summary() const override { return ", on cuda"; }

 private:
  std::unique_ptr<cuda::Executable> m_exe;
};

class CudaBackend final : public runtime::Backend {
 public:
  std::string name() const override { return "cuda"; }
  std::string unavailableReason() const override { return cuda::unavailableReason(); }
  Result<std::unique_ptr<runtime::Executable>> compile(const ir::Graph& g, const ir::OpRegistry& reg,
                                                       const runtime::CompileOptions& options) override {
    TSR_ASSIGN(passes::FusionPlan plan, passes::planFusion(g, reg, nullptr, fusionOptions()));
    CompileOptions co;
    co.name = options.name;
    TSR_ASSIGN(co.device, gpuForLocalDevice(options.localDevice));
    TSR_ASSIGN(std::unique_ptr<cuda::Executable> exe, cuda::Executable::compile(g, reg, plan, co));
    return std::unique_ptr<runtime::Executable>(std::make_unique<HostExecutable>(std::move(exe)));
  }
};

}  // namespace

void registerCudaBackend(runtime::BackendRegistry& registry) { registry.add(std::make_unique<CudaBackend>()); }

}  // namespace tsr::cuda
