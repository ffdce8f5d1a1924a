#pragma once
// Level of detail for dense metric curves: a series of a million points reduced to what a plot W pixels wide can
// show, without losing a spike. Each pixel column keeps the point with the smallest and the point with the
// largest value among those that fall in it, so the line drawn through what is kept reaches the same lowest and
// highest pixel in every column as the line through all the points. Samplers that keep every k-th point
// (TensorBoard and W&B draw about a thousand) miss a one-step spike with probability 1 - 1/k; this keeps it at
// every zoom. A frame finds the columns' ends by galloping search from one column to the next, then passes over
// the visible values, or, with a series' block summaries (MinMaxBlocks), over a column's summaries and the
// values at its two ends only.
// Nothing here knows Qt: the Metrics panel turns the kept indices into its chart's points.
#include <cstddef>
#include <span>
#include <vector>

namespace tsr::inspect {

// The pixel column of x in a plot whose `columns` columns split [x0, x1] evenly:
// floor((x - x0) * (columns / (x1 - x0))), clamped to [0, columns - 1] (x1 itself is in the last column).
// Every x is in column 0 when x1 <= x0. Non-decreasing in x.
int lodColumn(double x, double x0, double x1, int columns);

// The indices, ascending, of the points of one series to draw in a plot of `columns` pixel columns over
// [x0, x1]. `x` is non-decreasing (steps, tokens, seconds) and as long as `y`.
//   - Of the points with x in [x0, x1], each column (lodColumn) keeps the index of its smallest y and of its
//     largest y (the first of equal values), in index order, or one index when both are the same point.
//   - The line's ends are kept: the nearest drawable point before x0, so that the line runs on to the plot's
//     left edge, or when there is none the first drawable point in the range; the same after x1.
//   - A range that holds at most 2 * columns points keeps all of them.
// So at most 2 * columns + 2 indices. A point whose y is not finite, or is not positive when `positiveOnly` (a
// log axis), is not drawable: it is never kept and never a column's minimum or maximum.
// Block summaries of one series: for each block of kBlock consecutive points, its smallest and its largest
// drawable value and their indices (the first of equal values; kNone when the block has none). Built once per
// series (O(n)); a column that spans whole blocks is then reduced from their summaries, read in order, and a
// million points in 1,500 columns cost some 16,000 summaries and 100,000 values a frame instead of a million.
struct MinMaxBlocks {
  static constexpr size_t kBlock = 64;
  static constexpr size_t kNone = static_cast<size_t>(-1);
  struct Block {
    double min = 0, max = 0;
    size_t iMin = kNone, iMax = kNone;
  };
  std::vector<Block> blocks;
  size_t size = 0;            // points summarised
  bool positiveOnly = false;  // what "drawable" meant
};
MinMaxBlocks minMaxBlocks(std::span<const double> y, bool positiveOnly = false);

std::vector<size_t> minMaxPerColumn(std::span<const double> x, std::span<const double> y, double x0, double x1,
                                    int columns, bool positiveOnly = false);
// The same indices, read through y's block summaries (built with the same positiveOnly over the same y).
std::vector<size_t> minMaxPerColumn(std::span<const double> x, std::span<const double> y, const MinMaxBlocks& blocks,
                                    double x0, double x1, int columns, bool positiveOnly = false);

}  // namespace tsr::inspect
