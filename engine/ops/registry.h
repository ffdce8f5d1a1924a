#pragma once
// The core op registry: registerCoreOps() adds every op of op_list.inc, family by family.
#include "engine/ir/op_def.h"

namespace tsr::ops {

void registerCoreOps(ir::OpRegistry& reg);

// The process-wide registry: the core ops, plus what plugins add. Filled on first use.
ir::OpRegistry& registry();

// Family registration, one per file in engine/ops/.
void registerElementwiseOps(ir::OpRegistry& reg);  // elementwise.cpp: unary, binary, compare, select, clamp, convert
void registerLayoutOps(ir::OpRegistry& reg);       // layout.cpp: broadcast, reshape, transpose, slices, pad, iota, rev
void registerReductionOps(ir::OpRegistry& reg);    // reduction.cpp: reduce_*, argmax, argmin
void registerCumulativeOps(ir::OpRegistry& reg);   // cumulative.cpp: cumsum, cumprod, cummax, cumlogsumexp
void registerSortOps(ir::OpRegistry& reg);         // sort.cpp: sort, top_k
void registerContractionOps(ir::OpRegistry& reg);  // contraction.cpp: dot_general
void registerIndexingOps(ir::OpRegistry& reg);     // indexing.cpp: gather, scatter_add
void registerScatterOps(ir::OpRegistry& reg);      // scatter.cpp: scatter, scatter_mul, scatter_min, scatter_max
void registerMiscOps(ir::OpRegistry& reg);         // misc.cpp: constant, threefry2x32
void registerControlFlowOps(ir::OpRegistry& reg);  // control_flow.cpp: scan, cond, while_loop
void registerCustomVjpOps(ir::OpRegistry& reg);    // custom_vjp.cpp: custom_vjp_call
void registerRematOps(ir::OpRegistry& reg);        // remat.cpp: remat_call, optimization_barrier
void registerCollectiveOps(ir::OpRegistry& reg);   // collective.cpp: all_reduce, all_gather, reduce_scatter, all_to_all,
                                                   // collective_permute, device_table
void registerShardingOps(ir::OpRegistry& reg);     // sharding_ops.cpp: sharding_constraint
void registerConvolutionOps(ir::OpRegistry& reg);  // convolution.cpp: conv_general_dilated
void registerWindowOps(ir::OpRegistry& reg);       // window.cpp: reduce_window_sum/max/min, select_and_scatter_add
void registerAttentionOps(ir::OpRegistry& reg);    // attention.cpp: dot_product_attention and its gradient
void registerBatchNormOps(ir::OpRegistry& reg);    // batch_norm.cpp: batch_norm_training and its gradient
void registerCrossEntropyOps(ir::OpRegistry& reg); // cross_entropy.cpp: softmax_cross_entropy and its gradient
void registerLinalgOps(ir::OpRegistry& reg);       // linalg.cpp: cholesky, triangular_solve, lu
void registerHostCallbackOps(ir::OpRegistry& reg); // host_callback.cpp: host_callback

}  // namespace tsr::ops
