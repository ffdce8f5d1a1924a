#pragma once
// Running a reduction group of the CPU executable: [K1, R, K2] reductions split into chunks over the pool
// (partial sums combined in a fixed order), or any other layout walked tile by tile. bf16 results accumulate in
// f32 and are rounded once.
#include "engine/backends/cpu/executable.h"
#include "engine/backends/cpu/native_codegen.h"

namespace tsr::cpu {

// Runs k's reductions (k.prog's prologue, k.reduces) over the kernel's argument pointers; `native` is the
// kernel's native function where one is loaded.
void runReduction(const LoweredKernel& k, void* const* args, NativeReduceFn native = nullptr);

}  // namespace tsr::cpu
