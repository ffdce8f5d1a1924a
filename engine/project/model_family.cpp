#include "engine/project/model_family.h"

#include <deque>
#include <mutex>

namespace tsr::project {

namespace {

std::mutex& familiesMutex() {
  static std::mutex m;
  return m;
}

// A deque: registering a family never moves the others, so findModelFamily's pointers stay valid.
std::deque<ModelFamily>& families() {
  static std::deque<ModelFamily> f;
  return f;
}

}  // namespace

bool isCoreFamily(std::string_view name) { return name == "gpt2" || name == "vit" || name == "mlp"; }

Status registerModelFamily(ModelFamily family) {
  if (family.name.empty()) return makeError("model family registration: empty name");
  if (isCoreFamily(family.name)) return makeError("model family '{}' is a core family", family.name);
  if (!family.build) return makeError("model family '{}': no build function", family.name);
  std::lock_guard lock(familiesMutex());
  for (const auto& f : families())
    if (f.name == family.name) return makeError("model family '{}' is already registered", family.name);
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

}  // namespace tsr::project
