#pragma once
// OpDef: everything about one op in one place: its attributes, shape rule, cost, fusion kind, kernels,
// its vjp and batching rules (written with the Array API), and its sharding rule (shard_rule.h).
#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/core/shape.h"
#include "engine/ir/attrs.h"
#include "engine/ir/shard_rule.h"

namespace tsr::ir {

enum class OpCode : uint32_t {
#define TSR_OP(e, n, a) e,
#include "engine/ir/op_list.inc"
#undef TSR_OP
  kNumCoreOps
};
inline constexpr uint32_t kNumCoreOps = static_cast<uint32_t>(OpCode::kNumCoreOps);

// How the compiler may fuse the op.
enum class FusionKind : uint8_t { Elementwise, Reduction, Layout, Opaque };
const char* fusionKindName(FusionKind k);

struct Cost {
  double flops = 0;
  int64_t bytesRead = 0;
  int64_t bytesWritten = 0;
};

// A row-major tensor in host memory, as a kernel sees it: contiguous, or, for an op that takes row views
// (OpDef::cpuRowViewDims = n), rows of its trailing n dims lying `rowStride` elements apart (a slice of a wider
// last dim read or written in place: attention's q, k and v as columns of one qkv projection).
struct TensorView {
  const void* data = nullptr;
  Aval aval;
  int64_t rowStride = 0;  // elements from one row's start to the next; 0: contiguous
  template <class T> const T* as() const { return static_cast<const T*>(data); }
};
struct MutableTensorView {
  void* data = nullptr;
  Aval aval;
  int64_t rowStride = 0;
  template <class T> T* as() const { return static_cast<T*>(data); }
};

// Calls fn(begin, end, thread) over chunks of [0, n) of at least `grain` items, on several threads; thread is in
// [0, the thread count).
using ParallelForFn = void (*)(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

struct CpuKernelArgs {
  std::span<const TensorView> inputs;
  std::span<const MutableTensorView> outputs;  // allocated by the caller with the inferred avals
  const Attrs& attrs;
  // The backend's threads, where the caller lends them (the CPU executable: its pool, as XLA:CPU lends custom
  // calls its intra-op pool); null: the kernel runs on the calling thread alone.
  ParallelForFn parallelFor = nullptr;
  int threads = 1;  // how many distinct `thread` values parallelFor passes

  // fn over chunks of [0, n): on the lent threads, else in one call on this one.
  void forChunks(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn) const {
    if (parallelFor) parallelFor(n, grain, fn);
    else if (n > 0) fn(0, n, 0);
  }
};

using InferFn = std::function<Result<std::vector<Aval>>(std::span<const Aval> operands, const Attrs& attrs)>;
using CostFn = std::function<Cost(std::span<const Aval> operands, std::span<const Aval> results, const Attrs& attrs)>;
using CpuKernelFn = std::function<void(const CpuKernelArgs& args)>;

// The interpreter's form of a loop lowering: out[i] = expr(x[0][i], x[1][i], x[2][i]) for i in [0, n), f32
// lanes (bools as 0/1). Bit k of the table index marks operand k as one value for all i (x[k][0]): a broadcast
// scalar is loaded once. `out` may be one of the operands.
using LoopTileFn = void (*)(const float* const* x, float* out, int64_t n);

// How an elementwise op runs inside a fused loop, given once (engine/ops/loop_lowering.h): one scalar C++
// expression over its operands a, b, c in the loop dialect (engine/ops/loop_dialect_avx2.inc), from which the
// CPU tile interpreter's functions (compiled where the op is defined), the native CPU kernels' C++ and the CUDA
// kernels' C++ are all made. An op with a lowering is fusible; the fusion pass asks for nothing else.
struct LoopLowering {
  std::string expr;                  // e.g. "tsr_max(a, b)"; empty: the op has no loop form
  std::array<LoopTileFn, 8> tile{};  // by uniform-operand mask
  bool valid() const { return !expr.empty(); }
};

}  // namespace tsr::ir

namespace tsr {
class Array;
}

namespace tsr::ir {

// vjp: given the primal operands and results (Arrays, concrete or traced) and one cotangent per result (an
// invalid Array means zero), returns one cotangent per operand (an invalid Array: none, e.g. for an index).
// Rules are written with the Array API, so they run eagerly, under jit, and under grad of grad alike.
struct VjpArgs {
  const std::vector<Array>& operands;
  const std::vector<Array>& results;
  const std::vector<Array>& cotangents;
  const Attrs& attrs;
};
using VjpRule = std::function<std::vector<Array>(const VjpArgs&)>;

// batch (vmap): operands carry their batch dimension at batchDims[i] (-1: not batched, the same for every
// example). Returns the results with their own batch dimensions.
struct BatchArgs {
  const std::vector<Array>& operands;
  const std::vector<int>& batchDims;
  int64_t batchSize;
  const Attrs& attrs;
};
struct BatchResult {
  std::vector<Array> results;
  std::vector<int> batchDims;
};
using BatchRule = std::function<BatchResult(const BatchArgs&)>;

struct OpDef {
  OpCode code{};
  std::string name;
  std::string family;           // "elementwise", "layout", "reduction", ...
  int numOperands = 1;          // -1: variadic (at least minOperands)
  int minOperands = 0;
  int numResults = 1;           // -1: as many as the infer rule gives (scan, cond)
  size_t attrsIndex = 0;        // the Attrs alternative this op takes
  FusionKind fusion = FusionKind::Opaque;
  bool differentiable = true;   // false: comparisons, integer ops, random bits
  bool vjpRefused = false;      // its vjp rule raises: reverse mode is undefined (while_loop); gradient checks skip it
  // Its CPU kernel writes every element of its results, so the CPU executable need not zero them first (other
  // kernels may rely on zeroed results).
  bool cpuWritesWholeResult = false;
  // Its CPU kernel takes operands and results whose trailing cpuRowViewDims dims are rows lying
  // TensorView::rowStride elements apart, so the CPU executable may hand it a slice of a wider last dim in place
  // of a copy, and have it write a concatenate's parts where they go (row_views.h). 0: contiguous only.
  int cpuRowViewDims = 0;

  InferFn infer;
  CostFn cost;
  CpuKernelFn cpu;
  VjpRule vjp;
  BatchRule batch;
  ShardRule shard;
  std::string cudaSource;       // device code for NVRTC, where the op has one
  LoopLowering loop;            // its form inside fused loops (elementwise ops)
  LoopLowering loopToBool;      // the form when the result is bool, where it differs (convert)
};

// The loop lowering of `def` for a result of the given kind; nullptr when it has none.
inline const LoopLowering* loopLoweringOf(const OpDef& def, bool resultIsBool) {
  if (resultIsBool && def.loopToBool.valid()) return &def.loopToBool;
  return def.loop.valid() ? &def.loop : nullptr;
}

class OpRegistry {
 public:
  // Adds an op; core ops keep their enum code, others get the next free code. Fails on a duplicate name.
  Result<OpCode> add(OpDef def);
  const OpDef* find(OpCode code) const;
  const OpDef* find(std::string_view name) const;
  const OpDef& get(OpCode code) const;  // internal invariant: the code is registered
  const std::deque<OpDef>& all() const { return m_defs; }
  OpDef* mutableFind(OpCode code);

 private:
  std::deque<OpDef> m_defs;  // a deque: ops registered later (plugins) never move the ones already handed out
  std::vector<int> m_index;  // code -> position in m_defs, -1 if absent
};

// Checks what every op requires before its infer rule runs: operand count and the attrs kind.
// The message names the op: "add: expects 2 operands, got 3".
Status checkSignature(const OpDef& def, size_t numOperands, const Attrs& attrs);

// Runs the op's infer rule; a rule that throws anyway is reported as an error, never propagated.
Result<std::vector<Aval>> inferSafely(const OpDef& def, std::span<const Aval> in, const Attrs& attrs);

// The Attrs alternative index of a core op, from op_list.inc.
size_t coreAttrsIndex(OpCode code);
const char* coreOpName(OpCode code);

}  // namespace tsr::ir
