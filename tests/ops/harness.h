#pragma once
// The op conformance harness (one place for every op, like ggml's test-backend-ops): each family file adds
// cases with a naive reference written here, independently of engine/ops; one runner (runConformance) runs
// every case through the op's CPU kernel and, as a one-node graph, on the reference interpreter and on every
// backend registered with the runtime, and compares with the reference.
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/core/shape.h"
#include "engine/ir/attrs.h"
#include "engine/ir/op_def.h"
#include "engine/transform/array.h"

namespace tsr::test {

// A test-side tensor: an aval and its row-major bytes. Elements are read and written as double.
struct HostTensor {
  Aval aval;
  std::vector<uint8_t> bytes;

  static HostTensor zeros(const Aval& aval);
  static HostTensor fromValues(const Aval& aval, const std::vector<double>& values);
  int64_t numel() const { return aval.numel(); }
  double get(int64_t i) const;
  void set(int64_t i, double v);  // rounds to the dtype as a cast would (bf16/f16 to nearest even)
  uint64_t getBits(int64_t i) const;  // raw element bits (integers, random bits)
  void setBits(int64_t i, uint64_t bits);
};

// Conversions between test tensors and concrete engine Arrays (bytes copied as they are).
Array toArray(const HostTensor& t);
HostTensor toHost(const Array& a);

// Random values suited to the dtype: floats in [lo, hi], integers in a small range, bools 0/1.
HostTensor randomTensor(const Aval& aval, std::mt19937& rng, double lo = -2.0, double hi = 2.0);

// Multi-index helpers for naive references.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape);
int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape);

using Reference = std::function<std::vector<HostTensor>(const std::vector<HostTensor>& inputs)>;

struct OpCase {
  std::string label;  // shown on failure: "add f32 [2,3]"
  ir::OpCode op{};
  ir::Attrs attrs;
  std::vector<HostTensor> inputs;
  Reference reference;
  double rtol = -1;  // < 0: the default for the result dtype
  double atol = -1;
  // Results defined only up to a choice (an eigenvector's sign, a full SVD's completion columns) are put in one
  // canonical form, the op's and the reference's alike, before they are compared. Empty: compared as they are.
  std::function<void(std::vector<HostTensor>&)> canonical = {};
  // The op's vjp refuses this case (as JAX: a full SVD's completion columns have no derivative); the gradient
  // check expects the refusal instead of a gradient.
  bool gradientRefused = false;
};

// Shapes every elementwise op is run over: a scalar, size-1 dims, odd sizes, rank 1 to 4.
const std::vector<Shape>& edgeShapes();
const std::vector<DType>& allDTypes();

// A failure: the op, the case (and layout), and what differed. printFailures writes them to stderr one per
// failing op first, so that one broken op cannot hide another; then more up to a limit; then per op its count
// and its failing cases. Returns the number of distinct failing ops.
struct Failure {
  std::string op, where, what;
};
int printFailures(const std::vector<Failure>& failures);

// Every family's cases, in a fixed order with a fixed seed.
std::vector<OpCase> allCases();

// Where a case's graph runs: kInterpreter (the reference interpreter, runtime::interpret) and each backend
// registered with the runtime (runtime::backends(): "cpu", and "cuda" in a build with CUDA), compiled by
// runtime::compileOn. A registered backend that cannot run here (no GPU) is left out, with its reason.
inline constexpr const char* kInterpreter = "interpreter";
struct ConformanceTargets {
  std::vector<std::string> names;        // kInterpreter first, then the backends in registration order
  std::vector<std::string> unavailable;  // "cuda: no CUDA GPU: ..."
};
ConformanceTargets conformanceTargets();

struct ConformanceOptions {
  std::vector<std::string> targets;  // empty: every one of conformanceTargets()
  bool kernel = true;                // also the op's CPU kernel, called directly (runtime::runCpuOp)
};

// What a run of cases gave: one message per mismatch or error, and the graphs run on each target.
struct ConformanceReport {
  std::vector<std::string> messages;
  std::map<std::string, int> graphRuns;
  std::vector<std::string> unavailable;  // the targets left out, with their reasons
};

// The conformance check of one case: the op's CPU kernel, and the op as a one-node graph with its operands fed
// directly, through a transpose (rank 2) and broadcast from one row (binary elementwise ops), on every target,
// each against the case's reference. Adds to the report. Core ops and ops that plugins add run through the
// same check.
void checkConformance(const OpCase& c, const ConformanceOptions& options, ConformanceReport& report);
// Every case so; the suite's one loop over cases, feeds and targets.
ConformanceReport runConformance(const std::vector<OpCase>& cases, const ConformanceOptions& options = {});
// One case on every target: its messages (none when it passes); the graphs run are added to *graphRuns.
std::vector<std::string> checkConformance(const OpCase& c, int* graphRuns = nullptr);

// A result against a reference: "" when equal (floats within atol + rtol |want|, NaN with NaN, infinities
// exactly; integers and bools bit for bit), else the first mismatch. compareWithReference takes the case's
// tolerance, or the dtype's default. Backends' tests use them as the conformance check does.
std::string compareTensors(const HostTensor& got, const HostTensor& want, double rtol, double atol);
std::string compareWithReference(const HostTensor& got, const HostTensor& want, const OpCase& c);

// Compiled executables run with subnormals flushed to zero (as XLA's CPU backend does); references are exact.
// This sets a reference's subnormal f32 and f64 elements to zero of their sign, as a backend gives them.
void flushSubnormals(HostTensor& t);

// A rank-2 tensor stored transposed: element (i, j) of `t` is element (j, i) of the result (what a graph that
// transposes its input must be fed to see `t`).
HostTensor transposed(const HostTensor& t);

// How a case's operands reach its op inside a one-node graph: as they are; operand 0 (rank 2) stored transposed
// and put back by a transpose node, so kernels read it strided; operand 1 of a binary elementwise op broadcast
// from its first row (broadcast_in_dim).
enum class Feed { Direct, Transposed, Broadcast };
struct FedGraph {
  ir::Graph graph;
  std::vector<HostTensor> inputs;    // what the graph's inputs are fed
  std::vector<HostTensor> operands;  // what the op sees (the reference's inputs)
  std::string tag;                   // " (graph)", " (transposed input)", " (broadcast input)"
};
// The case's op fed so; nullopt when the feed does not apply to the case; an error when the op rejects the
// operands.
Result<std::optional<FedGraph>> fedCaseGraph(const OpCase& c, Feed feed);

// A case's op as a one-node graph of its inputs; with `transposedOperand0` (rank-2 operand 0 only), operand 0
// enters transposed and goes through a transpose node first (feed it transposed(input)), so kernels read it
// strided. An error when the op rejects the operands.
Result<ir::Graph> caseGraph(const OpCase& c, bool transposedOperand0 = false);

// A host tensor from a runtime buffer of aval `a`, and back.
HostTensor fromBuffer(const runtime::BufferPtr& b, const Aval& a);
runtime::BufferPtr toBuffer(const HostTensor& t);

// The op of a case applied to Arrays (eagerly, or traced under jit, vjp and vmap).
std::vector<Array> applyOp(const OpCase& c, const std::vector<Array>& xs);

// Each family file appends its cases (tests/ops/cases_<family>.cpp). Ops are run for every dtype their
// infer rule accepts, so "every dtype the op accepts" is covered by construction.
void addElementwiseCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addLayoutCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addReductionCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addCumulativeCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addSortCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addContractionCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addIndexingCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addMiscCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addControlFlowCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addCollectiveCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addShardingCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addConvolutionCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addWindowCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addAttentionCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addBatchNormCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addCrossEntropyCases(std::vector<OpCase>& cases, std::mt19937& rng);
void addLinalgCases(std::vector<OpCase>& cases, std::mt19937& rng);

}  // namespace tsr::test
