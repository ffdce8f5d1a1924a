// Softmax cross-entropy with integer labels, as optax.softmax_cross_entropy_with_integer_labels and PyTorch's
// fused cross_entropy: one op where a model would otherwise write max, exp, sum, log and a gather over the
// logits, and one for its gradient where autodiff would write exp, a scatter into zeros and an add. A language
// model's logits are its largest activation ([tokens, vocab]); the composite reads them four times forward and
// writes the gradient in three passes, the ops read them once forward and once backward.
//
//   softmax_cross_entropy (logits, labels) -> (loss, lse)
//     logits [..., V] f32, f64 or bf16, labels [...] of any integer dtype; loss [...] = lse - logits[..., label]
//     and lse [...] = log(sum_j exp(logits[..., j])) (entries of -inf count as zero; a row of -inf has lse -inf),
//     both of the logits' dtype, f32 for bf16 logits (computed in f32, as autocast runs cross_entropy in f32
//     without a widened copy of the logits). A label outside [0, V) gives a NaN loss, as jnp.take_along_axis fills out-of-range
//     indices with NaN, so a bad label shows instead of training on the wrong class.
//   softmax_cross_entropy_grad (logits, labels, lse, dloss, dlse) -> dlogits
//     the pullback of both results: dlogits = exp(logits - lse) (dloss + dlse) - onehot(label) dloss (no one-hot
//     term for a label outside [0, V)), of the logits' dtype; lse, dloss and dlse are the row values' dtype.
//
// Leading dims are any number (the op is rowwise), so batching moves the vmapped dim in front and sharding splits
// every leading dim; the class dim stays whole, as reduce_max's axes do. The gradient op's own vjp is the
// composite's, so second derivatives work.
#include <immintrin.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"

namespace tsr::ops {

namespace {

#include "engine/ops/vmath_avx2.inc"

using ir::OpCode;
using ir::ShardingRule;

constexpr const char* kFwd = "softmax_cross_entropy";
constexpr const char* kGrad = "softmax_cross_entropy_grad";

// The row values' dtype: the logits', f32 for bf16 logits.
DType rowDType(DType logits) { return logits == DType::BF16 ? DType::F32 : logits; }

// The logits and labels of either op: the rows' aval ([...] of rowDType), or an error naming the op.
Result<Aval> checkLogits(std::string_view op, std::span<const Aval> ops) {
  const Aval &x = ops[0], &labels = ops[1];
  if (x.dtype != DType::F32 && x.dtype != DType::F64 && x.dtype != DType::BF16)
    return opError(op, ops, "logits must be f32, f64 or bf16");
  if (x.rank() < 1) return opError(op, ops, "logits need a class dim (rank 1 or more)");
  if (!isInteger(labels.dtype)) return opError(op, ops, "labels must be integers (class indices)");
  std::vector<int64_t> rows(x.shape.dims().begin(), x.shape.dims().end() - 1);
  if (labels.shape != Shape(rows))
    return opError(op, ops, fmt::format("labels must have the logits' shape without its last dim, {}",
                                        Shape(rows).toString()));
  return Aval{Shape(rows), rowDType(x.dtype)};
}

Result<std::vector<Aval>> inferForward(std::span<const Aval> ops, const ir::Attrs&) {
  TSR_TRY(checkArity(kFwd, ops, 2));
  TSR_ASSIGN(Aval rows, checkLogits(kFwd, ops));
  return std::vector<Aval>{rows, rows};
}

Result<std::vector<Aval>> inferGrad(std::span<const Aval> ops, const ir::Attrs&) {
  TSR_TRY(checkArity(kGrad, ops, 5));
  TSR_ASSIGN(Aval rows, checkLogits(kGrad, ops));
  for (size_t i = 2; i < 5; ++i)
    if (!(ops[i] == rows)) return opError(kGrad, ops, fmt::format("lse, dloss and dlse must be {}", rows.toString()));
  return std::vector<Aval>{ops[0]};
}

// Per logit: a subtraction, an exp and an add forward (the max is a compare); the gradient an exp, a
// subtraction and a multiply.
ir::Cost forwardCost(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  ir::Cost c = movementCost(in, out);
  c.flops = 4.0 * static_cast<double>(in[0].numel());
  return c;
}

ir::Cost gradCost(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  ir::Cost c = movementCost(in, out);
  c.flops = 3.0 * static_cast<double>(in[0].numel());
  return c;
}

// ---- CPU kernels: rows split over the lent threads --------------------------------------------------------------

int64_t labelAt(const ir::TensorView& labels, int64_t row) {
  switch (labels.aval.dtype) {
    case DType::I32: return labels.as<int32_t>()[row];
    case DType::I64: return labels.as<int64_t>()[row];
    case DType::U8: return labels.as<uint8_t>()[row];
    case DType::U32: return labels.as<uint32_t>()[row];
    default: return -1;
  }
}

float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

double hsum8(__m256 v) {
  alignas(32) float f[8];
  _mm256_store_ps(f, v);
  double s = 0;
  for (float x : f) s += x;
  return s;
}

// log(sum exp(x)) of one f32 row: its max, then the exps (8 lanes, the vector exp of fused loops) summed in f32
// over blocks of 1024 and the blocks in double. NaN propagates through the exps; -inf entries give exp 0.
float rowLse(const float* x, int64_t n) {
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) mv = _mm256_max_ps(_mm256_loadu_ps(x + j), mv);
  float m = hmax8(mv);
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  if (m == -std::numeric_limits<float>::infinity()) {
    for (int64_t i = 0; i < n; ++i)
      if (std::isnan(x[i])) return x[i];
    return m;  // every entry -inf (or none): the sum is 0
  }
  const __m256 shift = _mm256_set1_ps(m);
  double total = 0;
  for (int64_t b = 0; b < n; b += 1024) {
    const int64_t e = std::min(n, b + 1024);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = b;
    for (; i + 8 <= e; i += 8) acc = _mm256_add_ps(acc, tsr_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), shift)));
    total += hsum8(acc);
    if (i < e) {
      alignas(32) float tail[8];
      for (int k = 0; k < 8; ++k) tail[k] = i + k < e ? x[i + k] - m : -std::numeric_limits<float>::infinity();
      total += hsum8(tsr_exp8(_mm256_load_ps(tail)));
    }
  }
  return static_cast<float>(static_cast<double>(m) + std::log(total));
}

double rowLse(const double* x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    if (std::isnan(x[j])) return x[j];
    m = std::max(m, x[j]);
  }
  if (m == -std::numeric_limits<double>::infinity()) return m;
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - m);
  return m + std::log(s);
}

// dx[j] = exp(x[j] - lse) g over one row (the one-hot term is the caller's).
void rowSoftmaxTimes(const float* x, float lse, float g, float* dx, int64_t n) {
  const __m256 shift = _mm256_set1_ps(lse), gv = _mm256_set1_ps(g);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(dx + j, _mm256_mul_ps(tsr_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), shift)), gv));
  if (j < n) {
    alignas(32) float tail[8];
    for (int k = 0; k < 8; ++k) tail[k] = j + k < n ? x[j + k] - lse : 0.0f;
    _mm256_store_ps(tail, _mm256_mul_ps(tsr_exp8(_mm256_load_ps(tail)), gv));
    for (int64_t k = 0; j + k < n; ++k) dx[j + k] = tail[k];
  }
}

void rowSoftmaxTimes(const double* x, double lse, double g, double* dx, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dx[j] = std::exp(x[j] - lse) * g;
}

struct RowShape {
  int64_t rows = 0, classes = 0;
};

RowShape rowShapeOf(const ir::CpuKernelArgs& a) {
  const Aval& logits = a.inputs[0].aval;
  return {a.inputs[1].aval.numel(), logits.shape[logits.rank() - 1]};
}

// Rows per chunk: about 16k logits each.
int64_t rowGrain(const RowShape& s) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(s.classes, 1)); }

// Row r of the logits as T: in place for f32 and f64; bf16 rows widened (exactly) into `wide`.
template <class T>
const T* rowOf(const ir::TensorView& x, int64_t r, int64_t classes, std::vector<float>& wide) {
  if constexpr (std::is_same_v<T, float>) {
    if (x.aval.dtype == DType::BF16) {
      const bf16* b = x.as<bf16>() + r * classes;
      wide.resize(static_cast<size_t>(classes));
      for (int64_t j = 0; j < classes; ++j) wide[static_cast<size_t>(j)] = static_cast<float>(b[j]);
      return wide.data();
    }
  }
  return x.as<T>() + r * classes;
}

template <class T>
void forwardRows(const ir::CpuKernelArgs& a) {
  const RowShape s = rowShapeOf(a);
  T *loss = a.outputs[0].as<T>(), *lse = a.outputs[1].as<T>();
  a.forChunks(s.rows, rowGrain(s), [&](int64_t lo, int64_t hi, int) {
    std::vector<float> wide;
    for (int64_t r = lo; r < hi; ++r) {
      const T* row = rowOf<T>(a.inputs[0], r, s.classes, wide);
      const T l = rowLse(row, s.classes);
      const int64_t label = labelAt(a.inputs[1], r);
      lse[r] = l;
      loss[r] = label >= 0 && label < s.classes ? l - row[label] : std::numeric_limits<T>::quiet_NaN();
    }
  });
}

// bf16 logits: each row's gradient in f32 (in `wide`, over the widened row), rounded once into dlogits.
template <class T>
void gradRows(const ir::CpuKernelArgs& a) {
  const RowShape s = rowShapeOf(a);
  const T *lse = a.inputs[2].as<T>(), *dloss = a.inputs[3].as<T>(), *dlse = a.inputs[4].as<T>();
  const bool half = a.inputs[0].aval.dtype == DType::BF16;
  a.forChunks(s.rows, rowGrain(s), [&](int64_t lo, int64_t hi, int) {
    std::vector<float> wide, out;
    for (int64_t r = lo; r < hi; ++r) {
      const T* row = rowOf<T>(a.inputs[0], r, s.classes, wide);
      T* dx = a.outputs[0].as<T>() + r * s.classes;
      if constexpr (std::is_same_v<T, float>) {
        if (half) {
          out.resize(static_cast<size_t>(s.classes));
          dx = out.data();
        }
      }
      rowSoftmaxTimes(row, lse[r], dloss[r] + dlse[r], dx, s.classes);
      const int64_t label = labelAt(a.inputs[1], r);
      if (label >= 0 && label < s.classes) dx[label] -= dloss[r];
      if (half) {
        bf16* b = a.outputs[0].as<bf16>() + r * s.classes;
        for (int64_t j = 0; j < s.classes; ++j) b[j] = bf16(static_cast<float>(dx[j]));
      }
    }
  });
}

void forwardKernel(const ir::CpuKernelArgs& a) {
  if (a.inputs[0].aval.dtype == DType::F64) forwardRows<double>(a);
  else forwardRows<float>(a);
}

void gradKernel(const ir::CpuKernelArgs& a) {
  if (a.inputs[0].aval.dtype == DType::F64) gradRows<double>(a);
  else gradRows<float>(a);
}

// ---- Transformation rules ---------------------------------------------------------------------------------------

std::vector<Array> forwardVjp(const ir::VjpArgs& a) {
  if (!a.cotangents[0].valid() && !a.cotangents[1].valid()) return {Array(), Array()};
  Array d = bind1(OpCode::SoftmaxCrossEntropyGrad,
                  {a.operands[0], a.operands[1], a.results[1], cotangentOrZeros(a, 0), cotangentOrZeros(a, 1)},
                  ir::NoAttrs{}, std::source_location::current());
  return {d, Array()};
}

// The gradient op as the composite it fuses, differentiated by autodiff: with p = exp(x - lse) and
// g = dloss + dlse broadcast along the classes, dx = p g - onehot(labels) dloss.
std::vector<Array> gradVjp(const ir::VjpArgs& a) {
  if (!a.cotangents[0].valid()) return {Array(), Array(), Array(), Array(), Array()};
  const Array labels = a.operands[1];
  auto composite = [labels](const std::vector<Array>& in) {
    const Array &lse = in[1], &dloss = in[2], &dlse = in[3];
    const Array x = astype(in[0], lse.dtype());  // bf16 logits: the row values' f32
    const int64_t last = x.rank() - 1;
    Array p = exp(sub(x, expandDims(lse, last)));
    Array hot = oneHot(labels, x.shape()[static_cast<int>(last)], x.dtype());
    Array d = sub(mul(p, expandDims(add(dloss, dlse), last)), mul(hot, expandDims(dloss, last)));
    return std::vector<Array>{astype(d, in[0].dtype())};
  };
  VjpOutput v = vjp(composite, {a.operands[0], a.operands[2], a.operands[3], a.operands[4]});
  std::vector<Array> ct = v.pullback({a.cotangents[0]});
  return {ct[0], Array(), ct[1], ct[2], ct[3]};
}

// Every leading dim is one factor shared by the logits, the labels and the row values; the classes stay whole.
Result<ShardingRule> leadingDims(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  ShardingRule r;
  const int lead = in[0].rank() - 1;
  std::vector<int> factors;
  for (int d = 0; d < lead; ++d) factors.push_back(r.addFactor(ir::FactorKind::PassThrough));
  auto dims = [&](const Aval& x) {
    std::vector<int> f(factors.begin(), factors.end());
    if (x.rank() == lead + 1) f.push_back(-1);
    return f;
  };
  for (const Aval& x : in) r.operandDims.push_back(dims(x));
  for (const Aval& y : out) r.resultDims.push_back(dims(y));
  return r;
}

}  // namespace

void registerCrossEntropyOps(ir::OpRegistry& reg) {
  ir::OpDef fwd = coreOp(OpCode::SoftmaxCrossEntropy, "loss", ir::FusionKind::Opaque, 2, 2);
  fwd.infer = inferForward;
  fwd.cost = forwardCost;
  fwd.cpu = forwardKernel;
  fwd.cpuWritesWholeResult = true;
  fwd.vjp = forwardVjp;
  fwd.batch = [](const ir::BatchArgs& a) { return batchElementwise(OpCode::SoftmaxCrossEntropy, a); };
  fwd.shard = leadingDims;
  addCoreOp(reg, std::move(fwd));

  ir::OpDef grad = coreOp(OpCode::SoftmaxCrossEntropyGrad, "loss", ir::FusionKind::Opaque, 5, 1);
  grad.infer = inferGrad;
  grad.cost = gradCost;
  grad.cpu = gradKernel;
  grad.cpuWritesWholeResult = true;
  grad.vjp = gradVjp;
  grad.batch = [](const ir::BatchArgs& a) { return batchElementwise(OpCode::SoftmaxCrossEntropyGrad, a); };
  grad.shard = leadingDims;
  addCoreOp(reg, std::move(grad));
}

}  // namespace tsr::ops
