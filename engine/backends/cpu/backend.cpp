#include "engine/backends/cpu/backend.h"

#include "engine/backends/cpu/executable.h"
#include "engine/backends/cpu/thread_pool.h"
#include "engine/core/env_options.h"
#include "engine/passes/fusion.h"
#include "engine/runtime/eager_threads.h"

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

// Eager ops' chunks on the pool, each run with the caller's MXCSR: the pool's workers flush subnormals, as
// jitted code does, while an eager op computes them as the calling thread does.
void eagerParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn) {
  const unsigned caller = MxcsrScope::current();
  ThreadPool::instance().parallelFor(n, grain, [&](int64_t lo, int64_t hi, int thread) {
    MxcsrScope csr(caller);
    fn(lo, hi, thread);
  });
}

int poolThreads() { return ThreadPool::instance().numThreads(); }

}  // namespace

void registerCpuBackend(runtime::BackendRegistry& registry) {
  registry.add(std::make_unique<CpuBackend>());
  runtime::lendEagerThreads(&eagerParallelFor, &poolThreads);
}

}  // namespace tsr::cpu
