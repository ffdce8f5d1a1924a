#pragma once
// Metrics of a model's logits against integer labels, written with the Array API so that they run inside the
// jitted training and evaluation steps. Under data parallelism their sums are reductions over the whole
// (sharded) batch axis, so every device computes them from the global batch.
#include "engine/transform/api.h"

namespace tsr::optim {

// The fraction of positions whose argmax over the last axis equals the label. logits: [..., C] (a classifier's
// [B, C], a segmentation model's [B, H, W, C]), labels: [...] integers -> f32 scalar. For a segmentation model
// this is the pixel accuracy.
Array accuracy(const Array& logits, const Array& labels);

// Intersection over union of the argmax prediction and the labels, per class, averaged over the classes present
// in the prediction or the labels (the others have no union and are left out): sklearn's
// jaccard_score(average="macro") with its default labels, the classes of y_true and y_pred. logits: [..., C],
// labels: [...] integers in [0, C) -> f32 scalar in [0, 1].
Array meanIou(const Array& logits, const Array& labels);

}  // namespace tsr::optim
