#pragma once
// Metrics of a model's logits against integer labels, written with the Array API so that they run inside the
// jitted training and evaluation steps. Under data parallelism their sums are reductions over the whole
// (sharded) batch axis, so every device computes them from the global batch.
#include <vector>

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

// What meanIou pools over an evaluation's batches (nn::Context::sowPooled): [2 * C] f32, each class's
// intersection (the pixels predicted and labelled c) then each class's union (predicted or labelled c).
Array meanIouSums(const Array& logits, const Array& labels);
// meanIou from those sums added over batches: each class's intersection / union, averaged over the classes whose
// union is not empty. 0 when none is (no pixels at all).
double meanIouOfSums(const std::vector<double>& sums);

}  // namespace tsr::optim
