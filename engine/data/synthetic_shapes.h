#pragma once
// A segmentation dataset drawn from a seed, so that a project needs no data files: each image holds a few filled
// shapes (circles, axis-aligned rectangles, upward triangles) of random sizes and colours, drawn in turn (a later
// shape covers an earlier one) over a background of one random colour, with Gaussian noise on every pixel. The
// mask gives each pixel the class of the shape on top there (1 circle, 2 rectangle, 3 triangle), 0 for the
// background. Each kind of shape has a tint of its own (bright in one channel), varied shape by shape, so that
// colour hints at the class and the outline decides where it does not (a background as bright, one channel).
// Sample i is a function of (seed, i) alone, computed with integer arithmetic of our own (no standard
// distribution, whose results differ between standard libraries), so it is the same on every machine.
#include <cstdint>
#include <string>

#include "engine/core/result.h"

namespace tsr::data {

struct ShapesOptions {
  int64_t size = 32;      // pixels a side
  int64_t channels = 3;
  int64_t classes = 4;    // the background and 1 to 3 kinds of shape: 2 to 4
  int64_t maxShapes = 3;  // each image holds 1 to maxShapes shapes
  double noise = 0.1;     // standard deviation of the noise added to every pixel (colours lie in [0, 1])
  uint64_t seed = 0;
};

// The shape kinds a mask can hold besides the background.
constexpr int64_t kShapeKinds = 3;

// What is wrong with the options, naming `where` (the project file and section) and the key; ok when none.
Status checkShapesOptions(const ShapesOptions& options, const std::string& where);

// Sample `index`: image [channels, size, size] (CHW) into `chw`, its mask [size, size] into `mask`.
void renderShapes(const ShapesOptions& options, int64_t index, float* chw, int32_t* mask);

}  // namespace tsr::data
