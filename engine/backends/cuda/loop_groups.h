#pragma once
// Loop kernels launched together (horizontal fusion; PyTorch's multi_tensor_apply, XLA's horizontal loop
// fusion). The fusion pass makes one multi-output loop per parameter for the optimizer's update (GPT-2 124M:
// 148 AdamW loops that differ only in their sizes and buffers); the CUDA backend launches loops whose generated
// text is the same up to their element counts (codegen.h: generateLoopGroup) as one kernel over a device-side
// table of the members' pointers and sizes.
//
// A group launches where its first member stood, so a later member joins only when it may run that early:
//   - each value it reads is a graph input or constant, or was computed before the group's first member (a
//     member never reads another member's result, and the memory plan keeps each such value intact from its
//     definition to its last reader, which is the member itself or later);
//   - each value it writes is a fresh output buffer (no arena memory another value may hold in between);
//   - it copies or zeroes nothing before its launch (no prefill).
// A group of one is no group: that loop launches alone.
#include <cstdint>
#include <vector>

#include "engine/backends/cuda/executable.h"

namespace tsr::cuda {

// Groups the loops of `lowered` in `program`: adds each group's kernel to program.kernels and fills
// program.groups and program.groupOf.
Status planLoopGroups(const cpu::Executable& lowered, GeneratedProgram& program);

// Where each group's table lies in the run's one table (words of 64 bits) and how its members' blocks are
// numbered, for a device with `numSMs` multiprocessors: each member gets the blocks a launch of its own would
// (one per 256 elements, at most 32 per SM).
struct LoopGroupLayout {
  int64_t offset = 0;               // the group's first word in the table
  int64_t blocks = 0;               // the launch's grid
  std::vector<int64_t> firstBlock;  // per member
  std::vector<int64_t> memberBlocks;
};
struct LoopGroupTables {
  std::vector<LoopGroupLayout> groups;
  int64_t words = 0;
};
LoopGroupTables layoutLoopGroups(const GeneratedProgram& program, int numSMs);

// Writes every group's entries into `table` (tables.words words): each member's pointers in its arg order, its
// elements, first block and blocks. ptr: the run's pointer of every value.
void writeLoopGroupTables(const cpu::Executable& lowered, const GeneratedProgram& program,
                          const LoopGroupTables& tables, const std::vector<void*>& ptr, int64_t* table);

}  // namespace tsr::cuda
