#include "app/cli/compile_command.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <iostream>
#include <sstream>

#include "app/cli/examples.h"
#include "app/cli/memory_command.h"
#include "app/cli/project_args.h"
#include "engine/core/bytes.h"
#include "engine/ops/registry.h"
#include "engine/backends/cpu/executable.h"
#include "engine/backends/cpu/native_compiler.h"
#include "engine/passes/dump.h"
#include "engine/passes/fusion.h"
#include "engine/passes/pipeline.h"
#include "engine/project/project.h"
#include "engine/sharding/propagation.h"
#include "engine/spmd/spmd.h"
#include "engine/train/run.h"

namespace tsr::cli {

namespace {

struct CompileArgs {
  std::string project;  // a project's training step; else the example or the IR file
  std::vector<std::string> sets;  // --set overrides
  std::string example = "mlp";
  int64_t batch = 8;
  std::string irFile;
  std::string dumpDir;
  bool quiet = false;
  std::vector<int64_t> whyNotFused;  // two node ids of the compiled graph (as decisions.txt and kernels.txt name them)
  bool memory = false;               // the project's step memory instead (tessera memory)
  int unfused = 0;                   // list this many of the costliest boundaries between kernels
};

// "node 12 (add @ blocks.0.mlp @ gpt2.cpp:40)"
std::string describeNode(const ir::Graph& g, ir::NodeId n) {
  const ir::Node& nd = g.nodes()[static_cast<size_t>(n)];
  std::string s = fmt::format("node {} ({}", n, ops::registry().get(nd.op).name);
  if (!nd.prov.empty()) s += " @ " + nd.prov.toString();
  return s + ")";
}

// Whether two nodes share a kernel, and if not, the fusion pass's reason and what would make them fusible.
int printWhyNotFused(const ir::Graph& g, const passes::FusionPlan& plan, const passes::PassContext& ctx,
                     const std::vector<int64_t>& nodes) {
  for (int64_t n : nodes)
    if (n < 0 || n >= static_cast<int64_t>(g.nodes().size())) {
      std::cerr << fmt::format("tessera compile: --why-not-fused: no node {} (the compiled graph has nodes 0 to {})\n",
                               n, g.nodes().size() - 1);
      return 1;
    }
  const auto a = static_cast<ir::NodeId>(nodes[0]), b = static_cast<ir::NodeId>(nodes[1]);
  passes::FusionVerdict v = passes::whyNotFused(g, plan, ctx.log().all(), a, b);
  std::cout << describeNode(g, a) << "\n" << describeNode(g, b) << "\n";
  std::cout << (v.fused ? "fused" : "not fused") << " [" << passes::fusionReasonName(v.reason) << "]: " << v.detail
            << "\n";
  if (!v.hint.empty()) std::cout << "to fuse them: " << v.hint << "\n";
  return 0;
}

// The boundaries fusion left, costliest first, each with what "why not fused?" says of it.
void printUnfused(const ir::Graph& g, const passes::FusionPlan& plan, const passes::PassContext& ctx, int count) {
  auto boundaries = passes::costliestUnfusedBoundaries(g, plan, ctx.log().all(), static_cast<size_t>(count));
  std::cout << fmt::format("\nthe {} costliest boundaries between kernels (a value written to memory and read back):\n",
                           boundaries.size());
  for (const passes::UnfusedBoundary& b : boundaries) {
    std::cout << fmt::format("  {:>10}  {} in {}\n  {:>10}    -> {} in {}\n", formatBytes(b.bytes),
                             describeNode(g, b.producer), plan.groups[static_cast<size_t>(b.producerGroup)].name, "",
                             describeNode(g, b.consumer), plan.groups[static_cast<size_t>(b.consumerGroup)].name);
    std::cout << fmt::format("  {:>10}    [{}] {}\n", "", passes::fusionReasonName(b.verdict.reason), b.verdict.detail);
    if (!b.verdict.hint.empty()) std::cout << fmt::format("  {:>10}    to fuse them: {}\n", "", b.verdict.hint);
  }
}

Result<ir::Graph> inputGraph(const CompileArgs& a, const ir::OpRegistry& reg) {
  if (!a.project.empty()) {
    TSR_ASSIGN(project::Project p, loadProject(a.project, a.sets));
    TSR_ASSIGN(ClosedGraph cg, train::traceTrainingStep(p));
    return std::move(cg.graph);
  }
  if (!a.irFile.empty()) {
    std::ifstream in(a.irFile);
    if (!in) return makeError("cannot read {}", a.irFile);
    std::stringstream ss;
    ss << in.rdbuf();
    auto g = ir::parse(ss.str(), reg);
    if (!g.ok()) return Error{a.irFile + ":" + g.error().message};
    return g;
  }
  TSR_ASSIGN(ClosedGraph cg, traceExample(a.example, a.batch));
  return std::move(cg.graph);
}

// A dump folder lists what it wrote in this file, so that the next dump into it removes exactly those files: a
// file a previous dump wrote and this one does not (a pass since removed, a project without a [mesh] now) would
// mislead, and a file of the user's is never touched.
constexpr const char* kDumpManifest = ".tessera-dump";

// Every regular file under `dir`, relative to it.
std::set<std::string> filesUnder(const std::filesystem::path& dir) {
  std::set<std::string> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != decltype(it)(); it.increment(ec))
    if (it->is_regular_file(ec)) files.insert(std::filesystem::relative(it->path(), dir, ec).generic_string());
  return files;
}

// Readies the dump folder: a new or empty folder as it is; one an earlier dump wrote (it has the manifest) without
// that dump's files; any other is refused. Returns the files left in it (the user's), which the manifest leaves out.
Result<std::set<std::string>> prepareDumpFolder(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::exists(root, ec)) return std::set<std::string>{};
  if (!fs::is_directory(root, ec)) return makeError("--dump {}: not a folder", dir);
  std::set<std::string> files = filesUnder(root);
  if (files.empty()) return files;
  if (!files.count(kDumpManifest))
    return makeError("--dump {}: the folder is not empty and no earlier dump wrote it (it holds {}{}); give a new or "
                     "empty folder", dir, *files.begin(),
                     files.size() > 1 ? fmt::format(" and {} more", files.size() - 1) : "");
  std::ifstream manifest(root / kDumpManifest);
  std::string line;
  while (std::getline(manifest, line)) {
    const fs::path rel = fs::path(line).lexically_normal();
    // Only a relative path inside the folder: an edited manifest cannot name files elsewhere.
    if (line.empty() || line[0] == '#' || rel.is_absolute() || rel.empty() || *rel.begin() == "..") continue;
    if (!fs::is_regular_file(root / rel, ec)) continue;
    if (!fs::remove(root / rel, ec) && ec) return makeError("--dump {}: cannot remove {}: {}", dir, line, ec.message());
    files.erase(rel.generic_string());
    // The folders it was in, once empty (spmd/).
    for (fs::path sub = rel.parent_path(); !sub.empty(); sub = sub.parent_path())
      if (fs::is_empty(root / sub, ec)) fs::remove(root / sub, ec);
  }
  fs::remove(root / kDumpManifest, ec);
  files.erase(kDumpManifest);
  return files;
}

// The manifest, written when the command ends (an error included: what it wrote is still the dump's): the files in
// the folder then that were not there before the dump.
struct DumpManifest {
  std::string dir;
  std::set<std::string> before;
  DumpManifest(std::string d, std::set<std::string> b) : dir(std::move(d)), before(std::move(b)) {}
  DumpManifest(const DumpManifest&) = delete;
  DumpManifest& operator=(const DumpManifest&) = delete;
  ~DumpManifest() {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) return;
    std::string text = "# Written by tessera compile --dump: the next dump into this folder removes these files first.\n";
    for (const std::string& f : filesUnder(dir))
      if (!before.count(f) && f != kDumpManifest) text += f + "\n";
    std::ofstream out(std::filesystem::path(dir) / kDumpManifest);
    out << text;
    if (!out.flush())
      std::cerr << "tessera compile: cannot write " << (std::filesystem::path(dir) / kDumpManifest).string() << "\n";
  }
};

// The per-device program of a project with a [mesh] and [sharding], dumped into DIR/spmd: the partitioner's
// output (00_input.tir/.dot, collectives included), the program after every pass of the pipeline, the plan (every
// value's sharding and why) and the collectives with their reasons.
Status dumpSpmd(const std::string& projectPath, const std::vector<std::string>& sets, const std::string& dir,
                const ir::OpRegistry& reg) {
  TSR_ASSIGN(project::Project p, loadProject(projectPath, sets));
  int64_t meshSize = 1;
  for (int64_t d : p.mesh.shape) meshSize *= d;
  if (meshSize <= 1) return {};
  TSR_ASSIGN(auto exe, train::compileShardedStep(p));
  const std::filesystem::path spmdDir = std::filesystem::path(dir) / "spmd";
  passes::PipelineOptions options;
  options.verify = true;
  passes::PassManager pm = passes::compilerPipeline(options);
  passes::PassContext ctx(reg);
  TSR_ASSIGN(passes::DumpResult r, passes::dumpPipeline(exe->partitioned().local, spmdDir.string(), pm, ctx));
  std::ofstream plan(spmdDir / "plan.txt");
  plan << exe->mesh().toString() << "\n" << sharding::describePlan(exe->global(), reg, exe->plan());
  std::ofstream colls(spmdDir / "collectives.txt");
  colls << fmt::format("{} collectives per step on {}\n", exe->partitioned().collectives.size(), exe->mesh().toString());
  for (const auto& c : exe->partitioned().collectives) {
    std::string where;
    if (c.globalNode >= 0) {
      const ir::Node& n = exe->global().nodes()[static_cast<size_t>(c.globalNode)];
      if (!n.prov.empty()) where = " at " + n.prov.toString();
    }
    colls << c.toString() << where << "\n";
  }
  std::cout << fmt::format("per-device program on {}: {} collectives, {} nodes after the partitioner, {} after the "
                           "pipeline; written to {}\n",
                           exe->mesh().toString(), exe->partitioned().collectives.size(),
                           exe->partitioned().local.nodes().size(), r.graph.nodes().size(), spmdDir.string());
  return {};
}

int runCompile(const CompileArgs& a) {
  if (a.memory) {
    if (a.project.empty()) {
      std::cerr << "tessera compile: --memory needs a project (the step of a project's model and optimizer)\n";
      return 1;
    }
    return printStepMemory("compile", a.project, a.sets, {});
  }
  const auto& reg = ops::registry();
  auto g = inputGraph(a, reg);
  if (!g.ok()) {
    std::cerr << "tessera compile: " << g.error().message << "\n";
    return 1;
  }
  passes::PipelineOptions options;
  options.verify = true;
  passes::PassManager pm = passes::compilerPipeline(options);
  passes::PassContext ctx(reg);
  ir::Graph out;
  passes::PipelineReport report;
  std::set<std::string> usersFiles;  // in the dump folder, not the dump's
  std::optional<DumpManifest> manifest;  // written however the command ends, an error included
  if (!a.dumpDir.empty()) {
    auto prepared = prepareDumpFolder(a.dumpDir);
    if (!prepared.ok()) {
      std::cerr << "tessera compile: " << prepared.error().message << "\n";
      return 1;
    }
    usersFiles = std::move(*prepared);
    manifest.emplace(a.dumpDir, usersFiles);
    auto r = passes::dumpPipeline(*g, a.dumpDir, pm, ctx);
    if (!r.ok()) {
      std::cerr << "tessera compile: " << r.error().message << "\n";
      return 1;
    }
    out = std::move(r->graph);
    report = std::move(r->report);
  } else {
    out = *g;
    auto r = pm.run(out, ctx);
    if (!r.ok()) {
      std::cerr << "tessera compile: " << r.error().message << "\n";
      return 1;
    }
    report = std::move(r).value();
  }
  // The backend: kernels, buffer assignment (liveness-based reuse) and launch order.
  const passes::FusionPlan* plan = ctx.fusionPlan().get();
  auto t0 = std::chrono::steady_clock::now();
  auto exe = plan ? cpu::Executable::compile(out, reg, *plan, {}) : Result<std::unique_ptr<cpu::Executable>>(makeError("no fusion plan"));
  double backendSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!exe.ok()) {
    std::cerr << "tessera compile: " << exe.error().message << "\n";
    return 1;
  }
  if (!a.whyNotFused.empty()) return printWhyNotFused(out, *plan, ctx, a.whyNotFused);
  if (a.quiet) std::cout << report.toText();
  else std::cout << ir::print(out, reg) << "\n" << report.toText();
  const auto& mem = (*exe)->memory();
  int fused = 0;
  for (const auto& gr : plan->groups) fused += gr.nodes.size() > 1;
  std::cout << fmt::format("backend: {} kernels ({} fused), arena {:.1f} MiB for {} intermediates ({:.1f} MiB "
                           "without reuse), {:.1f} ms\n",
                           (*exe)->kernels().size(), fused, mem.arenaBytes / 1048576.0, mem.numIntermediates,
                           mem.intermediateBytes / 1048576.0, backendSeconds * 1e3);
  std::cout << fmt::format("scheduling: arena {:.1f} MiB in the traced order; kept the {} order ({:.1f} MiB)\n",
                           mem.tracedOrderArenaBytes / 1048576.0, mem.scheduled ? "memory-aware" : "traced",
                           mem.arenaBytes / 1048576.0);
  if (a.unfused > 0) printUnfused(out, *plan, ctx, a.unfused);
  std::cout << fmt::format("compile total: {:.3f} s (passes {:.3f} s, backend {:.3f} s)\n",
                           report.totalSeconds + backendSeconds, report.totalSeconds, backendSeconds);
  if (!a.dumpDir.empty()) {
    std::ofstream k(std::filesystem::path(a.dumpDir) / "kernels.txt");
    k << (*exe)->describe();
    // The C++ the native tier would compile for these kernels (each once), as one translation unit.
    std::ofstream nat(std::filesystem::path(a.dumpDir) / "native_kernels.cpp");
    nat << "// Native CPU kernels of this program, as Tessera compiles them (" << cpu::nativeCompileCommand()
        << ")\n" << cpu::nativePrelude();
    std::set<std::string> seen;
    for (const auto& lk : (*exe)->loweredKernels()) {
      auto src = cpu::generateNative(lk);
      if (src.ok() && seen.insert(src->symbol).second) nat << "\n// " << lk.info.name << "\n" << src->code;
    }
    std::cout << "wrote every pass's graph (.tir, .dot), timings.json, decisions.txt, kernels.txt and native_kernels.cpp to " << a.dumpDir << "\n";
    for (const passes::PassContext::Report& r : ctx.reports())
      std::cout << "wrote " << r.name << " (the " << r.pass << " pass's report)\n";
    if (!a.project.empty()) {
      Status st = dumpSpmd(a.project, a.sets, a.dumpDir, reg);
      if (!st.ok()) {
        std::cerr << "tessera compile: the per-device program: " << st.error().message << "\n";
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace

std::function<int()> addCompileCommand(CLI::App& app) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App* cmd = app.add_subcommand("compile", "Run the compiler passes on a project's training step, an example or an IR file");
  cmd->add_option("project", args->project, "Project folder or project.toml: compiles its training step");
  cmd->add_option("--example", args->example, "Example: mlp, mlp12, mlp12-scan")->capture_default_str();
  cmd->add_option("--batch", args->batch, "Batch size")->capture_default_str();
  cmd->add_option("--ir", args->irFile, "Compile an IR text file instead of an example");
  cmd->add_flag("--quiet", args->quiet, "Print the pass table and the kernel summary, not the graph");
  cmd->add_option("--dump", args->dumpDir, "Write the graph after every pass (.tir, .dot), timings.json, decisions.txt; a project "
                 "with a [mesh] also its per-device program after the partitioner and every pass (DIR/spmd)");
  cmd->add_option("--why-not-fused", args->whyNotFused,
                  "Two node ids of the compiled graph (as decisions.txt and kernels.txt name them): whether they share a "
                  "kernel, and if not the fusion pass's reason and what would make them fusible")
      ->expected(2);
  cmd->add_option("--unfused", args->unfused,
                  "List the N costliest boundaries between kernels (bytes written and read back), each with the fusion "
                  "pass's reason and what would fuse it")
      ->expected(0, 1)
      ->default_str("10")
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--memory", args->memory,
                "The step's live bytes over its kernels by kind, its peak and the buffers live there, per device "
                "(as tessera memory)");
  addSetOption(cmd, args->sets);
  return [cmd, args]() { return cmd->parsed() ? runCompile(*args) : -1; };
}

}  // namespace tsr::cli
