#pragma once
// What the IDE's New Project dialog reads: the registered model families with their declared keys
// (project/model_family.h), and the project.toml a choice of family, values and corpus makes; and what File ›
// New Project from Template does: a copy of a sample project that trains as copied.
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/project/model_family.h"
#include "engine/project/new_project.h"

namespace tsr::inspect {

// Every registered family (core ones first); the pointers stay valid (families are never removed).
std::vector<const project::ModelFamily*> modelFamilies();

// Copies the project in `templateDir` to `targetDir`, which is created (with its parents) when missing, so that
// the copy trains as copied: project.toml and everything beside it (its data/, its own plugins/) but what a run
// leaves there (runs.db, checkpoints/, dot-folders such as the .tessera/ cache); a file a [data] key reads from
// outside the template's folder (gpt2_tp's "../gpt2_mini/data/corpus.txt") is copied into the copy's data/ and
// the key rewritten to point there, the rest of project.toml kept as written. Fails, naming the folder, when
// the target already holds a project.toml or cannot be written. Returns the copy's folder.
Result<std::string> newProjectFromTemplate(const std::string& templateDir, const std::string& targetDir);

using project::NewProject;
using project::newProjectToml;
using project::newProjectFiles;

}  // namespace tsr::inspect
