#include "app/cli/families_command.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/project_args.h"
#include "engine/data/file_io.h"
#include "engine/project/model_family.h"
#include "engine/project/new_project.h"

namespace tsr::cli {

namespace {

namespace fs = std::filesystem;

nlohmann::json keyJson(const project::FamilyKey& k) {
  nlohmann::json j = {{"name", k.name},
                      {"type", std::string(project::keyTypeName(k.type))},
                      {"default", project::keyValueToml(k.defaultValue)},
                      {"requirement", k.describeRequirement()},
                      {"help", k.help}};
  if (!k.choices.empty()) j["choices"] = k.choices;
  return j;
}

int runFamilies(bool json) {
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& name : project::modelFamilyNames()) {
    const project::ModelFamily* f = project::findModelFamily(name);
    if (json) {
      nlohmann::json keys = nlohmann::json::array();
      for (const auto& k : f->keys) keys.push_back(keyJson(k));
      all.push_back({{"name", f->name}, {"description", f->description}, {"origin", f->origin},
                     {"language_model", f->languageModel}, {"data_kinds", f->dataKinds}, {"keys", keys},
                     {"open_keys", f->openKeys}});
      continue;
    }
    std::string kinds;
    for (const std::string& k : f->dataKinds) kinds += (kinds.empty() ? "" : ", ") + k;
    std::cout << fmt::format("{} ({}): {}\n  [data] kind: {}{}\n", f->name, f->origin, f->description, kinds,
                             f->languageModel ? " (a language model: generate and logits work)" : "");
    for (const auto& k : f->keys)
      std::cout << fmt::format("  {:<12} {:<18} = {:<22} {} (must be {})\n", k.name, project::keyTypeName(k.type),
                               project::keyValueToml(k.defaultValue), k.help, k.describeRequirement());
    if (f->openKeys)
      std::cout << "  any other key (integer, number, string or array of integers) is handed to the model as written\n";
    std::cout << "\n";
  }
  if (json) std::cout << all.dump(2) << "\n";
  return 0;
}

// Whether two files hold the same bytes.
bool sameContents(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;
  const auto sizeA = fs::file_size(a, ec);
  if (ec) return false;
  const auto sizeB = fs::file_size(b, ec);
  if (ec || sizeA != sizeB) return false;
  std::ifstream x(a, std::ios::binary), y(b, std::ios::binary);
  std::array<char, 65536> bx{}, by{};
  while (x && y) {
    x.read(bx.data(), bx.size());
    y.read(by.data(), by.size());
    if (x.gcount() != y.gcount() || !std::equal(bx.begin(), bx.begin() + x.gcount(), by.begin())) return false;
  }
  return !x.bad() && !y.bad();
}

struct NewArgs {
  std::string dir, family = "gpt2", name, corpus;
  std::vector<std::string> sets;
};

int runNew(const NewArgs& a) {
  auto fail = [](const std::string& message) {
    std::cerr << "tessera new: " << message << "\n";
    return 1;
  };
  std::error_code ec;
  // "" would be the current folder, which a user who meant it writes as ".".
  if (a.dir.empty()) return fail("the project's folder is empty: name one (tessera new my_model; . for this folder)");
  const fs::path dir(a.dir);
  if (fs::exists(dir / "project.toml", ec)) return fail((dir / "project.toml").string() + " exists already");
  project::NewProject spec;
  spec.family = a.family;
  spec.name = a.name.empty() ? fs::absolute(dir, ec).lexically_normal().filename().string() : a.name;
  if (spec.name.empty()) spec.name = fs::absolute(dir, ec).lexically_normal().parent_path().filename().string();
  spec.dir = a.dir;
  for (const std::string& s : a.sets) {
    size_t eq = s.find('=');
    if (eq == std::string::npos) return fail(fmt::format("--set {}: expected key=value", s));
    spec.values[s.substr(0, eq)] = s.substr(eq + 1);
  }
  if (!a.corpus.empty()) {
    // The corpus is copied into the project, so that the folder holds all it trains on.
    if (!fs::is_regular_file(a.corpus, ec)) return fail(a.corpus + " is not a file");
    fs::create_directories(dir / "data", ec);
    if (ec) return fail(fmt::format("cannot create {}: {}", (dir / "data").string(), ec.message()));
    spec.corpus = "data/" + fs::path(a.corpus).filename().string();
    const fs::path copy = dir / spec.corpus;
    if (fs::exists(copy, ec)) {
      // A file of that name is there already: the project trains on it only when it is this corpus.
      if (!sameContents(a.corpus, copy))
        return fail(fmt::format("{} exists and is not {}: the project would train on it; remove it, or give the "
                                "corpus another name", copy.string(), a.corpus));
      std::cout << fmt::format("{} is {} already: kept\n", copy.string(), a.corpus);
    } else if (!fs::copy_file(a.corpus, copy, ec)) {
      return fail(fmt::format("cannot copy {}: {}", a.corpus, ec.message()));
    }
  }
  auto text = project::newProjectToml(spec);
  if (!text.ok()) return fail(text.error().message);
  fs::create_directories(dir, ec);
  if (auto st = data::writeFileAtomically((dir / "project.toml").string(), *text); !st.ok()) return fail(st.error().message);
  for (const auto& [file, content] : project::newProjectFiles(spec)) {
    if (fs::exists(dir / file, ec)) continue;  // the user's own model file stays as it is
    fs::create_directories((dir / file).parent_path(), ec);
    if (auto st = data::writeFileAtomically((dir / file).string(), content); !st.ok()) return fail(st.error().message);
    std::cout << fmt::format("wrote a starter {} to edit\n", (dir / file).string());
  }
  std::cout << fmt::format("new {} project in {}: train it with `tessera train {}`\n", spec.family, dir.string(),
                           shellWord(dir.string()));
  return 0;
}

}  // namespace

std::function<int()> addFamiliesCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("families", "List the model families, with their [model] keys and [data] kinds");
  auto project = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("project", *project, "A project whose plugins add families");
  cmd->add_flag("--json", *json, "Print JSON");
  return [cmd, json] { return cmd->parsed() ? runFamilies(*json) : -1; };
}

std::function<int()> addNewCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("new", "Create a project from a model family's declaration");
  auto a = std::make_shared<NewArgs>();
  cmd->add_option("dir", a->dir, "The new project's folder")->required();
  cmd->add_option("--family", a->family, "A model family (tessera families lists them)")->capture_default_str();
  cmd->add_option("--name", a->name, "The project's name (default: the folder's)");
  cmd->add_option("--set", a->sets, "A [model] key's value, as key=value (repeatable)");
  cmd->add_option("--corpus", a->corpus, "Text families: the corpus, copied into the project's data folder");
  return [cmd, a] { return cmd->parsed() ? runNew(*a) : -1; };
}

}  // namespace tsr::cli
