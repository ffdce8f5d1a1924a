#include "engine/backends/cuda/nccl_communicator.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "engine/backends/cuda/cuda_status.h"
#include "engine/backends/cuda/nccl_bootstrap.h"
#include "engine/core/env_options.h"

#ifdef TESSERA_HAVE_NCCL
#include <nccl.h>
#endif

namespace tsr::cuda {

#ifdef TESSERA_HAVE_NCCL

bool ncclBuilt() { return true; }

namespace {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes);

Status checkNccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return {};
  const char* last = ncclGetLastError(nullptr);
  return makeError("NCCL: {} failed: {}{}{}", what, ncclGetErrorString(r), last && *last ? ": " : "",
                   last ? last : "");
}
#define TSR_NCCL(call) TSR_TRY(checkNccl((call), #call))

Result<ncclDataType_t> ncclType(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
    case DType::U32: return ncclUint32;
    default: return makeError("NCCL: cannot sum {}", dtypeName(t));
  }
}

// At exit the CUDA runtime may be torn down before the communicators' owners go: set by a handler registered
// after the runtime's own (so it runs first), it makes them leave NCCL alone; the process's end frees all.
std::atomic<bool> g_exiting{false};
void markExiting() { g_exiting = true; }

// One position's communicators, kept with the host communicator (Communicator::attachment).
struct NcclState {
  std::map<std::vector<int>, ncclComm_t> roots;  // by participants
  std::map<std::pair<std::vector<int64_t>, int64_t>, NcclGroup> groups;  // by partition (groups, groupSize)
  std::vector<ncclComm_t> splits;                                          // owned, beside the roots

  ~NcclState() {
    if (g_exiting) return;
    for (ncclComm_t c : splits) ncclCommDestroy(c);
    for (auto& [members, c] : roots) ncclCommDestroy(c);
  }
};

// This member's record: its machine and GPU, and from the first member the unique id.
RankRecord ownRecord(int self, Device& device, bool first) {
  RankRecord r;
  r.position = self;
  r.gpu = device.ordinal();
  r.localRanks = envOptions().localRanks;
  auto fail = [&](const std::string& why) {
    setText(r.error, why);
    return r;
  };
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) setText(r.host, "?");
  else setText(r.host, host);
  auto n = deviceCount();
  if (!n.ok()) return fail(n.error().message);
  r.gpus = *n;
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device.ordinal()); e != cudaSuccess)
    return fail(fmt::format("cudaGetDeviceProperties: {}", cudaGetErrorString(e)));
  std::memcpy(r.gpuUuid.data(), prop.uuid.bytes, r.gpuUuid.size());
  if (first) {
    ncclUniqueId id;
    if (ncclResult_t e = ncclGetUniqueId(&id); e != ncclSuccess)
      return fail(fmt::format("ncclGetUniqueId: {}", ncclGetErrorString(e)));
    std::memcpy(r.uniqueId.data(), id.internal, kNcclIdBytes);
  }
  return r;
}

// The communicator over `members` (ascending positions, self among them), made with every member.
Result<ncclComm_t> makeRoot(dist::Communicator& host, int self, Device& device, const std::vector<int>& members) {
  const auto me = static_cast<int>(std::find(members.begin(), members.end(), self) - members.begin());
  TSR_ASSIGN(std::vector<RankRecord> records, exchangeRecords(host, self, members, ownRecord(self, device, me == 0)));
  TSR_TRY(checkOneGpuPerRank(records));
  ncclUniqueId id;
  std::memcpy(id.internal, records[0].uniqueId.data(), kNcclIdBytes);
  TSR_CUDA(cudaSetDevice(device.ordinal()));
  ncclComm_t comm = nullptr;
  TSR_NCCL(ncclCommInitRank(&comm, static_cast<int>(members.size()), id, me));
  return comm;
}

}  // namespace

Result<NcclGroup> ncclGroup(dist::Communicator& host, int self, Device& device, std::span<const int64_t> groups,
                            int64_t groupSize) {
  auto make = []() -> Result<dist::Communicator::Attachment> {
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(markExiting); });
    return std::shared_ptr<void>(std::make_shared<NcclState>());
  };
  TSR_ASSIGN(dist::Communicator::Attachment a, host.attachment("nccl", self, make));
  auto& state = *static_cast<NcclState*>(a.get());
  std::pair<std::vector<int64_t>, int64_t> partition{std::vector<int64_t>(groups.begin(), groups.end()), groupSize};
  if (auto it = state.groups.find(partition); it != state.groups.end()) return it->second;
  TSR_ASSIGN(GroupPlan plan, planGroup(groups, groupSize, self));
  auto root = state.roots.find(plan.members);
  if (root == state.roots.end()) {
    TSR_ASSIGN(ncclComm_t c, makeRoot(host, self, device, plan.members));
    root = state.roots.emplace(plan.members, c).first;
  }
  NcclGroup g{root->second, plan.key, static_cast<int>(groupSize)};
  if (plan.split) {
    TSR_CUDA(cudaSetDevice(device.ordinal()));
    ncclComm_t split = nullptr;
    TSR_NCCL(ncclCommSplit(root->second, plan.color, plan.key, &split, nullptr));
    state.splits.push_back(split);
    g.comm = split;
  }
  state.groups.emplace(std::move(partition), g);
  return g;
}

Status ncclAllReduce(const NcclGroup& g, const void* in, void* out, int64_t count, DType dtype, void* stream) {
  TSR_ASSIGN(ncclDataType_t t, ncclType(dtype));
  TSR_NCCL(ncclAllReduce(in, out, static_cast<size_t>(count), t, ncclSum, static_cast<ncclComm_t>(g.comm),
                         static_cast<cudaStream_t>(stream)));
  return {};
}

Status ncclAllGather(const NcclGroup& g, const void* in, void* out, int64_t bytes, void* stream) {
  TSR_NCCL(ncclAllGather(in, out, static_cast<size_t>(bytes), ncclUint8, static_cast<ncclComm_t>(g.comm),
                         static_cast<cudaStream_t>(stream)));
  return {};
}

Status ncclReduceScatter(const NcclGroup& g, const void* in, void* out, int64_t count, DType dtype, void* stream) {
  TSR_ASSIGN(ncclDataType_t t, ncclType(dtype));
  TSR_NCCL(ncclReduceScatter(in, out, static_cast<size_t>(count), t, ncclSum, static_cast<ncclComm_t>(g.comm),
                             static_cast<cudaStream_t>(stream)));
  return {};
}

Status ncclAllToAll(const NcclGroup& g, const void* in, void* out, int64_t bytes, void* stream) {
  auto c = static_cast<ncclComm_t>(g.comm);
  auto s = static_cast<cudaStream_t>(stream);
  TSR_NCCL(ncclGroupStart());
  Status st;
  for (int j = 0; j < g.size && st.ok(); ++j) {
    st = checkNccl(ncclSend(static_cast<const char*>(in) + j * bytes, static_cast<size_t>(bytes), ncclUint8, j, c, s),
                   "ncclSend");
    if (st.ok())
      st = checkNccl(ncclRecv(static_cast<char*>(out) + j * bytes, static_cast<size_t>(bytes), ncclUint8, j, c, s),
                     "ncclRecv");
  }
  TSR_NCCL(ncclGroupEnd());  // always closed, so that NCCL's group state stays balanced
  return st;
}

Status ncclPermute(const NcclGroup& g, std::span<const std::pair<int, int>> pairs, const void* in, void* out,
                   int64_t bytes, void* stream) {
  auto c = static_cast<ncclComm_t>(g.comm);
  auto s = static_cast<cudaStream_t>(stream);
  bool received = false;
  TSR_NCCL(ncclGroupStart());
  Status st;
  for (const auto& [from, to] : pairs) {
    if (!st.ok()) break;
    if (from == g.rank && to == g.rank) {
      st = checkCuda(cudaMemcpyAsync(out, in, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, s), "copy");
      received = true;
      continue;
    }
    if (from == g.rank) st = checkNccl(ncclSend(in, static_cast<size_t>(bytes), ncclUint8, to, c, s), "ncclSend");
    if (st.ok() && to == g.rank) {
      st = checkNccl(ncclRecv(out, static_cast<size_t>(bytes), ncclUint8, from, c, s), "ncclRecv");
      received = true;
    }
  }
  TSR_NCCL(ncclGroupEnd());
  TSR_TRY(st);
  if (!received && bytes > 0) TSR_CUDA(cudaMemsetAsync(out, 0, static_cast<size_t>(bytes), s));
  return {};
}

#else

bool ncclBuilt() { return false; }

namespace {
Error noNccl() { return makeError("NCCL: this build of Tessera was built without NCCL"); }
}  // namespace

Result<NcclGroup> ncclGroup(dist::Communicator&, int, Device&, std::span<const int64_t>, int64_t) { return noNccl(); }
Status ncclAllReduce(const NcclGroup&, const void*, void*, int64_t, DType, void*) { return noNccl(); }
Status ncclAllGather(const NcclGroup&, const void*, void*, int64_t, void*) { return noNccl(); }
Status ncclReduceScatter(const NcclGroup&, const void*, void*, int64_t, DType, void*) { return noNccl(); }
Status ncclAllToAll(const NcclGroup&, const void*, void*, int64_t, void*) { return noNccl(); }
Status ncclPermute(const NcclGroup&, std::span<const std::pair<int, int>>, const void*, void*, int64_t, void*) {
  return noNccl();
}

#endif

}  // namespace tsr::cuda
