#include "engine/backends/cuda/gemm.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "engine/backends/cuda/cuda_status.h"
#include "engine/backends/cuda/nvrtc.h"

namespace tsr::cuda {

namespace {

Status checkLt(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return makeError("cuBLASLt: {} failed: {}", what, cublasLtGetStatusString(s));
}
#define TSR_LT(call) TSR_TRY(checkLt((call), #call))

cudaDataType_t cudaType(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// Staging copies an operand into a pool buffer before the product: f32 -> bf16 (rounded to nearest even, NaN
// stays NaN) as PyTorch's autocast and JAX's bf16 precision do (cuBLASLt's CUBLAS_COMPUTE_32F_FAST_16BF only
// allows a down-conversion, and on an H200 it ran TF32 kernels instead), and/or with leading dimensions rounded
// up to 16 bytes: cuBLASLt's fast Hopper kernels need 16-byte aligned columns, and a product over GPT-2's 50257
// vocabulary entries has none (it ran at a seventh of the bf16 rate). One block per column of `rows` elements.
constexpr const char* kStageSource = R"(extern "C" __global__ void tsr_stage_bf16(const float* __restrict__ x,
    unsigned short* __restrict__ y, int rows, long long colsPerMatrix, long long ldx, long long ldy,
    long long strideX, long long strideY) {
  const long long q = blockIdx.x / colsPerMatrix, c = blockIdx.x % colsPerMatrix;
  const float* src = x + q * strideX + c * ldx;
  unsigned short* dst = y + q * strideY + c * ldy;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    unsigned int u = __float_as_uint(src[i]);
    if ((u & 0x7fffffffu) > 0x7f800000u) { dst[i] = (unsigned short)((u >> 16) | 0x40u); continue; }
    u += 0x7fffu + ((u >> 16) & 1u);
    dst[i] = (unsigned short)(u >> 16);
  }
}
extern "C" __global__ void tsr_stage_f32(const float* __restrict__ x, float* __restrict__ y, int rows,
    long long colsPerMatrix, long long ldx, long long ldy, long long strideX, long long strideY) {
  const long long q = blockIdx.x / colsPerMatrix, c = blockIdx.x % colsPerMatrix;
  const float* src = x + q * strideX + c * ldx;
  float* dst = y + q * strideY + c * ldy;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) dst[i] = src[i];
}
)";

Result<std::shared_ptr<LoadedModule>> stageModule(Device& d) {
  static std::mutex mutex;
  static auto& modules = *new std::map<int, std::shared_ptr<LoadedModule>>();  // per device, kept past exit
  std::lock_guard lock(mutex);
  auto& m = modules[d.ordinal()];
  if (!m) {
    NvrtcOptions o;
    o.sm = d.smVersion();
    TSR_ASSIGN(CompiledModule cm, compileCuda(kStageSource, "gemm_stage", o));
    TSR_ASSIGN(m, LoadedModule::load(cm));
  }
  return m;
}

// A column-major operand as cuBLASLt reads it (`rows` contiguous elements per column), and its staged copy.
struct Operand {
  int64_t rows = 0, cols = 0, ld = 0, stride = 0;  // stride 0: one matrix for the whole batch
  bool staged = false;
  int64_t stagedLd = 0, stagedStride = 0, stagedBytes = 0;
};

int64_t roundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Stages `o` (when `convert`, or when its columns are not 16-byte aligned and the product is large enough to
// pay for the copy) into elements of `outSize` bytes.
void planStaging(Operand& o, int64_t inSize, int64_t outSize, bool convert, bool large, int64_t batch) {
  const bool aligned = (o.ld * inSize) % 16 == 0 && (o.stride * inSize) % 16 == 0;
  o.staged = o.rows > 0 && o.cols > 0 && (convert || (large && !aligned));
  if (!o.staged) return;
  o.stagedLd = roundUp(o.rows, 16 / outSize);
  o.stagedStride = o.stride == 0 ? 0 : o.cols * o.stagedLd;
  o.stagedBytes = roundUp((o.stride == 0 ? 1 : batch) * o.cols * o.stagedLd * outSize, 256);
}

Status stage(Device& d, const void* fn, const Operand& o, int64_t batch, const void* x, void* y) {
  const int64_t matrices = o.stride == 0 ? 1 : batch;
  if (matrices * o.cols > 0x7fffffff || o.rows > 0x7fffffff)
    return makeError("cuBLASLt: an operand of {} x {} columns of {} is too large to stage", matrices, o.cols, o.rows);
  int rows = static_cast<int>(o.rows);
  long long cols = o.cols, ldx = o.ld, ldy = o.stagedLd, sx = o.stride, sy = o.stagedStride;
  void* args[] = {&x, &y, &rows, &cols, &ldx, &ldy, &sx, &sy};
  const int threads = o.rows >= 256 ? 256 : o.rows >= 128 ? 128 : 64;
  return launchKernel(fn, matrices * o.cols, threads, args, 0, d.computeStream());
}

}  // namespace

struct LtGemm::Handles {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  // Staged operands (converted to bf16 and/or realigned) and output (written aligned, then copied out).
  Operand a_, b_;
  bool stageC = false;
  int64_t ldc = 0, stagedCBytes = 0;
  const void* stageFn = nullptr;
  std::shared_ptr<LoadedModule> module;
  ~Handles() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

LtGemm::~LtGemm() = default;

Result<std::unique_ptr<LtGemm>> LtGemm::create(Device& d, const GemmSpec& spec) {
  std::unique_ptr<LtGemm> g(new LtGemm());
  g->m_device = &d;
  g->m_spec = spec;
  g->m_h = std::make_unique<Handles>();
  Handles& h = *g->m_h;
  const cpu::GemmPlan& p = spec.plan;
  if (spec.inType != DType::F32 && spec.inType != DType::BF16)
    return makeError("cuBLASLt: dot_general of {} is not supported (f32 or bf16)", dtypeName(spec.inType));
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (spec.inType == DType::F32 && spec.precision == MatmulPrecision::TF32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  const bool toBf16 = spec.inType == DType::F32 && spec.precision == MatmulPrecision::BF16;
  const int64_t inSize = dtypeSize(spec.inType), opSize = toBf16 ? 2 : inSize, outSize = dtypeSize(spec.outType);
  // Realigning pays for its copies only on products of about a GFLOP and more.
  const bool large = 2.0 * static_cast<double>(p.batch) * static_cast<double>(p.m) * static_cast<double>(p.n) *
                         static_cast<double>(p.k) >= 1e9;
  // cuBLASLt's first operand is B's bytes, (n x k) column-major when not transposed, else (k x n); the second A's.
  h.b_ = {p.transB ? p.k : p.n, p.transB ? p.n : p.k, p.ldb, p.batch > 1 ? p.strideB : 0};
  h.a_ = {p.transA ? p.m : p.k, p.transA ? p.k : p.m, p.lda, p.batch > 1 ? p.strideA : 0};
  const bool stageable = spec.inType == DType::F32;  // the staging kernels read f32
  planStaging(h.a_, inSize, opSize, toBf16, large && stageable, p.batch);
  planStaging(h.b_, inSize, opSize, toBf16, large && stageable, p.batch);
  h.stageC = large && (p.n * outSize) % 16 != 0;
  h.ldc = h.stageC ? roundUp(p.n, 16 / outSize) : p.n;
  if (h.stageC) h.stagedCBytes = roundUp(p.batch * p.m * h.ldc * outSize, 256);
  if (h.a_.staged || h.b_.staged) {
    TSR_ASSIGN(h.module, stageModule(d));
    TSR_ASSIGN(h.stageFn, h.module->kernel(toBf16 ? "tsr_stage_bf16" : "tsr_stage_f32"));
  }
  TSR_LT(cublasLtMatmulDescCreate(&h.desc, compute, CUDA_R_32F));
  // Column-major view: D (n x m) = op(B') (n x k) * op(A') (k x m), where X' is X's bytes read column-major.
  cublasOperation_t opFirst = p.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = p.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  TSR_LT(cublasLtMatmulDescSetAttribute(h.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst, sizeof(opFirst)));
  TSR_LT(cublasLtMatmulDescSetAttribute(h.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond, sizeof(opSecond)));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (spec.epilogue == GemmEpilogue::Bias) epi = CUBLASLT_EPILOGUE_BIAS;
  if (spec.epilogue == GemmEpilogue::GeluBias) epi = CUBLASLT_EPILOGUE_GELU_BIAS;
  if (spec.epilogue == GemmEpilogue::BiasGrad) epi = CUBLASLT_EPILOGUE_BGRADB;
  TSR_LT(cublasLtMatmulDescSetAttribute(h.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (spec.epilogue != GemmEpilogue::None) {
    cudaDataType_t bt = CUDA_R_32F;
    TSR_LT(cublasLtMatmulDescSetAttribute(h.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  const cudaDataType_t in = toBf16 ? CUDA_R_16BF : cudaType(spec.inType), out = cudaType(spec.outType);
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                    int64_t stride) -> Status {
    TSR_LT(cublasLtMatrixLayoutCreate(l, type, u(rows), u(cols), ld));
    if (p.batch > 1) {
      int32_t count = static_cast<int32_t>(p.batch);
      TSR_LT(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      TSR_LT(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
    return {};
  };
  const Operand& fa = h.b_;
  const Operand& fb = h.a_;
  TSR_TRY(layout(&h.a, in, fa.rows, fa.cols, fa.staged ? fa.stagedLd : fa.ld, fa.staged ? fa.stagedStride : fa.stride));
  TSR_TRY(layout(&h.b, in, fb.rows, fb.cols, fb.staged ? fb.stagedLd : fb.ld, fb.staged ? fb.stagedStride : fb.stride));
  TSR_TRY(layout(&h.c, out, p.n, p.m, h.ldc, p.m * h.ldc));
  cublasLtMatmulPreference_t pref = nullptr;
  TSR_LT(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = static_cast<uint64_t>(d.workspaceBytes());
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(d.cublasLt()), h.desc, h.a, h.b,
                                                    h.c, h.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0)
    return makeError("cuBLASLt: no algorithm for a {} GEMM {}x{}x{} (batch {}, precision {}): {}", dtypeName(spec.inType),
                     p.m, p.n, p.k, p.batch, matmulPrecisionName(spec.precision), cublasLtGetStatusString(s));
  h.algo = result.algo;
  return g;
}

Status LtGemm::run(const void* a, const void* b, void* c, void* bias) {
  Handles& h = *m_h;
  if (m_spec.epilogue != GemmEpilogue::None) {
    if (!bias) return makeError("cuBLASLt: the epilogue needs a bias pointer");
    TSR_LT(cublasLtMatmulDescSetAttribute(h.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  // Staged copies live in one pool buffer, freed in stream order once the product has read it.
  DeviceBufferPtr scratch;
  void* cOut = c;
  if (h.a_.staged || h.b_.staged || h.stageC) {
    const int64_t aBytes = h.a_.staged ? h.a_.stagedBytes : 0, bBytes = h.b_.staged ? h.b_.stagedBytes : 0;
    TSR_ASSIGN(scratch, m_device->allocate(aBytes + bBytes + h.stagedCBytes));
    char* base = static_cast<char*>(scratch->data());
    if (h.a_.staged) {
      TSR_TRY(stage(*m_device, h.stageFn, h.a_, m_spec.plan.batch, a, base));
      a = base;
    }
    if (h.b_.staged) {
      TSR_TRY(stage(*m_device, h.stageFn, h.b_, m_spec.plan.batch, b, base + aBytes));
      b = base + aBytes;
    }
    if (h.stageC) c = base + aBytes + bBytes;
  }
  const float alpha = 1.0f, beta = 0.0f;
  TSR_LT(cublasLtMatmul(static_cast<cublasLtHandle_t>(m_device->cublasLt()), h.desc, &alpha, b, h.a, a, h.b, &beta,
                        c, h.c, c, h.c, &h.algo, m_device->workspace(), static_cast<size_t>(m_device->workspaceBytes()),
                        static_cast<cudaStream_t>(m_device->computeStream())));
  if (h.stageC) {
    const cpu::GemmPlan& p = m_spec.plan;
    const size_t os = dtypeSize(m_spec.outType);
    TSR_CUDA(cudaMemcpy2DAsync(cOut, static_cast<size_t>(p.n) * os, c, static_cast<size_t>(h.ldc) * os,
                               static_cast<size_t>(p.n) * os, static_cast<size_t>(p.batch * p.m),
                               cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(m_device->computeStream())));
  }
  return {};
}

}  // namespace tsr::cuda
