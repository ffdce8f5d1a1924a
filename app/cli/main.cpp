// tessera: the command-line face of the engine. Everything the IDE shows is reachable from here.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/bench_command.h"
#include "app/cli/compile_command.h"
#include "app/cli/examples.h"
#include "app/cli/families_command.h"
#ifdef TESSERA_HAVE_CUDA
#include "engine/backends/cuda/executable.h"
#endif
#include "app/cli/logits_command.h"
#include "app/cli/memory_command.h"
#include "app/cli/model_command.h"
#include "app/cli/plugins_command.h"
#include "app/cli/profile_command.h"
#include "app/cli/runs_command.h"
#include "app/cli/shard_command.h"
#include "app/cli/sweep_command.h"
#include "app/cli/train_command.h"
#include "engine/backends/cpu/thread_pool.h"
#include "engine/backends/backends.h"
#include "engine/ir/graph.h"
#include "engine/ops/registry.h"
#include "engine/store/lock_wait.h"
#include "engine/version.h"

namespace {

using namespace tsr;

struct RuleFlags {
  bool infer, vjp, batch, shard, cost, cpu, cuda;
  std::string cudaPath;  // how the CUDA backend runs it: nvrtc, cublaslt, cudnn or host ("" without the backend)
};

RuleFlags rulesOf(const ir::OpDef& d) {
#ifdef TESSERA_HAVE_CUDA
  // Every op runs on the CUDA backend: generated kernels, cuBLASLt, or its CPU kernel on host copies.
  return {bool(d.infer), bool(d.vjp), bool(d.batch), bool(d.shard), bool(d.cost), bool(d.cpu), bool(d.cpu),
          cuda::opPath(d)};
#else
  return {bool(d.infer), bool(d.vjp), bool(d.batch), bool(d.shard), bool(d.cost), bool(d.cpu), !d.cudaSource.empty(), ""};
#endif
}

int cmdOps(bool json) {
  const auto& reg = ops::registry();
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& d : reg.all()) {
      RuleFlags r = rulesOf(d);
      arr.push_back({{"name", d.name},
                     {"code", static_cast<uint32_t>(d.code)},
                     {"family", d.family},
                     {"fusion", ir::fusionKindName(d.fusion)},
                     {"operands", d.numOperands},
                     {"results", d.numResults},
                     {"attrs", ir::attrsTypeNameAt(d.attrsIndex)},
                     {"differentiable", d.differentiable},
                     {"loop", d.loop.expr},
                     {"rules",
                      {{"infer", r.infer}, {"vjp", r.vjp}, {"batch", r.batch}, {"shard", r.shard},
                       {"cost", r.cost}, {"cpu", r.cpu}, {"cuda", r.cuda}, {"cuda_path", r.cudaPath}}}});
    }
    std::cout << arr.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{:<24}{:<13}{:<12}{:>5}{:>5}{:>5}{:>5}{:>5}{:>5}{:>5}  {}\n", "op", "family", "fusion",
                           "infer", "vjp", "batch", "shard", "cost", "cpu", "cuda", "loop lowering");
  auto mark = [](bool b) { return b ? "x" : "-"; };
  for (const auto& d : reg.all()) {
    RuleFlags r = rulesOf(d);
    std::cout << fmt::format("{:<24}{:<13}{:<12}{:>5}{:>5}{:>5}{:>5}{:>5}{:>5}{:>5}  {}\n", d.name, d.family,
                             ir::fusionKindName(d.fusion), mark(r.infer), mark(r.vjp), mark(r.batch), mark(r.shard),
                             mark(r.cost), mark(r.cpu), mark(r.cuda), d.loop.valid() ? d.loop.expr : "-");
  }
  std::cout << reg.all().size() << " ops\n";
  return 0;
}

// Nodes of a graph and of the graphs nested in it (scan bodies, cond branches), and how many are dot_general.
struct NodeCounts {
  int total = 0;
  int nested = 0;
  int dots = 0;
};

void countNodes(const ir::Graph& g, bool nested, NodeCounts& c) {
  for (const ir::Node& n : g.nodes()) {
    ++c.total;
    c.nested += nested;
    c.dots += n.op == ir::OpCode::DotGeneral;
    for (const ir::GraphPtr& body : ir::nestedGraphs(n.attrs))
      if (body) countNodes(*body, true, c);
  }
}

// The IR text, then a comment line with the node counts (the parser skips comments, so the output stays
// parseable, and re-printing a parsed file gives the same line).
void printIr(const ir::Graph& g, const ir::OpRegistry& reg) {
  NodeCounts c;
  countNodes(g, false, c);
  std::cout << ir::print(g, reg);
  std::cout << fmt::format("// {} dot_general, {} nodes", c.dots, c.total);
  if (c.nested) std::cout << fmt::format(" ({} of them in nested graphs)", c.nested);
  std::cout << "\n";
}

int cmdIr(const std::string& example, int64_t batch, const std::string& file) {
  const auto& reg = ops::registry();
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) {
      std::cerr << "tessera ir: cannot read " << file << "\n";
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    auto g = ir::parse(ss.str(), reg);
    if (!g.ok()) {
      std::cerr << file << ":" << g.error().message << "\n";
      return 1;
    }
    printIr(*g, reg);
    return 0;
  }
  auto cg = cli::traceExample(example, batch);
  if (!cg.ok()) {
    std::cerr << "tessera ir: " << cg.error().message << "\n";
    return 1;
  }
  printIr(cg->graph, reg);
  return 0;
}

// "tessera: unknown command 'x' (...)" when a word where a command must be is none, as `tessera trian` or
// `tessera runs lst`; CLI11 says only that a command is required. Empty when that is not the error.
std::string unknownCommand(const CLI::App& app) {
  const CLI::App* at = &app;
  std::string path = "tessera";
  while (!at->get_subcommands().empty()) {
    at = at->get_subcommands().front();
    path += " " + at->get_name();
  }
  // A word a command does not take falls through to its parents: it is among the remaining words of the chain.
  const std::vector<std::string> extra = app.remaining(true);
  auto word = std::find_if(extra.begin(), extra.end(), [](const std::string& e) { return e.rfind("-", 0) != 0; });
  if (at->get_require_subcommand_min() == 0 || !at->get_subcommands().empty() || word == extra.end()) return "";
  std::string names;
  for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  return fmt::format("{}: unknown command '{}' (one of {}; {} --help says what each does)", path, *word, names, path);
}

// CLI11 says "Could not convert: id = abc" of a value that is not of its option's type: said with the command
// and what the option takes ("tessera runs show: id: 'abc' is not a whole number"). Empty for other errors.
std::string conversionError(const CLI::App& app, const CLI::ParseError& e) {
  const std::string what = e.what(), prefix = "Could not convert: ";
  const size_t eq = what.find(" = ");
  if (what.rfind(prefix, 0) != 0 || eq == std::string::npos) return "";
  const std::string name = what.substr(prefix.size(), eq - prefix.size()), value = what.substr(eq + 3);
  const CLI::App* at = &app;
  std::string path = "tessera";
  while (!at->get_subcommands().empty()) {
    at = at->get_subcommands().front();
    path += " " + at->get_name();
  }
  const CLI::Option* option = at->get_option_no_throw(name);
  const std::string type = option ? option->get_type_name() : "";
  const char* kind = type.rfind("UINT", 0) == 0 ? "a whole number of 0 or more"
                     : type.rfind("INT", 0) == 0 ? "a whole number"
                     : type.rfind("FLOAT", 0) == 0 ? "a number"
                                                   : "a value it takes";
  return fmt::format("{}: {}: '{}' is not {} ({} --help says what each option takes)", path, name, value, kind, path);
}

int run(int argc, char** argv) {
  // The backends this build has (cpu, cuda where the toolkit was found): jit and the SPMD runner compile with them.
  tsr::registerBackends();
  tsr::store::setLockWaitNotice([](const std::string& path) {
    std::cerr << "tessera: waiting for " << path << " (locked by another process)...\n";
  });
  CLI::App app{"tessera: compile, train and inspect neural networks"};
  app.set_version_flag("--version", std::string("tessera ") + tsr::kVersion);
  app.require_subcommand(1);

  auto* ops = app.add_subcommand("ops", "List every op with the rules it has (infer, vjp, batch, shard, cost, cpu, cuda)");
  bool json = false;
  ops->add_flag("--json", json, "Print JSON");

  auto* ir = app.add_subcommand("ir", "Print the IR of an example's forward pass, or parse and check an IR file");
  std::string example = "mlp", file;
  int64_t batch = 8;
  ir->add_option("--example", example, "Example: mlp, mlp12 (12 identical layers), mlp12-scan (the same as a scan)")
      ->capture_default_str();
  ir->add_option("--batch", batch, "Batch size")->capture_default_str();
  ir->add_option("--parse", file, "Parse, verify and re-print an IR text file");

  auto compile = tsr::cli::addCompileCommand(app);
  auto train = tsr::cli::addTrainCommand(app);
  auto runs = tsr::cli::addRunsCommand(app);
  auto modelInfo = tsr::cli::addModelInfoCommand(app);
  auto eval = tsr::cli::addEvalCommand(app);
  auto generate = tsr::cli::addGenerateCommand(app);
  auto logits = tsr::cli::addLogitsCommand(app);
  auto bench = tsr::cli::addBenchCommand(app);
  auto profile = tsr::cli::addProfileCommand(app);
  auto shard = tsr::cli::addShardCommand(app);
  auto plugins = tsr::cli::addPluginsCommand(app);
  auto families = tsr::cli::addFamiliesCommand(app);
  auto newProject = tsr::cli::addNewCommand(app);
  auto sweep = tsr::cli::addSweepCommand(app);
  auto memory = tsr::cli::addMemoryCommand(app);
  auto profileDiff = tsr::cli::addProfileDiffCommand(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (std::string unknown = unknownCommand(app); !unknown.empty()) {
      std::cerr << unknown << "\n";
      return e.get_exit_code();
    }
    if (std::string conversion = conversionError(app, e); !conversion.empty()) {
      std::cerr << conversion << "\n";
      return e.get_exit_code();
    }
    return app.exit(e);
  }
  // Plugins load before any command runs: their ops, passes and model families are then the engine's own.
  tsr::cli::loadPluginsFor(app);
  if (ops->parsed()) return cmdOps(json);
  if (ir->parsed()) return cmdIr(example, batch, file);
  for (const auto& command : {compile, train, runs, modelInfo, eval, generate, logits, bench, profile, shard, plugins,
                              families, newProject, sweep, memory, profileDiff})
    if (int rc = command(); rc >= 0) return rc;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tsr::cpu::ensureThreadLibrarySettings(argv);
  // The last line of defence: what no command caught is printed and the exit status says so. Errors a user
  // can cause are values long before this; reaching it is a bug, but never a death by signal.
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::cerr << "tessera: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "tessera: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "tessera: internal error: an unknown exception\n";
  }
  return 1;
}
