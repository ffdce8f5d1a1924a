#include "engine/ops/matmul_onednn.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "engine/core/env_options.h"
#include "engine/ops/onednn_common.h"

namespace tsr::ops {

namespace {

using dt = dnnl::memory::data_type;

// A primitive per problem (shapes and strides), built once; `prim` empty where oneDNN declines it.
struct Matmul {
  std::optional<dnnl::matmul> prim;
  dnnl::memory::desc lhs, rhs, out;
  std::string implementation;
};

// The desc of a batch of matrices. A dim of extent 1 takes the stride of a dense layout: its stride is never
// used to address, and oneDNN checks strides for consistency.
dnnl::memory::desc descOf(const StridedMatrices& m) {
  const int64_t cs = m.cols > 1 ? m.colStride : 1;
  const int64_t rs = m.rows > 1 ? m.rowStride : m.cols * cs;
  int64_t span = std::max((m.rows - 1) * rs + (m.cols - 1) * cs + 1, int64_t{1});
  dnnl::memory::dims dims(m.batch.size()), strides(m.batch.size());
  for (size_t d = m.batch.size(); d-- > 0;) {
    dims[d] = m.batch[d];
    strides[d] = m.batch[d] > 1 ? m.batchStrides[d] : span;
    span = std::max(span, (m.batch[d] - 1) * strides[d] + span);
  }
  dims.insert(dims.end(), {m.rows, m.cols});
  strides.insert(strides.end(), {rs, cs});
  return dnnl::memory::desc(dims, dt::bf16, strides);
}

// The primitive of one problem; `prim` stays empty where oneDNN has only its reference implementation or declines.
std::shared_ptr<const Matmul> build(const StridedMatrices& lhs, const StridedMatrices& rhs) {
  auto m = std::make_shared<Matmul>();
  try {  // oneDNN refuses strides it cannot address, or the problem
    m->lhs = descOf(lhs);
    m->rhs = descOf(rhs);
    dnnl::memory::dims outDims = lhs.batch, outStrides(lhs.batch.size() + 2);
    outDims.insert(outDims.end(), {lhs.rows, rhs.cols});
    int64_t stride = 1;
    for (size_t d = outDims.size(); d-- > 0; stride *= outDims[d]) outStrides[d] = stride;
    m->out = dnnl::memory::desc(outDims, dt::bf16, outStrides);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(m->lhs, m->rhs, m->out), oneDnnEngine());
    m->implementation = pd.impl_info_str();
    if (m->implementation.rfind("ref", 0) != 0) m->prim = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    m->implementation.clear();
  }
  return m;
}

std::shared_ptr<const Matmul> matmulFor(const StridedMatrices& lhs, const StridedMatrices& rhs) {
  std::vector<int64_t> key = {lhs.rows, lhs.cols, rhs.cols, lhs.rowStride, lhs.colStride, rhs.rowStride, rhs.colStride};
  for (const StridedMatrices* m : {&lhs, &rhs}) {
    key.push_back(static_cast<int64_t>(m->batch.size()));
    key.insert(key.end(), m->batch.begin(), m->batch.end());
    key.insert(key.end(), m->batchStrides.begin(), m->batchStrides.end());
  }
  static OneDnnCache<std::vector<int64_t>, Matmul> cache;
  return cache.get(key, [&] { return build(lhs, rhs); });
}

// oneDNN's matmul takes at most 12 dims; every extent at least 1 (the kernel returns before empty products).
bool valid(const StridedMatrices& lhs, const StridedMatrices& rhs) {
  const auto positive = [](const std::vector<int64_t>& dims) {
    return std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d > 0; });
  };
  return lhs.batch == rhs.batch && lhs.batch.size() <= 10 && lhs.batchStrides.size() == lhs.batch.size() &&
         rhs.batchStrides.size() == rhs.batch.size() && positive(lhs.batch) && lhs.cols == rhs.rows &&
         lhs.rows > 0 && lhs.cols > 0 && rhs.cols > 0;
}

}  // namespace

bool oneDnnBf16Matmul(const StridedMatrices& lhs, const StridedMatrices& rhs, bf16* out) {
  if (!valid(lhs, rhs)) return false;
  const std::shared_ptr<const Matmul> m = matmulFor(lhs, rhs);
  if (!m->prim) return false;
  try {
    const dnnl::engine& engine = oneDnnEngine();
    useOneDnnThreads();
    dnnl::stream stream(engine);
    m->prim->execute(stream, {{DNNL_ARG_SRC, dnnl::memory(m->lhs, engine, const_cast<bf16*>(lhs.data))},
                              {DNNL_ARG_WEIGHTS, dnnl::memory(m->rhs, engine, const_cast<bf16*>(rhs.data))},
                              {DNNL_ARG_DST, dnnl::memory(m->out, engine, out)}});
    stream.wait();
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

std::string oneDnnBf16MatmulImplementation(const StridedMatrices& lhs, const StridedMatrices& rhs) {
  return valid(lhs, rhs) ? matmulFor(lhs, rhs)->implementation : std::string();
}

bool cpuBf16ProductsOutrunF32() {
  static const bool outrun = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto has = [isa](dnnl::cpu_isa wanted) {
      return (isa & static_cast<unsigned>(wanted)) == static_cast<unsigned>(wanted);
    };
    if (has(dnnl::cpu_isa::avx512_core_amx)) return true;
    return has(dnnl::cpu_isa::avx512_core_bf16) && __builtin_cpu_is("amd");
  }();
  return outrun;
}

bool bf16ProductsOnOneDnn() {
  const std::string& choice = envOptions().cpuBf16Matmul;
  if (choice == "onednn") return true;
  if (choice == "f32") return false;
  return cpuBf16ProductsOutrunF32();
}

}  // namespace tsr::ops
