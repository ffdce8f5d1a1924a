#include "engine/backends/cuda/nccl_communicator.h"

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "engine/backends/cuda/cuda_status.h"
#include "engine/backends/cuda/device.h"

#ifdef TESSERA_HAVE_NCCL
#include <nccl.h>
#endif

namespace tsr::cuda {

#ifdef TESSERA_HAVE_NCCL

namespace {

Status checkNccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return {};
  return makeError("NCCL: {} failed: {}", what, ncclGetErrorString(r));
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

class NcclCommunicator : public dist::Communicator {
 public:
  explicit NcclCommunicator(std::vector<ncclComm_t> comms) : m_comms(std::move(comms)) {}
  ~NcclCommunicator() override {
    for (ncclComm_t c : m_comms) ncclCommDestroy(c);
  }
  std::string kind() const override { return "nccl"; }
  int numDevices() const override { return static_cast<int>(m_comms.size()); }
  std::vector<int> localDevices() const override {
    std::vector<int> v(m_comms.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>(i);
    return v;
  }

  Status allReduce(int self, std::span<const int> group, const void* in, void* out, int64_t count, DType dtype) override {
    TSR_ASSIGN(cudaStream_t s, begin(self, group));
    TSR_ASSIGN(ncclDataType_t t, ncclType(dtype));
    TSR_NCCL(ncclAllReduce(in, out, static_cast<size_t>(count), t, ncclSum, m_comms[static_cast<size_t>(self)], s));
    return finish(s);
  }
  Status allGather(int self, std::span<const int> group, const void* in, void* out, int64_t bytes) override {
    TSR_ASSIGN(cudaStream_t s, begin(self, group));
    TSR_NCCL(ncclAllGather(in, out, static_cast<size_t>(bytes), ncclUint8, m_comms[static_cast<size_t>(self)], s));
    return finish(s);
  }
  Status reduceScatter(int self, std::span<const int> group, const void* in, void* out, int64_t count,
                       DType dtype) override {
    TSR_ASSIGN(cudaStream_t s, begin(self, group));
    TSR_ASSIGN(ncclDataType_t t, ncclType(dtype));
    TSR_NCCL(ncclReduceScatter(in, out, static_cast<size_t>(count), t, ncclSum, m_comms[static_cast<size_t>(self)], s));
    return finish(s);
  }
  Status allToAll(int self, std::span<const int> group, const void* in, void* out, int64_t bytes) override {
    TSR_ASSIGN(cudaStream_t s, begin(self, group));
    ncclComm_t c = m_comms[static_cast<size_t>(self)];
    TSR_NCCL(ncclGroupStart());
    for (size_t j = 0; j < group.size(); ++j) {
      TSR_NCCL(ncclSend(static_cast<const char*>(in) + static_cast<int64_t>(j) * bytes, static_cast<size_t>(bytes),
                        ncclUint8, group[j], c, s));
      TSR_NCCL(ncclRecv(static_cast<char*>(out) + static_cast<int64_t>(j) * bytes, static_cast<size_t>(bytes),
                        ncclUint8, group[j], c, s));
    }
    TSR_NCCL(ncclGroupEnd());
    return finish(s);
  }
  Status permute(int self, std::span<const std::pair<int, int>> pairs, const void* in, void* out,
                 int64_t bytes) override {
    if (self < 0 || self >= numDevices()) return makeError("NCCL: position {} out of range", self);
    auto s = static_cast<cudaStream_t>(streamOf(self));
    ncclComm_t c = m_comms[static_cast<size_t>(self)];
    bool received = false;
    TSR_NCCL(ncclGroupStart());
    for (const auto& [from, to] : pairs) {
      if (from == self) TSR_NCCL(ncclSend(in, static_cast<size_t>(bytes), ncclUint8, to, c, s));
      if (to == self) {
        TSR_NCCL(ncclRecv(out, static_cast<size_t>(bytes), ncclUint8, from, c, s));
        received = true;
      }
    }
    TSR_NCCL(ncclGroupEnd());
    if (!received) TSR_CUDA(cudaMemsetAsync(out, 0, static_cast<size_t>(bytes), s));
    return finish(s);
  }
  void abort(const std::string& why) override {
    std::lock_guard lock(m_mutex);
    if (m_aborted.exchange(true)) return;
    m_why = why;
    for (ncclComm_t c : m_comms) ncclCommAbort(c);
    m_comms.clear();
  }

 private:
  void* streamOf(int self) const {
    auto d = Device::get(self);
    return d.ok() ? (*d)->computeStream() : nullptr;
  }
  Result<cudaStream_t> begin(int self, std::span<const int> group) {
    if (m_aborted) return makeError("NCCL communicator aborted: {}", m_why);
    if (self < 0 || self >= numDevices()) return makeError("NCCL: position {} out of range (0..{})", self, numDevices() - 1);
    bool whole = static_cast<int>(group.size()) == numDevices();
    for (size_t i = 0; whole && i < group.size(); ++i) whole = group[i] == static_cast<int>(i);
    if (!whole) {
      std::string g;
      for (int p : group) g += fmt::format("{}{}", g.empty() ? "" : ",", p);
      return makeError("NCCL: group [{}] is not the whole mesh of {} GPUs (subgroups are not supported yet)", g,
                       numDevices());
    }
    TSR_ASSIGN(Device * d, Device::get(self));
    TSR_CUDA(cudaSetDevice(self));
    return static_cast<cudaStream_t>(d->computeStream());
  }
  static Status finish(cudaStream_t s) {
    TSR_CUDA(cudaStreamSynchronize(s));
    return {};
  }

  std::vector<ncclComm_t> m_comms;
  std::mutex m_mutex;
  std::atomic<bool> m_aborted{false};
  std::string m_why;
};

}  // namespace

Result<std::shared_ptr<dist::Communicator>> makeNcclCommunicator(int numDevices) {
  TSR_ASSIGN(int present, deviceCount());
  if (numDevices < 1 || numDevices > present)
    return makeError("NCCL: {} GPUs asked for, {} present", numDevices, present);
  std::vector<ncclComm_t> comms(static_cast<size_t>(numDevices));
  std::vector<int> devs(static_cast<size_t>(numDevices));
  for (int i = 0; i < numDevices; ++i) devs[static_cast<size_t>(i)] = i;
  TSR_NCCL(ncclCommInitAll(comms.data(), numDevices, devs.data()));
  return std::shared_ptr<dist::Communicator>(std::make_shared<NcclCommunicator>(std::move(comms)));
}

#else

Result<std::shared_ptr<dist::Communicator>> makeNcclCommunicator(int) {
  return makeError("NCCL: this build of Tessera was built without NCCL");
}

#endif

}  // namespace tsr::cuda
