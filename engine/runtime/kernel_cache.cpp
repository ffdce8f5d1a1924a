#include "engine/runtime/kernel_cache.h"

#include <cstdlib>
#include <filesystem>

namespace tsr::runtime {

std::string kernelCacheDir() {
  namespace fs = std::filesystem;
  if (const char* v = std::getenv("TESSERA_KERNEL_CACHE"); v && *v) {
    if (std::string(v) == "off") return "";
    return v;
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "tessera" / "kernels").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "tessera" / "kernels").string();
  return "";
}

}  // namespace tsr::runtime
