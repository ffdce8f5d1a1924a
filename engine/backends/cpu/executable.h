#pragma once
// The CPU executable: a graph compiled to an ordered list of kernel launches over planned memory.
//   - kernels come from the fusion plan: fused loops and reductions run tile programs on the thread pool,
//     GEMMs run on OpenBLAS (with their epilogue applied to the result), convolutions on oneDNN with their
//     epilogue as post-ops (or applied to the result where oneDNN takes no such chain), other ops run their
//     reference kernel;
//   - memory: intermediates live in one arena whose offsets come from liveness (two values share bytes only
//     when their lifetimes do not overlap); graph outputs get their own buffers, or the buffers of donated
//     inputs (an optimizer step updates the parameters in place);
//   - every launch is recorded by the profiler when one is active.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backends/cpu/gemm.h"
#include "engine/backends/cpu/tile_program.h"
#include "engine/core/result.h"
#include "engine/ir/graph.h"
#include "engine/ops/conv_onednn.h"
#include "engine/passes/fusion.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/executable.h"

namespace tsr::cpu {

class NativeKernelSet;

struct CompileOptions {
  std::string name = "main";
  // Per graph input: the caller may give up its buffer (JAX's donate_argnums). Outputs of the same size are
  // then planned to be written into it when the caller's buffer is really free at run time.
  std::vector<bool> donatable;
  // Fill every arena value with NaN bytes after its last use: a planner that let two live values share bytes
  // shows up as wrong results (tests).
  bool poisonFreed = false;
  // Try the memory-aware kernel order (schedule.h) and keep it where its arena is smaller; off: the fusion
  // plan's order.
  bool schedule = true;
  // Loop kernels and gemm epilogues may switch to native code once the executable is hot (native_compiler.h,
  // TESSERA_CPU_CODEGEN). Off for executables compiled only to be inspected or lowered for another backend.
  bool native = false;
  // Ask oneDNN whether it takes each conv group's epilogue as post-ops (LoweredKernel::oneDnnPostOps). Off where
  // the program is lowered for another backend, which runs the chain its own way.
  bool oneDnn = true;
  // bf16 values inside a fused kernel stay f32 between its ops and are rounded where they leave it
  // (TESSERA_BF16_EXCESS_PRECISION; XLA's xla_allow_excess_precision); false: rounded after every op.
  bool bf16ExcessPrecision = true;
  // The program runs on this CPU. Off where it is lowered for another backend: choices made for this CPU's
  // kernels (the f32 hand-off from widened bf16 products to their epilogue) are left out.
  bool runsOnCpu = true;
  // Slices and concatenates along the last dim that row-view ops read and write in place (row_views.h) launch no
  // kernel; off: every one copies (tests compare the two).
  bool rowViews = true;
};

struct KernelInfo {
  std::string name;
  passes::GroupKind kind = passes::GroupKind::Opaque;
  std::vector<ir::NodeId> nodes;
  int64_t fusionId = -1;  // profiler id
  double flops = 0;
  double bytes = 0;       // bytes read and written
};

struct MemoryPlan {
  int64_t arenaBytes = 0;         // one block for every intermediate
  int64_t intermediateBytes = 0;  // sum of the intermediates' sizes (what no reuse would take)
  int numIntermediates = 0;
  int donationPairs = 0;          // outputs planned into donated inputs
  bool scheduled = false;         // the kernels run in the memory-aware order (else the traced order)
  int64_t tracedOrderArenaBytes = 0;  // the arena the traced order needs (what scheduling is compared with)
  // For each arena value: [offset, offset + bytes) during kernels [def, lastUse].
  struct Interval {
    ir::ValueId value;
    int64_t offset, bytes;
    int def, lastUse;
  };
  std::vector<Interval> intervals;
  // The first pair of values that overlap in both bytes and lifetime, if any ("" when the plan is sound).
  std::string findOverlap() const;
};

// The lowered program, shared with backends that run the same kernels over the same memory plan
// (engine/backends/cuda): where each value lives and what each kernel does.
// Alias: the bytes of aliasOf (a reshape). View: rows of aliasOf (row_views.h), from `offset` bytes on,
// rowStride elements apart.
enum class Loc : uint8_t { None, Input, Const, Arena, Fresh, Alias, View };

struct ValueSlot {
  Loc loc = Loc::None;
  int index = -1;        // input index or constant index
  int64_t offset = 0;    // arena offset; a view's byte offset in aliasOf
  int64_t rowStride = 0;  // a view's
  ir::ValueId aliasOf = ir::kNone;
  int def = -1, lastUse = -1;
  int donor = -1;        // graph input whose buffer this output takes when donated
};

struct ReduceSpec {
  int slot = 0;
  ir::OpCode op{};
  int arg = 0;
  DType dtype = DType::F32;  // the result's: f32, or bf16 (accumulated as f32 is, rounded once when written)
};

struct LoweredKernel {
  KernelInfo info;
  std::vector<ir::ValueId> args;  // pointers passed to the kernel, by value
  int argOf(ir::ValueId v);       // v's position in args, added at the end when absent
  TileProgram prog;               // loop body, reduction prologue or gemm epilogue
  bool hasProgram = false;
  // Reductions: [k1, r, k2] after collapsing, or the generic path.
  std::vector<ReduceSpec> reduces;
  bool genericReduce = false;
  std::vector<bool> reducedDims;  // generic path: per collapsed dim
  int64_t k1 = 1, r = 1, k2 = 1;
  // gemm and opaque: the node, its operand and result args.
  ir::NodeId node = ir::kNone;
  std::vector<int> operandArgs, resultArgs;
  std::optional<GemmPlan> gemm;  // a dot_general read in place, its operands and result all of gemmDType
  DType gemmDType = DType::F32;
  // A bf16 gemm on the widened SGEMM under excess precision: its epilogue reads the f32 products (the program's
  // input of the product is f32, its pointer the product's f32 buffer), and the rounded bf16 product is written
  // only where the group outputs it (storeProduct). Chosen when the program is compiled.
  bool f32Epilogue = false;
  bool storeProduct = true;
  // conv groups whose members are the convolution and a chain of post-ops (fusion.h): the chain (each binary's
  // operand in arg `arg`) and the arg of the chain's last value. Empty: the group is not such a chain.
  struct PostOpArg {
    ops::ConvPostOp op;
    int arg = -1;
  };
  std::vector<PostOpArg> postOps;
  int postOut = -1;
  // oneDNN runs the chain with the convolution; otherwise the convolution runs, then prog over its result.
  bool oneDnnPostOps = false;
  std::vector<ir::ValueId> dying;  // arena values whose last use is this kernel
  int native = -1;  // the program's index among the executable's native kernels (-1: interpreted only)
};

// The runtime's Executable (engine/runtime/executable.h): the CPU backend registers itself with
// registerCpuBackend (backend.h), and what it compiles is one of these.
class Executable : public runtime::Executable {
 public:
  static Result<std::unique_ptr<Executable>> compile(const ir::Graph& g, const ir::OpRegistry& reg,
                                                     const passes::FusionPlan& plan, const CompileOptions& options);
  ~Executable() override;

  // Runs the program. inputs: one buffer per graph input. donated[i]: the caller holds no other reference to
  // inputs[i], so an output may be written into it (only where the plan paired them).
  Result<std::vector<runtime::BufferPtr>> run(std::span<const runtime::BufferPtr> inputs,
                                              const std::vector<bool>& donated = {}) override;
  bool donates() const override { return true; }
  // ", 12 kernels, 3.4 MiB arena"
  std::string summary() const override;
  int64_t arenaBytes() const override;

  const std::vector<KernelInfo>& kernels() const;
  const MemoryPlan& memory() const;
  // The kernel list: name, kind, nodes, arguments and their memory.
  std::string describe() const;

  // The lowered program: kernels in run order, per value its place (ValueSlot), constants, the compiled graph,
  // and the first of the kernels' profiler ids.
  const std::vector<LoweredKernel>& loweredKernels() const;
  const std::vector<ValueSlot>& valueSlots() const;
  const std::vector<runtime::BufferPtr>& constants() const;
  const ir::Graph& graph() const;
  int64_t fusionBase() const;

  // Native code: kernels that have a native form, and how many of them are loaded now.
  int64_t nativeKernels() const;
  int64_t nativeKernelsReady() const;
  // The native kernels' sources and functions (null when the executable has none).
  std::shared_ptr<NativeKernelSet> nativeSet() const;

 private:
  Executable();
  struct Impl;
  std::unique_ptr<Impl> m;
};

}  // namespace tsr::cpu
