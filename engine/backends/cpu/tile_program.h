#pragma once
// The body of a fused CPU kernel: a straight-line program over tiles. A tile is a run of up to kTile
// consecutive elements along the innermost dimension of the kernel's iteration space; every instruction maps
// whole tiles (vectorised loops, held in L1), so a fusion of n ops reads its inputs once, writes its outputs
// once, and keeps no per-op temporaries beyond one tile each.
//
// Values are f32 in tiles; bool values are 0/1 floats inside the kernel and bytes outside; bf16 values are
// widened on load and narrowed (rounded to nearest even) on store. A bf16 result is rounded where it is
// computed when its instruction says so (roundBf16): every one where the kernel must give what its ops give one
// by one (bf16 arithmetic is f32 arithmetic rounded once per op), else only those a comparison reads (excess
// precision, CompileOptions::bf16ExcessPrecision).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/ir/op_def.h"

namespace tsr::cpu {

inline constexpr int64_t kTile = 512;

// A strided read of a kernel argument: element i of the iteration space reads
// base[offset + sum_d i_d * strides[d]].
struct TileInput {
  int arg = 0;  // index into the kernel's argument pointers
  DType dtype = DType::F32;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  bool copy = false;  // read into scratch even where contiguous (an output may overwrite the same bytes)
};

// One op of a fused loop, run by its loop lowering (ir::LoopLowering: the same expression as the native and
// CUDA kernels').
struct TileInstr {
  ir::OpCode op{};
  int args[3] = {-1, -1, -1};  // slots
  bool resultIsBool = false;
  bool roundBf16 = false;  // the bf16 result is rounded to it (to nearest even) as the op alone would store it
};

// Writes a slot's tile, contiguously in iteration order, to an argument.
struct TileStore {
  int slot = 0;
  int arg = 0;
  DType dtype = DType::F32;
};

struct TileProgram {
  std::vector<int64_t> dims;  // the iteration space, collapsed where every input allows
  std::vector<TileInput> inputs;  // slots [0, inputs.size())
  std::vector<TileInstr> instrs;  // instruction i defines slot inputs.size() + i
  std::vector<TileStore> stores;
  std::vector<int> liveOut;  // slots read after the tile is evaluated (a reduction's operands)

  int numSlots() const { return static_cast<int>(inputs.size() + instrs.size()); }
  // Drops size-1 dims and merges adjacent dims that every input walks contiguously. `flags` (one per dim,
  // optional) marks reduced dims: a reduced dim never merges with a kept one, and flags follow the merge.
  void collapse(std::vector<bool>* flags = nullptr);
  // "dims [256,768]", then one line per slot: inputs with their strides, instructions, stores.
  std::string toString() const;
};

// x rounded to bf16 and widened back, n elements in place (round to nearest even; NaN stays NaN).
void roundToBf16(float* x, int64_t n);

// Evaluates tiles of a program. One per thread: it owns the scratch tiles.
class TileEvaluator {
 public:
  explicit TileEvaluator(const TileProgram& p);
  // Evaluates the tile starting at multi-index `idx` (of p.dims) with `len` elements along the last dim.
  // args: the kernel's argument pointers. Stores are written when `store` is true. Returns the slot pointers
  // (valid until the next call).
  const float* const* eval(void* const* args, const int64_t* idx, int64_t len, bool store = true);

 private:
  const TileProgram& m_p;
  std::vector<float> m_scratch;
  std::vector<const float*> m_slots;
  std::vector<int> m_storeOf;             // per slot: the f32 store that takes the instruction's result directly
  std::vector<int> m_buffer;              // per slot: its scratch tile (tiles are reused once a slot is dead)
  std::vector<std::vector<int>> m_storesAfter;  // per slot: stores to run as soon as it is computed
  std::vector<bool> m_uniform, m_uniformFilled;  // inputs read at one element for every tile
  std::vector<float> m_spare;             // results of direct-store slots when a call does not store
  std::vector<ir::LoopTileFn> m_fn;       // per instruction: its op's tile function for its broadcast operands
};

// A loop kernel compiled to native code (native_codegen.h): evaluates work units [firstUnit, endUnit).
using NativeLoopFn = void (*)(void* const* args, long long firstUnit, long long endUnit);

// Runs a loop kernel: the whole iteration space, split over the thread pool; through `native` when given.
void runLoop(const TileProgram& p, void* const* args, NativeLoopFn native = nullptr);

}  // namespace tsr::cpu
