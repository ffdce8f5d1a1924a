#include "engine/project/project.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "engine/core/limits.h"
#include "engine/core/toml_text.h"
#include "engine/project/model_family.h"

namespace tsr::project {

namespace {

namespace fs = std::filesystem;

// Edit distance, for "did you mean" on unknown keys.
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// What every section's reader shares: the file, the first error, which nodes came from --set, and the settings
// read (each as a closure over the field it filled, evaluated once parsing is done).
struct ParseContext {
  const std::string& file;
  std::optional<Error> error;
  std::map<const toml::node*, std::string> overridden;  // node -> "--set train.lr=-1"
  std::vector<std::pair<std::pair<std::string, std::string>, std::function<std::string()>>> settings;
  // A project.toml as its user wrote it (loadProject), not a configuration stored with a run: a stored one
  // writes every default out, which is not the user asking for it.
  bool asWritten = false;
  std::map<std::string, std::string> origins;  // "model.python" -> "p/project.toml:7" (Project::origins)
};

std::string settingText(int64_t v) { return std::to_string(v); }
std::string settingText(uint64_t v) { return std::to_string(v); }
std::string settingText(double v) { return keyValueToml(KeyValue{v}); }
std::string settingText(bool v) { return v ? "true" : "false"; }
std::string settingText(const std::string& v) { return tomlString(v); }
std::string settingText(const std::vector<int64_t>& v) { return keyValueToml(KeyValue{v}); }
std::string settingText(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + settingText(v[i]);
  return out + "]";
}
std::string settingText(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + tomlString(v[i]);
  return out + "]";
}

// Reads the keys of one table into typed fields; the first problem is kept with its line.
class SectionReader {
 public:
  SectionReader(ParseContext& ctx, const toml::table* table, std::string section)
      : m_table(table), m_section(std::move(section)), m_ctx(ctx) {}

  // Reads `key` into `out` (left as it is when absent) and records it as a setting of the resolved config.
  template <class T>
  void get(const char* key, T& out) {
    m_known.insert(key);
    if (m_record) m_ctx.settings.push_back({{m_section, key}, [&out] { return settingText(out); }});
    if (!m_table || m_ctx.error) return;
    const toml::node* node = m_table->get(key);
    if (!node) return;
    m_ctx.origins[m_section + "." + key] = where(*node);
    if (!read(*node, out)) fail(*node, fmt::format("'{}' must be {}", key, typeName(out)));
  }

  template <class T, class Check>
  void get(const char* key, T& out, Check check, const char* requirement) {
    get(key, out);
    if (m_ctx.error || !m_table) return;
    if (const toml::node* node = m_table->get(key); node && !check(out))
      fail(*node, fmt::format("'{}' must be {}", key, requirement));
  }

  // An integer size that must also stay within its limit (limits.h), checked before anything is sized by it.
  template <class Check>
  void get(const char* key, int64_t& out, Check check, const char* requirement, int64_t limit) {
    get(key, out, check, requirement);
    if (m_ctx.error || !m_table) return;
    if (const toml::node* node = m_table->get(key))
      if (auto st = limits::checkRange(key, out, INT64_MIN, limit); !st.ok()) fail(*node, st.error().message);
  }

  // An array of sizes: each within `each`, and their product within `product`.
  void getSizes(const char* key, std::vector<int64_t>& out, int64_t each, int64_t product) {
    if (m_ctx.error || !m_table) return;
    const toml::node* node = m_table->get(key);
    if (!node) return;
    for (int64_t v : out)
      if (auto st = limits::checkRange(key, v, 1, each); !st.ok()) return fail(*node, st.error().message);
    if (auto n = limits::checkedProduct(key, out, product); !n.ok()) fail(*node, n.error().message);
  }

  // A key a model family declares, read and checked as its type and range say (recorded by the caller).
  void getKey(const FamilyKey& k, KeyValue& out) {
    m_record = false;
    getKeyValue(k, out);
    m_record = true;
  }

  // Every key not read yet, kept as written (a family with open keys hands them to its model): integers,
  // numbers, strings and arrays of integers; anything else is an error naming the key.
  void getOpen(const std::function<void(const std::string&, KeyValue)>& keep) {
    if (!m_table || m_ctx.error) return;
    for (const auto& [k, v] : *m_table) {
      std::string key(k.str());
      if (m_known.count(key)) continue;
      m_known.insert(key);
      m_ctx.origins[m_section + "." + key] = where(v);
      std::vector<int64_t> sizes;
      if (v.is_integer()) keep(key, *v.value<int64_t>());
      else if (v.is_floating_point()) keep(key, *v.value<double>());
      else if (v.is_string()) keep(key, *v.value<std::string>());
      else if (v.is_array() && read(v, sizes)) keep(key, std::move(sizes));
      else return fail(v, fmt::format("'{}' must be an integer, a number, a string or an array of integers", key));
    }
  }

  // A rule between two keys of the section (min_lr <= lr), checked once both are read: the error is at the
  // --set that gave one of them, else at the first key's line, or at the second's when only it is written.
  void require(bool ok, const char* key, const char* other, const std::string& what) {
    if (ok || m_ctx.error || !m_table) return;
    const toml::node* first = m_table->get(key);
    const toml::node* second = m_table->get(other);
    const bool secondSet = second && m_ctx.overridden.count(second);
    const toml::node* node = first && (!secondSet || m_ctx.overridden.count(first)) ? first : second;
    if (node) fail(*node, what);
  }

  // Unknown keys are errors: a typo must not silently fall back to a default.
  void finish() {
    if (!m_table || m_ctx.error) return;
    for (const auto& [k, v] : *m_table) {
      std::string key(k.str());
      if (m_known.count(key)) continue;
      std::string best;
      size_t bestD = 3;
      for (const auto& known : m_known)
        if (size_t d = distance(key, known); d < bestD) { bestD = d; best = known; }
      fail(v, fmt::format("unknown key '{}' in [{}]{}", key, m_section, best.empty() ? "" : " (did you mean '" + best + "'?)"));
      return;
    }
  }

 private:
  void getKeyValue(const FamilyKey& k, KeyValue& out) {
    const std::string requirement = k.describeRequirement();
    const char* name = k.name.c_str();
    const bool bounded = k.max < 1e18;
    switch (k.type) {
      case KeyType::Integer: {
        int64_t v = std::get<int64_t>(out);
        auto inRange = [&k](int64_t x) { return static_cast<double>(x) >= k.min; };
        if (bounded) get(name, v, inRange, requirement.c_str(), static_cast<int64_t>(k.max));
        else get(name, v, inRange, requirement.c_str());
        out = v;
        break;
      }
      case KeyType::Number: {
        double v = std::get<double>(out);
        get(name, v, [&k](double x) { return x >= k.min && (k.maxOpen ? x < k.max : x <= k.max); }, requirement.c_str());
        out = v;
        break;
      }
      case KeyType::Text: {
        std::string v = std::get<std::string>(out);
        get(name, v, [&k](const std::string& x) {
          return k.choices.empty() || std::find(k.choices.begin(), k.choices.end(), x) != k.choices.end();
        }, requirement.c_str());
        out = std::move(v);
        break;
      }
      case KeyType::Sizes: {
        std::vector<int64_t> v = std::get<std::vector<int64_t>>(out);
        get(name, v, [&k](const std::vector<int64_t>& s) {
          return static_cast<int64_t>(s.size()) >= k.minCount && std::all_of(s.begin(), s.end(), [](int64_t d) { return d > 0; });
        }, requirement.c_str());
        getSizes(name, v, bounded ? static_cast<int64_t>(k.max) : INT64_MAX, k.product);
        out = std::move(v);
        break;
      }
    }
  }

  static bool read(const toml::node& n, int64_t& out) {
    if (auto v = n.value<int64_t>(); v && n.is_integer()) { out = *v; return true; }
    return false;
  }
  static bool read(const toml::node& n, uint64_t& out) {
    if (auto v = n.value<int64_t>(); v && n.is_integer() && *v >= 0) { out = static_cast<uint64_t>(*v); return true; }
    return false;
  }
  static bool read(const toml::node& n, double& out) {
    if (auto v = n.value<double>()) { out = *v; return true; }
    return false;
  }
  static bool read(const toml::node& n, bool& out) {
    if (auto v = n.value<bool>()) { out = *v; return true; }
    return false;
  }
  static bool read(const toml::node& n, std::string& out) {
    if (auto v = n.value<std::string>()) { out = *v; return true; }
    return false;
  }
  static bool read(const toml::node& n, std::vector<int64_t>& out) {
    const toml::array* a = n.as_array();
    if (!a) return false;
    std::vector<int64_t> v;
    for (const auto& e : *a) {
      if (!e.is_integer()) return false;
      v.push_back(*e.value<int64_t>());
    }
    out = std::move(v);
    return true;
  }
  static bool read(const toml::node& n, std::vector<std::string>& out) {
    const toml::array* a = n.as_array();
    if (!a) return false;
    std::vector<std::string> v;
    for (const auto& e : *a) {
      if (!e.is_string()) return false;
      v.push_back(*e.value<std::string>());
    }
    out = std::move(v);
    return true;
  }
  static bool read(const toml::node& n, std::vector<double>& out) {
    const toml::array* a = n.as_array();
    if (!a) return false;
    std::vector<double> v;
    for (const auto& e : *a) {
      auto x = e.value<double>();
      if (!x) return false;
      v.push_back(*x);
    }
    out = std::move(v);
    return true;
  }
  static const char* typeName(const std::vector<double>&) { return "an array of numbers"; }
  static const char* typeName(int64_t) { return "an integer"; }
  static const char* typeName(uint64_t) { return "a non-negative integer"; }
  static const char* typeName(double) { return "a number"; }
  static const char* typeName(bool) { return "true or false"; }
  static const char* typeName(const std::string&) { return "a string"; }
  static const char* typeName(const std::vector<int64_t>&) { return "an array of integers"; }
  static const char* typeName(const std::vector<std::string>&) { return "an array of strings"; }

  // The file and line of a value, or the --set that gave it.
  std::string where(const toml::node& n) const {
    if (auto it = m_ctx.overridden.find(&n); it != m_ctx.overridden.end())
      return fmt::format("{} (over {})", it->second, m_ctx.file);
    return fmt::format("{}:{}", m_ctx.file, n.source().begin.line);
  }

  // The error names the file and line, or the --set that gave the value.
  void fail(const toml::node& n, const std::string& what) { m_ctx.error = Error{where(n) + ": " + what}; }

  const toml::table* m_table;
  std::string m_section;
  ParseContext& m_ctx;
  std::set<std::string> m_known;
  bool m_record = true;
};

// The keys of the array and image kinds (npy, cifar10, image_folder), read only for those kinds: for any other
// they are unknown keys.
void readArrayDataKeys(SectionReader& data, DataSection& d) {
  const bool npy = d.kind == "npy", cifar = d.kind == "cifar10", folder = d.kind == "image_folder";
  if (npy) {
    data.get("x", d.x);
    data.get("y", d.y);
    data.get("val_x", d.valX);
    data.get("val_y", d.valY);
    data.get("scale", d.scale, [](double s) { return std::isfinite(s) && s >= 0; }, "a non-negative number (0: 1/255 for uint8 inputs, 1 otherwise)");
  }
  if (cifar || folder) {
    // Defaults: the CIFAR-10 training set's channel statistics, and ImageNet's for other images.
    d.mean = cifar ? std::vector<double>{0.4914, 0.4822, 0.4465} : std::vector<double>{0.485, 0.456, 0.406};
    d.stddev = cifar ? std::vector<double>{0.2470, 0.2435, 0.2616} : std::vector<double>{0.229, 0.224, 0.225};
    d.augment = folder;
    auto finite = [](const std::vector<double>& v) {
      return !v.empty() && std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
    };
    auto positive = [](const std::vector<double>& v) {
      return !v.empty() && std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x) && x > 0; });
    };
    data.get("mean", d.mean, finite, "an array of numbers, one per channel");
    data.get("std", d.stddev, positive, "an array of positive numbers, one per channel");
    data.get("augment", d.augment);
  }
  if (folder) {
    data.get("val_path", d.valPath);
    data.get("bad_files", d.badFiles, [](const std::string& b) { return b == "stop" || b == "skip"; }, "stop or skip");
  }
}

// The keys of kind shapes, read only for it.
void readShapesKeys(SectionReader& data, DataSection& d) {
  if (d.kind != "shapes") return;
  data.get("samples", d.samples, [](int64_t n) { return n >= 2; }, "at least 2", int64_t(1) << 24);
  data.get("max_shapes", d.maxShapes, [](int64_t n) { return n >= 1; }, "positive", 64);
  data.get("noise", d.noise, [](double x) { return std::isfinite(x) && x >= 0 && x <= 10; }, "in [0, 10]");
  data.get("seed", d.seed);
}

// The tables of project.toml, in the order the file has them.
const std::vector<std::string> kSections = {"project", "model", "data", "train", "mesh", "sharding", "precision"};

bool isSection(const std::string& name) { return std::find(kSections.begin(), kSections.end(), name) != kSections.end(); }

// Applies the overrides to the parsed file: each replaces or adds one key (and its table when absent).
Status applyOverrides(toml::table& root, const std::vector<Override>& overrides, ParseContext& ctx) {
  for (const Override& o : overrides) {
    if (!isSection(o.section))
      return makeError("--set {}: unknown section [{}] (one of {})", o.spec(), o.section, fmt::join(kSections, ", "));
    if (toml::node* n = root.get(o.section); n && !n->is_table())
      return makeError("--set {}: [{}] in {} is not a table", o.spec(), o.section, ctx.file);
    toml::table* table = root.get(o.section) ? root.get(o.section)->as_table()
                                               : root.insert(o.section, toml::table{}).first->second.as_table();
    // A TOML value when the text is one (checked first: toml++ misreads some invalid text), else a string.
    std::optional<toml::table> parsed;
    const std::string line = "v = " + o.value;
    if (checkTomlText(line, "--set").ok()) {
      try {
        parsed = toml::parse(std::string_view(line), std::string_view("--set"));
      } catch (const toml::parse_error&) {
      }
    }
    if (parsed && parsed->get("v")) table->insert_or_assign(o.key, *parsed->get("v"));
    else table->insert_or_assign(o.key, o.value);
    ctx.overridden[table->get(o.key)] = "--set " + o.spec();
  }
  return {};
}

auto positive = [](const auto& v) { return v > 0; };
auto nonNegative = [](const auto& v) { return v >= 0; };

}  // namespace

bool ModelSection::languageModel() const {
  const ModelFamily* f = definition();
  return f && f->languageModel;
}

int64_t ModelSection::contextLength() const {
  const ModelFamily* f = definition();
  return f && !f->contextKey.empty() && config.has(f->contextKey) ? config.integer(f->contextKey) : 0;
}

std::string Project::resolve(const std::string& relative) const {
  fs::path p(relative);
  return p.is_absolute() ? p.string() : (fs::path(dir) / p).lexically_normal().string();
}

std::string Project::origin(const std::string& section, const std::string& key) const {
  auto it = origins.find(section + "." + key);
  return it != origins.end() ? it->second : file;
}

Status checkModelFiles(const Project& p) {
  const ModelFamily* family = p.model.definition();
  if (!family) return {};
  for (const FamilyKey& k : family->keys) {
    if (!k.projectFile || !p.model.config.has(k.name)) continue;
    const auto* name = std::get_if<std::string>(&p.model.config.at(k.name));
    if (!name || name->empty()) continue;  // the family's check says a name is required
    const std::string path = fs::absolute(p.resolve(*name)).lexically_normal().string();
    std::error_code ec;
    if (!fs::exists(path, ec))
      return makeError("{}: [model] {} = \"{}\": {} does not exist", p.origin("model", k.name), k.name, *name, path);
    if (!fs::is_regular_file(path, ec))
      return makeError("{}: [model] {} = \"{}\": {} is not a file", p.origin("model", k.name), k.name, *name, path);
  }
  return {};
}

namespace {

Result<Project> parseProjectText(const std::string& text, const std::string& file, const std::string& dir,
                                 const std::vector<Override>& overrides, bool asWritten) {
  TSR_TRY(checkTomlText(text, file));
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    return makeError("{}:{}:{}: {}", file, e.source().begin.line, e.source().begin.column, e.description());
  }
  ParseContext ctx{file, std::nullopt, {}, {}, asWritten, {}};
  TSR_TRY(applyOverrides(root, overrides, ctx));
  Project p;
  p.file = file;
  p.dir = dir;
  p.text = text;
  p.overrides = overrides;
  std::optional<Error>& error = ctx.error;
  auto section = [&](const char* name) -> const toml::table* {
    const toml::node* n = root.get(name);
    if (n && !n->is_table() && !error)
      error = Error{fmt::format("{}:{}: [{}] must be a table", file, n->source().begin.line, name)};
    return n ? n->as_table() : nullptr;
  };
  for (const auto& [k, v] : root)
    if (!isSection(std::string(k.str())) && !error)
      error = Error{fmt::format("{}:{}: unknown section [{}]", file, v.source().begin.line, k.str())};

  SectionReader proj(ctx, section("project"), "project");
  proj.get("name", p.name);
  proj.finish();

  const toml::table* modelTable = section("model");
  SectionReader model(ctx, modelTable, "model");
  std::vector<std::string> names = modelFamilyNames();
  std::string families = "one of " + names.front();
  for (size_t i = 1; i < names.size(); ++i) families += ", " + names[i];
  // A Python model file names its family: a language model where the data is text.
  if (modelTable && modelTable->get("python") && !modelTable->get("family")) {
    const toml::node* kind = root.at_path("data.kind").node();
    p.model.family = kind && kind->value<std::string>() == "text" ? "python_lm" : "python";
  }
  model.get("family", p.model.family, [](const std::string& f) { return findModelFamily(f) != nullptr; },
            families.c_str());
  // The family's own keys, as it declares them (model_family.h); any other key is unknown.
  const ModelFamily* family = findModelFamily(p.model.family);
  if (family) {
    p.model.config = defaultConfig(*family);
    for (const FamilyKey& k : family->keys) {
      KeyValue value = k.defaultValue;
      model.getKey(k, value);
      p.model.config.set(k.name, std::move(value));
      ctx.settings.push_back({{"model", k.name}, [&p, name = k.name] { return keyValueToml(p.model.config.at(name)); }});
    }
    if (family->openKeys)
      model.getOpen([&](const std::string& key, KeyValue value) {
        p.model.config.set(key, std::move(value));
        ctx.settings.push_back({{"model", key}, [&p, key] { return keyValueToml(p.model.config.at(key)); }});
      });
  }
  model.finish();
  if (!error && family && family->check)
    if (auto st = family->check(p.model.config); !st.ok()) error = Error{fmt::format("{}: {}", file, st.error().message)};

  SectionReader data(ctx, section("data"), "data");
  std::string kinds;
  if (family)
    for (const std::string& k : family->dataKinds) kinds += (kinds.empty() ? "" : " or ") + k;
  const std::string kindRequirement = fmt::format("{} (what the {} family trains on)", kinds, p.model.family);
  data.get("kind", p.data.kind, [family](const std::string& k) {
    return !family || std::find(family->dataKinds.begin(), family->dataKinds.end(), k) != family->dataKinds.end();
  }, kindRequirement.c_str());
  if (p.data.kind.empty() && family && !family->dataKinds.empty()) p.data.kind = family->dataKinds.front();
  data.get("path", p.data.path);
  data.get("tokenizer", p.data.tokenizer, [](const std::string& t) { return t == "bpe" || t == "gpt2"; }, "bpe or gpt2");
  data.get("encoder_json", p.data.encoderJson);
  data.get("vocab_bpe", p.data.vocabBpe);
  data.get("vocab_size", p.data.vocabSize, [](int64_t n) { return n >= 257; }, "at least 257", limits::kVocab);
  data.get("val_fraction", p.data.valFraction, [](double f) { return f >= 0 && f < 1; }, "in [0, 1)");
  readArrayDataKeys(data, p.data);
  readShapesKeys(data, p.data);
  data.finish();

  auto& t = p.train;
  SectionReader train(ctx, section("train"), "train");
  train.get("steps", t.steps, positive, "positive", limits::kSteps);
  train.get("batch_size", t.batchSize, positive, "positive", limits::kBatch);
  train.get("seq_len", t.seqLen, positive, "positive", limits::kSequence);
  train.get("optimizer", t.optimizer, [](const std::string& o) { return o == "adamw" || o == "adam" || o == "sgd"; },
            "one of adamw, adam, sgd");
  train.get("loss", t.loss, [](const std::string& l) { return l == "cross_entropy" || l == "mse"; },
            "cross_entropy or mse");
  // inf passes `> 0` and `>= 0` (and a learning rate of inf trains to NaN at the first step).
  auto finite = [&](const char* key, double v) {
    train.require(std::isfinite(v), key, key, fmt::format("'{}' must be finite (it is {})", key, v));
  };
  train.get("lr", t.lr, positive, "positive");
  finite("lr", t.lr);
  train.get("min_lr", t.minLr, nonNegative, "non-negative");
  finite("min_lr", t.minLr);
  train.require(t.minLr <= t.lr, "min_lr", "lr",
                fmt::format("'min_lr' ({}) must not exceed 'lr' ({}): the schedule decays from lr to min_lr", t.minLr,
                            t.lr));
  train.get("warmup_steps", t.warmupSteps, nonNegative, "non-negative", limits::kSteps);
  // The default warmup (10 steps) is not held against a short run; a warmup the project asks for is.
  const bool warmupGiven = ctx.asWritten && section("train") && section("train")->get("warmup_steps");
  train.require(!warmupGiven || t.warmupSteps <= t.steps, "warmup_steps", "steps",
                fmt::format("'warmup_steps' ({}) must not exceed 'steps' ({}): the learning rate would never reach "
                            "'lr'", t.warmupSteps, t.steps));
  train.get("schedule", t.schedule, [](const std::string& s) {
    return s == "warmup_cosine" || s == "constant" || s == "linear" || s == "cosine" || s == "step" || s == "wsd";
  }, "one of warmup_cosine, constant, linear, cosine, step, wsd");
  train.get("step_every", t.stepEvery, positive, "positive", limits::kSteps);
  train.get("step_gamma", t.stepGamma, [](double g) { return g > 0 && g <= 1; }, "in (0, 1]");
  train.get("decay_fraction", t.decayFraction, [](double f) { return f >= 0 && f <= 1; }, "in [0, 1]");
  // weight_decay's default (0.1) is AdamW's; sgd and adam (L2, as PyTorch's) decay only when it is given.
  if (t.optimizer != "adamw" && !(section("train") && section("train")->get("weight_decay"))) t.weightDecay = 0.0;
  train.get("weight_decay", t.weightDecay, nonNegative, "non-negative");
  finite("weight_decay", t.weightDecay);
  train.get("grad_clip", t.gradClip, nonNegative, "non-negative (0 disables clipping)");
  finite("grad_clip", t.gradClip);
  train.get("beta1", t.beta1, [](double b) { return b >= 0 && b < 1; }, "in [0, 1)");
  train.get("beta2", t.beta2, [](double b) { return b >= 0 && b < 1; }, "in [0, 1)");
  train.get("momentum", t.momentum, [](double b) { return b >= 0 && b < 1; }, "in [0, 1)");
  train.get("nesterov", t.nesterov);
  train.get("eval_every", t.evalEvery, nonNegative, "non-negative", limits::kSteps);
  train.get("eval_steps", t.evalSteps, positive, "positive", limits::kSteps);
  train.get("log_every", t.logEvery, positive, "positive", limits::kSteps);
  train.get("checkpoint_every", t.checkpointEvery, nonNegative, "non-negative", limits::kSteps);
  train.get("keep_checkpoints", t.keepCheckpoints, nonNegative, "non-negative", limits::kSteps);
  train.get("best_metric", t.bestMetric, [](const std::string& m) { return m == "val_loss" || m == "loss"; },
            "val_loss or loss");
  train.get("accumulate", t.accumulate, positive, "positive", limits::kBatch);
  train.get("remat", t.remat, [](const std::string& r) { return r == "none" || r == "blocks" || r == "dots_saveable"; },
            "one of none, blocks, dots_saveable");
  train.get("seed", t.seed);
  train.get("shuffle", t.shuffle);
  train.finish();
  if (!error && family && t.remat != "none" && !family->rematBlocks)
    error = Error{fmt::format("{}: [train] remat = \"{}\": the {} family's model has no blocks it recomputes{}", file, t.remat,
                              family->name, family->openKeys ? " (a Python model recomputes what it wraps in tessera.checkpoint)" : "")};
  if (!error && family && family->languageModel && !family->contextKey.empty()) {
    const int64_t context = p.model.config.integer(family->contextKey);
    if (t.seqLen > context)
      error = Error{fmt::format("{}: [train] seq_len ({}) exceeds [model] {} ({})", file, t.seqLen, family->contextKey, context)};
  }

  SectionReader mesh(ctx, section("mesh"), "mesh");
  mesh.get("shape", p.mesh.shape, [](const std::vector<int64_t>& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](int64_t d) { return d > 0; });
  }, "a non-empty array of positive sizes");
  mesh.getSizes("shape", p.mesh.shape, limits::kMeshDevices, limits::kMeshDevices);
  mesh.get("axes", p.mesh.axes);
  mesh.finish();
  // At the axes' line (or the shape's, when the axes are the default): one name per size.
  const size_t sizeCount = p.mesh.shape.size(), nameCount = p.mesh.axes.size();
  mesh.require(sizeCount == nameCount, "axes", "shape",
               fmt::format("[mesh] has {} size{} (shape = {}) but {} axis name{} (axes = {}): give one name per size",
                           sizeCount, sizeCount == 1 ? "" : "s", settingText(p.mesh.shape), nameCount,
                           nameCount == 1 ? "" : "s", settingText(p.mesh.axes)));

  if (const toml::table* sh = section("sharding")) {
    // A rule is named by its line, or by the --set that gave it.
    auto where = [&](const toml::node& n) {
      auto it = ctx.overridden.find(&n);
      return it != ctx.overridden.end() ? fmt::format("{} (over {})", it->second, file)
                                        : fmt::format("{}:{}", file, n.source().begin.line);
    };
    for (const auto& [k, val] : *sh) {
      if (error) break;
      if (!val.is_string()) {
        error = Error{fmt::format("{}: sharding rule '{}' must be a string PartitionSpec", where(val), k.str())};
        break;
      }
      // The pattern is a regex over parameter paths: one that is not is said here, with its line, on any mesh
      // (on one device the rules are never read, and the mistake would wait for the first mesh).
      try {
        std::regex check{std::string(k.str())};
      } catch (const std::regex_error& e) {
        error = Error{fmt::format("{}: sharding rule '{}' is not a regular expression ({})", where(val), k.str(),
                                  e.what())};
        break;
      }
      p.sharding.push_back(ShardingRule{std::string(k.str()), *val.value<std::string>(), static_cast<int>(val.source().begin.line)});
    }
    // The first rule that matches wins, so the rules keep the file's order (a TOML table's keys come sorted).
    std::stable_sort(p.sharding.begin(), p.sharding.end(),
                     [](const ShardingRule& a, const ShardingRule& b) { return a.line < b.line; });
  }

  SectionReader prec(ctx, section("precision"), "precision");
  prec.get("compute", p.precision, [](const std::string& s) { return s == "f32" || s == "bf16"; }, "f32 or bf16");
  prec.finish();

  if (error) return *error;
  if (p.name.empty()) {
    // The folder's name ("." and "dir/" name the folder they point at).
    std::error_code ec;
    fs::path folder = fs::absolute(fs::path(dir), ec).lexically_normal();
    if (!folder.has_filename()) folder = folder.parent_path();
    p.name = folder.filename().string();
  }
  for (const auto& [where, value] : ctx.settings) p.settings.push_back({where.first, where.second, value()});
  p.origins = std::move(ctx.origins);
  return p;
}

}  // namespace

Result<Project> parseProject(const std::string& text, const std::string& file, const std::string& dir,
                             const std::vector<Override>& overrides) {
  return parseProjectText(text, file, dir, overrides, false);
}

Result<Override> parseOverride(const std::string& spec) {
  const size_t eq = spec.find('=');
  const size_t dot = spec.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 || dot + 1 == eq)
    return makeError("--set {}: expected SECTION.KEY=VALUE, e.g. train.lr=3e-4", spec);
  return Override{spec.substr(0, dot), spec.substr(dot + 1, eq - dot - 1), spec.substr(eq + 1)};
}

Result<std::vector<Override>> parseOverrides(const std::vector<std::string>& specs) {
  std::vector<Override> out;
  for (const std::string& s : specs) {
    TSR_ASSIGN(Override o, parseOverride(s));
    out.push_back(std::move(o));
  }
  return out;
}

std::string resolvedToml(const Project& p) {
  std::string out = fmt::format("# {} resolved: defaults filled in", p.file);
  for (const Override& o : p.overrides) out += (&o == &p.overrides.front() ? ", overridden by --set " : " --set ") + o.spec();
  out += "\n";
  std::string section;
  for (const Setting& s : p.settings) {
    if (s.section != section) {
      out += fmt::format("\n[{}]\n", s.section);
      section = s.section;
    }
    out += fmt::format("{} = {}\n", s.key, s.value);
  }
  if (!p.sharding.empty()) {
    out += "\n[sharding]\n";
    for (const ShardingRule& r : p.sharding) out += fmt::format("{} = {}\n", tomlString(r.pattern), tomlString(r.spec));
  }
  return out;
}

Result<Project> loadProject(const std::string& path, const std::vector<Override>& overrides) {
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) p /= "project.toml";
  // Read whole: a device or a pipe (/dev/zero) would never end, a huge file never fit.
  if (fs::exists(p, ec) && !fs::is_regular_file(p, ec)) return makeError("{}: not a regular file", p.string());
  if (fs::exists(p, ec))
    if (auto st = limits::checkRange("size of " + p.string(), static_cast<int64_t>(fs::file_size(p, ec)), 0,
                                     limits::kProjectFileBytes);
        !st.ok())
      return st.takeError();
  std::ifstream in(p);
  if (!in) {
    if (!fs::exists(p, ec)) return makeError("{}: no such file (a project is a folder with project.toml)", p.string());
    return makeError("{}: cannot read", p.string());
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  return parseProjectText(ss.str(), p.string(), dir, overrides, true);
}

}  // namespace tsr::project
