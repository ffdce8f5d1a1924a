#pragma once
// Byte counts as people read them, the one formatter every front end uses (CLI tables, the IDE's panels).
#include <cstdint>
#include <string>

namespace tsr {

// Binary units: "512 B", "1.5 KiB", "12.0 MiB", "1.25 GiB" (one decimal up to MiB, two from GiB on).
std::string formatBytes(int64_t bytes);

}  // namespace tsr
