#pragma once
// The core model families (gpt2, vit, mlp, resnet, unet; and python and python_lm for model.py files, python_family.h), which
// the registry (model_family.cpp) holds from its first use.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/project/model_family.h"

namespace tsr::project {

std::vector<ModelFamily> coreFamilies();

// An integer [model] key in [1, max], with its default and doc string, as the core families declare them.
FamilyKey integerKey(std::string name, int64_t def, int64_t max, std::string help);

}  // namespace tsr::project
