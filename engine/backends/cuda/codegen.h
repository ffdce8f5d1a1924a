#pragma once
// CUDA C++ for the fused kernels of a lowered program (the CPU backend's tile programs, engine/backends/cpu):
//   loop       one thread per element of the iteration space (grid-stride), inputs read through their strides,
//              the member ops as scalar expressions, stores in iteration order;
//   reduction  rows ([K1, R] after collapsing): one block per row, the prologue evaluated per element, each
//              reduction combined per thread, then across the warp with shuffles and across warps in shared
//              memory; columns ([K1, R, K2]): a block per 32 adjacent outputs (reads coalesced along K2), its
//              warps walking interleaved rows, partials combined in shared memory; any other layout: one
//              thread per output walking the reduced dims;
//   gemm       the epilogue as a loop kernel after the cuBLASLt product.
// Values are f32 in registers; bool values are 0/1 floats in the kernel and bytes outside, as on the CPU.
// The source of a kernel depends only on its program (dims and strides are constants in it), so equal kernels
// have equal sources and share one NVRTC compile and cache entry.
#include <optional>
#include <string>
#include <vector>

#include "engine/backends/cpu/executable.h"
#include "engine/core/result.h"

namespace tsr::cuda {

enum class LaunchShape : uint8_t {
  Elements,  // grid-stride over `elements` threads
  Rows,      // one block per row (`rows` blocks of kRowThreads)
};

inline constexpr int kThreads = 256;
inline constexpr int kRowThreads = 256;
// Column sums with fewer output blocks than this split their reduced rows into chunks (atomic adds).
inline constexpr int64_t kMinReductionBlocks = 512;

struct GeneratedKernel {
  std::string name;    // the kernel's symbol: "tsr_<hash>"
  std::string source;  // a complete translation unit: kernelPrelude() + body
  std::string body;    // the kernel alone (several bodies with one prelude make one translation unit)
  LaunchShape shape = LaunchShape::Elements;
  int64_t elements = 0;  // threads wanted (Elements)
  int64_t rows = 0;      // blocks (Rows)
  int numArgs = 0;       // pointer arguments, in the lowered kernel's arg order
  // Before the launch, copy prefillBytes from argument prefillFrom to argument prefillTo (scatter_add starts
  // from its operand); -1: none.
  int prefillFrom = -1, prefillTo = -1;
  int64_t prefillBytes = 0;
  std::vector<std::pair<int, int64_t>> zeroArgs;  // (argument, bytes) zeroed before the launch
};

// The helper functions every generated kernel uses.
const char* kernelPrelude();

// The CUDA C++ expression of an elementwise op on f32 operands a, b, c: its loop lowering (ir::LoopLowering) over
// floats; "" where the op has none.
std::string opExpression(ir::OpCode op, bool resultIsBool, const std::string& a, const std::string& b,
                         const std::string& c);

// The kernel of a lowered loop, reduction or gemm epilogue. `label` (the fusion's name) goes into a comment.
// An error names the kernel and the op that has no CUDA expression.
Result<GeneratedKernel> generateLoop(const cpu::TileProgram& p, int numArgs, const std::string& label);
Result<GeneratedKernel> generateReduction(const cpu::LoweredKernel& k, const std::string& label);

// Loop kernels whose text differs only in their element count (every input contiguous or one broadcast value:
// AdamW's update of each parameter) run as one launch, as PyTorch's multi_tensor_apply and XLA's horizontal
// fusion do: the kernel below reads its members from a table in device memory, kGroupEntryExtra + numArgs
// 64-bit words an entry (the member's pointers in arg order, then its elements, its first block and its
// blocks); a block finds its entry by binary search over the first blocks and strides over that member's
// elements with the member's blocks. Its text depends only on the members' common body, so loops of equal
// groupKernel sources may be grouped. None where the loop's text depends on its dims (strided inputs).
inline constexpr int kGroupEntryExtra = 3;
Result<std::optional<GeneratedKernel>> generateLoopGroup(const cpu::TileProgram& p, int numArgs,
                                                         const std::string& label);

}  // namespace tsr::cuda
