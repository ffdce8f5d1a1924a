#pragma once
// The core model families (gpt2, vit, mlp, and python and python_lm for model.py files: python_family.h), which the registry (model_family.cpp) holds from its first use.
#include <vector>

#include "engine/project/model_family.h"

namespace tsr::project {

std::vector<ModelFamily> coreFamilies();

}  // namespace tsr::project
