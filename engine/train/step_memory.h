#pragma once
// Memory over a training step: the bytes live at each kernel of the compiled step, by kind, the peak, and the
// buffers live there with the graph node that made each and its source line. Static, from the backend's memory
// plan (the CPU backend's; the CUDA backend runs the same plan), for the program one device runs: under a mesh,
// the per-device program of the project's sharding plan, with local shapes.
//
// A buffer's kind comes from the step's dataflow, not from names:
//   - parameters, optimizer state: the step's arguments by their paths, and its outputs params.* and opt.*
//     (which the plan writes into the donated arguments, so they add nothing);
//   - inputs: the batch, the step counter and constants;
//   - activations: values of the forward pass (the nodes the loss depends on) that a later node outside the
//     forward pass reads: what the backward pass keeps;
//   - gradients: values of the backward pass (neither forward nor reading the optimizer state);
//   - temporaries: the forward pass's other values, the optimizer's arithmetic (values that read its state),
//     and the loss.
#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backends/cpu/executable.h"
#include "engine/core/result.h"
#include "engine/passes/fusion.h"
#include "engine/project/project.h"
#include "engine/store/run_store.h"
#include "engine/train/sharding_plan.h"

namespace tsr::train {

enum class MemoryKind { Parameters, OptimizerState, Gradients, Activations, Temporaries, Inputs };
inline constexpr int kNumMemoryKinds = 6;
const char* memoryKindName(MemoryKind kind);  // "parameters", "optimizer state", ...

// Where a buffer's bytes are: an argument the caller holds, a constant the executable holds, an output of its
// own (one not written into a donated argument), or a value in the arena.
enum class MemoryStorage { Argument, Constant, Output, Arena };

struct MemoryBuffer {
  ir::ValueId value = ir::kNone;  // in the compiled program
  int64_t bytes = 0;
  MemoryKind kind = MemoryKind::Temporaries;
  MemoryStorage storage = MemoryStorage::Arena;
  int def = -1, lastUse = -1;     // kernels [def, lastUse] it is live in; def -1: before the step (an argument)
  ir::NodeId node = ir::kNone;    // the node that made it (kNone: an argument or a constant)
  std::string op;                 // that node's op; "argument", "constant"
  std::string what;               // an argument's or output's path ("params.layers.0.weight", "loss"), else ""
  std::string where;              // the node's provenance: "layers.0 @ model.cpp:42"; "" when unknown
};

struct StepMemory {
  std::string device;  // "one device", "each of 8 devices (mesh data=8)"
  std::vector<std::string> kernels;                        // names, in run order
  std::vector<std::array<int64_t, kNumMemoryKinds>> live;  // per kernel: bytes live while it runs, by kind
  int peakKernel = 0;
  int64_t peakBytes = 0;
  std::vector<MemoryBuffer> buffers;  // every buffer the step holds, largest first
  std::vector<int> atPeak;            // indices into buffers live at the peak, largest first
  // The plan's own figures: the one arena block for intermediates (at least their peak live bytes; the rest
  // is what their offsets leave unused), and what the buffers' sizes sum to without reuse.
  int64_t arenaBytes = 0, arenaPeakLiveBytes = 0, intermediateBytes = 0;
  std::shared_ptr<const ir::Graph> program;  // the compiled program (node ids above are its)

  int64_t liveAt(int kernel) const;
};

// The analysis of a compiled program: inputKinds and outputKinds per graph input and output, outputNames per
// output ("" for none); loss: the output the forward pass ends in (-1: none, every node counts as forward).
StepMemory analyzeStepMemory(const cpu::Executable& exe, std::span<const MemoryKind> inputKinds,
                             std::span<const std::string> inputNames, std::span<const MemoryKind> outputKinds,
                             std::span<const std::string> outputNames, int lossOutput);

// A training step's program (its inputs and outputs named as the step names them: "params.x", "opt.0.mu.x",
// "inputs", "loss"), compiled by the CPU backend as a run compiles it: the parameters and the optimizer state
// donated. `fusion`: the program's fusion plan, planned here when null.
Result<StepMemory> stepMemory(const ir::Graph& program, const passes::FusionPlan* fusion,
                              std::span<const std::string> inputPaths, std::span<const std::string> outputPaths);

// The project's training step, on its mesh (options as for the sharding plan; `compile` is ignored).
Result<StepMemory> projectStepMemory(const project::Project& project, const ShardPlanOptions& options = {});

// The measured side: live buffer bytes during a profile's steps (runtime::Buffer's count, sampled at each
// allocation while the profiler records). For the step whose bytes peak highest: what was held when it began
// (the parameters, the optimizer state, the batch, and whatever else the process holds) and the most it
// allocated on top (the step's arena, allocated whole, and its fresh outputs).
// The figures are rank 0's (the process of a run without mpirun); `ranks` has every rank's peak when the
// profile holds several.
struct MeasuredMemory {
  int64_t profile = 0;
  std::string step;             // the mark of the step that peaked, "step 3"
  int64_t peakBytes = 0;
  int64_t atStartBytes = 0;
  int64_t riseBytes = 0;        // peakBytes - atStartBytes
  int64_t samples = 0;
  struct RankPeak {
    int rank = 0;
    std::string step;
    int64_t peakBytes = 0;
  };
  std::vector<RankPeak> ranks;  // by rank; empty for a profile of one process
};
// From the store's profile; an error when the profile recorded no memory (a store from before it did).
Result<MeasuredMemory> measuredStepMemory(const store::RunStore& db, int64_t profile);
// The same for the latest profile in the store at dbPath (opened read-only).
Result<MeasuredMemory> latestMeasuredMemory(const std::string& dbPath);
// What the static plan holds while the step runs, as the live-buffer count measures it: the arguments, the
// constants, the outputs that do not go into donated arguments, and the arena as one block.
int64_t staticFootprint(const StepMemory& m);
// One sentence setting the measured figures beside the static ones.
std::string explainMeasured(const StepMemory& staticMemory, const MeasuredMemory& measured);

// As `tessera memory --json` prints it.
std::string stepMemoryJson(const StepMemory& m);

}  // namespace tsr::train
