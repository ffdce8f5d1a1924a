#pragma once
// A new project's project.toml, written from its family's declaration (model_family.h): every [model] key with
// its value and its doc string, the family's [data] kind, and [train] settings small enough for a first run; a
// Python family's starter model.py beside it.
// `tessera new` and the IDE's New Project dialog both write it; the text is checked by parseProject before it
// is returned, so what they write always opens.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/result.h"
#include "engine/project/model_family.h"

namespace tsr::project {

struct NewProject {
  std::string name;    // [project] name
  std::string family;  // a registered family
  // [model] values as project.toml spells them ("4", "0.1", "heads", "[784, 10]"): keys left out keep their
  // defaults. A key the family does not declare, or a value of the wrong type, is an error naming it.
  std::map<std::string, std::string> values;
  std::string corpus;  // text families: the corpus, relative to the project folder (or absolute)
  std::string dir;     // the project folder (for resolving `corpus` while checking); "." when empty
};

// A Python family's project names its model file, model.py unless [model] python says otherwise.
Result<std::string> newProjectToml(const NewProject& spec);

// The files a new project starts with beside project.toml, as (path relative to the project, text): a Python
// family's starter model.py. Callers write those that do not exist yet.
std::vector<std::pair<std::string, std::string>> newProjectFiles(const NewProject& spec);

// Parses one value of `key` as project.toml would hold it ("[784, 10]", "heads", "0.1"), to its type.
Result<KeyValue> parseKeyValue(const FamilyKey& key, const std::string& text);

}  // namespace tsr::project
