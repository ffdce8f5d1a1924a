#include "engine/core/bytes.h"

#include <fmt/format.h>

namespace tsr {

std::string formatBytes(int64_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < 1024 * 1024) return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024.0);
  if (b < int64_t(1) << 30) return fmt::format("{:.1f} MiB", static_cast<double>(b) / 1048576.0);
  return fmt::format("{:.2f} GiB", static_cast<double>(b) / 1073741824.0);
}

}  // namespace tsr
