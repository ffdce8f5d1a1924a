#include "engine/backends/cpu/arena_placement.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace tsr::cpu {

ArenaPlacement placeArena(const std::vector<ArenaValue>& values, int numKernels) {
  const auto nk = static_cast<size_t>(numKernels);
  std::vector<std::vector<size_t>> definedAt(nk), dyingAt(nk);
  for (size_t l = 0; l < values.size(); ++l) {
    definedAt[static_cast<size_t>(values[l].def)].push_back(l);
    dyingAt[static_cast<size_t>(values[l].last)].push_back(l);
  }
  auto online = [&](std::vector<int64_t>& offset) {
    std::vector<std::pair<int64_t, int64_t>> freeBlocks;  // offset, size, sorted by offset
    int64_t end = 0;
    auto allocate = [&](int64_t bytes) {
      int best = -1;
      for (size_t i = 0; i < freeBlocks.size(); ++i)
        if (freeBlocks[i].second >= bytes &&
            (best < 0 || freeBlocks[i].second < freeBlocks[static_cast<size_t>(best)].second))
          best = static_cast<int>(i);
      if (best < 0) {
        // Grow: extend a free block that ends at the arena's end, else append.
        if (!freeBlocks.empty() && freeBlocks.back().first + freeBlocks.back().second == end) {
          int64_t off = freeBlocks.back().first;
          end = off + bytes;
          freeBlocks.pop_back();
          return off;
        }
        int64_t off = end;
        end += bytes;
        return off;
      }
      auto& b = freeBlocks[static_cast<size_t>(best)];
      int64_t off = b.first;
      b.first += bytes;
      b.second -= bytes;
      if (b.second == 0) freeBlocks.erase(freeBlocks.begin() + best);
      return off;
    };
    auto release = [&](int64_t off, int64_t bytes) {
      auto it = std::lower_bound(freeBlocks.begin(), freeBlocks.end(), std::make_pair(off, int64_t{0}));
      it = freeBlocks.insert(it, {off, bytes});
      // Coalesce with neighbours.
      size_t i = static_cast<size_t>(it - freeBlocks.begin());
      if (i + 1 < freeBlocks.size() && freeBlocks[i].first + freeBlocks[i].second == freeBlocks[i + 1].first) {
        freeBlocks[i].second += freeBlocks[i + 1].second;
        freeBlocks.erase(freeBlocks.begin() + static_cast<int64_t>(i) + 1);
      }
      if (i > 0 && freeBlocks[i - 1].first + freeBlocks[i - 1].second == freeBlocks[i].first) {
        freeBlocks[i - 1].second += freeBlocks[i].second;
        freeBlocks.erase(freeBlocks.begin() + static_cast<int64_t>(i));
      }
    };
    for (size_t ki = 0; ki < nk; ++ki) {
      for (size_t l : definedAt[ki]) offset[l] = allocate(values[l].bytes);
      for (size_t l : dyingAt[ki]) release(offset[l], values[l].bytes);
    }
    return end;
  };
  auto bySize = [&](std::vector<int64_t>& offset) {
    std::vector<size_t> order(values.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (values[a].bytes != values[b].bytes) return values[a].bytes > values[b].bytes;
      return values[a].last - values[a].def > values[b].last - values[b].def;
    });
    int64_t end = 0;
    std::vector<size_t> placed;
    std::vector<std::pair<int64_t, int64_t>> taken;  // [begin, end) of overlapping placed values
    for (size_t l : order) {
      const ArenaValue& x = values[l];
      taken.clear();
      for (size_t p : placed)
        if (values[p].def <= x.last && x.def <= values[p].last) taken.push_back({offset[p], offset[p] + values[p].bytes});
      std::sort(taken.begin(), taken.end());
      int64_t at = -1, bestGap = 0, cursor = 0;
      for (const auto& [b, e] : taken) {
        if (b - cursor >= x.bytes && (at < 0 || b - cursor < bestGap)) {
          at = cursor;
          bestGap = b - cursor;
        }
        cursor = std::max(cursor, e);
      }
      offset[l] = at >= 0 ? at : cursor;
      end = std::max(end, offset[l] + x.bytes);
      placed.push_back(l);
    }
    return end;
  };
  std::vector<int64_t> offsets(values.size()), offline(values.size());
  int64_t end = online(offsets);
  // The offline placement is quadratic in the values: skipped for the very largest programs.
  if (values.size() <= 20000) {
    const int64_t offlineEnd = bySize(offline);
    if (offlineEnd < end) {
      end = offlineEnd;
      offsets.swap(offline);
    }
  }
  return {std::move(offsets), end};
}

}  // namespace tsr::cpu
