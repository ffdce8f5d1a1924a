// cuDNN execution plans for the convolutions of cudnn_conv.h, on the graph (backend) API: tensor, convolution
// and operation descriptors, an operation graph of the convolution (and, fused, the pointwise steps of its
// epilogue on virtual tensors between them), the engine configurations heuristics mode A
// proposes (mode FALLBACK where A has none), and the first that finalises into an execution plan within the
// workspace limit. Plans are cached per device, precision and problem; running one is a variant pack (the three
// buffers and a workspace from the device's pool) and cudnnBackendExecute on the compute stream.
#include <cuda_runtime_api.h>
#ifdef TESSERA_HAVE_CUDNN
#include <cudnn_graph.h>
#endif

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/backends/cuda/cuda_status.h"
#include "engine/backends/cuda/cudnn_conv.h"
#include "engine/backends/cuda/nvrtc.h"

namespace tsr::cuda {
namespace {

// The filter copies of cudnn_conv.h: one thread per packed element, its offset in the node's buffer from the
// view's dims and strides (rank <= 8: [groups, K / groups, C / groups] and up to 3 spatial dims). Elements are
// moved as 4- or 2-byte words (f32, bf16).
constexpr const char* kCopySource = R"(struct TsrFilterView {
  long long dims[8];
  long long strides[8];
  long long offset;
  int rank;
  int toPacked;
};
#define TSR_FILTER_COPY(NAME, T)                                                                              \
  extern "C" __global__ void NAME(const T* __restrict__ from, T* __restrict__ to, TsrFilterView v, long long n) { \
    const long long step = (long long)gridDim.x * blockDim.x;                                                \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {                  \
      long long r = i, off = v.offset;                                                                        \
      for (int d = v.rank - 1; d >= 0; --d) {                                                                 \
        const long long q = r % v.dims[d];                                                                    \
        r /= v.dims[d];                                                                                       \
        off += q * v.strides[d];                                                                              \
      }                                                                                                       \
      if (v.toPacked) to[i] = from[off]; else to[off] = from[i];                                              \
    }                                                                                                         \
  }
TSR_FILTER_COPY(tsr_filter_copy_4, unsigned int)
TSR_FILTER_COPY(tsr_filter_copy_2, unsigned short)
)";

// The kernel's argument, as the source declares it.
struct FilterView {
  int64_t dims[8] = {};
  int64_t strides[8] = {};
  int64_t offset = 0;
  int32_t rank = 0;
  int32_t toPacked = 0;
};
static_assert(sizeof(FilterView) == 144);

constexpr int kCopyThreads = 256;

}  // namespace

const char* cudnnFilterCopySource() { return kCopySource; }

#ifdef TESSERA_HAVE_CUDNN

namespace {

constexpr int64_t kMaxWorkspaceBytes = int64_t{1} << 30;
constexpr int64_t kAlignment = 16;  // device buffers: pool blocks, arena offsets are multiples of 64
// y: the convolution's result, or with an epilogue the chain's (the convolution's is then virtual); the binary
// steps' operands from kOperand on; virtual tensors from kVirtual on (not in the variant pack).
enum Uid : int64_t { kX = 1, kW = 2, kY = 3, kOperand = 16, kVirtual = 64 };

Status checkDnn(cudnnStatus_t s, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return {};
  char last[1024] = {};
  cudnnGetLastErrorString(last, sizeof(last));
  return makeError("cuDNN: {} failed: {}{}{}", what, cudnnGetErrorString(s), last[0] ? ": " : "", last);
}
#define TSR_DNN(call) TSR_TRY(checkDnn((call), #call))

// A backend descriptor, destroyed with its owner.
struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  Desc() = default;
  Desc(Desc&& o) noexcept : d(std::exchange(o.d, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d, o.d);
    return *this;
  }
  ~Desc() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
};

Result<Desc> make(cudnnBackendDescriptorType_t type) {
  Desc x;
  TSR_TRY(checkDnn(cudnnBackendCreateDescriptor(type, &x.d), fmt::format("creating descriptor type {}", int(type))));
  return x;
}

Status set(Desc& x, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values) {
  return checkDnn(cudnnBackendSetAttribute(x.d, name, type, count, values), fmt::format("setting attribute {}", int(name)));
}
Status setDesc(Desc& x, cudnnBackendAttributeName_t name, const Desc& value) {
  return set(x, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value.d);
}
Status setInts(Desc& x, cudnnBackendAttributeName_t name, const std::vector<int64_t>& v) {
  return set(x, name, CUDNN_TYPE_INT64, static_cast<int64_t>(v.size()), v.data());
}
Status finalize(Desc& x, const char* what) { return checkDnn(cudnnBackendFinalize(x.d), fmt::format("finalizing {}", what)); }

// A tensor; a virtual one (between two operations of a graph, never in memory) holds f32.
Result<Desc> tensor(const CudnnTensor& t, DType dtype, int64_t uid, bool isVirtual = false) {
  TSR_ASSIGN(Desc x, make(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  const cudnnDataType_t type = dtype == DType::BF16 && !isVirtual ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  TSR_TRY(set(x, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
  TSR_TRY(setInts(x, CUDNN_ATTR_TENSOR_DIMENSIONS, t.dims));
  TSR_TRY(setInts(x, CUDNN_ATTR_TENSOR_STRIDES, t.strides));
  TSR_TRY(set(x, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  TSR_TRY(set(x, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment));
  if (isVirtual) {
    const bool yes = true;
    TSR_TRY(set(x, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes));
  }
  TSR_TRY(finalize(x, "a tensor"));
  return x;
}

// What one engine's numerical notes allow at this precision: f32 at f32 precision takes no tensor cores (TF32
// there) and nothing converts inputs down or reduces in less than f32.
bool notesAllowed(const Desc& engine, DType dtype, MatmulPrecision precision, bool* deterministic) {
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t count = 0;
  if (cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes) != CUDNN_STATUS_SUCCESS)
    return false;
  *deterministic = true;
  for (int64_t i = 0; i < count; ++i) {
    switch (notes[i]) {
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: return false;
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
        if (dtype == DType::F32 && precision == MatmulPrecision::F32) return false;
        break;
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: *deterministic = false; break;
      default: break;
    }
  }
  return true;
}

// A finalised plan and everything it was made from (kept alive with it).
struct Plan {
  std::vector<Desc> keep;
  Desc plan;
  int64_t workspace = 0;
  int64_t engineIndex = -1;
  int operands = 0;   // the binary steps of a fused epilogue
  std::string error;  // why there is no plan
};

// The convolution's operation; y is its result tensor (virtual where an epilogue follows).
Result<Desc> operation(const CudnnConvProblem& p, const Desc& y, std::vector<Desc>& keep) {
  TSR_ASSIGN(Desc x, tensor(p.x, p.dtype, kX));
  TSR_ASSIGN(Desc w, tensor(p.w, p.dtype, kW));
  TSR_ASSIGN(Desc conv, make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = p.convolutionMode ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION;
  const int64_t spatial = p.spatialDims();
  TSR_TRY(set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute));
  TSR_TRY(set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  TSR_TRY(set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial));
  TSR_TRY(setInts(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, p.dilations));
  TSR_TRY(setInts(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, p.strides));
  TSR_TRY(setInts(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, p.prePadding));
  TSR_TRY(setInts(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, p.postPadding));
  TSR_TRY(finalize(conv, "the convolution descriptor"));
  const float alpha = 1.0f, beta = 0.0f;
  // The operation's descriptor type and its attributes for x, w, y (DX, W, DY for backward data; X, DW, DY for
  // backward filter), the convolution, alpha and beta.
  struct OpAttrs {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
  };
  const OpAttrs at = [&]() -> OpAttrs {
    switch (p.op) {
      case CudnnConvOp::BackwardData:
        return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
      case CudnnConvOp::BackwardFilter:
        return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
      case CudnnConvOp::Forward: break;
    }
    return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
  }();
  TSR_ASSIGN(Desc op, make(at.type));
  TSR_TRY(setDesc(op, at.x, x));
  TSR_TRY(setDesc(op, at.w, w));
  TSR_TRY(setDesc(op, at.y, y));
  TSR_TRY(setDesc(op, at.conv, conv));
  TSR_TRY(set(op, at.alpha, CUDNN_TYPE_FLOAT, 1, &alpha));
  TSR_TRY(set(op, at.beta, CUDNN_TYPE_FLOAT, 1, &beta));
  TSR_TRY(finalize(op, cudnnConvOpName(p.op)));
  for (Desc* d : {&x, &w, &conv}) keep.push_back(std::move(*d));
  return op;
}

cudnnPointwiseMode_t pointwiseMode(ops::ConvPostOp::Kind kind) {
  using K = ops::ConvPostOp::Kind;
  switch (kind) {
    case K::Relu: return CUDNN_POINTWISE_RELU_FWD;
    case K::Tanh: return CUDNN_POINTWISE_TANH_FWD;
    case K::Logistic: return CUDNN_POINTWISE_SIGMOID_FWD;
    case K::GeluTanh: return CUDNN_POINTWISE_GELU_APPROX_TANH_FWD;
    case K::GeluErf: return CUDNN_POINTWISE_GELU_FWD;
    case K::Add: return CUDNN_POINTWISE_ADD;
    case K::Sub: return CUDNN_POINTWISE_SUB;
    case K::Mul: return CUDNN_POINTWISE_MUL;
    case K::Div: return CUDNN_POINTWISE_DIV;
    case K::Max: return CUDNN_POINTWISE_MAX;
    case K::Min: return CUDNN_POINTWISE_MIN;
  }
  return CUDNN_POINTWISE_IDENTITY;
}

// The epilogue's pointwise operations after the convolution's virtual result `convY`, appended to ops: each
// reads the value before it (x) and its operand (b), and writes a virtual f32 tensor laid out as y, the last the
// chain's result (uid kY). Returns the number of binary steps.
Result<int> pointwiseChain(const CudnnConvProblem& p, const CudnnEpilogue& e, cudnnBackendDescriptor_t convY,
                           std::vector<Desc>& ops, std::vector<Desc>& keep) {
  cudnnBackendDescriptor_t x = convY;
  int operands = 0;
  const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
  for (size_t i = 0; i < e.steps.size(); ++i) {
    const CudnnPointwise& step = e.steps[i];
    const bool last = i + 1 == e.steps.size();
    TSR_ASSIGN(Desc y, tensor(p.y, p.dtype, last ? int64_t{kY} : kVirtual + 1 + static_cast<int64_t>(i), !last));
    TSR_ASSIGN(Desc pw, make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
    const cudnnPointwiseMode_t mode = pointwiseMode(step.kind);
    TSR_TRY(set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    TSR_TRY(set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision));
    TSR_TRY(finalize(pw, "a pointwise descriptor"));
    TSR_ASSIGN(Desc op, make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
    TSR_TRY(setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw));
    TSR_TRY(set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    if (step.binary) {
      TSR_ASSIGN(Desc b, tensor(step.operand, p.dtype, kOperand + operands++));
      TSR_TRY(setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b));
      keep.push_back(std::move(b));
    }
    TSR_TRY(setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y));
    TSR_TRY(finalize(op, cudnnPointwiseName(step.kind)));
    x = y.d;
    ops.push_back(std::move(op));
    keep.push_back(std::move(pw));
    keep.push_back(std::move(y));
  }
  return operands;
}

// The engine configurations one heuristics mode proposes, best first (empty where it proposes none).
std::vector<Desc> proposals(const Desc& graph, cudnnBackendHeurMode_t mode) {
  std::vector<Desc> out;
  auto heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  if (!heur.ok()) return out;
  if (!setDesc(*heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph).ok() ||
      !set(*heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode).ok() ||
      !finalize(*heur, "engine heuristics").ok())
    return out;
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS || count <= 0)
    return out;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    auto cfg = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (!cfg.ok()) return {};
    raw.push_back(cfg->d);
    out.push_back(std::move(*cfg));
  }
  int64_t got = 0;
  if (cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                               raw.data()) != CUDNN_STATUS_SUCCESS)
    return {};
  out.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  return out;
}

// The graph as text: the convolution's key, then the epilogue's steps (the plan cache's key, and messages).
std::string graphKey(const CudnnConvProblem& p, const CudnnEpilogue* epilogue) {
  return epilogue ? p.key() + " then" + epilogue->key() : p.key();
}

std::shared_ptr<Plan> buildPlan(cudnnHandle_t handle, const CudnnConvProblem& p, const CudnnEpilogue* epilogue,
                                MatmulPrecision precision) {
  auto plan = std::make_shared<Plan>();
  auto fail = [&](std::string why) {
    plan->error = std::move(why);
    return plan;
  };
  auto convY = tensor(p.y, p.dtype, epilogue ? int64_t{kVirtual} : int64_t{kY}, epilogue != nullptr);
  if (!convY.ok()) return fail(convY.error().message);
  std::vector<Desc> ops;
  {
    auto op = operation(p, *convY, plan->keep);
    if (!op.ok()) return fail(op.error().message);
    ops.push_back(std::move(*op));
  }
  if (epilogue) {
    auto operands = pointwiseChain(p, *epilogue, convY->d, ops, plan->keep);
    if (!operands.ok()) return fail(operands.error().message);
    plan->operands = *operands;
  }
  plan->keep.push_back(std::move(*convY));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Desc& op : ops) raw.push_back(op.d);
  auto graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  if (!graph.ok()) return fail(graph.error().message);
  Status st = set(*graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()),
                  raw.data());
  if (st.ok()) st = set(*graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  if (st.ok()) st = finalize(*graph, "the operation graph");
  if (!st.ok()) return fail(st.error().message);
  int tried = 0, refused = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Desc> configs = proposals(*graph, mode);
    // Deterministic engines first, each group in the heuristics' order.
    std::vector<std::pair<bool, size_t>> order;
    for (size_t i = 0; i < configs.size(); ++i) {
      auto engine = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      int64_t n = 0;
      bool deterministic = true;
      if (!engine.ok() || cudnnBackendGetAttribute(configs[i].d, CUDNN_ATTR_ENGINECFG_ENGINE,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine->d) != CUDNN_STATUS_SUCCESS)
        continue;
      if (!notesAllowed(*engine, p.dtype, precision, &deterministic)) {
        ++refused;
        continue;
      }
      order.emplace_back(!deterministic, i);
    }
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [nondeterministic, i] : order) {
      ++tried;
      auto candidate = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      if (!candidate.ok()) continue;
      if (!set(*candidate, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle).ok() ||
          !setDesc(*candidate, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]).ok() ||
          cudnnBackendFinalize(candidate->d) != CUDNN_STATUS_SUCCESS)
        continue;
      int64_t n = 0, workspace = 0;
      if (cudnnBackendGetAttribute(candidate->d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                   &workspace) != CUDNN_STATUS_SUCCESS || workspace > kMaxWorkspaceBytes)
        continue;
      auto engine = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      if (engine.ok() && cudnnBackendGetAttribute(configs[i].d, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                  1, &n, &engine->d) == CUDNN_STATUS_SUCCESS)
        cudnnBackendGetAttribute(engine->d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &plan->engineIndex);
      plan->workspace = std::max<int64_t>(workspace, 0);
      plan->plan = std::move(*candidate);
      for (Desc& op : ops) plan->keep.push_back(std::move(op));
      plan->keep.push_back(std::move(*graph));
      for (Desc& c : configs) plan->keep.push_back(std::move(c));
      return plan;
    }
  }
  return fail(fmt::format("no engine for {} at {} precision ({} configurations tried, {} refused for their numerics)",
                          graphKey(p, epilogue), matmulPrecisionName(precision), tried, refused));
}

struct PerDevice {
  std::mutex mutex;  // the handle is used by one thread at a time
  cudnnHandle_t handle = nullptr;
  std::map<std::string, std::shared_ptr<Plan>> plans;
  std::shared_ptr<LoadedModule> copyModule;
};

Result<PerDevice*> perDevice(Device& d) {
  static std::mutex mutex;
  static auto& devices = *new std::map<int, std::unique_ptr<PerDevice>>();  // kept past exit
  std::lock_guard lock(mutex);
  auto& slot = devices[d.ordinal()];
  if (!slot) {
    auto made = std::make_unique<PerDevice>();
    TSR_CUDA(cudaSetDevice(d.ordinal()));
    TSR_DNN(cudnnCreate(&made->handle));
    TSR_DNN(cudnnSetStream(made->handle, static_cast<cudaStream_t>(d.computeStream())));
    slot = std::move(made);
  }
  return slot.get();
}

}  // namespace

bool cudnnBuilt() { return true; }

std::string cudnnVersionString() {
  const size_t v = cudnnGetVersion();
  return fmt::format("cuDNN {}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

struct CudnnConv::Impl {
  Device* device = nullptr;
  PerDevice* per = nullptr;
  CudnnConvProblem problem;
  std::optional<CudnnEpilogue> epilogue;  // fused into the plan
  std::string epilogueDeclined;
  std::shared_ptr<Plan> plan;
  const void* copy = nullptr;  // the filter copy kernel, when the problem copies its filter
};

CudnnConv::CudnnConv() : m(std::make_unique<Impl>()) {}
CudnnConv::~CudnnConv() = default;
const CudnnConvProblem& CudnnConv::problem() const { return m->problem; }
bool CudnnConv::fused() const { return m->epilogue.has_value(); }
const std::string& CudnnConv::epilogueDeclined() const { return m->epilogueDeclined; }

std::string CudnnConv::engineSummary() const {
  return fmt::format("engine {}, workspace {} B{}{}", m->plan->engineIndex, m->plan->workspace,
                     m->problem.copyFilter ? ", filter copied" : "",
                     m->epilogue ? ", fused:" + m->epilogue->key() : "");
}

Result<std::unique_ptr<CudnnConv>> CudnnConv::create(Device& d, const CudnnConvProblem& problem,
                                                     MatmulPrecision precision, const CudnnEpilogue* epilogue) {
  TSR_ASSIGN(PerDevice* per, perDevice(d));
  std::unique_ptr<CudnnConv> conv(new CudnnConv());
  Impl& im = *conv->m;
  im.device = &d;
  im.per = per;
  std::lock_guard lock(per->mutex);
  auto planFor = [&](const CudnnConvProblem& p, const CudnnEpilogue* e) {
    auto& slot = per->plans[fmt::format("{} {}", matmulPrecisionName(precision), graphKey(p, e))];
    if (!slot) slot = buildPlan(per->handle, p, e, precision);
    return slot;
  };
  // The problem as it comes, then (the filter as it lies, or read flipped, may have no engine where a packed
  // copy has one) with its filter copied: the first with a plan, else the first's error.
  auto plan = [&](const CudnnEpilogue* e) {
    im.problem = problem;
    im.plan = planFor(problem, e);
    if (!im.plan->error.empty() && !problem.copyFilter) {
      CudnnConvProblem copied = withFilterCopy(problem);
      std::shared_ptr<Plan> second = planFor(copied, e);
      if (second->error.empty()) {
        im.problem = std::move(copied);
        im.plan = std::move(second);
      }
    }
    return im.plan->error.empty();
  };
  if (epilogue) {
    if (plan(epilogue))
      im.epilogue = *epilogue;
    else
      im.epilogueDeclined = im.plan->error;
  }
  if (!im.epilogue && !plan(nullptr)) return makeError("{}", im.plan->error);
  if (im.problem.copyFilter) {
    if (!per->copyModule) {
      NvrtcOptions o;
      o.sm = d.smVersion();
      TSR_ASSIGN(CompiledModule cm, compileCuda(kCopySource, "cudnn_filter_copy", o));
      TSR_ASSIGN(per->copyModule, LoadedModule::load(cm));
    }
    TSR_ASSIGN(im.copy, per->copyModule->kernel(im.problem.dtype == DType::BF16 ? "tsr_filter_copy_2" : "tsr_filter_copy_4"));
  }
  return conv;
}

Status CudnnConv::run(const void* lhs, const void* rhs, void* out, std::span<const void* const> operands) {
  Impl& im = *m;
  const CudnnConvProblem& p = im.problem;
  if (operands.size() != static_cast<size_t>(im.plan->operands))
    return makeError("cuDNN convolution: {} epilogue operands given, the plan reads {}", operands.size(),
                     im.plan->operands);
  void* values[3] = {const_cast<void*>(lhs), const_cast<void*>(rhs), out};
  void* x = values[p.xValue];
  void* w = values[p.wValue];
  void* y = values[p.yValue];
  std::vector<void*> all{x, w, y};
  for (const void* o : operands) all.push_back(const_cast<void*>(o));
  for (void* ptr : all)
    if (reinterpret_cast<uintptr_t>(ptr) % kAlignment != 0)
      return makeError("cuDNN convolution: a buffer at {} is not {}-byte aligned", ptr, kAlignment);
  const int64_t elem = p.dtype == DType::BF16 ? 2 : 4;
  DeviceBufferPtr packed, workspace;
  FilterView view;
  int64_t n = 1;
  auto copyFilter = [&](bool toPacked) -> Status {
    view.toPacked = toPacked ? 1 : 0;
    const void* from = toPacked ? w : packed->data();
    void* to = toPacked ? packed->data() : w;
    void* args[] = {&from, &to, &view, &n};
    const int64_t blocks = std::min<int64_t>((n + kCopyThreads - 1) / kCopyThreads, int64_t{im.device->numSMs()} * 32);
    return launchKernel(im.copy, blocks, kCopyThreads, args, 0, im.device->computeStream());
  };
  if (p.copyFilter) {
    const CudnnFilterCopy& c = p.filterCopy;
    view.rank = static_cast<int32_t>(c.dims.size());
    view.offset = c.offset;
    for (size_t d = 0; d < c.dims.size(); ++d) {
      view.dims[d] = c.dims[d];
      view.strides[d] = c.strides[d];
      n *= c.dims[d];
    }
    TSR_ASSIGN(packed, im.device->allocate(n * elem));
    if (p.op != CudnnConvOp::BackwardFilter) TSR_TRY(copyFilter(true));
  }
  if (im.plan->workspace > 0) {
    TSR_ASSIGN(workspace, im.device->allocate(im.plan->workspace));
  }
  std::vector<void*> pointers{x, p.copyFilter ? packed->data() : w, y};
  std::vector<int64_t> uids{kX, kW, kY};
  for (size_t i = 0; i < operands.size(); ++i) {
    pointers.push_back(const_cast<void*>(operands[i]));
    uids.push_back(kOperand + static_cast<int64_t>(i));
  }
  void* ws = workspace ? workspace->data() : nullptr;
  TSR_ASSIGN(Desc pack, make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  TSR_TRY(set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()),
              pointers.data()));
  TSR_TRY(set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data()));
  TSR_TRY(set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
  TSR_TRY(finalize(pack, "the variant pack"));
  {
    std::lock_guard lock(im.per->mutex);
    TSR_DNN(cudnnBackendExecute(im.per->handle, im.plan->plan.d, pack.d));
  }
  if (p.copyFilter && p.op == CudnnConvOp::BackwardFilter) TSR_TRY(copyFilter(false));
  // packed and workspace go back to the pool in stream order, after the work queued above.
  return {};
}

#else  // no cuDNN in this build

bool cudnnBuilt() { return false; }
std::string cudnnVersionString() { return "built without cuDNN"; }

struct CudnnConv::Impl {
  CudnnConvProblem problem;
  std::string epilogueDeclined;
};
CudnnConv::CudnnConv() : m(std::make_unique<Impl>()) {}
CudnnConv::~CudnnConv() = default;
const CudnnConvProblem& CudnnConv::problem() const { return m->problem; }
bool CudnnConv::fused() const { return false; }
const std::string& CudnnConv::epilogueDeclined() const { return m->epilogueDeclined; }
std::string CudnnConv::engineSummary() const { return ""; }
Result<std::unique_ptr<CudnnConv>> CudnnConv::create(Device&, const CudnnConvProblem&, MatmulPrecision,
                                                     const CudnnEpilogue*) {
  return makeError("cuDNN: this build has no cuDNN");
}
Status CudnnConv::run(const void*, const void*, void*, std::span<const void* const>) {
  return makeError("cuDNN: this build has no cuDNN");
}

#endif

}  // namespace tsr::cuda
