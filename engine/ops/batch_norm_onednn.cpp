#include "engine/ops/batch_norm_onednn.h"

#include <algorithm>
#include <memory>
#include <tuple>
#include <vector>

#include "engine/ops/onednn_common.h"


namespace tsr::ops {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

struct Primitives {
  dnnl::memory::desc data, channel;
  dnnl::batch_normalization_forward forward;
  dnnl::batch_normalization_backward backward;
};

std::shared_ptr<const Primitives> build(int64_t rows, int64_t c, double epsilon) {
  const dnnl::engine& engine = oneDnnEngine();
  auto p = std::make_shared<Primitives>();
  p->data = dnnl::memory::desc({rows, c, 1, 1}, dt::f32, tag::nhwc);
  p->channel = dnnl::memory::desc({c}, dt::f32, tag::a);
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  const auto eps = static_cast<float>(epsilon);
  dnnl::batch_normalization_forward::primitive_desc fwd(
      dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, p->data, eps, flags), engine);
  dnnl::batch_normalization_backward::primitive_desc bwd(
      dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, p->data, p->data, eps, flags), engine,
      fwd);
  p->forward = dnnl::batch_normalization_forward(fwd);
  p->backward = dnnl::batch_normalization_backward(bwd);
  return p;
}

std::shared_ptr<const Primitives> primitivesFor(int64_t rows, int64_t c, double epsilon) {
  static OneDnnCache<std::tuple<int64_t, int64_t, double>, Primitives> cache;
  return cache.get({rows, c, epsilon}, [&] { return build(rows, c, epsilon); });
}

dnnl::memory wrap(const dnnl::memory::desc& d, const float* data) {
  return dnnl::memory(d, oneDnnEngine(), const_cast<float*>(data));
}

// Runs one of the problem's primitives on the engine's threads (this thread's OpenMP teams) and waits for it;
// false where oneDNN declines or fails.
template <class Fn>
bool execute(int64_t rows, int64_t c, double epsilon, const Fn& fn) {
  if (rows <= 0 || c <= 0) return false;
  try {
    auto p = primitivesFor(rows, c, epsilon);
    useOneDnnThreads();
    dnnl::stream stream(oneDnnEngine());
    fn(*p, stream);
    stream.wait();
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

bool oneDnnBatchNormForward(const float* x, const float* scale, const float* offset, float* y, float* mean,
                            float* var, int64_t rows, int64_t c, double epsilon) {
  return execute(rows, c, epsilon, [&](const Primitives& p, dnnl::stream& stream) {
    p.forward.execute(stream, {{DNNL_ARG_SRC, wrap(p.data, x)},
                               {DNNL_ARG_DST, wrap(p.data, y)},
                               {DNNL_ARG_SCALE, wrap(p.channel, scale)},
                               {DNNL_ARG_SHIFT, wrap(p.channel, offset)},
                               {DNNL_ARG_MEAN, wrap(p.channel, mean)},
                               {DNNL_ARG_VARIANCE, wrap(p.channel, var)}});
  });
}

bool oneDnnBatchNormBackward(const float* x, const float* dy, const float* scale, const float* mean,
                             const float* var, float* dx, float* dscale, float* doffset, int64_t rows, int64_t c,
                             double epsilon) {
  // oneDNN 2.6 asks for the shift with use_shift, though the gradients do not read it.
  thread_local std::vector<float> shift;
  shift.assign(static_cast<size_t>(std::max<int64_t>(c, 0)), 0.0f);
  return execute(rows, c, epsilon, [&](const Primitives& p, dnnl::stream& stream) {
    p.backward.execute(stream, {{DNNL_ARG_SRC, wrap(p.data, x)},
                                {DNNL_ARG_DIFF_DST, wrap(p.data, dy)},
                                {DNNL_ARG_SCALE, wrap(p.channel, scale)},
                                {DNNL_ARG_SHIFT, wrap(p.channel, shift.data())},
                                {DNNL_ARG_MEAN, wrap(p.channel, mean)},
                                {DNNL_ARG_VARIANCE, wrap(p.channel, var)},
                                {DNNL_ARG_DIFF_SRC, wrap(p.data, dx)},
                                {DNNL_ARG_DIFF_SCALE, wrap(p.channel, dscale)},
                                {DNNL_ARG_DIFF_SHIFT, wrap(p.channel, doffset)}});
  });
}

}  // namespace tsr::ops
