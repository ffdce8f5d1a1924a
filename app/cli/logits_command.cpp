#include "app/cli/logits_command.h"

#include <algorithm>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "app/cli/project_args.h"
#include "engine/project/project.h"
#include "engine/random/random.h"
#include "engine/train/project_model.h"

namespace tsr::cli {

namespace {

struct LogitsArgs {
  std::string project;
  std::vector<std::string> sets;
  CheckpointArgs checkpoint;
  std::vector<int32_t> tokens;
  bool json = false;
};

int runLogits(const LogitsArgs& a) {
  auto fail = [](const std::string& message) {
    std::cerr << "tessera logits: " << message << "\n";
    return 1;
  };
  auto p = loadProject(a.project, a.sets);
  if (!p.ok()) return fail(p.error().message);
  if (!p->model.languageModel())
    return fail(fmt::format("{}: logits needs a language model, and {} is not one", p->file, p->model.family));
  int64_t vocab = train::configuredVocab(*p);
  for (int32_t t : a.tokens)
    if (t < 0 || t >= vocab) return fail(fmt::format("token {} is outside the vocabulary [0, {})", t, vocab));
  auto built = train::buildModel(*p, vocab);
  if (!built.ok()) return fail(built.error().message);
  const train::ProjectModel& model = *built;
  if (!model.forward) return fail(p->file + ": the model gives only a loss, no logits (define logits(params, inputs))");
  auto like = capture([&] { return model.init(random::key(p->train.seed)); });
  if (!like.ok()) return fail(like.error().message);
  const std::string again = fmt::format("{} --tokens {}", commandLine("logits", a.project, a.sets), fmt::join(a.tokens, ","));
  auto checkpoint = resolveCheckpoint(*p, a.checkpoint, {again, a.project, "read logits from"});
  if (!checkpoint.ok()) return fail(checkpoint.error().message);
  auto params = train::loadCheckpointParams(*checkpoint, *like);
  if (!params.ok()) return fail(params.error().message);
  auto stats = train::loadCheckpointState(*checkpoint, model.initState ? model.initState() : Tree());
  if (!stats.ok()) return fail(stats.error().message);
  auto n = static_cast<int64_t>(a.tokens.size());
  // tokens: [1, T] -> logits [1, T, V]
  auto logits = capture([&] { return model.forward(*params, *stats, Array::fromVector(a.tokens, Shape{1, n})); });
  if (!logits.ok()) return fail(logits.error().message);
  std::vector<float> values = logits->toFloats();
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t t = 0; t < n; ++t)
      rows.push_back(std::vector<float>(values.begin() + t * vocab, values.begin() + (t + 1) * vocab));
    std::cout << nlohmann::json{{"tokens", a.tokens}, {"vocab", vocab}, {"logits", rows}}.dump() << "\n";
    return 0;
  }
  for (int64_t t = 0; t < n; ++t) {
    const float* row = values.data() + t * vocab;
    int64_t best = std::max_element(row, row + vocab) - row;
    std::cout << fmt::format("position {}: token {}, argmax {} ({:.4f}), logits[0..3] = {:.6f} {:.6f} {:.6f}\n", t,
                             a.tokens[static_cast<size_t>(t)], best, row[best], row[0], row[1], row[2]);
  }
  return 0;
}

}  // namespace

std::function<int()> addLogitsCommand(CLI::App& app) {
  auto args = std::make_shared<LogitsArgs>();
  CLI::App* cmd = app.add_subcommand("logits", "A language model's logits for given token ids, from a checkpoint");
  cmd->add_option("project", args->project, "Project folder or project.toml")->required();
  addCheckpointOptions(cmd, args->checkpoint, "Our checkpoint, or a Hugging Face model.safetensors");
  addSetOption(cmd, args->sets);
  cmd->add_option("--tokens", args->tokens, "Token ids, e.g. 464,2068,7586")->required()->delimiter(',');
  cmd->add_flag("--json", args->json, "Print {tokens, vocab, logits: [T][V]} as JSON");
  return [cmd, args]() { return cmd->parsed() ? runLogits(*args) : -1; };
}

}  // namespace tsr::cli
