#pragma once
// Graphs the CUDA tests compile: a sample project's traced and optimised training step, and one-node graphs.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/cpu/executable.h"
#include "engine/backends/cuda/device.h"
#include "engine/runtime/buffer.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"

// Ends a test case as skipped, with the reason, where this machine cannot run CUDA kernels.
#define SKIP_WITHOUT_GPU()                                     \
  do {                                                         \
    std::string why = tsr::cuda::unavailableReason();          \
    if (!why.empty()) TSR_SKIP("CUDA backend tests: " << why); \
  } while (0)

namespace tsr::test {

// The training step of sample_projects/<name> for batch x seq (seq only for gpt2), after the standard passes;
// `compute` overrides the project's [precision] compute ("bf16": traced under autocast).
Result<ClosedGraph> projectStepGraph(const std::string& name, int64_t batch, int64_t seq,
                                     const std::string& compute = "");
// The CPU backend's lowered program of g (fusion plan and memory plan): what the CUDA backend runs.
Result<std::unique_ptr<cpu::Executable>> lowerForCuda(const ir::Graph& g);
// The state a training step hands to the next one: (output, input) pairs whose paths agree (the input's path may
// carry the argument's index: "0.params.wte" takes "params.wte") and whose avals agree.
std::vector<std::pair<size_t, size_t>> stepCarries(const ClosedGraph& step);
// Inputs for g: floats uniform in [0, scale) (non-negative, so that optimizer second moments stay valid),
// integers in [0, intBound), bools 0/1.
std::vector<runtime::BufferPtr> randomInputs(const ir::Graph& g, std::mt19937& rng, double scale, int64_t intBound);

// exp(x) and reduce_prod(exp(x), dim 1) of an f32[4, 8] input, outputs (prod, exp): a program with a kernel on
// host copies (reduce_prod has no device kernel), which therefore never runs as a CUDA graph.
ir::Graph hostKernelGraph();

// A convolution and both its cotangents, as training differentiates it: the graph of (x, w, dy) -> (y, dx, dw)
// after the standard passes. `ops` names the cuDNN operation each of its three convolutions maps to (in the
// order y, dx, dw: a stride-1 convolution's dx is a forward convolution of the flipped kernel).
struct ConvCase {
  const char* name;
  Shape lhs, rhs;
  ConvDimensionNumbers dims;
  std::vector<int64_t> strides;
  std::vector<std::pair<int64_t, int64_t>> padding;
  std::vector<int64_t> rhsDilation;
  int64_t groups = 1;
  DType dtype = DType::F32;
  std::vector<std::string> ops;  // forward, backward_data, backward_filter
  bool asymmetric = false;       // padding cuDNN sees as asymmetric: its engines may decline it
};
const std::vector<ConvCase>& convCases();
Result<ClosedGraph> convGradGraph(const ConvCase& c);

}  // namespace tsr::test
