#include "engine/project/new_project.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "engine/project/project.h"
#include "engine/project/python_family.h"

namespace tsr::project {

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool parseInteger(const std::string& t, int64_t& out) {
  if (t.empty()) return false;
  size_t used = 0;
  try {
    out = std::stoll(t, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == t.size();
}

}  // namespace

Result<KeyValue> parseKeyValue(const FamilyKey& key, const std::string& text) {
  std::string t = trim(text);
  switch (key.type) {
    case KeyType::Integer: {
      int64_t v = 0;
      if (!parseInteger(t, v)) return makeError("[model] {}: '{}' is not an integer", key.name, t);
      return KeyValue(v);
    }
    case KeyType::Number: {
      size_t used = 0;
      double v = 0;
      try {
        v = std::stod(t, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (t.empty() || used != t.size()) return makeError("[model] {}: '{}' is not a number", key.name, t);
      return KeyValue(v);
    }
    case KeyType::Text:
      if (t.size() >= 2 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
      if (t.find_first_of("\"\\\n") != std::string::npos)
        return makeError("[model] {}: '{}' may not hold quotes, backslashes or line breaks", key.name, t);
      return KeyValue(t);
    case KeyType::Sizes: {
      if (!t.empty() && t.front() == '[') t = t.substr(1);
      if (!t.empty() && t.back() == ']') t.pop_back();
      std::vector<int64_t> sizes;
      size_t pos = 0;
      while (pos <= t.size()) {
        size_t comma = t.find(',', pos);
        std::string part = trim(t.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
        int64_t v = 0;
        if (!parseInteger(part, v)) return makeError("[model] {}: '{}' is not a list of integers", key.name, text);
        sizes.push_back(v);
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
      return KeyValue(sizes);
    }
  }
  return makeError("[model] {}: unknown type", key.name);
}

Result<std::string> newProjectToml(const NewProject& spec) {
  const ModelFamily* family = findModelFamily(spec.family);
  if (!family) {
    std::string names;
    for (const std::string& n : modelFamilyNames()) names += (names.empty() ? "" : ", ") + n;
    return makeError("no model family '{}' (one of {})", spec.family, names);
  }
  NewProject withFile = spec;
  if (!pythonStarterModel(family->name).empty() && !spec.values.count("python")) withFile.values["python"] = "model.py";
  for (const auto& [k, v] : withFile.values) {
    bool declared = false;
    for (const FamilyKey& key : family->keys) declared |= key.name == k;
    if (!declared) return makeError("[model] {}: the {} family has no such key", k, family->name);
  }
  std::string name = spec.name.empty() ? "untitled" : spec.name;
  if (name.find_first_of("\"\\\n") != std::string::npos)
    return makeError("the project name may not hold quotes, backslashes or line breaks");
  std::string out = fmt::format("# {}: {}\n\n[project]\nname = \"{}\"\n\n[model]\nfamily = \"{}\"\n", name,
                                family->description, name, family->name);
  // Every key's value, parsed once: written below, and read for the first run's sequence length.
  ModelConfig config = defaultConfig(*family);
  for (const FamilyKey& key : family->keys) {
    if (auto it = withFile.values.find(key.name); it != withFile.values.end()) {
      TSR_ASSIGN(KeyValue value, parseKeyValue(key, it->second));
      config.set(key.name, std::move(value));
    }
    out += fmt::format("{} = {}  # {}\n", key.name, keyValueToml(config.at(key.name)), key.help);
  }
  const std::string& kind = family->dataKinds.front();
  out += fmt::format("\n[data]\nkind = \"{}\"\n", kind);
  if (kind == "text") {
    if (spec.corpus.empty()) return makeError("the {} family trains on text: choose a corpus (a UTF-8 text file)", family->name);
    if (spec.corpus.find_first_of("\"\\\n") != std::string::npos)
      return makeError("the corpus path may not hold quotes, backslashes or line breaks");
    out += fmt::format("path = \"{}\"\ntokenizer = \"bpe\"   # trained on the corpus at the first run and cached in .tessera/\n"
                       "vocab_size = 512\nval_fraction = 0.1\n", spec.corpus);
  }
  // Small enough for a first run on a laptop's CPU; the Settings tab edits them.
  const bool lm = family->languageModel;
  out += "\n[train]\nsteps = 200\nbatch_size = " + std::string(lm ? "8" : "32") + "\n";
  if (lm) {
    // A first run's sequences: 64 tokens, or the model's context when it is shorter.
    int64_t context = 64;
    if (!family->contextKey.empty()) context = std::min(context, std::max<int64_t>(config.integer(family->contextKey), 1));
    out += fmt::format("seq_len = {}\n", context);
  }
  out += "optimizer = \"adamw\"\nlr = 0.001\nwarmup_steps = 20\neval_every = 50\nlog_every = 1\nseed = 0\n";
  // What the user will open must parse: every value in range, every cross-key rule kept.
  auto parsed = parseProject(out, "project.toml", spec.dir.empty() ? "." : spec.dir);
  if (!parsed.ok()) return parsed.takeError();
  return out;
}

std::vector<std::pair<std::string, std::string>> newProjectFiles(const NewProject& spec) {
  const std::string model = pythonStarterModel(spec.family);
  if (model.empty()) return {};
  auto it = spec.values.find("python");
  std::string file = it == spec.values.end() ? "model.py" : it->second;
  if (file.size() >= 2 && file.front() == '"' && file.back() == '"') file = file.substr(1, file.size() - 2);
  // A model file of the user's elsewhere is theirs: only one inside the new folder is written.
  const std::filesystem::path path(file);
  if (file.empty() || path.is_absolute() || std::find(path.begin(), path.end(), "..") != path.end()) return {};
  return {{path.generic_string(), model}};
}

}  // namespace tsr::project
