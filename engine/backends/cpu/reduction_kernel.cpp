#include "engine/backends/cpu/reduction_kernel.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "engine/backends/cpu/thread_pool.h"
#include "engine/backends/cpu/tile_program.h"

namespace tsr::cpu {

using ir::OpCode;

namespace {

float reduceInit(OpCode op) {
  if (op == OpCode::ReduceMax) return -std::numeric_limits<float>::infinity();
  if (op == OpCode::ReduceMin) return std::numeric_limits<float>::infinity();
  return 0.0f;
}

inline float combine(OpCode op, float a, float b) {
  if (op == OpCode::ReduceSum) return a + b;
  if (op == OpCode::ReduceMax) return (a > b || a != a) ? a : b;
  return (a < b || a != a) ? a : b;
}

// Reduces a tile into a scalar (sum in double, as the reference kernel accumulates f32 sums).
double reduceTile(OpCode op, const float* x, int64_t n, double acc) {
  if (op == OpCode::ReduceSum) {
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int l = 0; l < 8; ++l) lanes[l] += x[i + l];
    double s = 0;
    for (float l : lanes) s += l;
    for (; i < n; ++i) s += x[i];
    return acc + s;
  }
  float a = static_cast<float>(acc);
  for (int64_t i = 0; i < n; ++i) a = combine(op, a, x[i]);
  return a;
}

}  // namespace

void runReduction(const LoweredKernel& k, void* const* args, NativeReduceFn native) {
  const TileProgram& p = k.prog;
  const auto nred = k.reduces.size();
  if (k.genericReduce) {
    // Any layout: walk the whole space tile by tile and combine each element into its output index.
    std::vector<int64_t> outStride(p.dims.size(), 0);
    int64_t s = 1;
    for (size_t d = p.dims.size(); d-- > 0;)
      if (!k.reducedDims[d]) {
        outStride[d] = s;
        s *= p.dims[d];
      }
    // Accumulated in f32: into the output itself, or for a bf16 result into a buffer rounded at the end.
    std::vector<std::vector<float>> wide(nred);
    std::vector<float*> accOf(nred);
    for (size_t ri = 0; ri < nred; ++ri) {
      const auto& r = k.reduces[ri];
      if (r.dtype == DType::BF16) {
        wide[ri].resize(static_cast<size_t>(s));
        accOf[ri] = wide[ri].data();
      } else {
        accOf[ri] = static_cast<float*>(args[r.arg]);
      }
      std::fill(accOf[ri], accOf[ri] + s, reduceInit(r.op));
    }
    auto narrow = [&] {
      for (size_t ri = 0; ri < nred; ++ri)
        if (k.reduces[ri].dtype == DType::BF16)
          for (int64_t i = 0; i < s; ++i) static_cast<bf16*>(args[k.reduces[ri].arg])[i] = bf16(wide[ri][static_cast<size_t>(i)]);
    };
    TileEvaluator ev(p);
    const size_t rank = p.dims.size();
    std::vector<int64_t> idx(rank, 0);
    int64_t total = 1;
    for (int64_t d : p.dims) total *= d;
    if (total == 0) return narrow();
    const int64_t inner = p.dims.back();
    for (;;) {
      for (int64_t t = 0; t < inner; t += kTile) {
        idx[rank - 1] = t;
        int64_t len = std::min(kTile, inner - t);
        const float* const* sl = ev.eval(args, idx.data(), len);
        int64_t base = 0;
        for (size_t d = 0; d + 1 < rank; ++d) base += idx[d] * outStride[d];
        for (size_t ri = 0; ri < nred; ++ri) {
          const auto& r = k.reduces[ri];
          float* o = accOf[ri];
          const float* x = sl[r.slot];
          for (int64_t i = 0; i < len; ++i) {
            int64_t oi = base + (t + i) * outStride[rank - 1];
            o[oi] = combine(r.op, o[oi], x[i]);
          }
        }
      }
      size_t d = rank - 1;
      for (;;) {
        if (d == 0) return narrow();
        --d;
        if (++idx[d] < p.dims[d]) break;
        idx[d] = 0;
      }
    }
  }
  const int64_t K1 = k.k1, R = k.r, K2 = k.k2;
  if (K1 * K2 == 0) return;  // no outputs (an empty kept dim)
  auto& pool = ThreadPool::instance();
  const int threads = pool.numThreads();
  const bool rowCase = K2 == 1;
  // Split the reduced dim into chunks when there are too few independent outputs to keep every thread busy.
  const int64_t outputsWork = rowCase ? K1 : K1 * ((K2 + kTile - 1) / kTile);
  int64_t chunks = 1;
  if (outputsWork < 4 * threads) chunks = std::min<int64_t>(std::max<int64_t>(1, (4 * threads + outputsWork - 1) / outputsWork), std::max<int64_t>(1, R / (rowCase ? kTile : 8)));
  const int64_t chunkLen = (R + chunks - 1) / chunks;
  chunks = R == 0 ? 1 : (R + chunkLen - 1) / chunkLen;
  // partial[reduce][k1][chunk][k2] in double
  std::vector<double> partial(nred * static_cast<size_t>(K1 * chunks * K2));
  auto pidx = [&](size_t ri, int64_t a, int64_t c, int64_t b) {
    return ((ri * static_cast<size_t>(K1) + static_cast<size_t>(a)) * static_cast<size_t>(chunks) + static_cast<size_t>(c)) *
               static_cast<size_t>(K2) + static_cast<size_t>(b);
  };
  const int64_t k2Tiles = (K2 + kTile - 1) / kTile;
  const int64_t units = K1 * chunks * (rowCase ? 1 : k2Tiles);
  // Dims of the collapsed program are [K1?, R, K2?]: idx positions.
  const size_t rank = p.dims.size();
  const bool hasK1 = rank >= 2 && !k.reducedDims[0];
  if (auto fn = native) {
    pool.parallelFor(units, 1, [&](int64_t b, int64_t e, int) { fn(args, b, e, chunks, chunkLen, partial.data()); });
  } else pool.parallelFor(units, 1, [&](int64_t b, int64_t e, int) {
    TileEvaluator ev(p);
    std::vector<int64_t> idx(rank, 0);
    std::vector<float> acc(nred * static_cast<size_t>(kTile));
    for (int64_t u = b; u < e; ++u) {
      int64_t a, c, t = 0;
      if (rowCase) {
        a = u / chunks;
        c = u % chunks;
      } else {
        a = u / (chunks * k2Tiles);
        int64_t rem = u % (chunks * k2Tiles);
        c = rem / k2Tiles;
        t = rem % k2Tiles;
      }
      const int64_t r0 = c * chunkLen, r1 = std::min(R, r0 + chunkLen);
      if (hasK1) idx[0] = a;
      const size_t rDim = hasK1 ? 1 : 0;
      if (rowCase) {
        for (size_t ri = 0; ri < nred; ++ri) {
          double v = reduceInit(k.reduces[ri].op);
          partial[pidx(ri, a, c, 0)] = v;
        }
        for (int64_t r = r0; r < r1; r += kTile) {
          idx[rDim] = r;
          int64_t len = std::min(kTile, r1 - r);
          const float* const* sl = ev.eval(args, idx.data(), len);
          for (size_t ri = 0; ri < nred; ++ri) {
            double& v = partial[pidx(ri, a, c, 0)];
            v = reduceTile(k.reduces[ri].op, sl[k.reduces[ri].slot], len, v);
          }
        }
      } else {
        const int64_t c0 = t * kTile, len = std::min(kTile, K2 - c0);
        for (size_t ri = 0; ri < nred; ++ri)
          std::fill(acc.begin() + static_cast<int64_t>(ri) * kTile, acc.begin() + static_cast<int64_t>(ri) * kTile + len,
                    reduceInit(k.reduces[ri].op));
        for (int64_t r = r0; r < r1; ++r) {
          idx[rDim] = r;
          idx[rank - 1] = c0;
          const float* const* sl = ev.eval(args, idx.data(), len);
          for (size_t ri = 0; ri < nred; ++ri) {
            const OpCode op = k.reduces[ri].op;
            const float* x = sl[k.reduces[ri].slot];
            float* ac = acc.data() + ri * kTile;
            if (op == OpCode::ReduceSum)
              for (int64_t i = 0; i < len; ++i) ac[i] += x[i];
            else
              for (int64_t i = 0; i < len; ++i) ac[i] = combine(op, ac[i], x[i]);
          }
        }
        for (size_t ri = 0; ri < nred; ++ri)
          for (int64_t i = 0; i < len; ++i) partial[pidx(ri, a, c, c0 + i)] = acc[ri * kTile + static_cast<size_t>(i)];
      }
    }
  });
  for (size_t ri = 0; ri < nred; ++ri) {
    const bool half = k.reduces[ri].dtype == DType::BF16;
    float* o = static_cast<float*>(args[k.reduces[ri].arg]);
    bf16* oh = static_cast<bf16*>(args[k.reduces[ri].arg]);
    const OpCode op = k.reduces[ri].op;
    for (int64_t a = 0; a < K1; ++a)
      for (int64_t b2 = 0; b2 < K2; ++b2) {
        double v = reduceInit(op);
        for (int64_t c = 0; c < chunks; ++c) {
          double x = partial[pidx(ri, a, c, b2)];
          v = op == OpCode::ReduceSum ? v + x : combine(op, static_cast<float>(v), static_cast<float>(x));
        }
        if (half) oh[a * K2 + b2] = bf16(static_cast<float>(v));
        else o[a * K2 + b2] = static_cast<float>(v);
      }
  }
}

}  // namespace tsr::cpu
