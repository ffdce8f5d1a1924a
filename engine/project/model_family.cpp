#include "engine/project/model_family.h"

#include <cmath>
#include <deque>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/toml_text.h"

#include "engine/project/core_families.h"

namespace tsr::project {

namespace {

std::mutex& familiesMutex() {
  static std::mutex m;
  return m;
}

// A deque: registering a family never moves the others, so findModelFamily's pointers stay valid. The core
// families are registered on first use, so they exist before any plugin's and whatever the static-init order.
std::deque<ModelFamily>& families() {
  static std::deque<ModelFamily> f = [] {
    std::deque<ModelFamily> core;
    for (ModelFamily& family : coreFamilies()) core.push_back(std::move(family));
    return core;
  }();
  return f;
}

bool holds(KeyType type, const KeyValue& v) {
  switch (type) {
    case KeyType::Integer: return std::holds_alternative<int64_t>(v);
    case KeyType::Number: return std::holds_alternative<double>(v);
    case KeyType::Text: return std::holds_alternative<std::string>(v);
    case KeyType::Sizes: return std::holds_alternative<std::vector<int64_t>>(v);
  }
  return false;
}

// A bound as the user reads it: 1, 0.5, 1e+18.
std::string bound(double x) { return fmt::format("{}", x); }

}  // namespace

std::string_view keyTypeName(KeyType t) {
  switch (t) {
    case KeyType::Integer: return "integer";
    case KeyType::Number: return "number";
    case KeyType::Text: return "string";
    case KeyType::Sizes: return "array of integers";
  }
  return "?";
}

std::string keyValueToml(const KeyValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) {
    std::string s = fmt::format("{}", *d);
    // TOML needs a point (or exponent) to read a float back as one.
    if (s.find_first_of(".eEni") == std::string::npos) s += ".0";
    return s;
  }
  if (const auto* s = std::get_if<std::string>(&v)) return tomlString(*s);
  return fmt::format("[{}]", fmt::join(std::get<std::vector<int64_t>>(v), ", "));
}

std::string FamilyKey::describeRequirement() const {
  if (!requirement.empty()) return requirement;
  switch (type) {
    case KeyType::Integer:
      if (min == 1) return "positive";
      if (min == 0) return "non-negative";
      return "at least " + bound(min);
    case KeyType::Number:
      return fmt::format("in [{}, {}{}", bound(min), bound(max), maxOpen ? ")" : "]");
    case KeyType::Text:
      if (choices.size() == 1) return choices.front();
      if (!choices.empty()) {
        std::vector<std::string> head(choices.begin(), choices.end() - 1);
        return fmt::format("{} or {}", fmt::join(head, ", "), choices.back());
      }
      return "a string";
    case KeyType::Sizes:
      return minCount <= 1 ? "positive sizes" : fmt::format("at least {} positive sizes", minCount);
  }
  return "";
}

const KeyValue& ModelConfig::at(std::string_view key) const {
  auto it = m_values.find(key);
  if (it == m_values.end()) throw std::out_of_range(fmt::format("[model] has no key '{}' in its family", key));
  return it->second;
}

bool ModelConfig::has(std::string_view key) const { return m_values.find(key) != m_values.end(); }

namespace {

template <class T>
const T& typed(const KeyValue& v, std::string_view key, const char* type) {
  if (const T* x = std::get_if<T>(&v)) return *x;
  throw std::out_of_range(fmt::format("[model] key '{}' is not {}", key, type));
}

}  // namespace

int64_t ModelConfig::integer(std::string_view key) const { return typed<int64_t>(at(key), key, "an integer"); }
double ModelConfig::number(std::string_view key) const { return typed<double>(at(key), key, "a number"); }
const std::string& ModelConfig::text(std::string_view key) const { return typed<std::string>(at(key), key, "a string"); }
const std::vector<int64_t>& ModelConfig::sizes(std::string_view key) const {
  return typed<std::vector<int64_t>>(at(key), key, "an array of integers");
}

Status validateModelFamily(const ModelFamily& family) {
  if (family.name.empty()) return makeError("model family registration: empty name");
  if (!family.build) return makeError("model family '{}': no build function", family.name);
  if (!family.languageModel && !family.batch)
    return makeError("model family '{}': no batch function (only a language model's batch is known)", family.name);
  if (family.dataKinds.empty()) return makeError("model family '{}': no [data] kinds", family.name);
  if (family.languageModel && !family.contextKey.empty()) {
    bool found = false;
    for (const FamilyKey& k : family.keys) found |= k.name == family.contextKey && k.type == KeyType::Integer;
    if (!found) return makeError("model family '{}': context key '{}' is not an integer key", family.name, family.contextKey);
  }
  for (const FamilyKey& k : family.keys) {
    if (k.name.empty() || k.name == "family")
      return makeError("model family '{}': a key may not be named '{}'", family.name, k.name);
    if (!holds(k.type, k.defaultValue))
      return makeError("model family '{}': the default of '{}' is not of its type ({})", family.name, k.name, keyTypeName(k.type));
  }
  return {};
}

Status registerModelFamily(ModelFamily family) {
  TSR_TRY(validateModelFamily(family));
  std::lock_guard lock(familiesMutex());
  for (const auto& f : families()) {
    if (f.name != family.name) continue;
    if (f.origin == "core") return makeError("model family '{}' is a core family", family.name);
    return makeError("model family '{}' is already registered", family.name);
  }
  families().push_back(std::move(family));
  return {};
}

const ModelFamily* findModelFamily(std::string_view name) {
  std::lock_guard lock(familiesMutex());
  for (const auto& f : families())
    if (f.name == name) return &f;
  return nullptr;
}

std::vector<std::string> modelFamilyNames() {
  std::lock_guard lock(familiesMutex());
  std::vector<std::string> names;
  for (const auto& f : families()) names.push_back(f.name);
  return names;
}

bool isCoreFamily(std::string_view name) {
  const ModelFamily* f = findModelFamily(name);
  return f && f->origin == "core";
}

ModelConfig defaultConfig(const ModelFamily& family) {
  ModelConfig c;
  for (const FamilyKey& k : family.keys) c.set(k.name, k.defaultValue);
  return c;
}

BatchSignature tokenBatch(int64_t batchSize, int64_t seqLen, int64_t vocab) {
  Aval tokens{Shape{batchSize, seqLen}, DType::I32};
  return {tokens, tokens, vocab};
}

}  // namespace tsr::project
