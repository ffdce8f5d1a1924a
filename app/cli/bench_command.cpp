#include "app/cli/bench_command.h"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/model_command.h"
#include "app/cli/profile_command.h"
#include "app/cli/project_args.h"
#include "engine/backends/cpu/machine_peaks.h"
#include "engine/backends/cpu/native_compiler.h"
#include "engine/backends/cpu/thread_pool.h"
#include "engine/core/env_options.h"
#include "engine/ops/matmul_onednn.h"
#include "engine/project/project.h"
#include "engine/train/bench.h"
#include "engine/train/profile_run.h"

namespace tsr::cli {

namespace {

struct BenchArgs {
  std::string project;
  std::vector<std::string> sets;  // --set overrides
  train::BenchOptions options;
  int64_t sgemmSize = 2048;
  int sgemmRepeats = 3;
  int64_t top = 0;
  bool json = false;
};

nlohmann::json toJson(const train::BenchReport& r, const cpu::SgemmPeak& peak, int threads, int64_t warmup) {
  double perSec = static_cast<double>(r.itemsPerStep) / r.medianSeconds;
  double gflops = r.flopsPerStep / r.medianSeconds / 1e9;
  nlohmann::json j = {{"project", r.project},
                      {"family", r.family},
                      {"params", r.params},
                      {"optimizer", r.optimizer},
                      {"batch", r.batch},
                      {"seq", r.seq},
                      {"items_per_step", r.itemsPerStep},
                      {"item", r.itemName},
                      {"threads", threads},
                      {"warmup", warmup},
                      {"steps", r.stepSeconds.size()},
                      {"compile_s", r.compileSeconds},
                      {"first_step_s", r.firstStepSeconds},
                      {"step_times_s", r.stepSeconds},
                      {"median_step_s", r.medianSeconds},
                      {"min_step_s", r.minSeconds},
                      {r.itemName + "_per_s", perSec},
                      {"flops_per_step", r.flopsPerStep},
                      {"flops_rule", r.flopsRule},
                      {"graph_flops_per_step", r.graphFlopsPerStep},
                      {"gflops", gflops},
                      {"first_loss", r.firstLoss},
                      {"last_loss", r.lastLoss}};
  if (peak.n > 0) {
    j["sgemm_n"] = peak.n;
    j["sgemm_peak_gflops"] = peak.gflops;
    j["sgemm_kernels"] = peak.kernels;
    j["peak_fraction"] = gflops / peak.gflops;
  }
  if (!peak.error.empty()) j["sgemm_error"] = peak.error;
  return j;
}

int runBench(BenchArgs& a) {
  auto project = loadProject(a.project, a.sets);
  if (!project.ok()) {
    std::cerr << "tessera bench: " << project.error().message << "\n";
    return 1;
  }
  int threads = cpu::configuredThreads();
  auto progress = [&](const std::string& line) {
    // With --json, stdout holds the JSON object alone.
    (a.json ? std::cerr : std::cout) << line << "\n";
  };
  a.options.profile = a.top > 0;
  // Steady state from the first timed step: native kernels are compiled with the step (TESSERA_CPU_CODEGEN
  // chooses otherwise).
  if (!envOptions().cpuCodegen) cpu::setNativeMode(cpu::NativeMode::Sync);
  auto report = train::benchTrainingStep(*project, a.options, progress);
  if (!report.ok()) {
    std::cerr << "tessera bench: " << report.error().message << "\n";
    return 1;
  }
  cpu::SgemmPeak peak = cpu::measureSgemm(a.sgemmSize, a.sgemmRepeats, threads);
  int64_t warmup = std::max<int64_t>(a.options.warmup, 1);
  nlohmann::json j = toJson(*report, peak, threads, warmup);
  const cpu::NativeStats native = cpu::nativeStats();
  // The step's compile alone; a sync native compile ran inside it and is reported on its own.
  const double graphCompile = std::max(0.0, report->compileSeconds - native.compileSeconds);
  j["compile_s"] = graphCompile;
  j["cpu_codegen"] = cpu::nativeModeName(cpu::nativeMode());
  j["cpu_bf16_products"] = ops::bf16ProductsOnOneDnn() ? "onednn" : "f32";  // TESSERA_CPU_BF16_MATMUL, resolved
  j["native_kernels"] = native.kernels;
  j["native_compile_s"] = native.compileSeconds;
  if (!native.error.empty()) j["native_error"] = native.error;
  if (a.top > 0) {
    std::vector<train::KernelSummary> kernels = train::summarizeKernels(report->profile);
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < kernels.size() && static_cast<int64_t>(i) < a.top; ++i)
      list.push_back({{"name", kernels[i].name}, {"kind", kernels[i].kind}, {"count", kernels[i].count},
                      {"total_s", static_cast<double>(kernels[i].totalNs) * 1e-9}, {"flops", kernels[i].flops},
                      {"bytes", kernels[i].bytes}});
    j["top_kernels"] = list;
  }
  if (a.json) {
    std::cout << j.dump() << "\n";
    return 0;
  }
  const train::BenchReport& r = *report;
  double gflops = j["gflops"];
  std::cout << fmt::format("\n{}: {} with {} parameters, batch {}{}, {}, {} threads\n", r.project, r.family,
                           withThousands(r.params), r.batch, r.seq ? fmt::format(" x {} tokens", r.seq) : "",
                           r.optimizer, threads);
  std::cout << fmt::format("  compile      {:.3f} s (first step {:.3f} s)\n", graphCompile, r.firstStepSeconds);
  std::cout << fmt::format("  native       {} kernels ({}; {} libraries compiled in {:.2f} s, {} from the cache)\n",
                           native.kernels, cpu::nativeModeName(cpu::nativeMode()), native.libraries,
                           native.compileSeconds, native.cachedLibraries);
  std::cout << fmt::format("  step         median {:.1f} ms, min {:.1f} ms ({} steps after {} warm-up)\n",
                           r.medianSeconds * 1e3, r.minSeconds * 1e3, r.stepSeconds.size(), warmup);
  std::cout << fmt::format("  throughput   {:.1f} {}/s\n", static_cast<double>(r.itemsPerStep) / r.medianSeconds,
                           r.itemName);
  std::cout << fmt::format("  model FLOPs  {:.2f} GFLOP per step ({}); the ops' cost rules count {:.2f}\n",
                           r.flopsPerStep / 1e9, r.flopsRule, r.graphFlopsPerStep / 1e9);
  std::cout << fmt::format("  achieved     {:.1f} GFLOP/s", gflops);
  if (peak.n > 0)
    std::cout << fmt::format(" = {:.1f}% of the SGEMM peak ({:.1f} GFLOP/s, OpenBLAS {}^3, best of {})",
                             100.0 * gflops / peak.gflops, peak.gflops, peak.n, a.sgemmRepeats);
  else if (!peak.error.empty())
    std::cout << fmt::format(" (no SGEMM peak: {})", peak.error);
  std::cout << "\n";
  if (a.top > 0) printKernelTable(r.profile, a.top);
  return 0;
}

}  // namespace

std::function<int()> addBenchCommand(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time a project's training step on synthetic batches against the SGEMM peak (TESSERA_NUM_THREADS)");
  cmd->add_option("project", args->project, "Project folder or project.toml")->required();
  cmd->add_option("--batch", args->options.batch, "Batch size (default: [train] batch_size)")->check(positiveNumber());
  cmd->add_option("--seq", args->options.seq, "Sequence length for language models (default: [train] seq_len)")
      ->check(positiveNumber());
  cmd->add_option("--steps", args->options.steps, "Timed steps")->capture_default_str()->check(positiveNumber());
  cmd->add_option("--warmup", args->options.warmup, "Untimed steps first (the first compiles)")
      ->capture_default_str()
      ->check(positiveNumber());
  cmd->add_option("--sgemm", args->sgemmSize, "Size n of the n^3 SGEMM that measures the peak (0: skip)")
      ->capture_default_str()
      ->check(nonNegativeNumber());
  cmd->add_option("--top", args->top, "Profile one more step and list its N longest kernels")
      ->check(nonNegativeNumber());
  cmd->add_flag("--json", args->json, "Print one JSON object (progress goes to stderr)");
  addSetOption(cmd, args->sets);
  return [cmd, args]() { return cmd->parsed() ? runBench(*args) : -1; };
}

}  // namespace tsr::cli
