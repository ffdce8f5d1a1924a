#include "engine/backends/cpu/schedule.h"

#include <algorithm>
#include <set>

namespace tsr::cpu {

std::vector<int> scheduleForMemory(const std::vector<ScheduleItem>& items, const std::vector<int64_t>& bytes,
                                   const std::vector<bool>& pinned) {
  const int n = static_cast<int>(items.size());
  const size_t nv = bytes.size();
  std::vector<int> producer(nv, -1), remainingReaders(nv, 0);
  for (int i = 0; i < n; ++i)
    for (int v : items[static_cast<size_t>(i)].writes) producer[static_cast<size_t>(v)] = i;
  std::vector<std::vector<int>> successors(static_cast<size_t>(n));
  std::vector<int> waiting(static_cast<size_t>(n), 0);
  int lastEffect = -1;
  for (int i = 0; i < n; ++i) {
    std::vector<int> preds;
    if (items[static_cast<size_t>(i)].ordered) {
      if (lastEffect >= 0) preds.push_back(lastEffect);
      lastEffect = i;
    }
    for (int v : items[static_cast<size_t>(i)].reads) {
      ++remainingReaders[static_cast<size_t>(v)];
      int p = producer[static_cast<size_t>(v)];
      if (p >= 0 && p != i) preds.push_back(p);
    }
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    waiting[static_cast<size_t>(i)] = static_cast<int>(preds.size());
    for (int p : preds) successors[static_cast<size_t>(p)].push_back(i);
  }
  // Net bytes a kernel would add if it ran now: what it writes, minus the inputs it is the last reader of.
  auto delta = [&](int i) {
    int64_t d = 0;
    for (int v : items[static_cast<size_t>(i)].writes)
      if (!pinned[static_cast<size_t>(v)]) d += bytes[static_cast<size_t>(v)];
    std::vector<int> seen;
    for (int v : items[static_cast<size_t>(i)].reads) {
      if (pinned[static_cast<size_t>(v)] || std::find(seen.begin(), seen.end(), v) != seen.end()) continue;
      seen.push_back(v);
      int uses = 0;
      for (int w : items[static_cast<size_t>(i)].reads) uses += w == v;
      if (remainingReaders[static_cast<size_t>(v)] == uses) d -= bytes[static_cast<size_t>(v)];
    }
    return d;
  };
  std::set<int> ready;
  for (int i = 0; i < n; ++i)
    if (waiting[static_cast<size_t>(i)] == 0) ready.insert(i);
  std::vector<int> order;
  order.reserve(static_cast<size_t>(n));
  while (!ready.empty()) {
    // The kernel that lowers memory most; a kernel that frees as much as it allocates or more goes first, in
    // program order; otherwise the smallest increase.
    int best = -1;
    int64_t bestDelta = 0;
    for (int i : ready) {
      int64_t d = delta(i);
      if (best < 0 || d < bestDelta) {
        best = i;
        bestDelta = d;
      }
      if (d <= 0 && i == *ready.begin()) break;  // the next kernel in program order frees memory: keep the order
    }
    ready.erase(best);
    order.push_back(best);
    for (int v : items[static_cast<size_t>(best)].reads) --remainingReaders[static_cast<size_t>(v)];
    for (int s : successors[static_cast<size_t>(best)])
      if (--waiting[static_cast<size_t>(s)] == 0) ready.insert(s);
  }
  return order;
}

}  // namespace tsr::cpu
