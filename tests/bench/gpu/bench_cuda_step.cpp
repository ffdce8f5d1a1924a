// A project's training step on the CUDA backend, timed: the step is traced as `tessera train` traces it, run
// on one GPU with the parameters and optimizer state kept on the device (each step's outputs are the next
// step's inputs), and the next batch copied on the copy stream while the current step runs. Prints one JSON
// line like the peers (tests/bench/gpu/*_peer.py).
//
//   bench_cuda_step --project sample_projects/gpt2_124m --batch 16 --seq 1024 --steps 10 --precision bf16
//   bench_cuda_step ... --compute bf16    # the project's [precision] compute: autocast, bf16 activations
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <tuple>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/backends/backends.h"
#include "engine/backends/cuda/executable.h"
#include "engine/core/env_options.h"
#include "engine/inspect/project_snapshot.h"
#include "engine/nn/attention.h"
#include "engine/ops/registry.h"
#include "engine/passes/fusion.h"
#include "engine/passes/pipeline.h"
#include "engine/project/project.h"
#include "engine/runtime/profiler.h"
#include "engine/random/random.h"
#include "engine/train/bench.h"
#include "engine/train/setup.h"
#include "engine/train/trainer.h"
#include "engine/version.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tsr;

namespace {

int fail(const std::string& why) {
  nlohmann::json j = {{"peer", "tessera"}, {"error", why}};
  std::cout << j.dump() << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  tsr::registerBackends();
  CLI::App app{"Time a project's training step on the CUDA backend"};
  std::string projectPath, precision = "f32", compute, peer = "tessera";
  int64_t batch = 0, seq = 0, steps = 10, warmup = 2;
  app.add_option("--project", projectPath, "Project folder")->required();
  app.add_option("--batch", batch, "Batch size (default: the project's)");
  app.add_option("--seq", seq, "Sequence length (gpt2; default: the project's)");
  app.add_option("--steps", steps, "Timed steps")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed steps first")->capture_default_str();
  app.add_option("--precision", precision, "Matmul precision: f32, tf32 or bf16")->capture_default_str();
  app.add_option("--compute", compute, "[precision] compute: f32, or bf16 (autocast; default: the project's)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--peer", peer, "The name of this run in the JSON line (an A/B variant)")->capture_default_str();
  bool describe = false;
  app.add_flag("--describe", describe, "Print every kernel's path (nvrtc, cublaslt, cudnn, host) to stderr");
  bool kernels = false;
  app.add_flag("--kernels", kernels,
               "Print the profiled step's kernels to stderr, those of the same kind and label together (fusion numbers "
               "left out), the most expensive first");
  CLI11_PARSE(app, argc, argv);

  if (std::string why = cuda::unavailableReason(); !why.empty()) return fail(why);
  auto prec = cuda::parseMatmulPrecision(precision);
  if (!prec.ok()) return fail(prec.error().message);
  cuda::setMatmulPrecision(*prec);
  auto loaded = project::loadProject(projectPath);
  if (!loaded.ok()) return fail(loaded.error().message);
  if (!compute.empty()) loaded->precision = compute;
  train::SetupOverrides o;
  o.batchSize = batch;
  o.seqLen = seq;
  o.data = false;
  o.mesh = false;
  auto setup = train::makeTrainingSetup(*loaded, o);
  if (!setup.ok()) return fail(setup.error().message);
  const project::Project& p = setup->project;
  const train::ProjectModel& model = setup->model;
  // The model's autocast dtype, as the setup built it; products under it are bf16 whatever the matmul precision.
  const bool autocast = model.computeDType.has_value();
  const std::string productPrecision = autocast ? "bf16" : precision;
  train::Trainer& trainer = *setup->trainer;
  trainer.setFusedAttention(nn::fusedAttentionFor("cuda", productPrecision));
  train::TrainState& state = setup->state;
  const bool lm = p.model.languageModel();
  std::vector<train::Batch> batches;
  for (int i = 0; i < 2; ++i) batches.push_back(train::syntheticBatch(model.batch, static_cast<uint64_t>(i)));

  auto t0 = std::chrono::steady_clock::now();
  auto cg = trainer.lowerStep(state, batches[0]);
  if (!cg.ok()) return fail(cg.error().message);
  passes::PassManager pm = passes::standardPipeline();
  passes::PassContext ctx(ops::registry());
  if (auto r = pm.run(cg->graph, ctx); !r.ok()) return fail(r.error().message);
  // The CUDA backend's fusion options (convolutions alone in their kernels, for cuDNN), as `tessera train
  // --device cuda` plans: the CPU's conv groups would run on the host.
  auto plan = passes::planFusion(cg->graph, ops::registry(), nullptr, cuda::fusionOptions());
  if (!plan.ok()) return fail(plan.error().message);
  cuda::CompileOptions co;
  co.name = "train_step";
  auto exe = cuda::Executable::compile(cg->graph, ops::registry(), *plan, co);
  if (!exe.ok()) return fail(exe.error().message);
  const double compileSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cuda::Device& dev = (*exe)->device();
  const ir::Graph& g = cg->graph;

  // Inputs: the step's arguments as the trainer passes them (params, opt, batch_stats where the model keeps
  // running statistics, inputs, targets, step) and captured constants. Outputs fed back: params.*, opt.* and
  // batch_stats.* by path.
  Tree args = trainer.stepArgs(state, batches[0]);
  std::vector<Array> leaves = args.leaves();
  leaves.insert(leaves.end(), cg->consts.begin(), cg->consts.end());
  const std::vector<std::string> inPaths = args.paths(), outPaths = inspect::treePaths(cg->outputTree);
  std::vector<cuda::DeviceBufferPtr> inputs;
  for (size_t i = 0; i < leaves.size(); ++i) {
    auto d = cuda::toDevice(dev, *leaves[i].buffer(), g.aval(g.inputs()[i]).bytes());
    if (!d.ok()) return fail(d.error().message);
    inputs.push_back(*d);
  }
  std::vector<std::pair<size_t, size_t>> carry;  // (output, input)
  size_t lossOut = SIZE_MAX, inputsIn = SIZE_MAX, targetsIn = SIZE_MAX;
  for (size_t o = 0; o < outPaths.size(); ++o) {
    if (outPaths[o] == "loss") lossOut = o;
    for (size_t i = 0; i < inPaths.size(); ++i)
      if (inPaths[i] == outPaths[o] && g.aval(g.inputs()[i]) == g.aval(g.outputs()[o])) carry.push_back({o, i});
  }
  for (size_t i = 0; i < inPaths.size(); ++i) {
    if (inPaths[i] == "inputs") inputsIn = i;
    if (inPaths[i] == "targets") targetsIn = i;
  }
  // Double-buffered batches on the device, filled from pinned memory on the copy stream.
  struct DeviceBatch {
    cuda::DeviceBufferPtr inputs, targets;
    std::shared_ptr<void> lastRead;
  };
  std::vector<std::unique_ptr<cuda::PinnedBuffer>> pinned;
  std::vector<DeviceBatch> devBatches(2);
  for (int s = 0; s < 2; ++s) {
    for (int which = 0; which < 2; ++which) {
      const Array& a = which == 0 ? batches[static_cast<size_t>(s)].inputs : batches[static_cast<size_t>(s)].targets;
      auto pb = cuda::PinnedBuffer::allocate(a.aval().bytes());
      if (!pb.ok()) return fail(pb.error().message);
      std::memcpy((*pb)->data(), a.buffer()->data(), static_cast<size_t>(a.aval().bytes()));
      auto db = dev.allocate(a.aval().bytes());
      if (!db.ok()) return fail(db.error().message);
      (which == 0 ? devBatches[static_cast<size_t>(s)].inputs : devBatches[static_cast<size_t>(s)].targets) = *db;
      pinned.push_back(std::move(*pb));
    }
  }
  auto queueBatch = [&](size_t s) -> Status {
    DeviceBatch& b = devBatches[s];
    TSR_TRY(dev.uploadAsync(b.inputs->data(), pinned[2 * s]->data(), pinned[2 * s]->size(), b.lastRead));
    return dev.uploadAsync(b.targets->data(), pinned[2 * s + 1]->data(), pinned[2 * s + 1]->size(), b.lastRead);
  };
  if (auto st = queueBatch(0); !st.ok()) return fail(st.error().message);
  std::vector<double> times;
  double firstLoss = 0, lastLoss = 0;
  auto readLoss = [&](const std::vector<cuda::DeviceBufferPtr>& outs) -> double {
    if (lossOut == SIZE_MAX) return 0;
    float v = 0;
    if (!dev.download(&v, outs[lossOut]->data(), 4).ok()) return 0;
    return v;
  };
  for (int64_t i = 0; i < warmup + steps; ++i) {
    const size_t s = static_cast<size_t>(i % 2);
    if (inputsIn != SIZE_MAX) inputs[inputsIn] = devBatches[s].inputs;
    if (targetsIn != SIZE_MAX) inputs[targetsIn] = devBatches[s].targets;
    auto start = std::chrono::steady_clock::now();
    auto outs = (*exe)->run(inputs);
    if (!outs.ok()) return fail(outs.error().message);
    auto fence = dev.computeFence();
    if (!fence.ok()) return fail(fence.error().message);
    devBatches[s].lastRead = *fence;
    if (auto st = queueBatch(1 - s); !st.ok()) return fail(st.error().message);
    for (auto [o, in] : carry) inputs[in] = (*outs)[o];
    if (auto st = dev.synchronize(); !st.ok()) return fail(st.error().message);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i == 0) firstLoss = readLoss(*outs);
    if (i >= warmup) times.push_back(secs);
    if (i == warmup + steps - 1) lastLoss = readLoss(*outs);
  }
  // One more step under the profiler: GPU time per kernel kind and the most expensive kernels (where to look next).
  nlohmann::json profile = nlohmann::json::object();
  {
    runtime::Profiler prof;
    {
      runtime::ProfilerScope scope(prof);
      auto outs = (*exe)->run(inputs);
      if (!outs.ok()) return fail(outs.error().message);
    }
    std::map<std::string, double> byKind;
    std::map<std::string, std::string> kindOf;
    for (const auto& f : prof.fusions()) kindOf[f.name] = f.kind;
    std::vector<std::pair<double, std::string>> top;
    double total = 0;
    for (const auto& e : prof.events()) {
      const double ms = static_cast<double>(e.durationNs) * 1e-6;
      // A GEMM's generated epilogue is an event of its own ("<fusion> epilogue"): kind "gemm epilogue", so that
      // "gemm" is the product alone (with its operands' staging).
      const bool epilogue = e.name.ends_with(" epilogue");
      byKind[epilogue ? "gemm epilogue" : kindOf[e.name]] += ms;
      top.push_back({ms, e.name});
      total += ms;
    }
    std::sort(top.rbegin(), top.rend());
    if (kernels) {  // e.g. the 12 layers' "gemm[dot_general,add] f32[16,1024,768]" as one line
      std::map<std::string, std::pair<double, int>> same;
      for (const auto& [ms, name] : top) {
        std::string label = name;
        if (label.starts_with("fusion.")) label.erase(0, std::min(label.size(), label.find(' ') + 1));
        const std::string kind = name.ends_with(" epilogue") ? "gemm epilogue" : kindOf.count(name) ? kindOf[name] : "?";
        auto& [sum, n] = same[kind + "  " + label];
        sum += ms;
        ++n;
      }
      std::vector<std::tuple<double, int, std::string>> rows;
      for (const auto& [label, v] : same) rows.push_back({v.first, v.second, label});
      std::sort(rows.rbegin(), rows.rend());
      for (const auto& [ms, n, label] : rows) std::fprintf(stderr, "kernels: %9.3f ms %4d x  %s\n", ms, n, label.c_str());
    }
    profile["gpu_ms_total"] = total;
    for (const auto& [k, ms] : byKind) profile["gpu_ms_by_kind"][k] = ms;
    for (size_t i = 0; i < std::min<size_t>(30, top.size()); ++i)
      profile["top_kernels"].push_back({{"name", top[i].second}, {"ms", top[i].first}});
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const int64_t items = lm ? p.train.batchSize * p.train.seqLen : p.train.batchSize;
  nlohmann::json j = {
      {"peer", peer},
      {"version", tsr::kVersion},
      {"gemm_autotune", envOptions().gemmAutotune},
      {"recompute", envOptions().recompute},
      {"flash_kernels", envOptions().flashKernelsV1 ? "v1" : "v2"},
      {"cuda_graphs", envOptions().cudaGraphs},
      {"loop_groups", envOptions().cudaLoopGroups},
      {"graph_captures", (*exe)->graphCaptures()},
      {"graph_replays", (*exe)->graphReplays()},
      {"grouped_loops", (*exe)->groupedLoops()},
      {"loop_group_launches", (*exe)->loopGroupLaunches()},
      {"workload", p.model.family},
      {"device", dev.name()},
      {"precision", precision},
      {"compute", loaded->precision},
      {"fused_attention", nn::fusedAttentionFor("cuda", productPrecision)},
      {"mode", autocast ? std::string("autocast: products bf16 in and out (f32 accumulation), norms, softmax and loss f32; "
                                      "master weights and optimizer state f32")
                        : "matmul inputs " + precision +
                              ", f32 accumulation; activations, master weights and optimizer state f32"},
      {"batch", p.train.batchSize},
      {"seq", lm ? p.train.seqLen : 0},
      {"params", model.numParams},
      {"steps", times.size()},
      {"step_ms_median", median * 1e3},
      {"step_ms_min", sorted.front() * 1e3},
      {lm ? "tokens_per_s" : "samples_per_s", static_cast<double>(items) / median},
      {"compile_s", compileSeconds},
      {"first_loss", firstLoss},
      {"last_loss", lastLoss},
      {"state_leaves_carried", carry.size()},
      {"profile", profile},
      {"kernels",
       {{"nvrtc", (*exe)->numKernels(cuda::KernelPath::Generated)},
        {"cublaslt", (*exe)->numKernels(cuda::KernelPath::CuBlasLt)},
        {"cudnn", (*exe)->numKernels(cuda::KernelPath::Cudnn)},
        {"flash", (*exe)->numKernels(cuda::KernelPath::Flash)},
        {"host", (*exe)->numKernels(cuda::KernelPath::Host)}}},
  };
  std::cout << j.dump() << std::endl;
  if (describe) std::cerr << (*exe)->describe();
  return 0;
}
