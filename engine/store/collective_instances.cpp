#include "engine/store/collective_instances.h"

#include <algorithm>
#include <charconv>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tsr::store {

namespace {

// The position of a device named "kind:N"; -1 for another name.
int positionOf(const std::string& device) {
  auto colon = device.rfind(':');
  if (colon == std::string::npos) return -1;
  int n = -1;
  auto [end, ec] = std::from_chars(device.data() + colon + 1, device.data() + device.size(), n);
  return ec == std::errc() && end == device.data() + device.size() ? n : -1;
}

}  // namespace

std::string groupText(const std::vector<int>& group) { return fmt::format("{}", fmt::join(group, ",")); }

std::vector<int> parseGroup(const std::string& text) {
  std::vector<int> out;
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    int v = 0;
    auto [next, ec] = std::from_chars(p, end, v);
    if (ec != std::errc()) return {};
    out.push_back(v);
    p = next;
    if (p < end && *p++ != ',') return {};
  }
  return out;
}

std::vector<CollectiveInstance> collectiveInstances(const std::vector<CollectiveLaunch>& launches) {
  std::map<std::pair<int64_t, std::string>, std::vector<const CollectiveLaunch*>> calls;
  for (const auto& l : launches) calls[{l.seq, l.group}].push_back(&l);
  std::vector<CollectiveInstance> out;
  out.reserve(calls.size());
  for (auto& [key, members] : calls) {
    const std::vector<int> group = parseGroup(key.second);
    // Members in the group's order (the order of its positions), unknown devices last by name.
    auto rank = [&](const CollectiveLaunch* l) {
      auto it = std::find(group.begin(), group.end(), positionOf(l->device));
      return std::pair(it - group.begin(), l->device);
    };
    std::stable_sort(members.begin(), members.end(), [&](auto* a, auto* b) { return rank(a) < rank(b); });
    CollectiveInstance c;
    c.seq = key.first;
    c.group = key.second;
    c.name = members.front()->name;
    int64_t first = members.front()->startNs, last = members.front()->startNs;
    for (size_t i = 0; i < members.size(); ++i) {
      const CollectiveLaunch& l = *members[i];
      c.members.push_back({l.device, l.startNs, l.startNs + l.durationNs, 0});
      if (l.startNs > last) {
        last = l.startNs;
        c.straggler = static_cast<int>(i);
      }
      first = std::min(first, l.startNs);
    }
    for (auto& m : c.members) {
      m.waitNs = last - m.arrivalNs;
      c.totalWaitNs += m.waitNs;
    }
    c.maxWaitNs = last - first;
    std::vector<int> present;
    for (const auto& m : c.members) present.push_back(positionOf(m.device));
    std::sort(present.begin(), present.end());
    std::vector<int> expected = group;
    std::sort(expected.begin(), expected.end());
    c.complete = !expected.empty() && present == expected;
    out.push_back(std::move(c));
  }
  return out;
}

Result<std::vector<CollectiveInstance>> collectiveInstances(const RunStore& db, int64_t profile) {
  TSR_ASSIGN(std::vector<CollectiveLaunch> launches, db.profileCollectives(profile));
  return collectiveInstances(launches);
}

std::vector<CollectiveInstance> worstByWait(std::vector<CollectiveInstance> instances, size_t top) {
  std::stable_sort(instances.begin(), instances.end(),
                   [](const auto& a, const auto& b) { return a.maxWaitNs > b.maxWaitNs; });
  if (instances.size() > top) instances.resize(top);
  return instances;
}

}  // namespace tsr::store
