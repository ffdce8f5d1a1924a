#include "app/cli/profile_command.h"

#include <csignal>
#include <cstdlib>
#include <filesystem>

#include <iostream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/project_args.h"
#include "engine/core/interrupt.h"
#include "engine/project/project.h"
#include "engine/train/profile_diff.h"
#include "engine/train/profile_run.h"

namespace tsr::cli {

namespace {

struct ProfileArgs {
  std::string project;
  std::vector<std::string> sets;  // --set overrides
  train::ProfileOptions options;
  int64_t top = 15;
  bool quiet = false;
  bool json = false;
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

// The devices' ranks and clocks, and the collectives with the longest waits (a profile of several devices).
void printCollectives(const runtime::Trace& t, int64_t top) {
  std::vector<store::CollectiveInstance> calls = store::collectiveInstances(train::collectiveLaunches(t));
  if (t.devices.size() > 1) {
    std::cout << "\ndevices (clocks on rank 0's):\n";
    for (const auto& d : t.devices)
      std::cout << fmt::format("  {:<8} rank {:<3} offset {:>+10.3f} us  within {:.3f} us\n", d.device, d.rank,
                               d.offsetNs * 1e-3, d.errorNs * 1e-3);
  }
  if (calls.empty()) return;
  int64_t totalWait = 0;
  std::map<std::string, int> stragglers;
  for (const auto& c : calls) {
    totalWait += c.totalWaitNs;
    ++stragglers[c.members[static_cast<size_t>(c.straggler)].device];
  }
  std::cout << fmt::format("\n{} collective calls, {:.3f} ms waited in all; last to arrive:", calls.size(),
                           totalWait * 1e-6);
  for (const auto& [device, n] : stragglers) std::cout << fmt::format(" {} {}x", device, n);
  std::cout << fmt::format("\nworst by wait (wait = the straggler's arrival - each member's):\n");
  std::cout << fmt::format("  {:>5}  {:<10}{:<40}{:<11}{:>11}  {}\n", "call", "group", "kernel", "straggler",
                           "max wait", "waits per member (us)");
  for (const auto& c : store::worstByWait(calls, static_cast<size_t>(std::max<int64_t>(top, 0)))) {
    std::string waits;
    for (const auto& m : c.members) waits += fmt::format("{}{} {:.1f}", waits.empty() ? "" : ", ", m.device, m.waitNs * 1e-3);
    std::cout << fmt::format("  {:>5}  {:<10}{:<40}{:<11}{:>8.1f} us  {}{}\n", c.seq, c.group, clip(c.name, 39),
                             c.members[static_cast<size_t>(c.straggler)].device, c.maxWaitNs * 1e-3, waits,
                             c.complete ? "" : "  (members missing)");
  }
}

// The profile's summary as one JSON object: kernels, steps, devices and every collective call.
nlohmann::json profileJson(const train::ProfileReport& r) {
  using nlohmann::json;
  json kernels = json::array();
  for (const auto& k : train::summarizeKernels(r.trace))
    kernels.push_back({{"name", k.name}, {"kind", k.kind}, {"count", k.count}, {"total_ns", k.totalNs},
                       {"flops", k.flops}, {"bytes", k.bytes}});
  json steps = json::array();
  for (const auto& m : r.trace.marks) steps.push_back({{"name", m.name}, {"start_ns", m.startNs}, {"duration_ns", m.durationNs}});
  json devices = json::array();
  for (const auto& d : r.trace.devices)
    devices.push_back({{"device", d.device}, {"rank", d.rank}, {"offset_ns", d.offsetNs}, {"error_ns", d.errorNs}});
  json calls = json::array();
  for (const auto& c : store::collectiveInstances(train::collectiveLaunches(r.trace))) {
    json members = json::array();
    for (const auto& m : c.members)
      members.push_back({{"device", m.device}, {"arrival_ns", m.arrivalNs}, {"end_ns", m.endNs}, {"wait_ns", m.waitNs}});
    calls.push_back({{"seq", c.seq}, {"group", c.group}, {"name", c.name}, {"members", members},
                     {"straggler", c.members[static_cast<size_t>(c.straggler)].device}, {"max_wait_ns", c.maxWaitNs},
                     {"total_wait_ns", c.totalWaitNs}, {"complete", c.complete}});
  }
  return {{"run", r.runId}, {"profile", r.profileId}, {"store", r.storePath}, {"events", r.trace.events.size()},
          {"kernels", kernels}, {"steps", steps}, {"devices", devices}, {"collectives", calls}};
}

void onInterrupt(int) {
  if (interruptRequested()) std::_Exit(130);
  requestInterrupt();
}

int runProfile(ProfileArgs& a) {
  auto project = loadProject(a.project, a.sets);
  if (!project.ok()) {
    std::cerr << "tessera profile: " << project.error().message << "\n";
    return 1;
  }
  // A closed stdout (`tessera profile ... | head`) must not kill the process by SIGPIPE between creating its run
  // and closing it: the profile (a few steps) completes and is stored; what cannot be printed is dropped.
  std::signal(SIGPIPE, SIG_IGN);
  // Ctrl-C (or SIGTERM) stops the engine between kernels and the run is marked stopped; a second one kills at once.
  std::signal(SIGINT, onInterrupt);
  std::signal(SIGTERM, onInterrupt);
  // With --json, stdout holds the JSON object alone (progress goes to stderr).
  auto report = train::profileTraining(*project, a.options, [&](const std::string& line) {
    if (!a.quiet) (a.json ? std::cerr : std::cout) << line << "\n" << std::flush;
  });
  if (!report.ok()) {
    std::cerr << "tessera profile: " << report.error().message << "\n";
    return interruptRequested() ? 130 : 1;
  }
  if (!report->primary) return 0;  // rank 0 reports for every rank
  if (a.json) {
    std::cout << profileJson(*report).dump(1) << "\n";
    return 0;
  }
  printKernelTable(report->trace, a.top);
  printCollectives(report->trace, a.top);
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
  cmd->add_option("--steps", a->options.steps, "Profiled steps")->capture_default_str()->check(positiveNumber());
  cmd->add_option("--warmup", a->options.warmup, "Unprofiled steps first (the first one compiles)")
      ->capture_default_str()
      ->check(nonNegativeNumber());
  cmd->add_option("--trace", a->options.tracePath, "Write a Chrome/Perfetto trace (JSON) to FILE");
  cmd->add_option("--db,--store", a->options.storePath, "Run store (default: PROJECT/runs.db)");
  addLockWaitOption(cmd);
  cmd->add_option("--batch", a->options.batch, "Override [train] batch_size")->check(positiveNumber());
  cmd->add_option("--seq", a->options.seq, "Override [train] seq_len")->check(positiveNumber());
  cmd->add_option("--name", a->options.runName, "Run name (default: profile PROJECT-NAME)");
  cmd->add_option("--top", a->top, "Kernels in the table")->capture_default_str()->check(nonNegativeNumber());
  cmd->add_flag("--quiet", a->quiet, "Print only the summary");
  cmd->add_flag("--json", a->json, "The summary as JSON: kernels, steps, devices with their clocks, every collective call");
  addSetOption(cmd, a->sets);
  return [cmd, a]() { return cmd->parsed() ? runProfile(*a) : -1; };
}

namespace {

struct ProfileDiffArgs {
  int64_t runA = 0, runB = 0;
  std::string projectA, projectB, dbA, dbB;
  bool json = false;
  int top = 15;
};

std::string storeOf(const std::string& db, const std::string& project) {
  if (!db.empty()) return db;
  return project.empty() ? std::string("runs.db") : (std::filesystem::path(project) / "runs.db").string();
}

std::string msText(double ns) { return fmt::format("{:.3f}", ns / 1e6); }

std::string changeText(double a, double b) {
  if (a <= 0) return b > 0 ? "new" : "";
  return fmt::format("{:+.1f}%", 100.0 * (b - a) / a);
}

int runProfileDiff(const ProfileDiffArgs& a) {
  auto fail = [](const std::string& m) {
    std::cerr << "tessera profile-diff: " << m << "\n";
    return 1;
  };
  const std::string pathA = storeOf(a.dbA, a.projectA);
  const std::string pathB = a.dbB.empty() && a.projectB.empty() ? pathA : storeOf(a.dbB, a.projectB);
  std::error_code ec;
  for (const std::string& p : {pathA, pathB})
    if (!std::filesystem::exists(p, ec)) return fail("no run store at " + p);
  auto dbA = store::RunStore::openReadOnly(pathA);
  if (!dbA.ok()) return fail(dbA.error().message);
  auto dbB = store::RunStore::openReadOnly(pathB);
  if (!dbB.ok()) return fail(dbB.error().message);
  auto d = train::diffProfiles(*dbA, a.runA, *dbB, a.runB);
  if (!d.ok()) return fail(d.error().message);
  if (a.json) {
    std::cout << train::profileDiffJson(*d) << "\n";
    return 0;
  }
  std::cout << fmt::format("A: run {} (profile {}, {} steps)   B: run {} (profile {}, {} steps){}\n", d->a.run,
                           d->a.profile, d->a.steps, d->b.run, d->b.profile, d->b.steps,
                           d->sameGraph ? "; the same nodes and ops" : "; different graphs: nodes matched by module, op and order");
  std::cout << fmt::format("kernel time per step: {} ms -> {} ms ({})\n\n", msText(d->a.stepNs), msText(d->b.stepNs),
                           changeText(d->a.stepNs, d->b.stepNs));
  const auto top = static_cast<size_t>(std::max(a.top, 0));
  std::cout << fmt::format("kernels by change, matched through their graph nodes ({} of {}):\n",
                           std::min(top, d->kernels.size()), d->kernels.size());
  std::cout << fmt::format("  {:>10} {:>10} {:>8}  {}\n", "A ms", "B ms", "change", "kernel (A -> B)");
  for (size_t i = 0; i < std::min(top, d->kernels.size()); ++i) {
    const auto& k = d->kernels[i];
    std::string names = k.nameB.empty() ? k.nameA + "  (A only)"
                        : k.nameA.empty() ? k.nameB + "  (B only)"
                        : k.nameA == k.nameB ? k.nameA
                                             : k.nameA + "  ->  " + k.nameB;
    std::cout << fmt::format("  {:>10} {:>10} {:>8}  {}\n", msText(k.nsA), msText(k.nsB), changeText(k.nsA, k.nsB), names);
  }
  std::cout << fmt::format("\ngraph nodes by change ({} of {}; a kernel's time split evenly among its nodes):\n",
                           std::min(top, d->nodes.size()), d->nodes.size());
  std::cout << fmt::format("  {:>10} {:>10} {:>8}  {}\n", "A ms", "B ms", "change", "node (module, op, which)");
  for (size_t i = 0; i < std::min(top, d->nodes.size()); ++i) {
    const auto& n = d->nodes[i];
    std::string ids = n.nodeA >= 0 && n.nodeB >= 0 ? fmt::format("nodes {} / {}", n.nodeA, n.nodeB)
                      : n.nodeA >= 0              ? fmt::format("node {} (A only)", n.nodeA)
                                                  : fmt::format("node {} (B only)", n.nodeB);
    std::cout << fmt::format("  {:>10} {:>10} {:>8}  {} {} #{}  {}\n", msText(n.nsA), msText(n.nsB),
                             changeText(n.nsA, n.nsB), n.module.empty() ? "(top)" : n.module, n.op, n.occurrence, ids);
  }
  return 0;
}

}  // namespace

std::function<int()> addProfileDiffCommand(CLI::App& app) {
  auto a = std::make_shared<ProfileDiffArgs>();
  CLI::App* cmd = app.add_subcommand(
      "profile-diff", "Two runs' latest profiles, time per kernel and per graph node, A against B, by change");
  cmd->add_option("run_a", a->runA, "Run A (its latest profile)")->required();
  cmd->add_option("run_b", a->runB, "Run B (its latest profile)")->required();
  cmd->add_option("--project", a->projectA, "Use the project's run store (PROJECT/runs.db)");
  cmd->add_option("--db", a->dbA, "Run store of A (default ./runs.db; B's too unless --db-b or --project-b)");
  cmd->add_option("--project-b", a->projectB, "B from another project's run store");
  cmd->add_option("--db-b", a->dbB, "B from another run store");
  addLockWaitOption(cmd);
  cmd->add_flag("--json", a->json, "Everything as JSON: both sides, every kernel pair and every node");
  cmd->add_option("--top", a->top, "Rows of each table")->capture_default_str()->check(CLI::Range(0, 1000000));
  return [cmd, a]() { return cmd->parsed() ? runProfileDiff(*a) : -1; };
}

}  // namespace tsr::cli
