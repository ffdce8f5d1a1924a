#pragma once
// Device kernels for single nodes that the fusion planner leaves opaque but a training step runs every time:
//   gather       (embedding lookups, picking the target's logit) one thread per result element;
//   scatter_add  (their gradients) the operand copied into the result, then one atomic add per update element
//                (f32 and i32; sums of duplicates in any order, so f32 results vary in the last bits);
//   scatter, scatter_mul, scatter_min, scatter_max  the operand copied into the result, then one thread per
//                column of updates (batch, outer, inner) that applies them in index order: deterministic, the
//                last update of a repeated index stays (bf16 products round at every update);
//   iota         any integer or float dtype;
//   convert      between f32, f64, bf16, i32, i64, u8, u32 and bool, with the CPU kernel's rules (float to
//                integer truncates then saturates, NaN -> 0; bf16 rounds to nearest even).
//   conv_general_dilated  f32, f64 and bf16: one thread per result element, a direct window loop (where
//                cuDNN does not run it: cudnn_conv.h).
//   reduce_window_*  f32, f64, bf16, i32 and i64: one thread per result element, a loop over its window;
//   select_and_scatter_add  the same dtypes: one thread per result element, summing what the windows that
//                select it scatter (deterministic, no atomics).
// Other opaque nodes have no device kernel (nullopt) and run on the host.
#include <optional>

#include "engine/backends/cuda/codegen.h"

namespace tsr::cuda {

Result<std::optional<GeneratedKernel>> generateNodeKernel(const ir::Graph& g, const cpu::LoweredKernel& k);

}  // namespace tsr::cuda
