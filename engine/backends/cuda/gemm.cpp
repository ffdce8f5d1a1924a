#include "engine/backends/cuda/gemm.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <limits>
#include <map>
#include <mutex>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "engine/backends/cuda/cuda_status.h"
#include "engine/backends/cuda/nvrtc.h"
#include "engine/core/env_options.h"

namespace tsr::cuda {

namespace {

Status checkLt(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return makeError("cuBLASLt: {} failed: {}", what, cublasLtGetStatusString(s));
}
#define TSR_LT(call) TSR_TRY(checkLt((call), #call))

cudaDataType_t cudaType(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// Staging copies an operand into a pool buffer before the product:
//   - f32 -> bf16 (rounded to nearest even, NaN stays NaN), as PyTorch's autocast and JAX's bf16 precision do:
//     cuBLASLt's CUBLAS_COMPUTE_32F_FAST_16BF only allows a down-conversion, and on an H200 it ran TF32 kernels
//     instead. An operand whose layout suits cuBLASLt keeps it: one flat pass over the elements it spans.
//   - with its columns repacked to 16-byte aligned leading dimensions ("cols" kernels, a column per group of
//     threads, several short columns per block): cuBLASLt's fast Hopper kernels need them, and the products
//     over GPT-2's 50257 vocabulary entries have none. Measured on an H200 (GPT-2 124M, B=16, T=1024, bf16): the
//     weight gradient of the tied embedding [50257,768] went from 9.9 to 4.6 ms. Writing an unaligned output
//     through an aligned copy made the forward logits slower (13.3 to 17.4 ms), so outputs are written in place.
//   - bf16 operands (autocast's products) are repacked and padded as they are ("_from_bf16" kernels), and a
//     padded bf16 C compacted the same way.
constexpr const char* kStageSource = R"(__device__ __forceinline__ unsigned short tsr_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
extern "C" __global__ void tsr_stage_bf16_flat(const float* __restrict__ x, unsigned short* __restrict__ y,
    long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = tsr_to_bf16(x[i]);
}
// Four elements of a column per thread and step: loaded as one float4 where the source column is 16-byte aligned
// (a padded product's C, whose rows are compacted), stored as one 8- or 16-byte vector where the destination is
// (an operand repacked to aligned columns); the alignment is the same for every thread of a column, so the
// branches do not diverge within it. Short columns (ViT's 197 tokens) share a block: threads per column `tx`.
#define TSR_STAGE_COLS(NAME, S, SVEC, WIDEN, T, VEC, CONVERT)                                                 \
  extern "C" __global__ void NAME(const S* __restrict__ x, T* __restrict__ y, int rows, int tx,                 \
      long long lines, long long colsPerMatrix, long long realCols, long long ldx, long long ldy,                \
      long long strideX, long long strideY) {                                                                    \
    const long long line = (long long)blockIdx.x * (blockDim.x / tx) + threadIdx.x / tx;                        \
    if (line >= lines) return;                                                                                   \
    const long long q = line / colsPerMatrix, c = line % colsPerMatrix;                                          \
    const S* src = x + q * strideX + c * ldx;                                                                    \
    T* dst = y + q * strideY + c * ldy;                                                                          \
    const bool real = c < realCols;                                                                              \
    const bool srcVec = ((unsigned long long)src & (sizeof(S) * 4 - 1)) == 0;                                    \
    const bool dstVec = ((unsigned long long)dst & (sizeof(T) * 4 - 1)) == 0;                                    \
    _Pragma("unroll 2") for (long long i = (threadIdx.x % tx) * 4; i < ldy; i += (long long)tx * 4) {            \
      float v0 = 0.0f, v1 = 0.0f, v2 = 0.0f, v3 = 0.0f;                                                          \
      if (real && srcVec && i + 3 < rows) {                                                                      \
        const SVEC f = *(const SVEC*)(src + i);                                                                  \
        const S* e = (const S*)&f;                                                                               \
        v0 = WIDEN(e[0]); v1 = WIDEN(e[1]); v2 = WIDEN(e[2]); v3 = WIDEN(e[3]);                                  \
      } else if (real) {                                                                                         \
        if (i < rows) v0 = WIDEN(src[i]);                                                                        \
        if (i + 1 < rows) v1 = WIDEN(src[i + 1]);                                                                \
        if (i + 2 < rows) v2 = WIDEN(src[i + 2]);                                                                \
        if (i + 3 < rows) v3 = WIDEN(src[i + 3]);                                                                \
      }                                                                                                          \
      if (dstVec && i + 3 < ldy) {                                                                               \
        VEC w;                                                                                                   \
        T* e = (T*)&w;                                                                                           \
        e[0] = CONVERT(v0); e[1] = CONVERT(v1); e[2] = CONVERT(v2); e[3] = CONVERT(v3);                          \
        *(VEC*)(dst + i) = w;                                                                                    \
      } else {                                                                                                   \
        dst[i] = CONVERT(v0);                                                                                    \
        if (i + 1 < ldy) dst[i + 1] = CONVERT(v1);                                                               \
        if (i + 2 < ldy) dst[i + 2] = CONVERT(v2);                                                               \
        if (i + 3 < ldy) dst[i + 3] = CONVERT(v3);                                                               \
      }                                                                                                          \
    }                                                                                                            \
  }
#define TSR_SAME(v) (v)
__device__ __forceinline__ float tsr_from_bf16(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }
TSR_STAGE_COLS(tsr_stage_bf16_cols, float, float4, TSR_SAME, unsigned short, uint2, tsr_to_bf16)
TSR_STAGE_COLS(tsr_stage_f32_cols, float, float4, TSR_SAME, float, float4, TSR_SAME)
// bf16 to bf16: widening is exact and tsr_to_bf16 gives the same bits back.
TSR_STAGE_COLS(tsr_stage_bf16_cols_from_bf16, unsigned short, uint2, tsr_from_bf16, unsigned short, uint2, tsr_to_bf16)
)";

constexpr int kStageThreads = 256;

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

// A column-major operand as cuBLASLt reads it (`rows` contiguous elements per column), and its staged copy, which
// may be padded with zeros to `padRows` x `padCols`.
struct Operand {
  int64_t rows = 0, cols = 0, ld = 0, stride = 0;  // stride 0: one matrix for the whole batch
  int64_t matrices = 1;
  int64_t padRows = 0, padCols = 0;  // as cuBLASLt sees it: rows/cols, or more when padded
  bool staged = false, repacked = false;
  int64_t stagedLd = 0, stagedStride = 0, stagedBytes = 0;
  const void* fn = nullptr;
  int64_t seenLd() const { return staged ? stagedLd : ld; }
  int64_t seenStride() const { return staged ? stagedStride : stride; }
  // Converted to bf16 as it lies (not repacked): any product that reads the same bytes can read the copy.
  bool flat() const { return staged && !repacked; }
};

int64_t roundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Plans staging for `o`: converted to bf16 when `toBf16`; repacked when its columns are not 16-byte aligned and
// the product is large enough to pay for the copy (`large`), or when it is padded (`padRows`/`padCols` set).
void planStaging(Operand& o, int64_t inSize, bool toBf16, bool large, int64_t batch) {
  const int64_t outSize = toBf16 ? 2 : inSize;
  o.matrices = o.stride == 0 ? 1 : batch;
  if (o.padRows < o.rows) o.padRows = o.rows;
  if (o.padCols < o.cols) o.padCols = o.cols;
  const bool padded = o.padRows != o.rows || o.padCols != o.cols;
  const bool aligned = (o.ld * outSize) % 16 == 0 && (o.stride * outSize) % 16 == 0;
  o.repacked = (padded || (large && !aligned)) && o.rows > 0 && o.cols > 0;
  o.staged = o.repacked || (toBf16 && o.rows > 0 && o.cols > 0);
  if (!o.staged) return;
  if (o.repacked) {
    o.stagedLd = roundUp(o.padRows, 16 / outSize);
    o.stagedStride = o.stride == 0 ? 0 : o.padCols * o.stagedLd;
    o.stagedBytes = roundUp(o.matrices * o.padCols * o.stagedLd * outSize, 256);
  } else {
    o.stagedLd = o.ld;
    o.stagedStride = o.stride;
    o.stagedBytes = roundUp(((o.matrices - 1) * o.stride + (o.cols - 1) * o.ld + o.rows) * outSize, 256);
  }
}

// Copies `lines` columns of `rows` elements (`colsPerMatrix` per matrix, of which the first `realCols` are read
// and the rest written as zeros; rows up to `ldy` zero too) with the "cols" kernel `fn`.
Status copyColumns(Device& d, const void* fn, const void* x, void* y, int64_t rows, int64_t lines,
                   int64_t colsPerMatrix, int64_t realCols, int64_t ldx, int64_t ldy, int64_t strideX,
                   int64_t strideY) {
  if (rows > 0x7fffffff) return makeError("cuBLASLt: an operand with columns of {} is too large to stage", rows);
  int r = static_cast<int>(rows);
  // Threads per column: a warp or more, four elements each per step.
  int tx = static_cast<int>(std::min<int64_t>(kStageThreads, roundUp((ldy + 3) / 4, 32)));
  long long n = lines, cpm = colsPerMatrix, real = realCols, lx = ldx, ly = ldy, sx = strideX, sy = strideY;
  void* args[] = {&x, &y, &r, &tx, &n, &cpm, &real, &lx, &ly, &sx, &sy};
  const int64_t perBlock = kStageThreads / tx;
  return launchKernel(fn, (lines + perBlock - 1) / perBlock, kStageThreads, args, 0, d.computeStream());
}

Status stage(Device& d, const Operand& o, const void* x, void* y) {
  if (!o.repacked) {  // bf16 in the same layout: the elements spanned, in one pass
    long long n = (o.matrices - 1) * o.stride + (o.cols - 1) * o.ld + o.rows;
    void* args[] = {&x, &y, &n};
    const int64_t blocks = std::min<int64_t>((n + kStageThreads - 1) / kStageThreads, int64_t{d.numSMs()} * 16);
    return launchKernel(o.fn, blocks, kStageThreads, args, 0, d.computeStream());
  }
  return copyColumns(d, o.fn, x, y, o.rows, o.matrices * o.padCols, o.padCols, o.cols, o.ld, o.stagedLd, o.stride,
                     o.stagedStride);
}

// Autotuning, as XLA's GEMM autotuner does: cuBLASLt's heuristic ranks algorithms by its model of the device,
// which can misjudge a shape (GPT-2's 50257-column products); for products of at least kTuneFlops the first
// kTuneCandidates are timed once per problem on the device, and the fastest is kept for every GEMM of that
// problem in the process. TESSERA_GEMM_AUTOTUNE=0 takes the heuristic's first; TESSERA_GEMM_AUTOTUNE_LOG=1
// prints each problem's timings.
constexpr int kTuneCandidates = 8;
constexpr double kTuneFlops = 5e8;
constexpr int kTuneReps = 3;
constexpr double kPadFlops = 1e9;

// A product as cuBLASLt runs it: its descriptors and the bytes each operand spans.
struct TuneProblem {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  int64_t bytesA = 0, bytesB = 0, bytesC = 0;
  std::string what;  // for the log
};

struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~EventPair() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

// The fastest of `candidates` on trial operands (every byte 0x3c: 0.0115 in f32 and in bf16); the first where
// the trial operands do not fit in memory (not remembered, so that a later compile tries again). Tuning never
// fails a compile over a candidate: one that cuBLASLt refuses to run is left out.
Result<cublasLtMatmulAlgo_t> tunedAlgo(Device& d, const std::string& key, const TuneProblem& t,
                                       std::span<const cublasLtMatmulHeuristicResult_t> candidates) {
  static std::mutex mutex;
  static auto& cache = *new std::map<std::string, cublasLtMatmulAlgo_t>();  // kept past exit, as the modules
  std::lock_guard lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Result<DeviceBufferPtr> a = d.allocate(t.bytesA), b = d.allocate(t.bytesB), c = d.allocate(t.bytesC);
  if (!a.ok() || !b.ok() || !c.ok()) return candidates[0].algo;
  void* pa = a.value()->data();
  void* pb = b.value()->data();
  void* pc = c.value()->data();
  TSR_TRY(d.memset(pa, 0x3c, t.bytesA));
  TSR_TRY(d.memset(pb, 0x3c, t.bytesB));
  EventPair ev;
  TSR_CUDA(cudaEventCreate(&ev.start));
  TSR_CUDA(cudaEventCreate(&ev.stop));
  auto stream = static_cast<cudaStream_t>(d.computeStream());
  auto lt = static_cast<cublasLtHandle_t>(d.cublasLt());
  const float alpha = 1.0f, beta = 0.0f;
  auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(lt, t.desc, &alpha, pa, t.a, pb, t.b, &beta, pc, t.c, pc, t.c, &algo, d.workspace(),
                          static_cast<size_t>(d.workspaceBytes()), stream);
  };
  std::vector<float> ms(candidates.size(), std::numeric_limits<float>::infinity());
  size_t best = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].state != CUBLAS_STATUS_SUCCESS || matmul(candidates[i].algo) != CUBLAS_STATUS_SUCCESS)
      continue;  // the warm-up run also loads the algorithm's kernels
    TSR_CUDA(cudaEventRecord(ev.start, stream));
    bool ran = true;
    for (int r = 0; r < kTuneReps && ran; ++r) ran = matmul(candidates[i].algo) == CUBLAS_STATUS_SUCCESS;
    TSR_CUDA(cudaEventRecord(ev.stop, stream));
    TSR_CUDA(cudaEventSynchronize(ev.stop));
    float elapsed = 0;
    TSR_CUDA(cudaEventElapsedTime(&elapsed, ev.start, ev.stop));
    if (!ran) continue;
    ms[i] = elapsed / kTuneReps;
    if (ms[i] < ms[best]) best = i;
  }
  if (envOptions().gemmAutotuneLog)
    fmt::print(stderr, "tessera: gemm autotune {}: the heuristic's first {:.3f} ms, chosen #{} of {}: {:.3f} ms\n",
               t.what, ms[0], best, candidates.size(), ms[best]);
  cache.emplace(key, candidates[best].algo);
  return candidates[best].algo;
}

}  // namespace

const char* gemmStageSource() { return kStageSource; }

struct LtGemm::Handles {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Operand a_, b_;  // staged when converted to bf16 and/or repacked
  int64_t m = 0, n = 0;              // C's rows and columns as cuBLASLt writes them (padded: more than the plan's)
  const void* compact = nullptr;     // when padded: copies C's first rows and columns out
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
  const int64_t inSize = dtypeSize(spec.inType);
  const double flops = 2.0 * static_cast<double>(p.batch) * static_cast<double>(p.m) * static_cast<double>(p.n) *
                       static_cast<double>(p.k);
  // Repacking pays for its copies only on products of about a GFLOP and more.
  const bool large = flops >= 1e9;
  // cuBLASLt's first operand is B's bytes, (n x k) column-major when not transposed, else (k x n); the second A's.
  h.b_ = {p.transB ? p.k : p.n, p.transB ? p.n : p.k, p.ldb, p.batch > 1 ? p.strideB : 0};
  h.a_ = {p.transA ? p.m : p.k, p.transA ? p.k : p.m, p.lda, p.batch > 1 ? p.strideA : 0};
  const bool halfIn = spec.inType == DType::BF16;  // autocast's products: staged only to repack or pad
  // Padding, as XLA's cublas_pad_for_gemms: on tensor cores, a product with a dimension that is not a multiple of
  // 8 runs on cuBLASLt's slow paths, whatever the leading dimensions. Measured on an H200 (bench_cuda_gemm, bf16):
  // GPT-2's logits [16384,768]x[768,50257] 12.2 ms, with 50264 columns 1.9 and with 50304 1.6; their input
  // gradient (k = 50257) 9.4 ms, with k = 50264 1.4. So a single product of a GFLOP and more is computed padded:
  // k with zeros in both staged operands, C's rows and columns into a pool buffer that is then compacted (1.5 ms
  // for the logits). The output's contiguous dimension is padded to 64, the others to 8. A batch of small
  // products of a GFLOP together is padded (every dimension to 8) where k is odd: ViT's attention at TF32,
  // [384, 197, 197] x [384, 197, 64], took 0.18 ms, padded 0.12 ms (an H200); its products with k = 64 and two
  // odd dimensions took 0.057 ms, padded 0.12 ms (the copies cost more than they save), so they are not.
  const bool tensorCores =
      halfIn || spec.precision == MatmulPrecision::BF16 || spec.precision == MatmulPrecision::TF32;
  const bool pad = tensorCores && spec.epilogue == GemmEpilogue::None &&
                   (p.batch > 1 ? flops >= kPadFlops && p.k % 8 != 0 : flops >= kPadFlops);
  h.n = p.n;
  h.m = p.m;
  int64_t kp = p.k;
  if (pad) {
    kp = roundUp(p.k, 8);
    if (spec.outType == DType::F32 || spec.outType == DType::BF16) {  // what the compaction kernels write
      h.n = roundUp(p.n, p.n % 8 == 0 || p.batch > 1 ? 8 : 64);
      h.m = roundUp(p.m, 8);
    }
    h.b_.padRows = p.transB ? kp : h.n;
    h.b_.padCols = p.transB ? h.n : kp;
    h.a_.padRows = p.transA ? h.m : kp;
    h.a_.padCols = p.transA ? kp : h.m;
  }
  for (Operand* o : {&h.a_, &h.b_}) {
    planStaging(*o, inSize, toBf16, large, p.batch);
    if (!o->staged) continue;
    if (!h.module) {
      TSR_ASSIGN(h.module, stageModule(d));
    }
    TSR_ASSIGN(o->fn, h.module->kernel(!o->repacked ? "tsr_stage_bf16_flat"
                                       : halfIn      ? "tsr_stage_bf16_cols_from_bf16"
                                       : toBf16      ? "tsr_stage_bf16_cols"
                                                     : "tsr_stage_f32_cols"));
  }
  if (h.n != p.n || h.m != p.m) {
    if (!h.module) {
      TSR_ASSIGN(h.module, stageModule(d));
    }
    TSR_ASSIGN(h.compact, h.module->kernel(spec.outType == DType::BF16 ? "tsr_stage_bf16_cols_from_bf16"
                                                                        : "tsr_stage_f32_cols"));
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
  TSR_TRY(layout(&h.a, in, fa.padRows, fa.padCols, fa.seenLd(), fa.seenStride()));
  TSR_TRY(layout(&h.b, in, fb.padRows, fb.padCols, fb.seenLd(), fb.seenStride()));
  TSR_TRY(layout(&h.c, out, h.n, h.m, h.n, h.m * h.n));
  cublasLtMatmulPreference_t pref = nullptr;
  TSR_LT(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = static_cast<uint64_t>(d.workspaceBytes());
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  std::array<cublasLtMatmulHeuristicResult_t, kTuneCandidates> results{};
  int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(d.cublasLt()), h.desc, h.a, h.b,
                                                    h.c, h.c, pref, kTuneCandidates, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0)
    return makeError("cuBLASLt: no algorithm for a {} GEMM {}x{}x{} (batch {}, precision {}): {}", dtypeName(spec.inType),
                     p.m, p.n, p.k, p.batch, matmulPrecisionName(spec.precision), cublasLtGetStatusString(s));
  h.algo = results[0].algo;
  if (found > 1 && flops >= kTuneFlops && spec.epilogue == GemmEpilogue::None && envOptions().gemmAutotune) {
    const std::string key = fmt::format("{}:{}x{}x{}b{} lda{} ldb{} sa{} sb{} t{}{} st{}/{}/{}/{} pad{}x{}x{} {}{}{}",
                                        d.ordinal(), p.m, p.n, p.k, p.batch, p.lda, p.ldb, p.strideA, p.strideB,
                                        p.transA, p.transB, fa.seenLd(), fb.seenLd(), fa.seenStride(), fb.seenStride(),
                                        h.m, h.n, kp, static_cast<int>(in), static_cast<int>(out),
                                        static_cast<int>(compute));
    auto span = [](const Operand& o, int64_t size) {
      return o.staged ? o.stagedBytes : ((o.matrices - 1) * o.stride + (o.cols - 1) * o.ld + o.rows) * size;
    };
    const int64_t elem = toBf16 ? 2 : inSize;
    TuneProblem t{h.desc, h.a, h.b, h.c, span(fa, elem), span(fb, elem), p.batch * h.m * h.n * dtypeSize(spec.outType),
                  fmt::format("{}x{}x{} batch {} ({}{})", p.m, p.n, p.k, p.batch, matmulPrecisionName(spec.precision),
                              pad ? fmt::format(", padded to {}x{}x{}", h.m, h.n, kp) : "")};
    TSR_ASSIGN(h.algo, tunedAlgo(d, key, t, {results.data(), static_cast<size_t>(found)}));
  }
  return g;
}

int64_t LtGemm::flatStagedBytes(int which) const {
  const Operand& o = which == 0 ? m_h->a_ : m_h->b_;
  return o.flat() ? o.stagedBytes : 0;
}

Status LtGemm::stageInto(int which, const void* x, void* y) const {
  const Operand& o = which == 0 ? m_h->a_ : m_h->b_;
  if (!o.flat()) return makeError("cuBLASLt: operand {} is not converted as it lies", which);
  return stage(*m_device, o, x, y);
}

Status LtGemm::run(const void* a, const void* b, void* c, void* bias, const void* aStaged, const void* bStaged) {
  Handles& h = *m_h;
  if (m_spec.epilogue != GemmEpilogue::None) {
    if (!bias) return makeError("cuBLASLt: the epilogue needs a bias pointer");
    TSR_LT(cublasLtMatmulDescSetAttribute(h.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  // Staged copies and a padded C live in one pool buffer, freed in stream order once the product has read it.
  const cpu::GemmPlan& p = m_spec.plan;
  if (aStaged && !h.a_.flat()) return makeError("cuBLASLt: a staged copy of A it does not take");
  if (bStaged && !h.b_.flat()) return makeError("cuBLASLt: a staged copy of B it does not take");
  const bool stageA = h.a_.staged && !aStaged, stageB = h.b_.staged && !bStaged;
  if (aStaged) a = aStaged;
  if (bStaged) b = bStaged;
  const int64_t aBytes = stageA ? h.a_.stagedBytes : 0, bBytes = stageB ? h.b_.stagedBytes : 0;
  const int64_t cBytes = h.compact ? roundUp(p.batch * h.m * h.n * dtypeSize(m_spec.outType), 256) : 0;
  DeviceBufferPtr scratch;
  void* out = c;
  if (aBytes + bBytes + cBytes > 0) {
    TSR_ASSIGN(scratch, m_device->allocate(aBytes + bBytes + cBytes));
    char* base = static_cast<char*>(scratch->data());
    if (stageA) {
      TSR_TRY(stage(*m_device, h.a_, a, base));
      a = base;
    }
    if (stageB) {
      TSR_TRY(stage(*m_device, h.b_, b, base + aBytes));
      b = base + aBytes;
    }
    if (h.compact) out = base + aBytes + bBytes;
  }
  const float alpha = 1.0f, beta = 0.0f;
  TSR_LT(cublasLtMatmul(static_cast<cublasLtHandle_t>(m_device->cublasLt()), h.desc, &alpha, b, h.a, a, h.b, &beta,
                        out, h.c, out, h.c, &h.algo, m_device->workspace(),
                        static_cast<size_t>(m_device->workspaceBytes()),
                        static_cast<cudaStream_t>(m_device->computeStream())));
  if (h.compact)  // C's m rows of n (row-major), out of the padded h.m rows of h.n
    TSR_TRY(copyColumns(*m_device, h.compact, out, c, p.n, p.batch * p.m, p.m, p.m, h.n, p.n, h.m * h.n, p.m * p.n));
  return {};
}

}  // namespace tsr::cuda
