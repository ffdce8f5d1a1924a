#include "engine/inspect/versions.h"

#include <sqlite3.h>

#include <fmt/format.h>

#include "engine/inspect/graph_layout.h"
#include "engine/version.h"

namespace tsr::inspect {

std::vector<std::pair<std::string, std::string>> libraryVersions() {
  return {
      {"Tessera engine", kVersion},
      {"Graphviz", graphvizVersion()},
      {"SQLite", sqlite3_libversion()},
      {"fmt", fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100)},
      {"Compiler", __VERSION__},
  };
}

}  // namespace tsr::inspect
