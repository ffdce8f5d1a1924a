#pragma once
// The CUDA executable: the CPU backend's lowered program (the same fusion plan, kernel order and memory plan,
// engine/backends/cpu/executable.h) run on one GPU:
//   - loop and reduction kernels and GEMM epilogues: CUDA C++ generated from their tile programs (codegen.h),
//     compiled with NVRTC (cached on disk) and launched on the device's compute stream;
//   - dot_general: cuBLASLt (gemm.h) at the matmul precision in force when the program was compiled;
//   - conv_general_dilated: cuDNN's graph API (cudnn_conv.h: forward, backward data or backward filter, at the
//     same precision) where the build has cuDNN and it takes the problem; else the NVRTC kernel below; a forward
//     convolution's epilogue (bias, residual add, activation) in the same cuDNN graph where an engine takes it;
//   - ops alone in their kernel with a generated CUDA kernel of their own (node_kernels.h: layout copies,
//     gather and the scatters, iota, cumulative ops, sort and top_k, convolution, window reductions, ...):
//     NVRTC too; opPath (executable.cpp) lists them;
//   - collectives: NCCL on the device under mpirun, else their CPU kernel on host copies (collective_kernels.h);
//   - every other op (scan, while, random bits, ...): its CPU reference kernel on host copies of its operands
//     ("host" kernels; correct, slow, listed by describe());
//   - intermediates in one device arena laid out by the CPU memory plan; outputs in fresh pool buffers (while runs
//     may become graphs, buffers the caller has dropped are handed out again, so that addresses repeat).
// With a Profiler active, every launch is timed with CUDA events on the GPU clock, shifted onto the profiler's
// host clock (an event recorded at a known host time anchors the two), and recorded as device "cuda:<n>" (a
// loop group's launch is its first member's event; the other members' events are empty).
// Loops of the same generated text launch together (loop_groups.h); runs after the first replay a CUDA graph of
// the whole run where they can (step_graphs.h).
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backends/cpu/executable.h"
#include "engine/backends/cuda/codegen.h"
#include "engine/backends/cuda/cudnn_conv.h"
#include "engine/backends/cuda/device.h"
#include "engine/backends/cuda/flash_attention.h"
#include "engine/runtime/buffer.h"

namespace tsr::cuda {

enum class KernelPath : uint8_t { Generated, CuBlasLt, Cudnn, Flash, Host, Collective, None };
const char* kernelPathName(KernelPath p);

// How the CUDA backend runs an op when it is alone in its kernel: "nvrtc", "cublaslt", "cudnn", "flash" (fused
// attention on tensor cores, with bf16 matmuls; on the host otherwise), "collective" (NCCL under mpirun, the
// host otherwise) or "host".
const char* opPath(const ir::OpDef& def);

struct CompileOptions {
  std::string name = "main";
  int device = 0;
  bool groupLoops = true;  // and TESSERA_CUDA_LOOP_GROUPS not off
  bool graphs = true;      // and TESSERA_CUDA_GRAPHS not off
};

// The generated kernels of a lowered program, one per loop, reduction or gemm or conv epilogue, in kernel order;
// for every kernel of the program its path. Needs no GPU (tests compile every source with NVRTC). A convolution
// alone on the cudnn path keeps its NVRTC kernel (generatedIndex) for when cuDNN offers no engine on the device.
// A conv group (the fusion pass's convolution with its epilogue) has its epilogue in generatedIndex and its
// convolution's NVRTC kernel in anchorIndex; on the cudnn path, its chain as cuDNN pointwise steps where it maps
// (cudnnEpilogues): one graph runs both where an engine takes it, the convolution then the epilogue where not.
// Loop kernels launched as one (loop_groups.h): the group's kernel reads its members from a table.
struct LoopGroup {
  int kernel = -1;                // index into GeneratedProgram::kernels
  std::vector<size_t> members;    // lowered kernels in program order; the first launches the group
  std::vector<int64_t> elements;  // per member
};
struct GeneratedProgram {
  std::vector<KernelPath> paths;               // per lowered kernel
  std::vector<int> generatedIndex;             // per lowered kernel: index into `kernels`, or -1
  std::vector<int> anchorIndex;                // per lowered kernel: a conv group's convolution, or -1
  std::vector<GeneratedKernel> kernels;
  std::map<size_t, CudnnConvProblem> cudnnConvs;  // per lowered kernel on the cudnn path: its problem
  std::map<size_t, CudnnEpilogue> cudnnEpilogues;  // conv groups among them: their chain
  // Per lowered kernel that the flash kernels can run (fused attention alone in its kernel): its problem. Those of
  // bf16 operands (autocast) are on the flash path; f32 ones take it where products are bf16 (compile decides).
  std::map<size_t, AttentionProblem> attention;
  std::vector<LoopGroup> groups;               // in program order
  std::vector<int> groupOf;                    // per lowered kernel: its group, or -1
};
// groupLoops: launch loops of the same text as groups (loop_groups.h); off: every loop alone.
Result<GeneratedProgram> generateProgram(const cpu::Executable& lowered, bool groupLoops = true);

// The fusion options this backend plans with: an f32 convolution anchors a conv group with its epilogue (cuDNN
// fuses it where it can), as on the CPU.
passes::FusionOptions fusionOptions();

class Executable {
 public:
  // Lowers g with the CPU backend's planner, generates and compiles its kernels, uploads its constants.
  static Result<std::unique_ptr<Executable>> compile(const ir::Graph& g, const ir::OpRegistry& reg,
                                                     const passes::FusionPlan& plan, const CompileOptions& options);
  ~Executable();

  // inputs: one device buffer per graph input (on this executable's device). Returns the outputs.
  Result<std::vector<DeviceBufferPtr>> run(std::span<const DeviceBufferPtr> inputs);
  // The same from and to host buffers (copies both ways).
  Result<std::vector<runtime::BufferPtr>> runHost(std::span<const runtime::BufferPtr> inputs);

  Device& device() const;
  const cpu::Executable& lowered() const;
  // One line per kernel: its name, path (nvrtc / cublaslt / cudnn / host) and launch shape; for a
  // convolution, its cuDNN engine or why it fell back to its NVRTC kernel.
  // The first lines say how many loops run grouped (loop_groups.h) and whether runs replay a CUDA graph, or why
  // not (step_graphs.h).
  std::string describe() const;
  int numKernels(KernelPath p) const;
  int groupedLoops() const;       // loop kernels that launch with others
  int loopGroupLaunches() const;  // the launches they make
  int graphCaptures() const;      // graphs captured so far
  int graphReplays() const;       // runs that replayed one

 private:
  Executable();
  struct Impl;
  std::unique_ptr<Impl> m;
};

// Copies between host and device buffers.
Result<DeviceBufferPtr> toDevice(Device& d, const runtime::Buffer& host, int64_t bytes);
Result<runtime::BufferPtr> toHost(Device& d, const DeviceBuffer& dev, int64_t bytes);

}  // namespace tsr::cuda
