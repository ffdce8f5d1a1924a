#pragma once
// The one definition of a collective's sum, shared by the communicators so that they agree bit for bit:
// element e is ((x0[e] + x1[e]) + x2[e]) + ... in group order; bf16/f16 accumulate in f32 and round once;
// integers wrap modulo 2^bits.
#include <cstdint>
#include <span>
#include <string_view>

#include "engine/core/result.h"
#include "engine/core/shape.h"

namespace tsr::dist {

// An error naming `op` and the dtype when the communicators cannot sum it (bool).
Status checkSummable(DType dtype, std::string_view op);

// For e in [0, count): every outs[k][e] = the group-order sum of ins[0][e], ins[1][e], ... Works block by
// block, reading a block of every input before writing it to any output, so an output may be one of the
// inputs (in-place all-reduce). dtype must be summable.
void sumInGroupOrder(DType dtype, std::span<const void* const> ins, std::span<void* const> outs, int64_t count);

}  // namespace tsr::dist
