#pragma once
// conv_general_dilated's f32 CPU kernel through oneDNN, on the operands as they lie in memory (any dimension
// specs: NCHW, NHWC, the swapped roles of a gradient), for the three problems training produces:
//   forward          no lhs dilation: convolution_forward;
//   data gradient    lhs dilation (a transposed convolution, the lhs cotangent of a strided one), window
//                    strides 1: convolution_backward_data of the forward convolution it transposes;
//   filter gradient  a window larger than the output (the rhs cotangent: the cotangent itself is the window):
//                    convolution_backward_weights.
// oneDNN picks its own (blocked) layouts; operands are reordered into them and the result out of them.
#include <string>

#include "engine/core/shape.h"
#include "engine/ir/attrs.h"
#include "engine/ops/conv_geometry.h"

namespace tsr::ops {

// Computes out (row-major, shaped as the op infers) from lhs and rhs (row-major, their shapes). False when no
// oneDNN primitive fits the problem (batch groups, negative padding, an empty dim, or oneDNN refuses): the
// caller computes it another way. Safe to call from several threads at once.
bool oneDnnConvolution(const float* lhs, const Shape& lhsShape, const float* rhs, const Shape& rhsShape, float* out,
                       const Shape& outShape, const ir::ConvAttrs& at, const ConvGeometry& g);

// Which of the three problems oneDnnConvolution would solve ("forward", "data_gradient", "filter_gradient"), or
// "" where it declines. For tests and for the kernel's profile name.
const char* oneDnnConvolutionKind(const ConvGeometry& g);

// The oneDNN implementation that runs the problem ("jit:avx2", "gemm:jit", "ref", ...), or "" where none does.
// For benchmarks: a "ref" here is a slow path worth knowing about.
std::string oneDnnConvolutionImplementation(const Shape& lhsShape, const Shape& rhsShape, const Shape& outShape,
                                            const ir::ConvAttrs& at, const ConvGeometry& g);

}  // namespace tsr::ops
