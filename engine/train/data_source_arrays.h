#pragma once
// The array and image [data] kinds: npy, cifar10 and image_folder, as resumable sources whose batches have the
// shapes of the model family's batch.
#include <functional>
#include <string>

#include "engine/core/result.h"
#include "engine/project/project.h"
#include "engine/train/data_source.h"

namespace tsr::train {

Result<ProjectData> prepareArrayData(const project::Project& project,
                                     const std::function<void(const std::string&)>& info);

}  // namespace tsr::train
