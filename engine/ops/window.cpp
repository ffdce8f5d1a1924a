// Windowed reductions: reduce_window_sum, reduce_window_max, reduce_window_min (x){WindowAttrs}, JAX's
// reduce_window_sum_p / _max_p / _min_p (lax.reduce_window with the monoid fixed), and
// select_and_scatter_add (source, operand){WindowAttrs}, max pooling's gradient.
//
// Every result element of reduce_window_* combines one window of x. Padded positions hold the monoid's identity
// (0, -inf, +inf; an integer type's limits), so the kernels skip them. Float sums accumulate in double and
// round once, integer sums wrap around; max and min propagate NaN, as reduce_max does. The CPU kernel reduces
// one windowed dim at a time (reduceWindow); select_and_scatter_add's visits each window (WindowWalk).
// select_and_scatter_add: result = zeros(operand); for each window w of operand, result[sel(w)] += source[w],
// where sel(w) is the window's first maximum in row-major window order, NaN counting as larger than any number
// (argmax's rule); padded positions are never selected. With no NaN this is XLA's `ge` select.
//
// Gradients follow JAX (jax/_src/lax/windowed_reductions.py): the sum's cotangent is the window sum of the
// cotangent dilated by the strides and padded (the transpose of a window sum); max sends it through
// select_and_scatter_add, min too, selecting on -x (whose first maximum is x's first minimum).
// select_and_scatter_add's cotangent for source gathers the operand's cotangent at each window's selected
// position (JAX's select_and_gather_add), written as an argmax over the windows laid out along a new axis; for
// operand it is zero (the selection is piecewise constant).
// vmap gives the batch dim a one-element window; sharding splits batch-like dims only (window_geometry.h).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "engine/ops/elementwise_functors.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/ops/shard_rules.h"
#include "engine/ops/window_geometry.h"
#include "engine/transform/trace.h"

namespace tsr::ops {
namespace {

using ir::OpCode;
using ir::WindowAttrs;

// Integer sums wrap (modulo 2^64, then truncated); max and min of integers stay in their own type.
constexpr DTypeSet kWindowTypes = kFloats | kSignedInts;

// ---- shape rules ----

// x: the operand the windows are placed over (reduce_window's x, select_and_scatter_add's operand).
Status checkWindow(std::string_view op, std::span<const Aval> ops, const Aval& x, const WindowAttrs& at) {
  if (!kWindowTypes.contains(x.dtype))
    return opError(op, ops,
                   fmt::format("dtype {} is not supported (accepts {})", dtypeName(x.dtype), kWindowTypes.toString()));
  const auto rank = static_cast<size_t>(x.rank());
  auto perDim = [&](const char* name, const ir::Ints& v, int64_t least) -> Status {
    if (v.size() != rank)
      return opError(op, ops, fmt::format("{} [{}] must have one entry per operand dim ({})", name, joinInts(v), rank));
    for (int64_t e : v)
      if (e < least) return opError(op, ops, fmt::format("{} [{}] must be at least {}", name, joinInts(v), least));
    return {};
  };
  TSR_TRY(perDim("window_dimensions", at.windowDimensions, 1));
  TSR_TRY(perDim("window_strides", at.windowStrides, 1));
  TSR_TRY(perDim("padding_lo", at.paddingLo, 0));
  TSR_TRY(perDim("padding_hi", at.paddingHi, 0));
  TSR_TRY(perDim("window_dilation", at.windowDilation, 1));
  for (size_t d = 0; d < rank; ++d) {
    const int64_t padded = x.shape[static_cast<int>(d)] + at.paddingLo[d] + at.paddingHi[d];
    const int64_t extent = dilatedWindow(at.windowDimensions[d], at.windowDilation[d]);
    if (extent > padded)
      return opError(op, ops,
                     fmt::format("dim {}: the window ({} wide with dilation {}: extent {}) is larger than the padded "
                                 "operand ({} + padding {} + {} = {})",
                                 d, at.windowDimensions[d], at.windowDilation[d], extent, x.shape[static_cast<int>(d)],
                                 at.paddingLo[d], at.paddingHi[d], padded));
  }
  return {};
}

ir::InferFn reduceWindowInfer(std::string op) {
  return [op](std::span<const Aval> ops, const ir::Attrs& attrs) -> Result<std::vector<Aval>> {
    TSR_TRY(checkArity(op, ops, 1));
    const auto& at = attrsAs<WindowAttrs>(attrs);
    TSR_TRY(checkWindow(op, ops, ops[0], at));
    return std::vector<Aval>{Aval{windowOutputShape(ops[0].shape, at), ops[0].dtype}};
  };
}

// (source [windows], operand [x]) -> [x]
Result<std::vector<Aval>> inferSelectAndScatterAdd(std::span<const Aval> ops, const ir::Attrs& attrs) {
  constexpr const char* kOp = "select_and_scatter_add";
  TSR_TRY(checkArity(kOp, ops, 2));
  const auto& at = attrsAs<WindowAttrs>(attrs);
  const Aval& source = ops[0];
  const Aval& operand = ops[1];
  TSR_TRY(checkWindow(kOp, ops, operand, at));
  if (source.dtype != operand.dtype) return opError(kOp, ops, "source and operand must have equal dtypes");
  const Shape windows = windowOutputShape(operand.shape, at);
  if (source.shape != windows)
    return opError(kOp, ops, fmt::format("source must have one element per window of the operand: shape {}",
                                         windows.toString()));
  return std::vector<Aval>{operand};
}

// One comparison or addition per window position.
ir::Cost windowCost(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) {
  const auto& at = attrsAs<WindowAttrs>(attrs);
  ir::Cost c = movementCost(in, out);
  c.flops = static_cast<double>(windowOutputShape(in.back().shape, at).numel()) * static_cast<double>(windowSize(at));
  return c;
}

// ---- CPU kernels ----

// select_and_scatter_add's walk over the windows of one operand shape, the result in row-major order. Per dim
// d and result index o, the window starts at operand index o * stride - lo; of its positions, those inside the
// operand are visited (the others are padding).
class WindowWalk {
 public:
  WindowWalk(const Shape& operand, const WindowAttrs& at)
      : m_out(windowOutputShape(operand, at)), m_windowSize(windowSize(at)) {
    const int r = operand.rank();
    const auto strides = operand.strides();
    for (int d = 0; d < r; ++d) {
      const auto u = static_cast<size_t>(d);
      Dim dim;
      dim.step = at.windowDilation[u] * strides[u];
      dim.stride = strides[u];
      for (int64_t o = 0; o < m_out[d]; ++o) {
        const int64_t start = o * at.windowStrides[u] - at.paddingLo[u];
        int64_t first = 0, end = at.windowDimensions[u];
        while (first < end && start + first * at.windowDilation[u] < 0) ++first;
        while (end > first && start + (end - 1) * at.windowDilation[u] >= operand[d]) --end;
        dim.count.push_back(end - first);
        dim.base.push_back(start + first * at.windowDilation[u]);
      }
      if (at.windowDimensions[u] > 1) m_active.push_back(d);
      m_dims.push_back(std::move(dim));
    }
  }

  // visit(e, offsets): e the flat result index, offsets the flat operand indices of its window's positions
  // inside the operand, in row-major window order (possibly none).
  template <class F>
  void forEach(F&& visit) const {
    forEachIn(0, m_out.numel(), visit);
  }

  // The same for the result indices in [begin, end).
  template <class F>
  void forEachIn(int64_t begin, int64_t end, F&& visit) const {
    if (begin >= end) return;
    const size_t r = m_dims.size(), na = m_active.size();
    std::vector<int64_t> o(r, 0), idx(na, 0), count(r, 0);
    for (int64_t rest = begin, d = static_cast<int64_t>(r) - 1; d >= 0; --d) {
      o[static_cast<size_t>(d)] = rest % m_out[static_cast<int>(d)];
      rest /= m_out[static_cast<int>(d)];
    }
    std::vector<int64_t> offsets;
    offsets.reserve(static_cast<size_t>(m_windowSize));
    for (int64_t e = begin; e < end; ++e) {
      offsets.clear();
      int64_t base = 0;
      bool empty = false;
      for (size_t d = 0; d < r; ++d) {
        const auto od = static_cast<size_t>(o[d]);
        count[d] = m_dims[d].count[od];
        empty |= count[d] <= 0;
        base += m_dims[d].base[od] * m_dims[d].stride;
      }
      if (!empty) collect(base, count, idx, offsets);
      visit(e, offsets);
      for (size_t d = r; d-- > 0;) {  // next result index
        if (++o[d] < m_out[static_cast<int>(d)]) break;
        o[d] = 0;
      }
    }
  }

 private:
  struct Dim {
    int64_t step = 0, stride = 0;      // operand elements between window positions, between indices
    std::vector<int64_t> count, base;  // per result index: positions inside the operand, the first one's index
  };

  // The window's offsets by an odometer over the dims whose window is wider than one.
  void collect(int64_t off, const std::vector<int64_t>& count, std::vector<int64_t>& idx,
               std::vector<int64_t>& offsets) const {
    std::fill(idx.begin(), idx.end(), 0);
    const int na = static_cast<int>(m_active.size());
    while (true) {
      offsets.push_back(off);
      int j = na - 1;
      for (; j >= 0; --j) {
        const auto d = static_cast<size_t>(m_active[static_cast<size_t>(j)]);
        const auto u = static_cast<size_t>(j);
        if (++idx[u] < count[d]) {
          off += m_dims[d].step;
          break;
        }
        off -= m_dims[d].step * (count[d] - 1);
        idx[u] = 0;
      }
      if (j < 0) return;
    }
  }

  Shape m_out;
  int64_t m_windowSize;
  std::vector<Dim> m_dims;
  std::vector<int> m_active;
};

template <class A, class T>
A widen(T v) {
  if constexpr (std::is_same_v<A, uint64_t>) return static_cast<uint64_t>(static_cast<int64_t>(v));
  else return static_cast<A>(static_cast<ComputeType<T>>(v));
}

template <class T, class A>
T narrow(A a) {
  if constexpr (kIsHalf<T>) return T(static_cast<float>(a));
  else return static_cast<T>(a);
}

// The three monoids: Acc<T> the accumulator, identity<A>() the padding value, combine(running, next).
struct SumMonoid {
  template <class T> using Acc = std::conditional_t<std::is_floating_point_v<ComputeType<T>>, double, uint64_t>;
  template <class A> static A identity() { return A(0); }
  template <class A> static A combine(A a, A b) { return a + b; }  // uint64_t: wraps
};
template <bool kMax>
struct ExtremumMonoid {
  template <class T> using Acc = ComputeType<T>;  // exact: a max or min is one of its operands
  template <class A> static A identity() {
    if constexpr (std::is_floating_point_v<A>)
      return kMax ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
    else return kMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
  }
  template <class A> static A combine(A a, A b) {
    const bool better = kMax ? b > a : b < a;
    if constexpr (std::is_floating_point_v<A>) return (better || b != b) ? b : a;  // a NaN wins and stays
    else return better ? b : a;
  }
};

// One window dim of a reduction: src viewed as [outer, n, inner] around the dim gives dst [outer, m, inner],
// dst[o, j, i] combining src[o, j * stride + k * dilation - lo, i] over the window positions k inside [0, n).
// The innermost loop runs along memory (vectorised when inner > 1).
struct WindowPass {
  int64_t outer = 1, n = 1, inner = 1, m = 1, k = 1, stride = 1, dilation = 1, lo = 0;
};

// Rows [begin, end) of a pass: row r is dst[o, j, :] with o = r / m, j = r % m.
template <class Monoid, class A, class S>
void windowPass(const S* src, A* dst, const WindowPass& p, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const int64_t o = r / p.m, j = r % p.m;
    A* d = dst + r * p.inner;
    std::fill(d, d + p.inner, Monoid::template identity<A>());
    for (int64_t kk = 0; kk < p.k; ++kk) {
      const int64_t x = j * p.stride + kk * p.dilation - p.lo;
      if (x < 0 || x >= p.n) continue;
      const S* sp = src + (o * p.n + x) * p.inner;
      for (int64_t i = 0; i < p.inner; ++i) d[i] = Monoid::combine(d[i], widen<A>(sp[i]));
    }
  }
}

// Whether dim d's window is one element wide: size 1, stride 1, no padding.
bool trivialWindow(const WindowAttrs& at, size_t d) {
  return at.windowDimensions[d] == 1 && at.windowStrides[d] == 1 && at.paddingLo[d] == 0 && at.paddingHi[d] == 0;
}

// The trailing dims whose window is one element wide (size 1, stride 1, no padding: a channels-last layout's
// channels), from `first` on: every window treats their elements alike, so they are lanes, contiguous in memory.
// Returns the number of lanes (1 when the last dim is windowed).
int64_t trailingLanes(const Shape& shape, const WindowAttrs& at, int& first) {
  int64_t lanes = 1;
  first = shape.rank();
  while (first > 0) {
    const auto u = static_cast<size_t>(first - 1);
    if (!trivialWindow(at, u)) break;
    lanes *= shape[first - 1];
    --first;
  }
  return lanes;
}

// The window of dims [begin, end) alone.
WindowAttrs windowDims(const WindowAttrs& at, int begin, int end) {
  WindowAttrs sub;
  for (auto [from, to] : {std::pair{&at.windowDimensions, &sub.windowDimensions},
                          std::pair{&at.windowStrides, &sub.windowStrides}, std::pair{&at.paddingLo, &sub.paddingLo},
                          std::pair{&at.paddingHi, &sub.paddingHi}, std::pair{&at.windowDilation, &sub.windowDilation}})
    to->assign(from->begin() + begin, from->begin() + end);
  return sub;
}

// Channels-last windows (the trailing dims windowed trivially: `lanes` contiguous values per position): each
// result's window is visited once and combines whole rows of lanes (vectorised), the results split over the
// lent threads: each window row is read once, where the passes below write and read an intermediate array per
// windowed dim (ResNet's 3x3 stride-2 max pool over [32, 112, 112, 64]: 6 ms on 2 threads, 48 ms in passes on
// one).
template <class Monoid, class T>
void reduceWindowLanes(const ir::CpuKernelArgs& args, const T* x, T* y, const Shape& shape, const WindowAttrs& at,
                       int first, int64_t lanes) {
  using A = typename Monoid::template Acc<T>;
  const Shape mid(std::vector<int64_t>(shape.dims().begin(), shape.dims().begin() + first));
  const WindowAttrs midAttrs = windowDims(at, 0, first);
  const WindowWalk walk(mid, midAttrs);
  const int64_t results = windowOutputShape(mid, midAttrs).numel();
  std::vector<std::vector<A>> scratch(static_cast<size_t>(std::max(1, args.threads)));
  const int64_t grain = std::max<int64_t>(1, 4096 / lanes);
  args.forChunks(results, grain, [&](int64_t begin, int64_t end, int thread) {
    std::vector<A>& acc = scratch[static_cast<size_t>(thread)];
    acc.resize(static_cast<size_t>(lanes));
    A* a = acc.data();
    walk.forEachIn(begin, end, [&](int64_t e, const std::vector<int64_t>& offsets) {
      std::fill(a, a + lanes, Monoid::template identity<A>());
      for (int64_t off : offsets) {
        const T* xs = x + off * lanes;
        for (int64_t j = 0; j < lanes; ++j) a[j] = Monoid::combine(a[j], widen<A>(xs[j]));
      }
      T* ys = y + e * lanes;
      for (int64_t j = 0; j < lanes; ++j) ys[j] = narrow<T>(a[j]);
    });
  });
}

// Rows of a pass per chunk handed to a thread: about 64K combined elements.
int64_t rowGrain(int64_t inner, int64_t k) {
  return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, inner * k));
}

// A box of max, min or sum is the same reduction taken one dim at a time (padding holds the identity, which
// every pass skips), so the kernel runs one pass per windowed dim, in the accumulator type, and rounds once:
// about a tenth of the time of visiting every window position of every result element. Each pass splits its
// rows over the lent threads; where the accumulator is the element type (max and min of f32 and f64), the last
// pass writes the result directly.
template <class Monoid, class T>
void reduceWindow(const ir::CpuKernelArgs& args, const T* x, T* y, const Shape& shape, const WindowAttrs& at) {
  using A = typename Monoid::template Acc<T>;
  int first = 0;
  if (const int64_t lanes = trailingLanes(shape, at, first); lanes >= 8 && first > 0)
    return reduceWindowLanes<Monoid>(args, x, y, shape, at, first, lanes);
  const Shape out = windowOutputShape(shape, at);
  std::vector<int64_t> dims = shape.dims();
  int last = -1;
  for (int d = 0; d < shape.rank(); ++d)
    if (isWindowed(at, static_cast<size_t>(d))) last = d;
  std::vector<A> cur, next;
  bool widened = false;  // whether cur holds the data yet (else x does)
  for (int d = 0; d <= last; ++d) {
    const auto u = static_cast<size_t>(d);
    if (!isWindowed(at, u)) continue;
    WindowPass p;
    for (size_t e = 0; e < u; ++e) p.outer *= dims[e];
    for (size_t e = u + 1; e < dims.size(); ++e) p.inner *= dims[e];
    p.n = dims[u];
    p.m = out[d];
    p.k = at.windowDimensions[u];
    p.stride = at.windowStrides[u];
    p.dilation = at.windowDilation[u];
    p.lo = at.paddingLo[u];
    A* dst = nullptr;
    bool final = false;  // writing y itself
    if constexpr (std::is_same_v<A, T>) {
      if (d == last) dst = y, final = true;
    }
    if (!final) {
      next.resize(static_cast<size_t>(p.outer * p.m * p.inner));
      dst = next.data();
    }
    args.forChunks(p.outer * p.m, rowGrain(p.inner, p.k), [&](int64_t begin, int64_t end, int) {
      if (widened) windowPass<Monoid>(cur.data(), dst, p, begin, end);
      else windowPass<Monoid>(x, dst, p, begin, end);
    });
    if (final) return;
    std::swap(cur, next);
    widened = true;
    dims[u] = p.m;
  }
  args.forChunks(out.numel(), 1 << 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) y[i] = widened ? narrow<T>(cur[static_cast<size_t>(i)]) : x[i];
  });
}

template <class Monoid>
ir::CpuKernelFn reduceWindowKernel() {
  return [](const ir::CpuKernelArgs& args) {
    const auto& at = attrsAs<WindowAttrs>(args.attrs);
    dispatchDType(args.inputs[0].aval.dtype, [&]<class T>() {
      if constexpr (kWindowTypes.contains<T>())
        reduceWindow<Monoid>(args, args.inputs[0].as<T>(), args.outputs[0].as<T>(), args.inputs[0].aval.shape, at);
      else
        TSR_CHECK_MSG(false, "reduce_window kernel called with a dtype its infer rule rejects");
    });
  };
}

// Whether c, met after v in window order, takes the selection from it: larger, or the first NaN.
template <class C>
bool takesOver(C c, C v) {
  return c > v || (c != c && v == v);
}

// x's first maximum among `offsets` (not empty); a NaN beats every number and the first NaN stays.
template <class T>
int64_t firstMax(const T* x, const std::vector<int64_t>& offsets) {
  int64_t best = offsets[0];
  auto v = static_cast<ComputeType<T>>(x[best]);
  for (size_t i = 1; i < offsets.size(); ++i) {
    const auto c = static_cast<ComputeType<T>>(x[offsets[i]]);
    if (takesOver(c, v)) {
      best = offsets[i];
      v = c;
    }
  }
  return best;
}

// Whether no two windows share a position (each stride at least the window's extent): then every position
// receives at most one source value (pooling's usual stride = window).
bool windowsDisjoint(const WindowAttrs& at) {
  for (size_t d = 0; d < at.windowDimensions.size(); ++d)
    if (at.windowStrides[d] < dilatedWindow(at.windowDimensions[d], at.windowDilation[d])) return false;
  return true;
}

// select_and_scatter_add over lanes: the walk visits each window of the dims in [begin, first) once, and each of
// its positions compares and adds `lanes` contiguous values (vectorised) instead of one, per-lane first maxima as
// firstMax picks them. The leading dims before `begin` are windowed trivially too (a batch): each of their
// slabs is done apart, summing into an accumulator of one slab, the slabs split over the lent threads.
template <class T, class A>
void selectAndScatterLanes(const ir::CpuKernelArgs& args, const T* source, const T* x, T* y, const Shape& operand,
                           const WindowAttrs& at, int first, int64_t lanes) {
  int begin = 0;
  while (begin + 1 < first && trivialWindow(at, static_cast<size_t>(begin))) ++begin;
  int64_t slabs = 1;
  for (int d = 0; d < begin; ++d) slabs *= operand[d];
  std::vector<int64_t> mid(operand.dims().begin() + begin, operand.dims().begin() + first);
  const WindowAttrs midAttrs = windowDims(at, begin, first);
  const Shape midShape(mid);
  const WindowWalk walk(midShape, midAttrs);
  const int64_t slab = midShape.numel() * lanes, sourceSlab = windowOutputShape(midShape, midAttrs).numel() * lanes;
  using C = ComputeType<T>;
  struct Scratch {
    std::vector<C> best;
    std::vector<int64_t> where;
    std::vector<A> acc;
  };
  std::vector<Scratch> scratch(static_cast<size_t>(std::max(1, args.threads)));
  args.forChunks(slabs, 1, [&](int64_t from, int64_t to, int thread) {
    Scratch& sc = scratch[static_cast<size_t>(thread)];
    sc.best.resize(static_cast<size_t>(lanes));
    sc.where.resize(static_cast<size_t>(lanes));
    sc.acc.resize(static_cast<size_t>(slab));
    C* best = sc.best.data();
    int64_t* where = sc.where.data();
    A* acc = sc.acc.data();
    for (int64_t o = from; o < to; ++o) {
      const T* xs = x + o * slab;
      const T* ss = source + o * sourceSlab;
      std::fill(acc, acc + slab, A(0));
      walk.forEach([&](int64_t e, const std::vector<int64_t>& offsets) {
        if (offsets.empty()) return;
        const T* x0 = xs + offsets[0] * lanes;
        for (int64_t j = 0; j < lanes; ++j) {
          best[j] = static_cast<C>(x0[j]);
          where[j] = offsets[0] * lanes + j;
        }
        for (size_t i = 1; i < offsets.size(); ++i) {
          const T* xi = xs + offsets[i] * lanes;
          for (int64_t j = 0; j < lanes; ++j) {
            const auto c = static_cast<C>(xi[j]);
            const C v = best[j];
            const bool take = takesOver(c, v);
            best[j] = take ? c : v;
            where[j] = take ? offsets[i] * lanes + j : where[j];
          }
        }
        const T* s = ss + e * lanes;
        for (int64_t j = 0; j < lanes; ++j) acc[where[j]] += widen<A>(s[j]);
      });
      T* ys = y + o * slab;
      for (int64_t i = 0; i < slab; ++i) ys[i] = narrow<T>(acc[i]);
    }
  });
}

void selectAndScatterAddKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<WindowAttrs>(args.attrs);
  const Aval& operand = args.inputs[1].aval;
  dispatchDType(operand.dtype, [&]<class T>() {
    if constexpr (kWindowTypes.contains<T>()) {
      using A = typename SumMonoid::template Acc<T>;
      const T* source = args.inputs[0].as<T>();
      const T* x = args.inputs[1].as<T>();
      T* y = args.outputs[0].as<T>();
      int first = 0;
      const int64_t lanes = trailingLanes(operand.shape, at, first);
      if (lanes > 1 && first > 0) {
        selectAndScatterLanes<T, A>(args, source, x, y, operand.shape, at, first, lanes);
        return;
      }
      const WindowWalk walk(operand.shape, at);
      if (windowsDisjoint(at)) {
        std::fill(y, y + operand.numel(), T(0));
        walk.forEach([&](int64_t e, const std::vector<int64_t>& offsets) {
          if (!offsets.empty()) y[firstMax(x, offsets)] = source[e];
        });
        return;
      }
      // Overlapping windows may add several values to one position: summed in the accumulator type, rounded once.
      std::vector<A> acc(static_cast<size_t>(operand.numel()), A(0));
      walk.forEach([&](int64_t e, const std::vector<int64_t>& offsets) {
        if (!offsets.empty()) acc[static_cast<size_t>(firstMax(x, offsets))] += widen<A>(source[e]);
      });
      for (size_t i = 0; i < acc.size(); ++i) y[i] = narrow<T>(acc[i]);
    } else {
      TSR_CHECK_MSG(false, "select_and_scatter_add kernel called with a dtype its infer rule rejects");
    }
  });
}

// ---- vjp rules ----

Array bindWindow(OpCode op, const std::vector<Array>& operands, const WindowAttrs& at) {
  return bind1(op, operands, at, std::source_location::current());
}

bool floatCotangent(const ir::VjpArgs& a) {
  const Array& g = a.cotangents[0];
  return g.valid() && isFloating(g.dtype());
}

// The transpose of the window sum (JAX's _reduce_window_sum_transpose_rule): g dilated by the strides and padded
// so that a stride-1 window sum over it gives, at each operand position, the sum of g over the windows that
// contain it. Padding below zero crops (padding wider than the window).
std::vector<Array> reduceWindowSumVjp(const ir::VjpArgs& a) {
  if (!floatCotangent(a)) return {Array()};
  const auto& at = attrsAs<WindowAttrs>(a.attrs);
  const Array& g = a.cotangents[0];
  const Shape& in = a.operands[0].shape();
  Axes low, high, interior;
  for (int d = 0; d < in.rank(); ++d) {
    const auto u = static_cast<size_t>(d);
    const int64_t extent = dilatedWindow(at.windowDimensions[u], at.windowDilation[u]);
    const int64_t dilatedG = (g.shape()[d] - 1) * at.windowStrides[u] + 1;
    const int64_t before = extent - at.paddingLo[u] - 1;
    low.push_back(before);
    high.push_back(in[d] + extent - 1 - dilatedG - before);
    interior.push_back(at.windowStrides[u] - 1);
  }
  WindowAttrs t = at;
  t.windowStrides.assign(at.windowStrides.size(), 1);
  t.paddingLo.assign(at.paddingLo.size(), 0);
  t.paddingHi.assign(at.paddingHi.size(), 0);
  return {bindWindow(OpCode::ReduceWindowSum, {pad(g, low, high, 0.0, interior)}, t)};
}

ir::VjpRule extremumVjp(bool isMax) {
  return [isMax](const ir::VjpArgs& a) -> std::vector<Array> {
    if (!floatCotangent(a)) return {Array()};
    const Array& x = a.operands[0];
    const auto& at = attrsAs<WindowAttrs>(a.attrs);
    return {bindWindow(OpCode::SelectAndScatterAdd, {a.cotangents[0], isMax ? x : neg(x)}, at)};
  };
}

// x's windows along one new last axis: [windows..., window size], positions in row-major window order, padded
// positions holding padValue. One strided slice per window position.
Array windowPatches(const Array& x, const WindowAttrs& at, double padValue) {
  const Array padded = pad(x, at.paddingLo, at.paddingHi, padValue);
  const Shape out = windowOutputShape(x.shape(), at);
  const Shape window(at.windowDimensions);
  std::vector<Array> patches;
  for (int64_t k = 0; k < window.numel(); ++k) {
    Axes starts, limits;
    int64_t rest = k;
    for (int d = window.rank() - 1; d >= 0; --d) {
      const auto u = static_cast<size_t>(d);
      const int64_t kd = rest % window[d];
      rest /= window[d];
      starts.insert(starts.begin(), kd * at.windowDilation[u]);
      limits.insert(limits.begin(), kd * at.windowDilation[u] + (out[d] - 1) * at.windowStrides[u] + 1);
    }
    patches.push_back(slice(padded, starts, limits, at.windowStrides));
  }
  return stack(patches, x.rank());
}

std::vector<Array> selectAndScatterAddVjp(const ir::VjpArgs& a) {
  const Array& operand = a.operands[1];
  if (!floatCotangent(a)) return {Array(), zerosLike(operand)};
  const auto& at = attrsAs<WindowAttrs>(a.attrs);
  const int last = operand.rank();
  Array selected = argmax(windowPatches(operand, at, -std::numeric_limits<double>::infinity()), last);
  Array gathered = takeAlongAxis(windowPatches(a.cotangents[0], at, 0.0), selected, last);
  return {gathered, zerosLike(operand)};
}

// ---- batching: the batch dim gets a window of one element ----

WindowAttrs withBatchDim(WindowAttrs at, int dim) {
  auto insert = [dim](ir::Ints& v, int64_t value) { v.insert(v.begin() + dim, value); };
  insert(at.windowDimensions, 1);
  insert(at.windowStrides, 1);
  insert(at.paddingLo, 0);
  insert(at.paddingHi, 0);
  insert(at.windowDilation, 1);
  return at;
}

ir::BatchRule reduceWindowBatch(OpCode code) {
  return [code](const ir::BatchArgs& a) {
    const int bd = a.batchDims[0];
    return ir::BatchResult{{bindWindow(code, {a.operands[0]}, withBatchDim(attrsAs<WindowAttrs>(a.attrs), bd))}, {bd}};
  };
}

ir::BatchResult selectAndScatterAddBatch(const ir::BatchArgs& a) {
  std::vector<Array> operands;
  for (size_t i = 0; i < 2; ++i) operands.push_back(moveBatchDim(a.operands[i], a.batchDims[i], 0, a.batchSize));
  const WindowAttrs at = withBatchDim(attrsAs<WindowAttrs>(a.attrs), 0);
  return ir::BatchResult{{bindWindow(OpCode::SelectAndScatterAdd, operands, at)}, {0}};
}

template <class Monoid>
void addReduceWindowOp(ir::OpRegistry& reg, OpCode code, ir::VjpRule vjp) {
  ir::OpDef d = coreOp(code, "window", ir::FusionKind::Opaque, 1);
  d.cpuWritesWholeResult = true;
  d.infer = reduceWindowInfer(d.name);
  d.cost = windowCost;
  d.cpu = reduceWindowKernel<Monoid>();
  d.vjp = std::move(vjp);
  d.batch = reduceWindowBatch(code);
  d.shard = windowShardRule();
  addCoreOp(reg, std::move(d));
}

}  // namespace

void registerWindowOps(ir::OpRegistry& reg) {
  addReduceWindowOp<SumMonoid>(reg, OpCode::ReduceWindowSum, reduceWindowSumVjp);
  addReduceWindowOp<ExtremumMonoid<true>>(reg, OpCode::ReduceWindowMax, extremumVjp(true));
  addReduceWindowOp<ExtremumMonoid<false>>(reg, OpCode::ReduceWindowMin, extremumVjp(false));
  ir::OpDef d = coreOp(OpCode::SelectAndScatterAdd, "window", ir::FusionKind::Opaque, 2);
  d.cpuWritesWholeResult = true;
  d.infer = inferSelectAndScatterAdd;
  d.cost = windowCost;
  d.cpu = selectAndScatterAddKernel;
  d.vjp = selectAndScatterAddVjp;
  d.batch = selectAndScatterAddBatch;
  d.shard = windowShardRule();
  addCoreOp(reg, std::move(d));
}

}  // namespace tsr::ops
