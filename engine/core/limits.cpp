#include "engine/core/limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "engine/core/bytes.h"

namespace tsr::limits {

Status checkRange(std::string_view key, int64_t value, int64_t min, int64_t max) {
  if (value < min) return makeError("'{}' is {}, below the minimum of {}", key, value, min);
  if (value > max) return makeError("'{}' is {}, above the limit of {}", key, value, max);
  return {};
}

Result<int64_t> checkedProduct(std::string_view key, std::span<const int64_t> sizes, int64_t limit) {
  int64_t n = 1;
  std::string shown;
  for (int64_t s : sizes) shown += fmt::format("{}{}", shown.empty() ? "" : " x ", s);
  for (int64_t s : sizes) {
    if (s < 0) return makeError("'{}' has a size of {} ({}); sizes cannot be negative", key, s, shown);
    // n * s > limit, without computing n * s.
    if (s > 0 && n > limit / s) return makeError("'{}' is {}, more than the limit of {}", key, shown, limit);
    n *= s;
  }
  return n;
}

namespace {

// The first number on the line of /proc/meminfo (or a status file) that starts with `key`, times `scale`.
int64_t fieldOf(const char* path, const std::string& key, int64_t scale) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      std::istringstream rest(line.substr(key.size()));
      int64_t v = -1;
      if (rest >> v) return v * scale;
    }
  return -1;
}

int64_t fileNumber(const char* path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return -1;
  try {
    return std::stoll(word);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

int64_t availableMemoryBytes() {
  int64_t best = -1;
  auto consider = [&](int64_t v) {
    if (v >= 0) best = best < 0 ? v : std::min(best, v);
  };
  consider(fieldOf("/proc/meminfo", "MemAvailable:", 1024));
  // cgroup v2, as containers see it from inside.
  const int64_t max = fileNumber("/sys/fs/cgroup/memory.max"), current = fileNumber("/sys/fs/cgroup/memory.current");
  if (max >= 0 && current >= 0) consider(std::max<int64_t>(0, max - current));
  rlimit r{};
  if (::getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    const int64_t mapped = fieldOf("/proc/self/status", "VmSize:", 1024);
    consider(std::max<int64_t>(0, static_cast<int64_t>(r.rlim_cur) - std::max<int64_t>(mapped, 0)));
  }
  return best;
}

Status checkFitsInMemory(std::string_view what, int64_t bytes) {
  const int64_t available = availableMemoryBytes();
  if (available < 0 || bytes <= available) return {};
  return makeError("{} need {}, but this machine has {} available", what, formatBytes(bytes), formatBytes(available));
}

}  // namespace tsr::limits
