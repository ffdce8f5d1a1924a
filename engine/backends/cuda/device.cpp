#include "engine/backends/cuda/device.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "engine/backends/cuda/cuda_status.h"
#include "engine/core/env_options.h"

namespace tsr::cuda {

namespace {

constexpr int kMaxDevices = 16;
// cuBLASLt's workspace: 32 MiB is what NVIDIA recommends for Hopper.
constexpr int64_t kWorkspaceBytes = 32 << 20;

std::atomic<int> g_precision{-1};

MatmulPrecision precisionFromEnv() {
  const std::string& v = envOptions().matmulPrecision;
  if (v.empty()) return MatmulPrecision::F32;
  auto p = parseMatmulPrecision(v);
  return p.ok() ? *p : MatmulPrecision::F32;
}

}  // namespace

Result<int> deviceCount() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e == cudaErrorInitializationError)
    return makeError("no CUDA GPU: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
  if (e != cudaSuccess) return makeError("no CUDA GPU: cudaGetDeviceCount: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
  if (n == 0) return makeError("no CUDA GPU: the driver reports no device");
  return n;
}

std::string unavailableReason() {
  auto n = deviceCount();
  return n.ok() ? std::string() : n.error().message;
}

Result<int> chooseGpu(const GpuChoice& c) {
  if (c.gpus < 1) return makeError("no CUDA GPU to run on");
  int base = std::max(c.localRank, 0);
  if (c.requested) {
    const std::string& r = *c.requested;
    int n = -1;
    auto [end, ec] = std::from_chars(r.data(), r.data() + r.size(), n);
    if (r.empty() || ec != std::errc() || end != r.data() + r.size() || n < 0 || n >= c.gpus)
      return makeError("TESSERA_CUDA_DEVICE='{}' names no GPU: this process sees {} (0 to {})", r, c.gpus,
                       c.gpus - 1);
    base = n;
  }
  return (base + std::max(c.localDevice, 0)) % c.gpus;
}

Result<int> gpuForLocalDevice(int localDevice) {
  TSR_ASSIGN(int n, deviceCount());
  const EnvOptions& env = envOptions();
  return chooseGpu(GpuChoice{env.cudaDevice, env.localRank, localDevice, n});
}

const char* matmulPrecisionName(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::F32: return "f32";
    case MatmulPrecision::TF32: return "tf32";
    case MatmulPrecision::BF16: return "bf16";
  }
  return "?";
}

Result<MatmulPrecision> parseMatmulPrecision(const std::string& text) {
  // jax's names ("highest", "high", "default"/"bfloat16") and torch's ("highest", "high", "medium") too.
  if (text == "f32" || text == "float32" || text == "highest") return MatmulPrecision::F32;
  if (text == "tf32" || text == "tensorfloat32" || text == "high") return MatmulPrecision::TF32;
  if (text == "bf16" || text == "bfloat16" || text == "medium" || text == "default") return MatmulPrecision::BF16;
  return makeError("unknown matmul precision '{}' (expected f32, tf32 or bf16)", text);
}

MatmulPrecision matmulPrecision() {
  int v = g_precision.load(std::memory_order_relaxed);
  if (v < 0) {
    v = static_cast<int>(precisionFromEnv());
    g_precision.store(v, std::memory_order_relaxed);
  }
  return static_cast<MatmulPrecision>(v);
}

void setMatmulPrecision(MatmulPrecision p) { g_precision.store(static_cast<int>(p), std::memory_order_relaxed); }

DeviceBuffer::~DeviceBuffer() {
  if (!m_data) return;
  cudaSetDevice(m_device->ordinal());
  cudaFreeAsync(m_data, static_cast<cudaStream_t>(m_device->computeStream()));
}

Result<Device*> Device::get(int ordinal) {
  // Never destroyed: the CUDA runtime tears itself down at exit before static destructors would run.
  static std::mutex mutex;
  static auto& devices = *new std::array<std::unique_ptr<Device>, kMaxDevices>();
  TSR_ASSIGN(int n, deviceCount());
  if (ordinal < 0 || ordinal >= n || ordinal >= kMaxDevices)
    return makeError("CUDA device {} does not exist ({} present)", ordinal, n);
  std::lock_guard lock(mutex);
  auto& d = devices[static_cast<size_t>(ordinal)];
  if (!d) {
    std::unique_ptr<Device> made(new Device());
    TSR_TRY(made->init(ordinal));
    d = std::move(made);
  }
  return d.get();
}

Status Device::init(int ordinal) {
  m_ordinal = ordinal;
  TSR_CUDA(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  TSR_CUDA(cudaGetDeviceProperties(&prop, ordinal));
  m_name = prop.name;
  m_sm = prop.major * 10 + prop.minor;
  m_numSMs = prop.multiProcessorCount;
  cudaStream_t compute = nullptr, copy = nullptr;
  TSR_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  TSR_CUDA(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  m_compute = compute;
  m_copy = copy;
  // The default pool keeps freed memory for reuse instead of returning it at each synchronisation.
  cudaMemPool_t pool = nullptr;
  TSR_CUDA(cudaDeviceGetDefaultMemPool(&pool, ordinal));
  uint64_t threshold = UINT64_MAX;
  TSR_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  m_pool = pool;
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return makeError("cuBLASLt: cublasLtCreate failed on device {}", ordinal);
  m_lt = lt;
  TSR_CUDA(cudaMalloc(&m_workspace, kWorkspaceBytes));
  m_workspaceBytes = kWorkspaceBytes;
  return {};
}

Device::~Device() {
  // Devices live until exit; the driver may already be shutting down, so errors are ignored.
  if (m_lt) cublasLtDestroy(static_cast<cublasLtHandle_t>(m_lt));
  if (m_workspace) cudaFree(m_workspace);
}

Result<DeviceBufferPtr> Device::allocate(int64_t bytes) {
  TSR_CUDA(cudaSetDevice(m_ordinal));
  void* p = nullptr;
  // Zero-byte arrays get a small block so that every buffer has a distinct address.
  size_t n = static_cast<size_t>(bytes > 0 ? bytes : 16);
  cudaError_t e = cudaMallocAsync(&p, n, static_cast<cudaStream_t>(m_compute));
  if (e != cudaSuccess) {
    cudaGetLastError();
    int64_t freeB = 0, totalB = 0;
    (void)memoryInfo(&freeB, &totalB);
    return makeError("cuda:{}: out of memory allocating {:.1f} MiB ({:.1f} MiB free of {:.1f} MiB; {})", m_ordinal,
                     bytes / 1048576.0, freeB / 1048576.0, totalB / 1048576.0, cudaGetErrorString(e));
  }
  return DeviceBufferPtr(new DeviceBuffer(this, p, bytes));
}

Status Device::upload(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return {};
  TSR_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, static_cast<cudaStream_t>(m_compute)));
  return {};
}

Status Device::download(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return {};
  TSR_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(m_compute)));
  TSR_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(m_compute)));
  return {};
}

Status Device::memset(void* dst, int value, int64_t bytes) {
  if (bytes <= 0) return {};
  TSR_CUDA(cudaMemsetAsync(dst, value, static_cast<size_t>(bytes), static_cast<cudaStream_t>(m_compute)));
  return {};
}

Result<std::shared_ptr<void>> Device::computeFence() {
  cudaEvent_t ev = nullptr;
  TSR_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  std::shared_ptr<void> fence(ev, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  TSR_CUDA(cudaEventRecord(ev, static_cast<cudaStream_t>(m_compute)));
  return fence;
}

Status Device::uploadAsync(void* dst, const void* pinnedSrc, int64_t bytes, const std::shared_ptr<void>& after) {
  if (bytes <= 0) return {};
  auto copy = static_cast<cudaStream_t>(m_copy);
  if (after) TSR_CUDA(cudaStreamWaitEvent(copy, static_cast<cudaEvent_t>(after.get()), 0));
  TSR_CUDA(cudaMemcpyAsync(dst, pinnedSrc, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, copy));
  cudaEvent_t done = nullptr;
  TSR_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  TSR_CUDA(cudaEventRecord(done, copy));
  TSR_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(m_compute), done, 0));
  TSR_CUDA(cudaEventDestroy(done));  // released once the wait is satisfied
  return {};
}

Status Device::synchronize() {
  TSR_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(m_copy)));
  TSR_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(m_compute)));
  return {};
}

Status Device::trimPool() {
  TSR_TRY(synchronize());
  TSR_CUDA(cudaMemPoolTrimTo(static_cast<cudaMemPool_t>(m_pool), 0));
  return {};
}

int64_t Device::poolBytes() const {
  uint64_t v = 0;
  cudaMemPoolGetAttribute(static_cast<cudaMemPool_t>(m_pool), cudaMemPoolAttrReservedMemCurrent, &v);
  return static_cast<int64_t>(v);
}

Status Device::memoryInfo(int64_t* freeBytes, int64_t* totalBytes) const {
  size_t f = 0, t = 0;
  TSR_CUDA(cudaSetDevice(m_ordinal));
  TSR_CUDA(cudaMemGetInfo(&f, &t));
  *freeBytes = static_cast<int64_t>(f);
  *totalBytes = static_cast<int64_t>(t);
  return {};
}

Result<std::unique_ptr<PinnedBuffer>> PinnedBuffer::allocate(int64_t bytes) {
  void* p = nullptr;
  TSR_CUDA(cudaMallocHost(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1))));
  return std::unique_ptr<PinnedBuffer>(new PinnedBuffer(p, bytes));
}

PinnedBuffer::~PinnedBuffer() { cudaFreeHost(m_data); }

}  // namespace tsr::cuda
