#pragma once
// conv_general_dilated on cuDNN's graph (backend) API.
//
// A node maps to one of cuDNN's three convolution operations, as the CPU backend maps the same IR forms to
// oneDNN's primitives (engine/ops/conv_onednn.cpp), canonical terms as in engine/ops/conv_geometry.h:
//   forward          no lhs dilation: CONVOLUTION_FORWARD, X = lhs, W = rhs, Y = out;
//   backward data    lhs dilation, window strides 1 (the lhs cotangent of a strided convolution, or a transposed
//                    one): BACKWARD_DATA of the forward convolution it transposes, DY = lhs, W = rhs read with
//                    its two feature roles swapped and flipped (the vjp flipped it: cuDNN's CONVOLUTION mode, or
//                    a copy that flips it), DX = out, stride = the lhs dilation;
//   backward filter  batch groups, or a window larger than the output (the rhs cotangent: the cotangent is the
//                    window): BACKWARD_FILTER with the roles swapped, X = lhs as [C, N, in], DY = rhs as [C, O,
//                    k], DW = out as [O, N, out], stride = the rhs dilation, dilation = the window strides.
// Tensors are described by dims and strides over the buffers as they lie (NCHW, NHWC, any dimension specs), so
// no activation is copied. A 1-D problem gets a unit spatial dim (cuDNN convolves 2-D and 3-D). A filter whose
// layout cuDNN does not take (not packed like the activations: HWIO beside NHWC) or that no strides express (a
// grouped data gradient) goes through a packed copy in the activations' layout, flipped there when it must be.
//
// The mapping is a pure function (mapConvToCudnn: no CUDA call, tested without a GPU); the execution plans need a
// device (CudnnConv::create: engine heuristics, first engine that finalises at the matmul precision), made when
// the executable is compiled and cached per device and problem.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backends/cuda/device.h"
#include "engine/core/dtype.h"
#include "engine/core/shape.h"
#include "engine/ir/attrs.h"
#include "engine/ops/conv_onednn.h"

namespace tsr::cuda {

enum class CudnnConvOp : uint8_t { Forward, BackwardData, BackwardFilter };
// "forward", "backward_data", "backward_filter".
const char* cudnnConvOpName(CudnnConvOp op);

// A tensor as cuDNN reads it: [N, C, spatial...] (4 or 5 dims) with strides in elements over its buffer.
struct CudnnTensor {
  std::vector<int64_t> dims, strides;
  bool operator==(const CudnnTensor&) const = default;
};

// The filter copied between the node's buffer and a packed one (forward and backward data: before the
// convolution; backward filter: the packed gradient into the node's result after it). The packed buffer is
// row-major over `dims`; element (i0, i1, ...) of it is the node's element offset + sum i_d * strides[d]
// (a negative stride reads a spatial dim reversed).
struct CudnnFilterCopy {
  std::vector<int64_t> dims, strides;
  int64_t offset = 0;
  CudnnTensor packed;  // the filter [K, C / groups, spatial...] as cuDNN then reads it from the packed buffer
  bool operator==(const CudnnFilterCopy&) const = default;
};

// One convolution operation in cuDNN's terms. x, w, y are the forward convolution's (for backward data, x is
// DX and y is DY; for backward filter, w is DW); xValue, wValue, yValue say which of the node's buffers each
// is: 0 its lhs, 1 its rhs, 2 its result.
struct CudnnConvProblem {
  CudnnConvOp op = CudnnConvOp::Forward;
  DType dtype = DType::F32;
  CudnnTensor x, w, y;
  int xValue = 0, wValue = 1, yValue = 2;
  int64_t groups = 1;
  std::vector<int64_t> strides, dilations, prePadding, postPadding;  // per cuDNN spatial dim
  bool convolutionMode = false;  // CUDNN_CONVOLUTION (w read flipped) instead of CUDNN_CROSS_CORRELATION
  // w as a packed copy (flip applied, so cross-correlation); used when copyFilter, and as the second try when
  // cuDNN has no engine for the filter as it lies.
  CudnnFilterCopy filterCopy;
  bool copyFilter = false;

  int spatialDims() const { return static_cast<int>(strides.size()); }
  // The problem as text: the cache key of its execution plans and what describe() shows.
  std::string key() const;
};

// Whether a node goes to cuDNN, and how; where not, why (a line for describe and the tests).
struct CudnnConvDecision {
  std::optional<CudnnConvProblem> problem;
  std::string reason;
};

// The mapping of conv_general_dilated(lhs, rhs) -> out with attrs `at` (checked by the op's infer). Pure.
CudnnConvDecision mapConvToCudnn(const Aval& lhs, const Aval& rhs, const Aval& out, const ir::ConvAttrs& at);
// The same problem with the filter always copied (copyFilter, cross-correlation): the second try.
CudnnConvProblem withFilterCopy(CudnnConvProblem p);

// A forward convolution's epilogue as cuDNN pointwise operations after it in one operation graph: the fusion
// pass's conv groups (engine/passes/conv_epilogue.h), whose chain oneDNN takes as post-ops on the CPU. Each step
// reads the chain's value so far and, where binary, an operand laid over the result (broadcast along dims of 1:
// a scalar [1, 1, ...], a per-channel vector [1, K, 1, ...] or a tensor laid out as y). The values between steps
// are virtual; the last step writes the chain's result, laid out as y. cuDNN's runtime fusion engines take such
// graphs (at tensor-core precisions); where no engine does, the convolution and the generated epilogue run apart.
struct CudnnPointwise {
  ops::ConvPostOp::Kind kind = ops::ConvPostOp::Kind::Relu;
  bool binary = false;
  CudnnTensor operand;  // binary steps: the operand's layout over the result
  bool operator==(const CudnnPointwise&) const = default;
};
struct CudnnEpilogue {
  std::vector<CudnnPointwise> steps;
  std::string key() const;  // what the plan cache adds to the convolution's key
};
struct CudnnEpilogueDecision {
  std::optional<CudnnEpilogue> epilogue;
  std::string reason;
};
// The epilogue of `conv` (a forward problem from mapConvToCudnn) for a post-op chain. Pure.
CudnnEpilogueDecision mapEpilogueToCudnn(const CudnnConvProblem& conv, std::span<const ops::ConvPostOp> chain);
// cuDNN's name of a step's pointwise mode ("relu_fwd", "add", ...), for describe and the tests.
const char* cudnnPointwiseName(ops::ConvPostOp::Kind kind);

// Whether this build links cuDNN (TESSERA_HAVE_CUDNN); without it every convolution runs its NVRTC kernel.
bool cudnnBuilt();
// "cuDNN 9.19.0" (the library loaded), or why there is none.
std::string cudnnVersionString();
// The CUDA source of the filter copy kernels (compiled with NVRTC on first use; tests compile it).
const char* cudnnFilterCopySource();

// A convolution with its finalised cuDNN execution plan, made once per kernel on its device. f32 problems
// follow the matmul precision: at f32 no engine that uses tensor cores (TF32) or converts its inputs down runs
// them; tf32 and bf16 allow tensor-core engines (inputs rounded to TF32; cuDNN has no bf16-input mode for f32
// tensors). bf16 problems accumulate in f32. Deterministic engines are preferred.
class CudnnConv {
 public:
  // Error (with cuDNN's reason) when no engine runs the problem: the caller runs its NVRTC kernel instead.
  // With an epilogue, the graph of the convolution and its pointwise steps is planned first; where no engine
  // takes it, the convolution alone (fused() false; epilogueDeclined() says why).
  static Result<std::unique_ptr<CudnnConv>> create(Device& d, const CudnnConvProblem& problem,
                                                   MatmulPrecision precision, const CudnnEpilogue* epilogue = nullptr);
  ~CudnnConv();
  // lhs, rhs, out: the node's buffers (16-byte aligned). Asynchronous on the device's compute stream. When
  // fused(), out is the chain's result and operands the binary steps' operands, in step order.
  Status run(const void* lhs, const void* rhs, void* out, std::span<const void* const> operands = {});
  const CudnnConvProblem& problem() const;
  bool fused() const;
  const std::string& epilogueDeclined() const;
  // The engine's global index and workspace (and the fused steps), for describe().
  std::string engineSummary() const;

 private:
  CudnnConv();
  struct Impl;
  std::unique_ptr<Impl> m;
};

}  // namespace tsr::cuda
