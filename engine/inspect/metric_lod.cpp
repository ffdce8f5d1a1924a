#include "engine/inspect/metric_lod.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "engine/core/check.h"

namespace tsr::inspect {

int lodColumn(double x, double x0, double x1, int columns) {
  if (!(x1 > x0) || columns <= 1) return 0;
  double c = std::floor((x - x0) * (columns / (x1 - x0)));
  if (!(c > 0)) return 0;  // also NaN
  return c >= columns ? columns - 1 : static_cast<int>(c);
}

std::vector<size_t> minMaxPerColumn(std::span<const double> x, std::span<const double> y, double x0, double x1,
                                    int columns, bool positiveOnly) {
  TSR_CHECK(x.size() == y.size());
  columns = std::max(columns, 1);
  // Drawable: yFloor < y < inf (NaN fails both comparisons).
  const double yFloor = positiveOnly ? 0.0 : -std::numeric_limits<double>::infinity();
  const double inf = std::numeric_limits<double>::infinity();
  auto drawable = [&](size_t i) { return y[i] > yFloor && y[i] < inf; };

  // The visible points are [lo, hi): x is sorted, so both ends are binary searches.
  const size_t lo = static_cast<size_t>(std::lower_bound(x.begin(), x.end(), x0) - x.begin());
  const size_t hi = std::max(lo, static_cast<size_t>(std::upper_bound(x.begin(), x.end(), x1) - x.begin()));
  std::vector<size_t> out;
  out.reserve(std::min(hi - lo, 2 * static_cast<size_t>(columns)) + 2);
  for (size_t i = lo; i-- > 0;) {
    if (drawable(i)) {
      out.push_back(i);
      break;
    }
  }
  if (hi - lo <= 2 * static_cast<size_t>(columns)) {
    for (size_t i = lo; i < hi; ++i)
      if (drawable(i)) out.push_back(i);
  } else {
    // Column c's points are [begin, end): those lodColumn puts in c. It is monotone in x, so the formula a
    // point-by-point loop would use splits the sorted xs by binary search.
    auto columnEnd = [&](size_t begin, int c) {
      if (c + 1 == columns) return hi;
      auto first = x.begin() + static_cast<std::ptrdiff_t>(begin), last = x.begin() + static_cast<std::ptrdiff_t>(hi);
      auto end = std::partition_point(first, last, [&](double v) { return lodColumn(v, x0, x1, columns) <= c; });
      return static_cast<size_t>(end - x.begin());
    };
    size_t begin = lo;
    for (int c = 0; c < columns && begin < hi; ++c) {
      const size_t end = columnEnd(begin, c);
      size_t iMin = end, iMax = end;
      double vMin = inf, vMax = -inf;
      for (size_t i = begin; i < end; ++i) {
        const double v = y[i];
        if (!(v > yFloor && v < inf)) continue;
        if (v < vMin) {
          vMin = v;
          iMin = i;
        }
        if (v > vMax) {
          vMax = v;
          iMax = i;
        }
      }
      if (iMin != end) {
        out.push_back(std::min(iMin, iMax));
        if (iMax != iMin) out.push_back(std::max(iMin, iMax));
      }
      begin = end;
    }
  }
  for (size_t i = hi; i < x.size(); ++i) {
    if (drawable(i)) {
      out.push_back(i);
      break;
    }
  }
  return out;
}

}  // namespace tsr::inspect
