#include "engine/inspect/metric_lod.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "engine/core/check.h"

namespace tsr::inspect {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kNone = MinMaxBlocks::kNone;
constexpr size_t kBlock = MinMaxBlocks::kBlock;

// Drawable: floor < y < inf, where floor is 0 on a log axis and -inf otherwise (NaN fails both comparisons).
double floorOf(bool positiveOnly) { return positiveOnly ? 0.0 : -kInf; }

// The running minimum and maximum of one column (or block). Points come in index order and only a strictly
// smaller (larger) value replaces the one held, so each extreme is the first of equal values.
struct Extremes {
  std::span<const double> y;
  double floor;
  size_t iMin = kNone, iMax = kNone;
  double vMin = kInf, vMax = -kInf;

  void scan(size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      const double v = y[i];
      if (!(v > floor && v < kInf)) continue;
      if (v < vMin) {
        vMin = v;
        iMin = i;
      }
      if (v > vMax) {
        vMax = v;
        iMax = i;
      }
    }
  }
  // A block's summary: its extremes, which come after everything offered so far.
  void offer(const MinMaxBlocks::Block& b) {
    if (b.iMin == kNone) return;
    if (b.min < vMin) {
      vMin = b.min;
      iMin = b.iMin;
    }
    if (b.max > vMax) {
      vMax = b.max;
      iMax = b.iMax;
    }
  }
};

std::vector<size_t> reduce(std::span<const double> x, std::span<const double> y, const MinMaxBlocks* blocks,
                           double x0, double x1, int columns, bool positiveOnly) {
  TSR_CHECK(x.size() == y.size());
  if (blocks) TSR_CHECK(blocks->size == y.size() && blocks->positiveOnly == positiveOnly);
  columns = std::max(columns, 1);
  const double floor = floorOf(positiveOnly);
  auto drawable = [&](size_t i) { return y[i] > floor && y[i] < kInf; };

  // The visible points are [lo, hi): x is sorted, so both ends are binary searches.
  const size_t lo = static_cast<size_t>(std::lower_bound(x.begin(), x.end(), x0) - x.begin());
  const size_t hi = std::max(lo, static_cast<size_t>(std::upper_bound(x.begin(), x.end(), x1) - x.begin()));
  // The line's ends: the nearest drawable point outside the range on each side, so that it runs on to the
  // plot's edges, or else the first (last) drawable point inside it, so that it starts (ends) where the data does.
  auto firstDrawable = [&](size_t from, size_t to) {  // in [from, to)
    for (size_t i = from; i < to; ++i)
      if (drawable(i)) return i;
    return kNone;
  };
  auto lastDrawable = [&](size_t from, size_t to) {
    for (size_t i = to; i-- > from;)
      if (drawable(i)) return i;
    return kNone;
  };
  size_t first = lastDrawable(0, lo), last = firstDrawable(hi, x.size());
  if (first == kNone) first = firstDrawable(lo, hi);
  if (last == kNone) last = lastDrawable(lo, hi);

  std::vector<size_t> out;
  out.reserve(std::min(hi - lo, 2 * static_cast<size_t>(columns)) + 2);
  auto keep = [&](size_t i) {  // indices come in ascending order; an end may also be a column's extreme
    if (i != kNone && (out.empty() || out.back() < i)) out.push_back(i);
  };
  keep(first);
  if (hi - lo <= 2 * static_cast<size_t>(columns)) {
    for (size_t i = lo; i < hi; ++i)
      if (drawable(i)) keep(i);
    keep(last);
    return out;
  }
  // Column c's points are [begin, end): those lodColumn puts in c. It is monotone in x, so the formula a
  // point-by-point loop would use splits the sorted xs by search: galloping from the column's start (its end
  // is near), then binary between the last two probes, so the probes stay in a few cache lines.
  auto inColumn = [&](size_t i, int c) { return lodColumn(x[i], x0, x1, columns) <= c; };
  auto columnEnd = [&](size_t begin, int c) {
    if (c + 1 == columns) return hi;
    size_t known = begin, probe = begin, step = 1;  // every index below `known` is in column c or before
    while (probe < hi && inColumn(probe, c)) {
      known = probe + 1;
      probe = known + step;
      step *= 2;
    }
    auto from = x.begin() + static_cast<std::ptrdiff_t>(known);
    auto to = x.begin() + static_cast<std::ptrdiff_t>(std::min(probe, hi));
    auto end = std::partition_point(from, to, [&](double v) { return lodColumn(v, x0, x1, columns) <= c; });
    return static_cast<size_t>(end - x.begin());
  };
  size_t begin = lo;
  for (int c = 0; c < columns && begin < hi; ++c) {
    const size_t end = columnEnd(begin, c);
    Extremes e{y, floor};
    // With summaries, the whole blocks inside the column are read from them, the partial ones at its ends value
    // by value, in index order: only a strictly smaller (larger) value replaces the one held, so the result is
    // the plain scan's.
    const size_t firstBlock = (begin + kBlock - 1) / kBlock, endBlock = end / kBlock;
    if (blocks && endBlock > firstBlock) {
      e.scan(begin, firstBlock * kBlock);
      for (size_t b = firstBlock; b < endBlock; ++b) e.offer(blocks->blocks[b]);
      e.scan(endBlock * kBlock, end);
    } else {
      e.scan(begin, end);
    }
    if (e.iMin != kNone) {
      keep(std::min(e.iMin, e.iMax));
      keep(std::max(e.iMin, e.iMax));
    }
    begin = end;
  }
  keep(last);
  return out;
}

}  // namespace

int lodColumn(double x, double x0, double x1, int columns) {
  if (!(x1 > x0) || columns <= 1) return 0;
  double c = std::floor((x - x0) * (columns / (x1 - x0)));
  if (!(c > 0)) return 0;  // also NaN
  return c >= columns ? columns - 1 : static_cast<int>(c);
}

MinMaxBlocks minMaxBlocks(std::span<const double> y, bool positiveOnly) {
  MinMaxBlocks blocks;
  blocks.size = y.size();
  blocks.positiveOnly = positiveOnly;
  blocks.blocks.resize((y.size() + kBlock - 1) / kBlock);
  for (size_t b = 0; b < blocks.blocks.size(); ++b) {
    Extremes e{y, floorOf(positiveOnly)};
    e.scan(b * kBlock, std::min(y.size(), (b + 1) * kBlock));
    blocks.blocks[b] = {e.vMin, e.vMax, e.iMin, e.iMax};
  }
  return blocks;
}

std::vector<size_t> minMaxPerColumn(std::span<const double> x, std::span<const double> y, double x0, double x1,
                                    int columns, bool positiveOnly) {
  return reduce(x, y, nullptr, x0, x1, columns, positiveOnly);
}

std::vector<size_t> minMaxPerColumn(std::span<const double> x, std::span<const double> y, const MinMaxBlocks& blocks,
                                    double x0, double x1, int columns, bool positiveOnly) {
  return reduce(x, y, &blocks, x0, x1, columns, positiveOnly);
}

}  // namespace tsr::inspect
