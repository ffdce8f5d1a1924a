#include "engine/optim/metrics.h"

#include <numeric>

namespace tsr::optim {

namespace {

// Every axis but the last (the classes) of a [..., C] array.
Axes leadingAxes(const Array& x) {
  Axes axes(static_cast<size_t>(x.rank() - 1));
  std::iota(axes.begin(), axes.end(), int64_t(0));
  return axes;
}

// Per class [C]: the pixels predicted and labelled c, and those predicted or labelled c.
std::pair<Array, Array> intersectionAndUnion(const Array& logits, const Array& labels) {
  const int64_t classes = logits.dim(-1);
  // One-hot prediction and labels: [..., C]; their products and sums per class count pixels.
  Array predicted = oneHot(argmax(logits, -1, DType::I32), classes, DType::F32);
  Array truth = oneHot(astype(labels, DType::I32), classes, DType::F32);
  const Axes axes = leadingAxes(predicted);
  Array intersection = sum(predicted * truth, axes);
  return {intersection, sum(predicted, axes) + sum(truth, axes) - intersection};
}

}  // namespace

Array accuracy(const Array& logits, const Array& labels) {
  Array predicted = argmax(logits, -1, DType::I32);
  return mean(astype(equal(predicted, astype(labels, DType::I32)), DType::F32));
}

Array meanIouSums(const Array& logits, const Array& labels) {
  auto [intersection, unionCount] = intersectionAndUnion(logits, labels);
  return concatenate({intersection, unionCount}, 0);
}

double meanIouOfSums(const std::vector<double>& sums) {
  const size_t classes = sums.size() / 2;
  double total = 0;
  size_t present = 0;
  for (size_t c = 0; c < classes; ++c) {
    const double unionCount = sums[classes + c];
    if (unionCount <= 0) continue;
    total += sums[c] / unionCount;
    ++present;
  }
  return present ? total / static_cast<double>(present) : 0.0;
}

Array meanIou(const Array& logits, const Array& labels) {
  auto [intersection, unionCount] = intersectionAndUnion(logits, labels);
  Array present = greater(unionCount, Array::scalar(0.0, DType::F32));
  Array iou = where(present, intersection / maximum(unionCount, Array::scalar(1.0, DType::F32)),
                    Array::scalar(0.0, DType::F32));
  Array presentCount = sum(astype(present, DType::F32));
  return sum(iou) / maximum(presentCount, Array::scalar(1.0, DType::F32));
}

}  // namespace tsr::optim
