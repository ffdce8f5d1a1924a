// Conformance cases for softmax_cross_entropy and its gradient. The references work each row in double from the
// definitions: lse = log(sum_j exp(x_j)) (shifted by the row's max, -inf entries contributing nothing), loss =
// lse - x[label] (NaN for a label outside [0, V)), and dx_j = exp(x_j - lse) (dloss + dlse) - [j = label] dloss.
// The harness's finite differences check the forward op's vjp (the gradient op) and the gradient op's own.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

using ir::OpCode;

constexpr double kInf = std::numeric_limits<double>::infinity();

double rowLse(const HostTensor& x, int64_t row, int64_t classes) {
  double m = -kInf;
  for (int64_t j = 0; j < classes; ++j) m = std::max(m, x.get(row * classes + j));
  if (m == -kInf) return -kInf;
  double s = 0;
  for (int64_t j = 0; j < classes; ++j) s += std::exp(x.get(row * classes + j) - m);
  return m + std::log(s);
}

std::vector<HostTensor> forwardRef(const std::vector<HostTensor>& in) {
  const HostTensor &x = in[0], &labels = in[1];
  const int64_t classes = x.aval.shape[x.aval.rank() - 1];
  const Aval rows{labels.aval.shape, x.aval.dtype == DType::BF16 ? DType::F32 : x.aval.dtype};
  HostTensor loss = HostTensor::zeros(rows), lse = HostTensor::zeros(rows);
  for (int64_t r = 0; r < labels.numel(); ++r) {
    const double l = rowLse(x, r, classes);
    const double label = labels.get(r);
    lse.set(r, l);
    loss.set(r, label >= 0 && label < static_cast<double>(classes)
                    ? l - x.get(r * classes + static_cast<int64_t>(label))
                    : std::numeric_limits<double>::quiet_NaN());
  }
  return {loss, lse};
}

std::vector<HostTensor> gradRef(const std::vector<HostTensor>& in) {
  const HostTensor &x = in[0], &labels = in[1], &lse = in[2], &dloss = in[3], &dlse = in[4];
  const int64_t classes = x.aval.shape[x.aval.rank() - 1];
  HostTensor dx = HostTensor::zeros(x.aval);
  for (int64_t r = 0; r < labels.numel(); ++r)
    for (int64_t j = 0; j < classes; ++j) {
      const double p = std::exp(x.get(r * classes + j) - lse.get(r));
      dx.set(r * classes + j, p * (dloss.get(r) + dlse.get(r)) -
                                  (labels.get(r) == static_cast<double>(j) ? dloss.get(r) : 0.0));
    }
  return {dx};
}

// Labels drawn from [0, classes), or with `outOfRange` the first row's label set to `classes` and the last's to -1
// (for signed dtypes).
HostTensor randomLabels(const Shape& rows, DType t, int64_t classes, std::mt19937& rng, bool outOfRange) {
  HostTensor l = HostTensor::zeros(Aval{rows, t});
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(classes - 1, 0));
  for (int64_t i = 0; i < l.numel(); ++i) l.set(i, static_cast<double>(pick(rng)));
  if (outOfRange && l.numel() > 0) {
    l.set(0, static_cast<double>(classes));
    if (t == DType::I32 || t == DType::I64) l.set(l.numel() - 1, -1);
  }
  return l;
}

void addCrossEntropy(std::vector<OpCase>& cases, std::mt19937& rng, DType t, const Shape& shape, DType labelType,
                     bool outOfRange = false, bool masked = false) {
  const int64_t classes = shape[shape.rank() - 1];
  std::vector<int64_t> lead(shape.dims().begin(), shape.dims().end() - 1);
  HostTensor x = randomTensor(Aval{shape, t}, rng, -4.0, 4.0);
  HostTensor labels = randomLabels(Shape(lead), labelType, classes, rng, outOfRange);
  if (masked)  // every other entry -inf, as a masked vocabulary gives, except at the label
    for (int64_t i = 0; i < x.numel(); ++i)
      if (i % 2 == 1 && static_cast<double>(i % classes) != labels.get(i / classes)) x.set(i, -kInf);
  const std::string what = fmt::format("{} {} labels {}{}{}", dtypeName(t), shape.toString(), dtypeName(labelType),
                                       outOfRange ? " out of range" : "", masked ? " masked" : "");
  OpCase c;
  c.label = "softmax_cross_entropy " + what;
  c.op = OpCode::SoftmaxCrossEntropy;
  c.attrs = ir::NoAttrs{};
  c.inputs = {x, labels};
  c.reference = forwardRef;
  if (t != DType::F64) c.rtol = c.atol = 1e-5;  // bf16 logits: exact in f32, the rows computed in f32
  cases.push_back(c);

  // The gradient at the forward pass's own lse, with random cotangents for the loss and the lse.
  const std::vector<HostTensor> fwd = forwardRef({x, labels});
  OpCase gc;
  gc.label = "softmax_cross_entropy_grad " + what;
  gc.op = OpCode::SoftmaxCrossEntropyGrad;
  gc.attrs = ir::NoAttrs{};
  gc.inputs = {x, labels, fwd[1], randomTensor(fwd[1].aval, rng), randomTensor(fwd[1].aval, rng)};
  gc.reference = gradRef;
  if (t == DType::F32) gc.rtol = gc.atol = 1e-5;
  if (t == DType::BF16) gc.rtol = gc.atol = 4e-3;  // the f32 gradient rounded once to bf16 (2^-9 relative)
  cases.push_back(gc);
}

}  // namespace

void addCrossEntropyCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (DType t : {DType::F32, DType::F64}) {
    addCrossEntropy(cases, rng, t, Shape{1}, DType::I32);
    addCrossEntropy(cases, rng, t, Shape{4, 7}, DType::I32);
    addCrossEntropy(cases, rng, t, Shape{2, 3, 13}, DType::I64);      // two leading dims, an odd class count
    addCrossEntropy(cases, rng, t, Shape{3, 1029}, DType::U32);       // past the kernels' 8-lane and 1024 blocks
    addCrossEntropy(cases, rng, t, Shape{5, 9}, DType::I32, true);    // labels V and -1: NaN losses
    addCrossEntropy(cases, rng, t, Shape{4, 10}, DType::I64, false, true);
    addCrossEntropy(cases, rng, t, Shape{0, 5}, DType::I32);          // no rows
  }
  // bf16 logits (a language model's head under autocast): row values in f32, the gradient in bf16.
  addCrossEntropy(cases, rng, DType::BF16, Shape{4, 7}, DType::I32);
  addCrossEntropy(cases, rng, DType::BF16, Shape{3, 1029}, DType::I64);
  addCrossEntropy(cases, rng, DType::BF16, Shape{5, 9}, DType::I32, true);
  addCrossEntropy(cases, rng, DType::BF16, Shape{4, 10}, DType::I64, false, true);
}

}  // namespace tsr::test
