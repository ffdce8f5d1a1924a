// Convolution benchmark at ResNet-18's CIFAR layer shapes (NHWC activations, HWIO kernels, batch 64): for each
// layer the three convolutions a training step runs — forward, the input's gradient (data) and the kernel's
// (filter) — taken from the layer's traced vjp, so they are exactly the ops the engine's step holds, and timed in
// the CPU kernel (conv_general_dilated's, through oneDNN) on the engine's thread count. Each is reported in
// GFLOP/s (2 x the forward's multiply-adds, the usual convention for all three) and as a fraction of the SGEMM
// peak measured in the same run, with the oneDNN implementation that ran it. The peer is PyTorch at the same
// shapes (tests/bench/peers/torch_peer.py conv); run.py puts them side by side.
//   Beside them, `epilogue`: each layer's forward as relu(conv(x, w) + b) compiled by the CPU backend, with its
// bias and relu as oneDNN post-ops of the convolution (the fusion plan's conv group) against the convolution
// followed by the epilogue as a native loop kernel (convEpilogues off): both times and their ratio. A layer
// whose convolution runs Winograd (TESSERA_CONV_ALGORITHM) keeps its epilogue apart in both: Winograd takes no
// bias post-op. GFLOP/s count the direct convolution's multiply-adds whatever algorithm ran, as PyTorch's and
// cuDNN's benchmarks do, so Winograd's can pass the SGEMM peak.
//   bench_conv [--batch N] [--steps S] [--quick] [--json]
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/backends/backends.h"
#include "engine/backends/cpu/executable.h"
#include "engine/backends/cpu/native_compiler.h"
#include "engine/backends/cpu/machine_peaks.h"
#include "engine/backends/cpu/thread_pool.h"
#include "engine/ops/conv_geometry.h"
#include "engine/ops/conv_onednn.h"
#include "engine/ops/registry.h"
#include "engine/passes/fusion.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"

using namespace tsr;

namespace {

struct Layer {
  std::string name;
  int64_t size, cin, cout, k, stride;
};

// ResNet-18 with the CIFAR stem at width 64: the stem, then per stage its first block's strided 3x3 and 1x1
// shortcut convolutions and the 3x3 convolution every other block repeats.
std::vector<Layer> resnetLayers() {
  return {{"stem 3x3 3->64", 32, 3, 64, 3, 1},         {"stage1 3x3 64->64", 32, 64, 64, 3, 1},
          {"stage2 3x3/2 64->128", 32, 64, 128, 3, 2}, {"stage2 1x1/2 64->128", 32, 64, 128, 1, 2},
          {"stage2 3x3 128->128", 16, 128, 128, 3, 1}, {"stage3 3x3/2 128->256", 16, 128, 256, 3, 2},
          {"stage3 1x1/2 128->256", 16, 128, 256, 1, 2}, {"stage3 3x3 256->256", 8, 256, 256, 3, 1},
          {"stage4 3x3/2 256->512", 8, 256, 512, 3, 2}, {"stage4 1x1/2 256->512", 8, 256, 512, 1, 2},
          {"stage4 3x3 512->512", 4, 512, 512, 3, 1}};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// relu(conv(x, w) + b) for one layer, compiled with and without conv epilogues and timed run by run (the
// median of `steps`): {"fused_s", "unfused_s", "speedup", "implementation" (the bare convolution's), "post_ops"
// (whether the plan chained them: not where the convolution runs Winograd)}. Native loop kernels are compiled
// before timing.
Result<nlohmann::json> timeEpilogue(const Layer& layer, int64_t batch, int steps, std::mt19937& gen) {
  const int64_t pad = layer.k / 2;
  auto f = [&](const std::vector<Array>& in) {
    Array y = convGeneralDilated(in[0], in[1], {layer.stride, layer.stride},
                                 std::vector<std::pair<int64_t, int64_t>>{{pad, pad}, {pad, pad}}, {}, {},
                                 {"NHWC", "HWIO", "NHWC"});
    return std::vector<Array>{relu(y + in[2])};
  };
  TSR_ASSIGN(ClosedGraph cg, makeGraph(f, {Aval{Shape{batch, layer.size, layer.size, layer.cin}, DType::F32},
                                           Aval{Shape{layer.k, layer.k, layer.cin, layer.cout}, DType::F32},
                                           Aval{Shape{layer.cout}, DType::F32}}));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<runtime::BufferPtr> inputs;
  for (ir::ValueId v : cg.graph.inputs()) {
    const Aval& a = cg.graph.aval(v);
    TSR_ASSIGN(runtime::BufferPtr b, runtime::Buffer::allocateUninitialized(a.bytes()));
    auto* p = static_cast<float*>(b->data());
    for (int64_t i = 0; i < a.numel(); ++i) p[i] = uniform(gen);
    inputs.push_back(std::move(b));
  }
  nlohmann::json out;
  for (bool fused : {true, false}) {
    passes::FusionOptions fo;
    fo.convEpilogues = fused;
    TSR_ASSIGN(passes::FusionPlan plan, passes::planFusion(cg.graph, ops::registry(), nullptr, fo));
    cpu::CompileOptions co;
    co.native = true;
    TSR_ASSIGN(std::unique_ptr<cpu::Executable> exe, cpu::Executable::compile(cg.graph, ops::registry(), plan, co));
    int postOpKernels = 0;
    for (const auto& k : exe->loweredKernels()) postOpKernels += k.oneDnnPostOps;
    if (fused) {
      // Where the convolution runs Winograd, which takes no bias post-op, the plan runs the epilogue apart.
      const Shape xs{batch, layer.size, layer.size, layer.cin}, ws{layer.k, layer.k, layer.cin, layer.cout};
      const ir::Node& conv = *std::find_if(cg.graph.nodes().begin(), cg.graph.nodes().end(), [](const ir::Node& n) {
        return n.op == ir::OpCode::ConvGeneralDilated;
      });
      const auto& at = std::get<ir::ConvAttrs>(conv.attrs);
      const ops::ConvGeometry g = ops::convGeometry(xs, ws, at);
      const std::string bare =
          ops::oneDnnConvolutionImplementation(xs, ws, cg.graph.aval(conv.results[0]).shape, at, g);
      out["implementation"] = bare;
      out["post_ops"] = postOpKernels == 1;
      if (postOpKernels != 1 && bare.find("wino") == std::string::npos)
        return makeError("{}: oneDNN did not take the bias and relu as post-ops", layer.name);
    }
    TSR_TRY(exe->run(inputs));  // warm: primitives built, buffers touched
    std::vector<double> times;
    for (int s = 0; s < steps; ++s) {
      auto t0 = std::chrono::steady_clock::now();
      TSR_TRY(exe->run(inputs));
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    out[fused ? "fused_s" : "unfused_s"] = median(times);
  }
  out["speedup"] = out["unfused_s"].get<double>() / out["fused_s"].get<double>();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  tsr::registerBackends();
  int64_t batch = 64;
  int steps = 5;
  // The engine's thread count (TESSERA_NUM_THREADS, else the cores this process may use), as the kernel uses it.
  const int threads = cpu::configuredThreads();
  bool json = false, quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--batch" && i + 1 < argc) batch = std::stoll(argv[++i]);
    else if (arg == "--steps" && i + 1 < argc) steps = std::max(1, std::stoi(argv[++i]));
    else if (arg == "--quick") quick = true;
    else if (arg == "--json") json = true;
    else {
      std::cerr << "usage: bench_conv [--batch N] [--steps S] [--quick] [--json]\n";
      return 2;
    }
  }
  if (quick) batch = std::min<int64_t>(batch, 2), steps = 1;
  const cpu::SgemmPeak peak = cpu::measureSgemm(quick ? 256 : 2048, quick ? 1 : 3, threads);
  // The unfused epilogue as a step runs it: native code (the quick check only proves the paths run).
  cpu::setNativeMode(quick ? cpu::NativeMode::Off : cpu::NativeMode::Sync);
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  nlohmann::json layers = nlohmann::json::array();
  double totalSeconds = 0, totalFlops = 0;
  for (const Layer& layer : resnetLayers()) {
    const int64_t pad = layer.k / 2;
    auto step = [&](const std::vector<Array>& in) {
      auto loss = [&](const std::vector<Array>& p) {
        Array y = convGeneralDilated(p[0], p[1], {layer.stride, layer.stride},
                                     std::vector<std::pair<int64_t, int64_t>>{{pad, pad}, {pad, pad}}, {}, {},
                                     {"NHWC", "HWIO", "NHWC"});
        return std::vector<Array>{sum(y * y)};
      };
      VjpOutput v = vjp(loss, in);
      return v.pullback({onesLike(v.outputs[0])});
    };
    auto cg = makeGraph(step, {Aval{Shape{batch, layer.size, layer.size, layer.cin}, DType::F32},
                               Aval{Shape{layer.k, layer.k, layer.cin, layer.cout}, DType::F32}});
    if (!cg.ok()) {
      std::cerr << "bench_conv: " << cg.error().message << "\n";
      return 1;
    }
    const int64_t out = (layer.size + 2 * pad - layer.k) / layer.stride + 1;
    const double flops = 2.0 * static_cast<double>(batch * out * out * layer.cout * layer.cin * layer.k * layer.k);
    nlohmann::json entry{{"layer", layer.name}, {"flops", flops}};
    for (const ir::Node& n : cg->graph.nodes()) {
      if (n.op != ir::OpCode::ConvGeneralDilated) continue;
      const auto& at = std::get<ir::ConvAttrs>(n.attrs);
      const Shape& ls = cg->graph.aval(n.operands[0]).shape;
      const Shape& rs = cg->graph.aval(n.operands[1]).shape;
      const Shape& os = cg->graph.aval(n.results[0]).shape;
      const ops::ConvGeometry g = ops::convGeometry(ls, rs, at);
      std::string kind = ops::oneDnnConvolutionKind(g);
      std::vector<float> l(static_cast<size_t>(ls.numel())), r(static_cast<size_t>(rs.numel())),
          o(static_cast<size_t>(os.numel()));
      for (float& v : l) v = uniform(gen);
      for (float& v : r) v = uniform(gen);
      // The kernel the engine runs; the fallback would be reported as an empty implementation.
      if (!ops::oneDnnConvolution(l.data(), ls, r.data(), rs, o.data(), os, at, g)) {
        std::cerr << fmt::format("bench_conv: {}: oneDNN declined the {} convolution\n", layer.name, kind);
        return 1;
      }
      std::vector<double> times;
      for (int s = 0; s < steps; ++s) {
        auto t0 = std::chrono::steady_clock::now();
        ops::oneDnnConvolution(l.data(), ls, r.data(), rs, o.data(), os, at, g);
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      const double t = median(times);
      // Forward first; the vjp then computes the kernel's gradient and the input's.
      const std::string role = kind == "forward" && entry.contains("forward") ? "data" : kind == "forward" ? "forward"
                               : kind == "data_gradient" ? "data" : "filter";
      entry[role] = {{"median_s", t},
                     {"gflops", flops / t / 1e9},
                     {"peak_fraction", flops / t / 1e9 / peak.gflops},
                     {"kind", kind},
                     {"implementation", ops::oneDnnConvolutionImplementation(ls, rs, os, at, g)}};
      totalSeconds += t;
      totalFlops += flops;
    }
    auto epilogue = timeEpilogue(layer, batch, steps, gen);
    if (!epilogue.ok()) {
      std::cerr << "bench_conv: " << epilogue.error().message << "\n";
      return 1;
    }
    entry["epilogue"] = std::move(*epilogue);
    if (!json)
      std::cout << fmt::format("{:24} forward {:7.1f} GFLOP/s  data {:7.1f}  filter {:7.1f}  +bias+relu fused {:.3f} ms "
                               "unfused {:.3f} ms ({:.2f}x)\n",
                               layer.name, entry["forward"].value("gflops", 0.0), entry["data"].value("gflops", 0.0),
                               entry["filter"].value("gflops", 0.0), 1e3 * entry["epilogue"]["fused_s"].get<double>(),
                               1e3 * entry["epilogue"]["unfused_s"].get<double>(),
                               entry["epilogue"]["speedup"].get<double>());
    layers.push_back(std::move(entry));
  }
  nlohmann::json doc{{"workload", "conv"},
                     {"batch", batch},
                     {"threads", threads},
                     {"sgemm_peak_gflops", peak.gflops},
                     {"total_s", totalSeconds},
                     {"gflops", totalFlops / totalSeconds / 1e9},
                     {"peak_fraction", totalFlops / totalSeconds / 1e9 / peak.gflops},
                     {"layers", layers}};
  if (json) std::cout << doc.dump() << "\n";
  else std::cout << fmt::format("all layers: {:.1f} GFLOP/s = {:.1f}% of the SGEMM peak ({:.1f} GFLOP/s)\n",
                                doc["gflops"].get<double>(), 100 * doc["peak_fraction"].get<double>(), peak.gflops);
  return 0;
}
