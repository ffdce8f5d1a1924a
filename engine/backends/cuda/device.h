#pragma once
// CUDA devices, streams and memory (host code on the CUDA runtime API; no device code is compiled at build
// time). A Device owns, per GPU:
//   - a compute stream and a copy stream (host-to-device copies of the next batch overlap compute);
//   - a stream-ordered memory pool (cudaMallocAsync): buffers are freed in stream order and their memory is
//     reused by later allocations without a device-wide synchronisation;
//   - a cuBLASLt handle and workspace.
// Every call that can fail returns a Status naming the CUDA error; with no GPU (or no driver) `deviceCount`
// says so in one clear line, and nothing aborts.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/core/result.h"

namespace tsr::cuda {

// The number of usable GPUs, or an error saying why there are none ("no CUDA driver", "no GPU").
Result<int> deviceCount();
// "" when a GPU is present, else the reason (for test skips and the CLI).
std::string unavailableReason();

// Which GPU a local device of this process runs on: TESSERA_CUDA_DEVICE when set, else under mpirun the rank's
// local rank (its index among the ranks of its machine), plus the device's index among the process's local
// devices (virtual devices of one process take consecutive GPUs), modulo the GPUs the process sees. Ranks that
// land on one GPU are found when their NCCL communicator is made (nccl_bootstrap.h: checkOneGpuPerRank).
struct GpuChoice {
  std::optional<std::string> requested;  // TESSERA_CUDA_DEVICE as written
  int localRank = -1;                    // -1: no launcher said
  int localDevice = 0;
  int gpus = 1;                          // the GPUs this process sees
};
Result<int> chooseGpu(const GpuChoice& c);
// The same for this process: its environment and its GPUs.
Result<int> gpuForLocalDevice(int localDevice);

// The numerical precision of f32 matrix products (jax.default_matmul_precision,
// torch.set_float32_matmul_precision): F32 exact, TF32 tensor cores (10-bit mantissa inputs), BF16 inputs;
// accumulation is always f32. Default: TESSERA_MATMUL_PRECISION (f32, tf32, bf16), else f32.
enum class MatmulPrecision : uint8_t { F32, TF32, BF16 };
const char* matmulPrecisionName(MatmulPrecision p);
Result<MatmulPrecision> parseMatmulPrecision(const std::string& text);
MatmulPrecision matmulPrecision();
void setMatmulPrecision(MatmulPrecision p);

class Device;

// A block of device memory from the device's pool, freed in order on the compute stream when the last
// reference goes.
class DeviceBuffer {
 public:
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() { return m_data; }
  const void* data() const { return m_data; }
  int64_t size() const { return m_size; }
  Device& device() const { return *m_device; }

 private:
  friend class Device;
  DeviceBuffer(Device* d, void* p, int64_t size) : m_device(d), m_data(p), m_size(size) {}
  Device* m_device;
  void* m_data;
  int64_t m_size;
};
using DeviceBufferPtr = std::shared_ptr<DeviceBuffer>;

class Device {
 public:
  // The device with this ordinal, created on first use (streams, pool, cuBLASLt handle). Thread-safe.
  static Result<Device*> get(int ordinal = 0);
  ~Device();

  int ordinal() const { return m_ordinal; }
  std::string name() const { return m_name; }  // "NVIDIA H100 80GB HBM3"
  int smVersion() const { return m_sm; }       // 90 for sm_90
  int numSMs() const { return m_numSMs; }
  void* computeStream() const { return m_compute; }  // cudaStream_t
  void* copyStream() const { return m_copy; }
  void* cublasLt() const { return m_lt; }              // cublasLtHandle_t
  void* workspace() const { return m_workspace; }
  int64_t workspaceBytes() const { return m_workspaceBytes; }

  // Stream-ordered allocation on the compute stream; contents undefined. Fails with the size and the free
  // memory when the device runs out.
  Result<DeviceBufferPtr> allocate(int64_t bytes);
  // Copies (on the compute stream, ordered with the kernels).
  Status upload(void* dst, const void* src, int64_t bytes);
  Status download(void* dst, const void* src, int64_t bytes);
  Status memset(void* dst, int value, int64_t bytes);
  // A point in the work queued on the compute stream so far (a CUDA event).
  Result<std::shared_ptr<void>> computeFence();
  // Host-to-device copy on the copy stream from pinned host memory, after `after` (when given) and before
  // whatever the compute stream runs next: the next batch is copied while the current step runs, into a
  // buffer whose last reader was fenced.
  Status uploadAsync(void* dst, const void* pinnedSrc, int64_t bytes, const std::shared_ptr<void>& after = nullptr);
  Status synchronize();
  // Gives the pool's memory no buffer holds back to the driver, once the work queued so far is done (a program's
  // first CUDA graph allocates its own memory: what its eager runs left in the pool is then surplus).
  Status trimPool();
  // Bytes the pool holds from the driver, and the free and total memory of the device.
  int64_t poolBytes() const;
  Status memoryInfo(int64_t* freeBytes, int64_t* totalBytes) const;

 private:
  Device() = default;
  Status init(int ordinal);
  int m_ordinal = 0;
  std::string m_name;
  int m_sm = 0, m_numSMs = 0;
  void* m_compute = nullptr;
  void* m_copy = nullptr;
  void* m_pool = nullptr;  // cudaMemPool_t
  void* m_lt = nullptr;
  void* m_workspace = nullptr;
  int64_t m_workspaceBytes = 0;
};

// Pinned host memory (cudaMallocHost) for asynchronous copies; freed on destruction.
class PinnedBuffer {
 public:
  static Result<std::unique_ptr<PinnedBuffer>> allocate(int64_t bytes);
  ~PinnedBuffer();
  void* data() { return m_data; }
  int64_t size() const { return m_size; }

 private:
  PinnedBuffer(void* p, int64_t n) : m_data(p), m_size(n) {}
  void* m_data;
  int64_t m_size;
};

}  // namespace tsr::cuda
