#include "engine/ops/matmul_onednn.h"

#include <dnnl.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/ops/conv_onednn.h"

namespace tsr::ops {

namespace {

using dt = dnnl::memory::data_type;

// A primitive per problem (shapes and strides), built once; `prim` empty where oneDNN declines it.
struct Matmul {
  std::optional<dnnl::matmul> prim;
  dnnl::memory::desc lhs, rhs, out;
  std::string implementation;
};

struct Cache {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;
  std::map<std::vector<int64_t>, std::shared_ptr<const Matmul>> problems;
  static Cache& instance() {
    static Cache c;
    return c;
  }
};

// The desc of a batch of matrices. A dim of extent 1 takes the stride of a dense layout: its stride is never
// used to address, and oneDNN checks strides for consistency.
dnnl::memory::desc descOf(const StridedMatrices& m) {
  const int64_t cs = m.cols > 1 ? m.colStride : 1;
  const int64_t rs = m.rows > 1 ? m.rowStride : m.cols * cs;
  const int64_t span = std::max((m.rows - 1) * rs + (m.cols - 1) * cs + 1, int64_t{1});
  const int64_t bs = m.batch > 1 ? m.batchStride : span;
  return dnnl::memory::desc({m.batch, m.rows, m.cols}, dt::bf16, {bs, rs, cs});
}

std::shared_ptr<const Matmul> matmulFor(const StridedMatrices& lhs, const StridedMatrices& rhs) {
  const std::vector<int64_t> key = {lhs.batch,       lhs.rows,      lhs.cols,      rhs.cols,      lhs.batchStride,
                                    lhs.rowStride,   lhs.colStride, rhs.batchStride, rhs.rowStride, rhs.colStride};
  Cache& c = Cache::instance();
  std::lock_guard lock(c.mutex);
  auto& slot = c.problems[key];
  if (slot) return slot;
  auto m = std::make_shared<Matmul>();
  m->lhs = descOf(lhs);
  m->rhs = descOf(rhs);
  m->out = dnnl::memory::desc({lhs.batch, lhs.rows, rhs.cols}, dt::bf16, dnnl::memory::format_tag::abc);
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(m->lhs, m->rhs, m->out), c.engine);
    m->implementation = pd.impl_info_str();
    if (m->implementation.rfind("ref", 0) != 0) m->prim = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    m->implementation.clear();
  }
  slot = std::move(m);
  return slot;
}

bool valid(const StridedMatrices& lhs, const StridedMatrices& rhs) {
  return lhs.batch == rhs.batch && lhs.cols == rhs.rows && lhs.batch > 0 && lhs.rows > 0 && lhs.cols > 0 &&
         rhs.cols > 0;
}

}  // namespace

bool oneDnnBf16Matmul(const StridedMatrices& lhs, const StridedMatrices& rhs, bf16* out) {
  if (!valid(lhs, rhs)) return false;
  const std::shared_ptr<const Matmul> m = matmulFor(lhs, rhs);
  if (!m->prim) return false;
  try {
    Cache& c = Cache::instance();
    useOneDnnThreads();
    dnnl::stream stream(c.engine);
    m->prim->execute(stream, {{DNNL_ARG_SRC, dnnl::memory(m->lhs, c.engine, const_cast<bf16*>(lhs.data))},
                              {DNNL_ARG_WEIGHTS, dnnl::memory(m->rhs, c.engine, const_cast<bf16*>(rhs.data))},
                              {DNNL_ARG_DST, dnnl::memory(m->out, c.engine, out)}});
    stream.wait();
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

std::string oneDnnBf16MatmulImplementation(const StridedMatrices& lhs, const StridedMatrices& rhs) {
  return valid(lhs, rhs) ? matmulFor(lhs, rhs)->implementation : std::string();
}

}  // namespace tsr::ops
