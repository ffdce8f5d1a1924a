#include "engine/runtime/debug_nans.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "engine/core/env_options.h"

namespace tsr::runtime {

namespace {

std::atomic<int>& override() {
  static std::atomic<int> v{-1};  // -1: follow the environment
  return v;
}

}  // namespace

bool debugNansEnabled() {
  int o = override().load(std::memory_order_relaxed);
  return o < 0 ? envOptions().debugNans : o == 1;
}

void setDebugNans(bool on) { override().store(on ? 1 : 0); }

std::optional<std::string> findNonFinite(const Buffer& buffer, const Aval& aval) {
  if (!isFloating(aval.dtype)) return std::nullopt;
  const auto* base = static_cast<const char*>(buffer.data());
  return dispatchDType(aval.dtype, [&]<class T>() -> std::optional<std::string> {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16> ||
                  std::is_same_v<T, f16>) {
      for (int64_t i = 0; i < aval.numel(); ++i) {
        T v;
        std::memcpy(&v, base + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
        double d = static_cast<double>(static_cast<float>(v));
        if constexpr (std::is_same_v<T, double>) d = v;
        if (std::isnan(d)) return fmt::format("nan at element {}", i);
        if (std::isinf(d)) return fmt::format("{}inf at element {}", d < 0 ? "-" : "", i);
      }
    }
    return std::nullopt;
  });
}

}  // namespace tsr::runtime
