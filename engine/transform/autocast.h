#pragma once
// Mixed precision by region, as torch.autocast: inside an AutocastScope(bf16) the Array API's products
// (dot_general, and what calls it: matmul, einsum; conv_general_dilated) take their f32 operands in bf16 and give
// bf16 results (accumulated in f32 by every backend), while the functions that need f32's range take narrower
// operands widened to f32 and give f32 (softmax, log_softmax, logsumexp; the layers' norms). Parameters stay
// what they are (f32 master weights): each product converts the copy it reads, and autodiff converts the
// gradient back (the convert's vjp), so the optimizer sees f32 gradients. Values that meet (a bf16 product added
// to the f32 residual stream) promote to the wider dtype, as jnp's promotion does.
//
// A project's [precision] compute = "bf16" traces its model's loss inside a scope (engine/train/project_model);
// the optimizer's update is traced outside one. The scope is per thread and nests; AutocastScope(std::nullopt)
// switches it off inside an outer one. Tracing reads it, so a compiled step keeps the dtypes it was traced with.
#include <optional>
#include <source_location>

#include "engine/core/dtype.h"
#include "engine/transform/array.h"

namespace tsr {

class AutocastScope {
 public:
  explicit AutocastScope(std::optional<DType> compute);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  std::optional<DType> m_outer;
};

// The innermost scope's compute dtype on this thread; none outside every scope.
std::optional<DType> autocastDType();

// What a product reads: x in the compute dtype where autocast is on and x is f32 (f64, integers and values
// already narrow stay as they are).
Array autocastOperand(const Array& x, std::source_location loc = std::source_location::current());
// What an f32 function reads: x widened to f32 where autocast is on and x is a narrower float (bf16, f16).
Array autocastWiden(const Array& x, std::source_location loc = std::source_location::current());

}  // namespace tsr
