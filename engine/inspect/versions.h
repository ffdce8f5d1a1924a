#pragma once
// The versions of the engine and the libraries it is built with, for the IDE's About box.
#include <string>
#include <utility>
#include <vector>

namespace tsr::inspect {

std::vector<std::pair<std::string, std::string>> libraryVersions();

}  // namespace tsr::inspect
