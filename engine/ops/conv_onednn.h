#pragma once
// conv_general_dilated's f32 CPU kernel through oneDNN, on the operands as they lie in memory (any dimension
// specs: NCHW, NHWC, the swapped roles of a gradient), for the three problems training produces:
//   forward          no lhs dilation: convolution_forward;
//   data gradient    lhs dilation (a transposed convolution, the lhs cotangent of a strided one), window
//                    strides 1: convolution_backward_data of the forward convolution it transposes;
//   filter gradient  a window larger than the output (the rhs cotangent: the cotangent itself is the window):
//                    convolution_backward_weights.
// oneDNN picks its own (blocked) layouts; operands are reordered into them and the result out of them.
#include <cstdint>
#include <span>
#include <string>

#include "engine/core/shape.h"
#include "engine/ir/attrs.h"
#include "engine/ops/conv_geometry.h"

namespace tsr::ops {

// An operation oneDNN applies to the forward convolution's result as it writes it (a post-op): the fusion pass's
// conv groups (engine/passes/conv_epilogue.h) run their epilogue so. Each applies to the value so far.
struct ConvPostOp {
  enum class Kind : uint8_t { Relu, Tanh, Logistic, GeluTanh, GeluErf, Add, Sub, Mul, Div, Max, Min };
  // A binary's other operand: one value, one per output feature, or an array shaped as the result (row-major).
  enum class Operand : uint8_t { None, Scalar, PerChannel, Full };
  Kind kind = Kind::Relu;
  Operand operand = Operand::None;
  const float* data = nullptr;
};

// Computes out (row-major, shaped as the op infers) from lhs and rhs (row-major, their shapes). False when no
// oneDNN primitive fits the problem (batch groups, negative padding, an empty dim, or oneDNN refuses): the
// caller computes it another way. Safe to call from several threads at once.
bool oneDnnConvolution(const float* lhs, const Shape& lhsShape, const float* rhs, const Shape& rhsShape, float* out,
                       const Shape& outShape, const ir::ConvAttrs& at, const ConvGeometry& g);

// The same with post-ops applied to the result: out = postOps(conv(lhs, rhs)). Only the forward problem takes
// them; false where it is another problem or oneDNN refuses the chain (the caller then runs the convolution and
// the epilogue apart). The operands' data may be null when only asking (oneDnnTakesPostOps).
bool oneDnnConvolution(const float* lhs, const Shape& lhsShape, const float* rhs, const Shape& rhsShape, float* out,
                       const Shape& outShape, const ir::ConvAttrs& at, const ConvGeometry& g,
                       std::span<const ConvPostOp> postOps);

// Whether oneDnnConvolution takes this problem with these post-ops (it builds and caches the primitive).
bool oneDnnTakesPostOps(const Shape& lhsShape, const Shape& rhsShape, const Shape& outShape, const ir::ConvAttrs& at,
                        const ConvGeometry& g, std::span<const ConvPostOp> postOps);

// Which of the three problems oneDnnConvolution would solve ("forward", "data_gradient", "filter_gradient"), or
// "" where it declines. For tests and for the kernel's profile name.
const char* oneDnnConvolutionKind(const ConvGeometry& g);

// The oneDNN implementation that runs the problem ("jit:avx2", "gemm:jit", "ref", ...), or "" where none does.
// For benchmarks: a "ref" here is a slow path worth knowing about.
std::string oneDnnConvolutionImplementation(const Shape& lhsShape, const Shape& rhsShape, const Shape& outShape,
                                            const ir::ConvAttrs& at, const ConvGeometry& g,
                                            std::span<const ConvPostOp> postOps = {});

}  // namespace tsr::ops
