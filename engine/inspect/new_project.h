#pragma once
// What the IDE's New Project dialog reads: the registered model families with their declared keys
// (project/model_family.h), and the project.toml a choice of family, values and corpus makes.
#include <vector>

#include "engine/project/model_family.h"
#include "engine/project/new_project.h"

namespace tsr::inspect {

// Every registered family (core ones first); the pointers stay valid (families are never removed).
std::vector<const project::ModelFamily*> modelFamilies();

using project::NewProject;
using project::newProjectToml;

}  // namespace tsr::inspect
