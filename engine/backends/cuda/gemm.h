#pragma once
// dot_general on cuBLASLt. The product is the CPU backend's GemmPlan (row-major operands read in place, a
// batch of equal products); cuBLASLt is column-major, so C^T = op(B)^T op(A)^T is computed instead, which reads
// the same bytes without copies. Inputs f32 or bf16, accumulation f32; f32 inputs follow the matmul precision
// (f32, tf32 tensor cores, or bf16: the operands rounded to bf16 by a conversion kernel into a pool buffer first,
// as autocast does). Epilogues fuse a bias over C's columns, bias + GELU (tanh form), or the
// bias gradient (column sums of the second operand) into the product.
#include <cstdint>
#include <memory>

#include "engine/backends/cpu/gemm.h"
#include "engine/backends/cuda/device.h"
#include "engine/core/dtype.h"

namespace tsr::cuda {

enum class GemmEpilogue : uint8_t { None, Bias, GeluBias, BiasGrad };

struct GemmSpec {
  cpu::GemmPlan plan;
  DType inType = DType::F32;   // both operands
  DType outType = DType::F32;
  MatmulPrecision precision = MatmulPrecision::F32;
  GemmEpilogue epilogue = GemmEpilogue::None;
};

// A GEMM with its cuBLASLt descriptors and chosen algorithm, made once per kernel on its device.
// The CUDA source of the kernels that stage operands (compiled with NVRTC on first use; tests compile it).
const char* gemmStageSource();

class LtGemm {
 public:
  static Result<std::unique_ptr<LtGemm>> create(Device& d, const GemmSpec& spec);
  ~LtGemm();
  // c = a * b (+ epilogue). bias: n floats (Bias, GeluBias: read; BiasGrad: written). aStaged/bStaged: the
  // operand's bf16 copy made already by stageInto (another product read the same value), or null.
  Status run(const void* a, const void* b, void* c, void* bias = nullptr, const void* aStaged = nullptr,
             const void* bStaged = nullptr);
  // Bytes of operand `which`'s (0: a, 1: b) bf16 copy when it is converted as it lies (no repacking: any product
  // that reads the same bytes can read the copy), else 0.
  int64_t flatStagedBytes(int which) const;
  // Writes that copy of operand `which` read from x into y (flatStagedBytes(which) bytes) on the compute stream.
  Status stageInto(int which, const void* x, void* y) const;
  const GemmSpec& spec() const { return m_spec; }

 private:
  LtGemm() = default;
  Device* m_device = nullptr;
  GemmSpec m_spec;
  struct Handles;
  std::unique_ptr<Handles> m_h;
};

}  // namespace tsr::cuda
