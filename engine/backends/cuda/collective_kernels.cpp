#include "engine/backends/cuda/collective_kernels.h"

#include <algorithm>
#include <variant>

#include <cuda_runtime_api.h>

#include "engine/backends/cuda/cuda_status.h"
#include "engine/backends/cuda/nccl_bootstrap.h"
#include "engine/backends/cuda/nccl_communicator.h"
#include "engine/core/env_options.h"
#include "engine/dist/communicator.h"

namespace tsr::cuda {

using ir::OpCode;

bool isCollective(OpCode op) {
  return op == OpCode::AllReduce || op == OpCode::AllGather || op == OpCode::ReduceScatter ||
         op == OpCode::AllToAll || op == OpCode::CollectivePermute;
}

Status packChunks(const void* src, void* dst, int64_t outer, int64_t n, int64_t row, void* stream) {
  // Chunk j: rows j, j + n, j + 2n, ... of src, one after another in dst.
  for (int64_t j = 0; j < n && row > 0 && outer > 0; ++j)
    TSR_CUDA(cudaMemcpy2DAsync(static_cast<char*>(dst) + j * outer * row, static_cast<size_t>(row),
                               static_cast<const char*>(src) + j * row, static_cast<size_t>(n * row),
                               static_cast<size_t>(row), static_cast<size_t>(outer), cudaMemcpyDeviceToDevice,
                               static_cast<cudaStream_t>(stream)));
  return {};
}

Status unpackChunks(const void* src, void* dst, int64_t outer, int64_t n, int64_t row, void* stream) {
  for (int64_t j = 0; j < n && row > 0 && outer > 0; ++j)
    TSR_CUDA(cudaMemcpy2DAsync(static_cast<char*>(dst) + j * row, static_cast<size_t>(n * row),
                               static_cast<const char*>(src) + j * outer * row, static_cast<size_t>(row),
                               static_cast<size_t>(row), static_cast<size_t>(outer), cudaMemcpyDeviceToDevice,
                               static_cast<cudaStream_t>(stream)));
  return {};
}

namespace {

// The product of shape[0:dim].
int64_t outerSize(const Shape& s, int64_t dim) {
  int64_t n = 1;
  for (int d = 0; d < dim; ++d) n *= s[d];
  return n;
}

Status copyOnDevice(void* dst, const void* src, int64_t bytes, void* stream) {
  if (bytes > 0 && dst != src)
    TSR_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                             static_cast<cudaStream_t>(stream)));
  return {};
}

// One collective node on device pointers, for position self of the host communicator.
class Call {
 public:
  Call(Device& d, dist::Communicator& host, int self, const ir::Graph& g, const ir::Node& n, const void* x, void* out)
      : m_device(d), m_host(host), m_self(self), m_x(x), m_out(out), m_in(g.aval(n.operands[0])),
        m_result(g.aval(n.results[0])), m_stream(d.computeStream()) {}

  Status allReduce(const ir::AllReduceAttrs& at) {
    TSR_ASSIGN(NcclGroup grp, ncclGroup(m_host, m_self, m_device, at.groups, at.groupSize));
    return ncclAllReduce(grp, m_x, m_out, m_in.numel(), m_in.dtype, m_stream);
  }

  // x: [A, D, B] -> out: [A, n*D, B], member j's x at out[:, j*D:(j+1)*D, :].
  Status allGather(const ir::AllGatherAttrs& at) {
    TSR_ASSIGN(NcclGroup grp, ncclGroup(m_host, m_self, m_device, at.groups, at.groupSize));
    const int64_t bytes = m_in.bytes(), outer = outerSize(m_in.shape, at.dim), n = at.groupSize;
    if (outer == 1 || bytes == 0) return ncclAllGather(grp, m_x, m_out, bytes, m_stream);
    TSR_ASSIGN(DeviceBufferPtr gathered, m_device.allocate(bytes * n));  // [n, A, D*B]
    TSR_TRY(ncclAllGather(grp, m_x, gathered->data(), bytes, m_stream));
    return unpackChunks(gathered->data(), m_out, outer, n, bytes / outer, m_stream);
  }

  // x: [A, n*D, B] -> out: [A, D, B], the sum over members of their x[:, me*D:(me+1)*D, :].
  Status reduceScatter(const ir::AllGatherAttrs& at) {
    TSR_ASSIGN(NcclGroup grp, ncclGroup(m_host, m_self, m_device, at.groups, at.groupSize));
    const int64_t bytes = m_in.bytes(), outer = outerSize(m_in.shape, at.dim), n = at.groupSize;
    if (outer == 1 || bytes == 0) return ncclReduceScatter(grp, m_x, m_out, m_result.numel(), m_in.dtype, m_stream);
    TSR_ASSIGN(DeviceBufferPtr packed, m_device.allocate(bytes));  // [n, A, D*B]
    TSR_TRY(packChunks(m_x, packed->data(), outer, n, bytes / (outer * n), m_stream));
    return ncclReduceScatter(grp, packed->data(), m_out, m_result.numel(), m_in.dtype, m_stream);
  }

  // x split along splitDim into n chunks (chunk j to member j); the chunks received are concatenated along
  // concatDim in member order.
  Status allToAll(const ir::AllToAllAttrs& at) {
    TSR_ASSIGN(NcclGroup grp, ncclGroup(m_host, m_self, m_device, at.groups, at.groupSize));
    const int64_t bytes = m_in.bytes(), n = at.groupSize;
    const int64_t splitOuter = outerSize(m_in.shape, at.splitDim);
    const void* send = m_x;
    DeviceBufferPtr packed, received;
    if (splitOuter > 1 && bytes > 0) {
      TSR_ASSIGN(packed, m_device.allocate(bytes));
      TSR_TRY(packChunks(m_x, packed->data(), splitOuter, n, bytes / (splitOuter * n), m_stream));
      send = packed->data();
    }
    Shape chunk = m_in.shape;
    chunk[static_cast<int>(at.splitDim)] /= n;
    const int64_t concatOuter = outerSize(chunk, at.concatDim);
    if (concatOuter == 1 || bytes == 0) return ncclAllToAll(grp, send, m_out, bytes / n, m_stream);
    TSR_ASSIGN(received, m_device.allocate(bytes));
    TSR_TRY(ncclAllToAll(grp, send, received->data(), bytes / n, m_stream));
    return unpackChunks(received->data(), m_out, concatOuter, n, bytes / (n * concatOuter), m_stream);
  }

  // Over the communicator of the positions the pairs name (every one of them makes this call); a position
  // named in none only zeroes its result.
  Status permute(const ir::CollectivePermuteAttrs& at) {
    ir::Ints named;
    for (int64_t p : at.pairs) named.push_back(p);
    std::sort(named.begin(), named.end());
    named.erase(std::unique(named.begin(), named.end()), named.end());
    auto rankOf = [&](int64_t p) {
      return static_cast<int>(std::lower_bound(named.begin(), named.end(), p) - named.begin());
    };
    if (!std::binary_search(named.begin(), named.end(), static_cast<int64_t>(m_self))) {
      if (m_in.bytes() > 0)
        TSR_CUDA(cudaMemsetAsync(m_out, 0, static_cast<size_t>(m_in.bytes()), static_cast<cudaStream_t>(m_stream)));
      return {};
    }
    TSR_ASSIGN(NcclGroup grp, ncclGroup(m_host, m_self, m_device, named, static_cast<int64_t>(named.size())));
    std::vector<std::pair<int, int>> pairs;
    for (size_t i = 0; i + 1 < at.pairs.size(); i += 2)
      pairs.emplace_back(rankOf(at.pairs[i]), rankOf(at.pairs[i + 1]));
    return ncclPermute(grp, pairs, m_x, m_out, m_in.bytes(), m_stream);
  }

 private:
  Device& m_device;
  dist::Communicator& m_host;
  int m_self;
  const void* m_x;
  void* m_out;
  const Aval &m_in, &m_result;
  void* m_stream;
};

// The group size of a collective's attrs (0 for collective_permute, whose pairs name its members).
int64_t groupSizeOf(const ir::Attrs& attrs) {
  if (auto* a = std::get_if<ir::AllReduceAttrs>(&attrs)) return a->groupSize;
  if (auto* a = std::get_if<ir::AllGatherAttrs>(&attrs)) return a->groupSize;
  if (auto* a = std::get_if<ir::AllToAllAttrs>(&attrs)) return a->groupSize;
  return 0;
}

}  // namespace

Result<bool> runCollective(Device& device, const ir::Graph& g, const cpu::LoweredKernel& k,
                           const std::vector<void*>& args) {
  const ir::Node& n = g.nodes()[static_cast<size_t>(k.node)];
  const void* x = args[static_cast<size_t>(k.operandArgs[0])];
  void* out = args[static_cast<size_t>(k.resultArgs[0])];
  if (groupSizeOf(n.attrs) == 1) {
    TSR_TRY(copyOnDevice(out, x, g.aval(n.operands[0]).bytes(), device.computeStream()));
    return true;
  }
  dist::DeviceContext* ctx = dist::currentDevice();
  if (!ctx || !ctx->comm) return false;
  TSR_ASSIGN(CollectiveRoute route, collectiveRoute(ctx->comm->kind(), envOptions().nccl, ncclBuilt()));
  if (route == CollectiveRoute::Host) return false;
  Call call(device, *ctx->comm, ctx->position, g, n, x, out);
  switch (n.op) {
    case OpCode::AllReduce: TSR_TRY(call.allReduce(std::get<ir::AllReduceAttrs>(n.attrs))); break;
    case OpCode::AllGather: TSR_TRY(call.allGather(std::get<ir::AllGatherAttrs>(n.attrs))); break;
    case OpCode::ReduceScatter: TSR_TRY(call.reduceScatter(std::get<ir::AllGatherAttrs>(n.attrs))); break;
    case OpCode::AllToAll: TSR_TRY(call.allToAll(std::get<ir::AllToAllAttrs>(n.attrs))); break;
    case OpCode::CollectivePermute: TSR_TRY(call.permute(std::get<ir::CollectivePermuteAttrs>(n.attrs))); break;
    default: return makeError("{} is not a collective", static_cast<int>(n.op));
  }
  return true;
}

}  // namespace tsr::cuda
