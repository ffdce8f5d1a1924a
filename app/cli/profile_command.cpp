#include "app/cli/profile_command.h"

#include <iostream>

#include <fmt/format.h>

#include "app/cli/project_args.h"
#include "engine/project/project.h"
#include "engine/train/profile_run.h"

namespace tsr::cli {

namespace {

struct ProfileArgs {
  std::string project;
  std::vector<std::string> sets;  // --set overrides
  train::ProfileOptions options;
  int64_t top = 15;
  bool quiet = false;
};

std::string clip(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 3) + "...";
}

}  // namespace

void printKernelTable(const runtime::Trace& t, int64_t top) {
  std::vector<train::KernelSummary> kernels = train::summarizeKernels(t);
  int64_t totalNs = 0;
  for (const auto& k : kernels) totalNs += k.totalNs;
  std::cout << fmt::format("\n{} kernel launches, {} distinct kernels, {:.1f} ms of kernel time\n", t.events.size(),
                           kernels.size(), static_cast<double>(totalNs) * 1e-6);
  std::cout << fmt::format("{:<56}{:<10}{:>7}{:>11}{:>11}{:>8}{:>10}{:>9}\n", "kernel", "kind", "count", "total ms",
                           "mean us", "share", "GFLOP/s", "GB/s");
  for (size_t i = 0; i < kernels.size() && static_cast<int64_t>(i) < top; ++i) {
    const auto& k = kernels[i];
    double ns = static_cast<double>(k.totalNs);
    // flops per ns is GFLOP/s, bytes per ns is GB/s.
    std::cout << fmt::format("{:<56}{:<10}{:>7}{:>11.3f}{:>11.1f}{:>7.1f}%{:>10.2f}{:>9.2f}\n", clip(k.name, 55),
                             k.kind, k.count, ns * 1e-6, ns * 1e-3 / static_cast<double>(k.count),
                             totalNs > 0 ? 100.0 * ns / static_cast<double>(totalNs) : 0.0, ns > 0 ? k.flops / ns : 0.0,
                             ns > 0 ? k.bytes / ns : 0.0);
  }
  if (static_cast<int64_t>(kernels.size()) > top)
    std::cout << fmt::format("... {} more kernels (--top N shows more)\n", kernels.size() - static_cast<size_t>(top));

  std::cout << "\n";
  for (const auto& m : t.marks) {
    int64_t end = m.startNs + m.durationNs, kernelNs = 0;
    double flops = 0;
    for (const auto& e : t.events)
      if (e.startNs >= m.startNs && e.startNs < end) {
        kernelNs += e.durationNs;
        flops += e.flops;
      }
    double ms = static_cast<double>(m.durationNs) * 1e-6;
    std::cout << fmt::format("{:<10}{:>10.1f} ms   kernels {:>8.1f} ms   {:.2f} GFLOP ({:.1f} GFLOP/s)\n", m.name, ms,
                             static_cast<double>(kernelNs) * 1e-6, flops * 1e-9,
                             m.durationNs > 0 ? flops / static_cast<double>(m.durationNs) : 0.0);
  }
}

namespace {

int runProfile(ProfileArgs& a) {
  auto project = loadProject(a.project, a.sets);
  if (!project.ok()) {
    std::cerr << "tessera profile: " << project.error().message << "\n";
    return 1;
  }
  auto report = train::profileTraining(*project, a.options, [&](const std::string& line) {
    if (!a.quiet) std::cout << line << "\n" << std::flush;
  });
  if (!report.ok()) {
    std::cerr << "tessera profile: " << report.error().message << "\n";
    return 1;
  }
  printKernelTable(report->trace, a.top);
  std::cout << fmt::format("\nrun {}, profile {} in {}\n", report->runId, report->profileId, report->storePath);
  if (!report->tracePath.empty())
    std::cout << fmt::format("trace {} (open it in ui.perfetto.dev or chrome://tracing)\n", report->tracePath);
  return 0;
}

}  // namespace

std::function<int()> addProfileCommand(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  CLI::App* cmd = app.add_subcommand("profile", "Profile a project's training step: kernel timeline, trace JSON, top kernels");
  cmd->add_option("project", a->project, "Project folder or project.toml")->required();
  cmd->add_option("--steps", a->options.steps, "Profiled steps")->capture_default_str();
  cmd->add_option("--warmup", a->options.warmup, "Unprofiled steps first (the first one compiles)")->capture_default_str();
  cmd->add_option("--trace", a->options.tracePath, "Write a Chrome/Perfetto trace (JSON) to FILE");
  cmd->add_option("--db,--store", a->options.storePath, "Run store (default: PROJECT/runs.db)");
  cmd->add_option("--batch", a->options.batch, "Override [train] batch_size");
  cmd->add_option("--seq", a->options.seq, "Override [train] seq_len");
  cmd->add_option("--name", a->options.runName, "Run name (default: profile PROJECT-NAME)");
  cmd->add_option("--top", a->top, "Kernels in the table")->capture_default_str();
  cmd->add_flag("--quiet", a->quiet, "Print only the summary");
  addSetOption(cmd, a->sets);
  return [cmd, a]() { return cmd->parsed() ? runProfile(*a) : -1; };
}

}  // namespace tsr::cli
