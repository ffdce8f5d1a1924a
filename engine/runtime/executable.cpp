#include "engine/runtime/executable.h"

#include <fmt/format.h>

namespace tsr::runtime {

bool BackendRegistry::add(std::unique_ptr<Backend> backend) {
  std::lock_guard lock(m_mutex);
  for (const auto& b : m_backends)
    if (b->name() == backend->name()) return false;
  m_backends.push_back(std::move(backend));
  return true;
}

Backend* BackendRegistry::find(std::string_view name) const {
  std::lock_guard lock(m_mutex);
  for (const auto& b : m_backends)
    if (b->name() == name) return b.get();
  return nullptr;
}

std::vector<std::string> BackendRegistry::names() const {
  std::lock_guard lock(m_mutex);
  std::vector<std::string> out;
  for (const auto& b : m_backends) out.push_back(b->name());
  return out;
}

BackendRegistry& backends() {
  static BackendRegistry registry;
  return registry;
}

Result<std::unique_ptr<Executable>> compileOn(std::string_view name, const ir::Graph& g, const ir::OpRegistry& reg,
                                              const CompileOptions& options) {
  Backend* b = backends().find(name);
  if (!b) {
    std::string have;
    for (const auto& n : backends().names()) have += (have.empty() ? "" : ", ") + n;
    return makeError("no '{}' backend is registered (registered: {}); the program must call registerBackends at "
                     "start-up (engine/backends/backends.h)", name, have.empty() ? "none" : have);
  }
  return b->compile(g, reg, options);
}

}  // namespace tsr::runtime
