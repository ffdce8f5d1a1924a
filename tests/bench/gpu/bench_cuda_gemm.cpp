// bench_cuda_gemm: how cuBLASLt's bf16 products (f32 accumulation and output) run when a dimension is odd, and
// what padding it to a multiple of 8 or 64 gains. GPT-2's 50257-entry vocabulary gives three such products per
// step (logits, their input gradient, the embedding gradient). Each variant is timed with the heuristic's first
// algorithm and with the fastest of its first 8, as the backend's autotuner chooses. Prints one JSON object.
//
//   bench_cuda_gemm [--reps N]
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

#define CHECK_CUDA(x)                                                                          \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                            \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)
#define CHECK_LT(x)                                                                            \
  do {                                                                                         \
    cublasStatus_t s_ = (x);                                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
      std::fprintf(stderr, "%s: %s\n", #x, cublasLtGetStatusString(s_));                       \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

// D[m x n] (column-major, leading dimension ldd) = op(A) op(B); A is stored k x m when transA, else m x k.
struct Problem {
  std::string name;
  bool transA, transB;
  long long m, n, k, lda, ldb, ldd;
};

struct Timing {
  double first = -1, best = -1;
  int algos = 0;
};

Timing timeProblem(cublasLtHandle_t lt, const Problem& p, void* a, void* b, void* d, void* ws, size_t wsBytes,
                   int reps) {
  cublasLtMatmulDesc_t op;
  CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = p.transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtMatrixLayout_t la, lb, ld;
  CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.transA ? p.k : p.m, p.transA ? p.m : p.k, p.lda));
  CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p.transB ? p.n : p.k, p.transB ? p.k : p.n, p.ldb));
  CHECK_LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, p.m, p.n, p.ldd));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes,
                                                sizeof wsBytes));
  cublasLtMatmulHeuristicResult_t results[8];
  int found = 0;
  CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 8, results, &found));
  Timing t;
  t.algos = found;
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  const float alpha = 1, beta = 0;
  for (int i = 0; i < found; ++i) {
    auto run = [&] {
      return cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &results[i].algo, ws, wsBytes, 0);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;
    CHECK_CUDA(cudaEventRecord(e0));
    for (int r = 0; r < reps; ++r) run();
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    const double each = ms / reps;
    if (i == 0) t.first = each;
    if (t.best < 0 || each < t.best) t.best = each;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  return t;
}

double timeCopy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height, int reps) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  CHECK_CUDA(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice));
  CHECK_CUDA(cudaEventRecord(e0));
  for (int r = 0; r < reps; ++r) cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice);
  CHECK_CUDA(cudaEventRecord(e1));
  CHECK_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / reps;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("{\"error\": \"no CUDA GPU\"}\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const long long T = 16384, C = 768;
  std::vector<Problem> problems;
  // The logits: W [V, C] row-major is A (k x m, transposed), x [T, C] row-major is B; D [T, V] row-major.
  for (long long v : {50257LL, 50264LL, 50304LL})
    problems.push_back({"logits V=" + std::to_string(v) + " ldd=" + std::to_string(v), true, false, v, T, C, C, C, v});
  problems.push_back({"logits V=50257 ldd=50264", true, false, 50257, T, C, C, C, 50264});
  problems.push_back({"logits V=50257 ldd=50304", true, false, 50257, T, C, C, C, 50304});
  // Their input gradient: W [V, C] is A (m x k), dlogits [T, V] (ld padded to 50264 by staging) is B (k x n).
  for (long long v : {50257LL, 50264LL, 50304LL})
    problems.push_back({"dx K=" + std::to_string(v), false, false, C, T, v, C, v == 50257 ? 50264 : v, C});
  // The embedding gradient: x [T, C] is A (m x k), dlogits is B transposed (n x k); D [V, C] row-major.
  for (long long v : {50257LL, 50264LL, 50304LL})
    problems.push_back({"dw N=" + std::to_string(v), false, true, C, v, T, C, v == 50257 ? 50264 : v, C});
  // GPT-2's other products, for scale.
  problems.push_back({"qkv 16384x2304x768", true, false, 2304, T, C, C, C, 2304});
  problems.push_back({"fc 16384x3072x768", true, false, 3072, T, C, C, C, 3072});

  size_t maxA = 0, maxB = 0, maxD = 0;
  for (const auto& p : problems) {
    maxA = std::max<size_t>(maxA, size_t(p.lda) * (p.transA ? p.m : p.k) * 2);
    maxB = std::max<size_t>(maxB, size_t(p.ldb) * (p.transB ? p.k : p.n) * 2);
    maxD = std::max<size_t>(maxD, size_t(p.ldd) * p.n * 4);
  }
  void *a, *b, *d, *d2, *ws;
  const size_t wsBytes = 32u << 20;
  CHECK_CUDA(cudaMalloc(&a, maxA));
  CHECK_CUDA(cudaMalloc(&b, maxB));
  CHECK_CUDA(cudaMalloc(&d, maxD));
  CHECK_CUDA(cudaMalloc(&d2, maxD));
  CHECK_CUDA(cudaMalloc(&ws, wsBytes));
  CHECK_CUDA(cudaMemset(a, 0x3c, maxA));
  CHECK_CUDA(cudaMemset(b, 0x3c, maxB));
  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));

  std::printf("{\"device\": \"%s\", \"reps\": %d, \"products\": [", prop.name, reps);
  for (size_t i = 0; i < problems.size(); ++i) {
    const auto& p = problems[i];
    Timing t = timeProblem(lt, p, a, b, d, ws, wsBytes, reps);
    const double tflops = 2.0 * p.m * p.n * p.k / (t.best * 1e-3) / 1e12;
    std::printf("{\"name\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"algos\": %d, \"first_ms\": %.4f, "
                "\"best_ms\": %.4f, \"tflops\": %.1f}, ",
                p.name.c_str(), p.m, p.n, p.k, t.algos, t.first, t.best, tflops);
  }
  // Compacting a padded logits buffer [T, 50264] into [T, 50257], and a plain copy of the same bytes.
  const double compact = timeCopy2d(d2, 50257 * 4, d, 50264 * 4, 50257 * 4, T, reps);
  const double flat = timeCopy2d(d2, 50257 * 4 * T, d, 50257 * 4 * T, 50257 * 4 * T, 1, reps);
  std::printf("{\"name\": \"copy2d [16384,50264]->[16384,50257] f32\", \"ms\": %.4f}, ", compact);
  std::printf("{\"name\": \"copy [16384,50257] f32\", \"ms\": %.4f, \"gbps\": %.0f}]}\n", flat,
              2.0 * 50257 * 4 * T / (flat * 1e-3) / 1e9);
  cublasLtDestroy(lt);
  return 0;
}
