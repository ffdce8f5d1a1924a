#include "engine/backends/cuda/gemm.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "engine/backends/cuda/nvrtc.h"

namespace tsr::cuda {

namespace {

Status checkLt(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return makeError("cuBLASLt: {} failed: {}", what, cublasLtGetStatusString(s));
}
#define TSR_LT(call) TSR_TRY(checkLt((call), #call))

cudaDataType_t cudaType(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// f32 -> bf16, rounded to nearest even (NaN stays NaN), as PyTorch's autocast and JAX's bf16 precision do before
// a product: cuBLASLt's CUBLAS_COMPUTE_32F_FAST_16BF only allows a down-conversion, and on Hopper it was seen to
// run TF32 kernels instead (the same results, at TF32's rate).
constexpr const char* kToBf16Kernel = "tsr_f32_to_bf16";
constexpr const char* kToBf16Source = R"(extern "C" __global__ void tsr_f32_to_bf16(const float* __restrict__ x,
    unsigned short* __restrict__ y, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned int u = __float_as_uint(x[i]);
    if ((u & 0x7fffffffu) > 0x7f800000u) { y[i] = (unsigned short)((u >> 16) | 0x40u); continue; }
    u += 0x7fffu + ((u >> 16) & 1u);
    y[i] = (unsigned short)(u >> 16);
  }
}
)";

Result<const void*> toBf16Kernel(Device& d) {
  static std::mutex mutex;
  static auto& modules = *new std::map<int, std::shared_ptr<LoadedModule>>();  // per device, kept past exit
  std::lock_guard lock(mutex);
  auto& m = modules[d.ordinal()];
  if (!m) {
    NvrtcOptions o;
    o.sm = d.smVersion();
    TSR_ASSIGN(CompiledModule cm, compileCuda(kToBf16Source, kToBf16Kernel, o));
    TSR_ASSIGN(m, LoadedModule::load(cm));
  }
  return m->kernel(kToBf16Kernel);
}

Status convertToBf16(Device& d, const void* fn, const void* x, void* y, int64_t n) {
  if (n <= 0) return {};
  long long count = n;
  void* args[] = {&x, &y, &count};
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t{d.numSMs()} * 16);
  return launchKernel(fn, blocks, 256, args, 0, d.computeStream());
}

// Elements from the first to one past the last that a column-major rows x cols matrix with leading dimension
// ld spans, over `batch` matrices `stride` apart.
int64_t spanElements(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  if (rows <= 0 || cols <= 0) return 0;
  return (cols - 1) * ld + rows + (batch > 1 ? (batch - 1) * stride : 0);
}

}  // namespace

struct LtGemm::Handles {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  // f32 operands run as bf16 (MatmulPrecision::BF16): converted into a pool buffer before each product.
  bool toBf16 = false;
  int64_t aElems = 0, bElems = 0;
  const void* convert = nullptr;
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
  h.toBf16 = spec.inType == DType::F32 && spec.precision == MatmulPrecision::BF16;
  if (h.toBf16) {
    h.aElems = spanElements(p.transA ? p.m : p.k, p.transA ? p.k : p.m, p.lda, p.batch, p.strideA);
    h.bElems = spanElements(p.transB ? p.k : p.n, p.transB ? p.n : p.k, p.ldb, p.batch, p.strideB);
    TSR_ASSIGN(h.convert, toBf16Kernel(d));
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
  const cudaDataType_t in = h.toBf16 ? CUDA_R_16BF : cudaType(spec.inType), out = cudaType(spec.outType);
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  // First operand: B's bytes; (n x k) when not transposed, else (k x n).
  TSR_LT(cublasLtMatrixLayoutCreate(&h.a, in, p.transB ? u(p.k) : u(p.n), p.transB ? u(p.n) : u(p.k), p.ldb));
  TSR_LT(cublasLtMatrixLayoutCreate(&h.b, in, p.transA ? u(p.m) : u(p.k), p.transA ? u(p.k) : u(p.m), p.lda));
  TSR_LT(cublasLtMatrixLayoutCreate(&h.c, out, u(p.n), u(p.m), p.n));
  if (p.batch > 1) {
    int32_t count = static_cast<int32_t>(p.batch);
    int64_t sa = p.strideB, sb = p.strideA, sc = p.m * p.n;
    TSR_LT(cublasLtMatrixLayoutSetAttribute(h.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    TSR_LT(cublasLtMatrixLayoutSetAttribute(h.b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    TSR_LT(cublasLtMatrixLayoutSetAttribute(h.c, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    TSR_LT(cublasLtMatrixLayoutSetAttribute(h.a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof(sa)));
    TSR_LT(cublasLtMatrixLayoutSetAttribute(h.b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof(sb)));
    TSR_LT(cublasLtMatrixLayoutSetAttribute(h.c, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, sizeof(sc)));
  }
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
  DeviceBufferPtr converted;  // freed in stream order once the product has read it
  if (h.toBf16) {
    const int64_t aBytes = (h.aElems * 2 + 255) / 256 * 256;
    TSR_ASSIGN(converted, m_device->allocate(aBytes + h.bElems * 2));
    char* base = static_cast<char*>(converted->data());
    TSR_TRY(convertToBf16(*m_device, h.convert, a, base, h.aElems));
    TSR_TRY(convertToBf16(*m_device, h.convert, b, base + aBytes, h.bElems));
    a = base;
    b = base + aBytes;
  }
  const float alpha = 1.0f, beta = 0.0f;
  TSR_LT(cublasLtMatmul(static_cast<cublasLtHandle_t>(m_device->cublasLt()), h.desc, &alpha, b, h.a, a, h.b, &beta,
                        c, h.c, c, h.c, &h.algo, m_device->workspace(), static_cast<size_t>(m_device->workspaceBytes()),
                        static_cast<cudaStream_t>(m_device->computeStream())));
  return {};
}

}  // namespace tsr::cuda
