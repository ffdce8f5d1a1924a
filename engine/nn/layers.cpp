#include "engine/nn/layers.h"

#include <cmath>

#include "engine/random/random.h"
#include "engine/transform/autocast.h"

namespace tsr::nn {

Array keyAt(const Array& keys, int64_t i) { return reshape(sliceAxis(keys, 0, i, i + 1), {2}); }

Array applyBlock(Context& ctx, const Array& x, const std::function<Array(const Array&)>& block) {
  if (ctx.remat() == RematPolicy::None) return block(x);
  auto one = [&](const std::vector<Array>& in) { return std::vector<Array>{block(in[0])}; };
  return rematCall(one, {x}, ctx.remat())[0];
}

Array Context::nextKey() {
  if (!m_key.valid()) raise(makeError("dropout needs a random key: the Context was made without one"));
  return random::foldIn(m_key, m_counter++);
}

Tree Dense::init(const Array& key) const {
  Shape w = layout == WeightLayout::InOut ? Shape{in, out} : Shape{out, in};
  Tree t = Tree::dict({{"weight", Tree(random::normal(key, w, dtype) * initStd)}});
  if (useBias) t.set("bias", Tree(Array::zeros({out}, dtype)));
  return t;
}

Array Dense::apply(const Tree& p, const Array& x) const {
  const Array& w = p.find("weight")->leaf();
  int64_t last = x.rank() - 1;
  // x: [..., in] . W -> [..., out]; the contraction reads W in its stored layout.
  Array y = dotGeneral(x, w, {{last}, {layout == WeightLayout::InOut ? 0 : 1}, {}, {}});
  // Under autocast the bias joins the bf16 product in bf16 (torch.autocast's linear), so the output stays bf16.
  if (useBias) y = y + autocastOperand(p.find("bias")->leaf());
  return y;
}

Tree Embed::init(const Array& key) const {
  return Tree::dict({{"weight", Tree(random::normal(key, {num, dim}, dtype) * initStd)}});
}

Array Embed::apply(const Tree& p, const Array& ids) const { return take(p.find("weight")->leaf(), ids, 0); }

Array Embed::attend(const Tree& p, const Array& x) const {
  // x: [..., dim] . weight[num, dim] over dim -> [..., num]
  return dotGeneral(x, p.find("weight")->leaf(), {{x.rank() - 1}, {1}, {}, {}});
}

Tree LayerNorm::init() const {
  return Tree::dict({{"weight", Tree(Array::ones({dim}, dtype))}, {"bias", Tree(Array::zeros({dim}, dtype))}});
}

// In f32 under autocast (bf16 inputs widened), as torch.autocast runs layer_norm.
Array LayerNorm::apply(const Tree& p, const Array& x0) const {
  const Array x = autocastWiden(x0);
  Array mu = mean(x, {-1}, true);
  Array xc = x - mu;
  Array var = mean(square(xc), {-1}, true);
  return xc * rsqrt(var + eps) * p.find("weight")->leaf() + p.find("bias")->leaf();
}

Array Dropout::apply(const Array& x, Context& ctx) const {
  if (rate <= 0.0 || !ctx.training()) return x;
  if (rate >= 1.0) return zerosLike(x);
  double keep = 1.0 - rate;
  Array mask = random::bernoulli(ctx.nextKey(), keep, x.shape());
  return where(mask, x * (1.0 / keep), zerosLike(x));
}

Array activate(Activation a, const Array& x) {
  switch (a) {
    case Activation::Relu: return relu(x);
    case Activation::GeluTanh: return gelu(x, true);
    case Activation::GeluErf: return gelu(x, false);
  }
  return x;
}

Array causalMask(int64_t t) {
  Array row = iota(Shape{t, t}, 0);
  Array col = iota(Shape{t, t}, 1);
  return greaterEqual(row, col);
}

}  // namespace tsr::nn
