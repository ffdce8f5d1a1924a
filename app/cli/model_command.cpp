#include "app/cli/model_command.h"

#include <iostream>

#include <fmt/format.h>

#include "engine/core/bytes.h"

#include "app/cli/project_args.h"
#include "engine/project/project.h"
#include "engine/train/run.h"

namespace tsr::cli {

std::string withThousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

namespace {

std::string humanFlops(double f) {
  if (f >= 1e12) return fmt::format("{:.2f} TFLOP", f / 1e12);
  if (f >= 1e9) return fmt::format("{:.2f} GFLOP", f / 1e9);
  if (f >= 1e6) return fmt::format("{:.2f} MFLOP", f / 1e6);
  return fmt::format("{:.0f} FLOP", f);
}

std::optional<project::Project> load(const std::string& command, const std::string& path,
                                     const std::vector<std::string>& sets) {
  auto p = loadProject(path, sets);
  if (!p.ok()) {
    std::cerr << "tessera " << command << ": " << p.error().message << "\n";
    return std::nullopt;
  }
  return std::move(p).value();
}

int runModelInfo(const std::string& path, const std::vector<std::string>& sets) {
  auto p = load("model-info", path, sets);
  if (!p) return 1;
  auto info = train::describeModel(*p);
  if (!info.ok()) {
    std::cerr << "tessera model-info: " << info.error().message << "\n";
    return 1;
  }
  std::cout << fmt::format("{}: {} with {} parameters ({})\n\n", p->name, info->family, withThousands(info->numParams),
                           formatBytes(info->bytes));
  std::cout << fmt::format("{:<44}{:>16}{:>14}\n", "module", "params", "bytes");
  for (const auto& m : info->modules)
    std::cout << fmt::format("{:<44}{:>16}{:>14}\n", m.path, withThousands(m.params), formatBytes(m.bytes));
  std::cout << fmt::format("{:<44}{:>16}{:>14}\n\n", "total", withThousands(info->numParams), formatBytes(info->bytes));
  std::cout << fmt::format("FLOPs per {}: {} forward, {} training step (forward + backward)\n", info->itemName,
                           humanFlops(info->forwardFlopsPerItem), humanFlops(info->trainFlopsPerItem));
  return 0;
}

int runEval(const std::string& path, const std::vector<std::string>& sets, const CheckpointArgs& which) {
  auto p = load("eval", path, sets);
  if (!p) return 1;
  auto found = resolveCheckpoint(*p, which, {commandLine("eval", path, sets), path, "evaluate"});
  if (!found.ok()) {
    std::cerr << "tessera eval: " << found.error().message << "\n";
    return 1;
  }
  const std::string& checkpoint = *found;
  auto evaluated =
      train::evaluateCheckpointMetrics(*p, checkpoint, [](const std::string& line) { std::cerr << line << "\n"; });
  if (!evaluated.ok()) {
    std::cerr << "tessera eval: " << evaluated.error().message << "\n";
    return 1;
  }
  std::string metrics;
  for (const auto& [name, value] : evaluated->extra) metrics += fmt::format(", {} {:.4f}", name, value);
  std::cout << fmt::format("validation loss {:.4f} over {} batches{} ({})\n", evaluated->loss, p->train.evalSteps,
                           metrics, checkpoint);
  return 0;
}

int runGenerate(const std::string& path, const std::vector<std::string>& sets, const CheckpointArgs& which,
                const train::GenerateOptions& o) {
  auto p = load("generate", path, sets);
  if (!p) return 1;
  auto checkpoint = resolveCheckpoint(*p, which, {commandLine("generate", path, sets), path, "sample from"});
  if (!checkpoint.ok()) {
    std::cerr << "tessera generate: " << checkpoint.error().message << "\n";
    return 1;
  }
  auto text = train::generateFromCheckpoint(*p, *checkpoint, o);
  if (!text.ok()) {
    std::cerr << "tessera generate: " << text.error().message << "\n";
    return 1;
  }
  std::cout << o.prompt << *text << "\n";  // the prompt, then its continuation
  return 0;
}

}  // namespace

std::function<int()> addModelInfoCommand(CLI::App& app) {
  struct Args {
    std::string project;
    std::vector<std::string> sets;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("model-info", "Parameter count, per-module sizes and FLOPs of a project's model");
  cmd->add_option("project", a->project, "Project folder or project.toml")->required();
  addSetOption(cmd, a->sets);
  return [cmd, a]() { return cmd->parsed() ? runModelInfo(a->project, a->sets) : -1; };
}

std::function<int()> addEvalCommand(CLI::App& app) {
  struct Args {
    std::string project;
    std::vector<std::string> sets;
    CheckpointArgs checkpoint;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("eval", "Validation loss of a checkpoint over [train] eval_steps batches");
  cmd->add_option("project", a->project, "Project folder or project.toml")->required();
  addCheckpointOptions(cmd, a->checkpoint, "A checkpoint written by 'tessera train'");
  addSetOption(cmd, a->sets);
  return [cmd, a]() { return cmd->parsed() ? runEval(a->project, a->sets, a->checkpoint) : -1; };
}

std::function<int()> addGenerateCommand(CLI::App& app) {
  struct Args {
    std::string project;
    std::vector<std::string> sets;
    CheckpointArgs checkpoint;
    train::GenerateOptions options;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "Sample text from a language-model checkpoint");
  cmd->add_option("project", a->project, "Project folder or project.toml")->required();
  addCheckpointOptions(cmd, a->checkpoint, "A checkpoint written by 'tessera train'");
  addSetOption(cmd, a->sets);
  cmd->add_option("--prompt", a->options.prompt, "Text to continue");
  cmd->add_option("--tokens", a->options.tokens, "New tokens")->capture_default_str()->check(positiveNumber());
  cmd->add_option("--temperature", a->options.temperature, "Softmax temperature (0: the likeliest token)")
      ->capture_default_str()
      ->check(nonNegativeNumber());
  cmd->add_option("--top-k", a->options.topK, "Sample among the k likeliest tokens (0: all)")
      ->capture_default_str()
      ->check(nonNegativeNumber());
  cmd->add_option("--seed", a->options.seed, "Random seed")->capture_default_str();
  return [cmd, a]() { return cmd->parsed() ? runGenerate(a->project, a->sets, a->checkpoint, a->options) : -1; };
}

}  // namespace tsr::cli
