// The min/max-per-pixel-column reduction of dense metric curves (engine/inspect/metric_lod.h), against a naive
// reference: every point visited, its column computed by the formula the header gives, each column's smallest
// and largest value kept. Random walks with single-point spikes, zoomed ranges, ties, NaN and a log axis; read
// value by value and through the block summaries, which must give the same indices.
#include "tests/check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include "engine/inspect/metric_lod.h"

using namespace tsr;
using inspect::minMaxPerColumn;

namespace {

// The minimum and maximum drawable value of each column, visiting every point (the reference).
struct ColumnExtremes {
  std::vector<double> min, max;
  std::vector<bool> any;
};

ColumnExtremes naiveExtremes(const std::vector<double>& x, const std::vector<double>& y, double x0, double x1,
                             int columns, bool positiveOnly) {
  ColumnExtremes e{std::vector<double>(columns, INFINITY), std::vector<double>(columns, -INFINITY),
                   std::vector<bool>(columns, false)};
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < x0 || x[i] > x1 || !std::isfinite(y[i]) || (positiveOnly && y[i] <= 0)) continue;
    int c = static_cast<int>(std::floor((x[i] - x0) * (columns / (x1 - x0))));
    c = std::clamp(c, 0, columns - 1);
    e.min[c] = std::min(e.min[c], y[i]);
    e.max[c] = std::max(e.max[c], y[i]);
    e.any[c] = true;
  }
  return e;
}

// A noisy decaying loss of n steps with single-step spikes, alternately up and down, at random steps: one in
// each of `spikes` equal stretches of the run, in its first half, so no two are closer than n / (2 * spikes).
struct Walk {
  std::vector<double> x, y;
  std::vector<size_t> spikes;
};

Walk noisyLoss(size_t n, int spikes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 0.05);
  Walk w;
  for (size_t i = 0; i < n; ++i) {
    w.x.push_back(static_cast<double>(i));
    w.y.push_back(2.0 + 8.0 / (1.0 + 0.01 * static_cast<double>(i)) + noise(rng));
  }
  const size_t stretch = n / static_cast<size_t>(spikes);
  std::uniform_int_distribution<size_t> offset(1, stretch / 2);
  for (int s = 0; s < spikes; ++s) {
    size_t i = static_cast<size_t>(s) * stretch + offset(rng);
    w.y[i] += s % 2 == 0 ? 25.0 : -25.0;
    w.spikes.push_back(i);
  }
  return w;
}

// Checks the reduction of (x, y) over [x0, x1] against the reference: the size bound, ascending indices (so x
// is monotone along the drawn line), every column's extremes present among the kept points of that column.
std::vector<size_t> checkAgainstNaive(const std::vector<double>& x, const std::vector<double>& y, double x0,
                                      double x1, int columns, bool positiveOnly = false) {
  std::vector<size_t> kept = minMaxPerColumn(x, y, x0, x1, columns, positiveOnly);
  INFO("range [" << x0 << ", " << x1 << "], " << columns << " columns, " << x.size() << " points");
  // Through the block summaries: the same indices.
  TSR_COMPARE(minMaxPerColumn(x, y, inspect::minMaxBlocks(y, positiveOnly), x0, x1, columns, positiveOnly), kept);
  REQUIRE(kept.size() <= 2 * static_cast<size_t>(columns) + 2);
  for (size_t k = 1; k < kept.size(); ++k) {
    REQUIRE(kept[k - 1] < kept[k]);
    REQUIRE(x[kept[k - 1]] <= x[kept[k]]);
  }
  auto drawable = [&](size_t i) { return std::isfinite(y[i]) && (!positiveOnly || y[i] > 0); };
  for (size_t i : kept) REQUIRE(drawable(i));
  // The line's ends: the nearest drawable point outside the range, or else the first (last) one inside it.
  std::optional<size_t> before, firstIn, lastIn, after;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!drawable(i)) continue;
    if (x[i] < x0) {
      before = i;
    } else if (x[i] <= x1) {
      if (!firstIn) firstIn = i;
      lastIn = i;
    } else if (!after) {
      after = i;
    }
  }
  if (std::optional<size_t> start = before ? before : firstIn) REQUIRE(kept.front() == *start);
  if (std::optional<size_t> end = after ? after : lastIn) REQUIRE(kept.back() == *end);
  ColumnExtremes ref = naiveExtremes(x, y, x0, x1, columns, positiveOnly);
  std::vector<std::multiset<double>> keptByColumn(columns);
  std::vector<size_t> extremesKept(columns, 0);  // kept points in each column other than the line's ends
  for (size_t k = 0; k < kept.size(); ++k) {
    const size_t i = kept[k];
    if (x[i] < x0 || x[i] > x1) continue;
    int c = std::clamp(static_cast<int>(std::floor((x[i] - x0) * (columns / (x1 - x0)))), 0, columns - 1);
    keptByColumn[c].insert(y[i]);
    extremesKept[c] += k != 0 && k + 1 != kept.size();
  }
  for (int c = 0; c < columns; ++c) {
    if (!ref.any[c]) {
      REQUIRE(keptByColumn[c].empty());
      continue;
    }
    INFO("column " << c);
    REQUIRE(keptByColumn[c].count(ref.min[c]) > 0);
    REQUIRE(keptByColumn[c].count(ref.max[c]) > 0);
  }
  // Reduced, each column keeps two points at most besides the line's ends; otherwise every drawable point in
  // the range is kept.
  size_t visible = 0, visibleDrawable = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < x0 || x[i] > x1) continue;
    ++visible;
    visibleDrawable += drawable(i);
  }
  size_t keptVisible = 0;
  for (int c = 0; c < columns; ++c) {
    if (visible > 2 * static_cast<size_t>(columns)) REQUIRE(extremesKept[c] <= 2);
    keptVisible += keptByColumn[c].size();
  }
  if (visible <= 2 * static_cast<size_t>(columns)) TSR_COMPARE(keptVisible, visibleDrawable);
  return kept;
}

}  // namespace

TEST_CASE("lodColumnSplitsTheRangeEvenly") {
  TSR_COMPARE(inspect::lodColumn(0, 0, 10, 5), 0);
  TSR_COMPARE(inspect::lodColumn(1.999, 0, 10, 5), 0);
  TSR_COMPARE(inspect::lodColumn(2, 0, 10, 5), 1);
  TSR_COMPARE(inspect::lodColumn(9.99, 0, 10, 5), 4);
  TSR_COMPARE(inspect::lodColumn(10, 0, 10, 5), 4);  // x1 is in the last column
  TSR_COMPARE(inspect::lodColumn(-3, 0, 10, 5), 0);  // clamped
  TSR_COMPARE(inspect::lodColumn(42, 0, 10, 5), 4);
  TSR_COMPARE(inspect::lodColumn(7, 5, 5, 5), 0);    // an empty range is one column
}

TEST_CASE("aSmallExampleByHand") {
  // 10 points, 2 columns over [0, 9]: column = floor(x * 2 / 9), so x 0..4 are column 0 and x 5..9 column 1.
  // Column 0: min 1 at index 1, max 7 at index 2. Column 1: min 0 at index 5, max 9 at index 6. Nothing lies
  // outside the range, so the line's ends are the first and the last point.
  std::vector<double> x = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<double> y = {5, 1, 7, 3, 2, 0, 9, 4, 4, 8};
  TSR_COMPARE(minMaxPerColumn(x, y, 0, 9, 2), (std::vector<size_t>{0, 1, 2, 5, 6, 9}));
  // The maximum before the minimum stays in index order.
  y = {5, 7, 1, 3, 2, 9, 0, 4, 4, 8};
  TSR_COMPARE(minMaxPerColumn(x, y, 0, 9, 2), (std::vector<size_t>{0, 1, 2, 5, 6, 9}));
  // A flat column keeps one point: its first (here also the line's start).
  y = {3, 3, 3, 3, 3, 0, 9, 4, 4, 8};
  TSR_COMPARE(minMaxPerColumn(x, y, 0, 9, 2), (std::vector<size_t>{0, 5, 6, 9}));
  y = {4, 3, 3, 3, 3, 0, 9, 4, 4, 9};
  TSR_COMPARE(minMaxPerColumn(x, y, 0, 9, 2), (std::vector<size_t>{0, 1, 5, 6, 9}));
  // Zoomed to [2, 7] (6 points, more than 2 * 2): the columns are x 2..4 and 5..7, and the nearest points
  // outside, x 1 and x 8, are kept so the line reaches the plot's edges.
  y = {5, 1, 7, 3, 2, 0, 9, 4, 4, 8};
  TSR_COMPARE(minMaxPerColumn(x, y, 2, 7, 2), (std::vector<size_t>{1, 2, 4, 5, 6, 8}));
  // Few points for the columns: all of them, and the neighbours.
  TSR_COMPARE(minMaxPerColumn(x, y, 2.5, 5.5, 4), (std::vector<size_t>{2, 3, 4, 5, 6}));
  TSR_COMPARE(minMaxPerColumn(x, y, 0, 9, 100).size(), size_t(10));
  // Nothing visible: the points on either side still draw the line across the plot.
  TSR_COMPARE(minMaxPerColumn(x, y, 3.2, 3.8, 10), (std::vector<size_t>{3, 4}));
  TSR_COMPARE(minMaxPerColumn(x, y, 20, 30, 10), (std::vector<size_t>{9}));
  TSR_COMPARE(minMaxPerColumn(std::vector<double>{}, std::vector<double>{}, 0, 1, 10), (std::vector<size_t>{}));
}

TEST_CASE("everySpikeSurvivesTheReduction") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Walk w = noisyLoss(200'000, 40, seed);
    for (int columns : {1, 3, 640, 1597}) checkAgainstNaive(w.x, w.y, 0, w.x.back(), columns);
    // With columns narrower than the gaps between spikes, each spike is its column's maximum (or minimum): it is
    // drawn, whichever step it is at. Sampling every k-th step would draw about one in k of them.
    for (int columns : {640, 1597}) {
      std::vector<size_t> kept = minMaxPerColumn(w.x, w.y, 0, w.x.back(), columns);
      for (size_t s : w.spikes) REQUIRE_MESSAGE(std::binary_search(kept.begin(), kept.end(), s), "spike at " << s);
    }
    // Zoomed: ranges that start and end between steps, and one narrower than the columns.
    checkAgainstNaive(w.x, w.y, 12'345.5, 150'000.25, 997);
    checkAgainstNaive(w.x, w.y, 99'000, 101'000, 1600);
    checkAgainstNaive(w.x, w.y, 500.5, 520.5, 1600);
  }
}

TEST_CASE("unevenAndRepeatedX") {
  // Wall-clock x: uneven gaps and runs of equal times (several steps logged in one clock tick).
  std::mt19937 rng(7);
  std::exponential_distribution<double> gap(50.0);
  std::uniform_real_distribution<double> value(-1, 1);
  std::vector<double> x, y;
  double t = 1000;
  for (int i = 0; i < 50'000; ++i) {
    if (i % 7 != 0) t += gap(rng);
    x.push_back(t);
    y.push_back(value(rng));
  }
  checkAgainstNaive(x, y, x.front(), x.back(), 800);
  checkAgainstNaive(x, y, x[1000], x[1000] + 3.0, 333);
  checkAgainstNaive(x, y, x[1000], x[1000] + 300.0, 333);
}

TEST_CASE("notDrawablePointsAreNeverKept") {
  Walk w = noisyLoss(100'000, 10, 11);
  std::mt19937 rng(5);
  std::uniform_int_distribution<size_t> at(0, w.y.size() - 1);
  for (int i = 0; i < 500; ++i) w.y[at(rng)] = std::numeric_limits<double>::quiet_NaN();
  for (int i = 0; i < 50; ++i) w.y[at(rng)] = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 2000; ++i) {  // hidden on a log axis
    size_t k = at(rng);
    w.y[k] = -std::abs(w.y[k]);
  }
  checkAgainstNaive(w.x, w.y, 0, w.x.back(), 1000);
  checkAgainstNaive(w.x, w.y, 0, w.x.back(), 1000, true);
  checkAgainstNaive(w.x, w.y, 30'000, 31'000, 1000, true);
  // A neighbour outside the range that is not drawable is skipped for the nearest one that is.
  std::vector<double> x = {0, 1, 2, 3, 4, 5, 6};
  std::vector<double> y = {1, -1, NAN, 2, 3, -5, 4};
  TSR_COMPARE(minMaxPerColumn(x, y, 2.5, 4.5, 10, true), (std::vector<size_t>{0, 3, 4, 6}));
  TSR_COMPARE(minMaxPerColumn(x, y, 2.5, 4.5, 10, false), (std::vector<size_t>{1, 3, 4, 5}));
}

TEST_CASE("blockSummariesKeepTheFirstOfEqualValues") {
  // Values from a handful of levels: every column and block has ties for its minimum and maximum.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> level(0, 4);
  std::vector<double> x, y;
  for (int i = 0; i < 30'000; ++i) {
    x.push_back(i);
    y.push_back(level(rng) == 0 ? NAN : level(rng));
  }
  for (int columns : {7, 100, 229, 1000})
    for (bool positiveOnly : {false, true}) {
      checkAgainstNaive(x, y, 0, 29'999, columns, positiveOnly);
      checkAgainstNaive(x, y, 1'000.5, 20'063, columns, positiveOnly);
    }
  inspect::MinMaxBlocks b = inspect::minMaxBlocks(y);
  TSR_COMPARE(b.blocks.size(), size_t((30'000 + 63) / 64));
  for (size_t k = 0; k < b.blocks.size(); ++k) {
    // The first index of the block's smallest and largest value, found here by a plain loop.
    size_t iMin = inspect::MinMaxBlocks::kNone, iMax = inspect::MinMaxBlocks::kNone;
    for (size_t i = k * 64; i < std::min(y.size(), (k + 1) * 64); ++i) {
      if (std::isnan(y[i])) continue;
      if (iMin == inspect::MinMaxBlocks::kNone || y[i] < y[iMin]) iMin = i;
      if (iMax == inspect::MinMaxBlocks::kNone || y[i] > y[iMax]) iMax = i;
    }
    TSR_COMPARE(b.blocks[k].iMin, iMin);
    TSR_COMPARE(b.blocks[k].iMax, iMax);
    if (iMin != inspect::MinMaxBlocks::kNone) {
      TSR_COMPARE(b.blocks[k].min, y[iMin]);
      TSR_COMPARE(b.blocks[k].max, y[iMax]);
    }
  }
}
