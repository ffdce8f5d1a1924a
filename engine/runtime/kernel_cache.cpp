#include "engine/runtime/kernel_cache.h"

#include <filesystem>

#include "engine/core/env_options.h"

namespace tsr::runtime {

std::string kernelCacheDir() {
  namespace fs = std::filesystem;
  const EnvLocations env = envLocations();
  if (!env.kernelCache.empty()) return env.kernelCache == "off" ? "" : env.kernelCache;
  if (!env.cacheHome.empty()) return (fs::path(env.cacheHome) / "tessera" / "kernels").string();
  if (!env.home.empty()) return (fs::path(env.home) / ".cache" / "tessera" / "kernels").string();
  return "";
}

}  // namespace tsr::runtime
