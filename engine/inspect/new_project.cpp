#include "engine/inspect/new_project.h"

namespace tsr::inspect {

std::vector<const project::ModelFamily*> modelFamilies() {
  std::vector<const project::ModelFamily*> out;
  for (const std::string& name : project::modelFamilyNames()) out.push_back(project::findModelFamily(name));
  return out;
}

}  // namespace tsr::inspect
