#pragma once
// Training tests write small projects: project.toml into a folder, loaded back with optional --set overrides.
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/project/project.h"

namespace tsr::test {

inline Result<project::Project> writeProject(const std::string& dir, const std::string& toml,
                                             const std::vector<std::string>& sets = {}) {
  std::ofstream(dir + "/project.toml") << toml;
  TSR_ASSIGN(auto overrides, project::parseOverrides(sets));
  return project::loadProject(dir, overrides);
}

}  // namespace tsr::test
