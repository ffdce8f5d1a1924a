#pragma once
// Graphs the CUDA tests compile: a sample project's traced and optimised training step, and one-node graphs.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/cpu/executable.h"
#include "engine/runtime/buffer.h"
#include "engine/transform/trace.h"

namespace tsr::test {

// The training step of sample_projects/<name> for batch x seq (seq only for gpt2), after the standard passes.
Result<ClosedGraph> projectStepGraph(const std::string& name, int64_t batch, int64_t seq);
// The CPU backend's lowered program of g (fusion plan and memory plan): what the CUDA backend runs.
Result<std::unique_ptr<cpu::Executable>> lowerForCuda(const ir::Graph& g);
// Inputs for g: floats uniform in [0, scale) (non-negative, so that optimizer second moments stay valid),
// integers in [0, intBound), bools 0/1.
std::vector<runtime::BufferPtr> randomInputs(const ir::Graph& g, std::mt19937& rng, double scale, int64_t intBound);

}  // namespace tsr::test
