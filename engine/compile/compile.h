#pragma once
// The one compile sequence. Every program the engine runs is compiled the same way:
//   1. trace: a function to a ClosedGraph (makeGraph, engine/transform; Jit::lower does it per signature);
//   2. passes: the compiler's cleanup pipeline (simplify, constant folding, CSE, DCE): optimize();
//   3. sharding/SPMD: when an argument or a captured constant is split over a mesh, or the graph holds a
//      sharding constraint, shardings propagate and the graph is partitioned into one per-device program
//      (spmd::SpmdExecutable, which runs steps 2 and 4 on that program): compileSpmd();
//   4. backend compile: the graph goes to a backend found by name in the runtime's registry ("cpu", "cuda"),
//      which plans fusion and memory and generates code: compileForDevice();
//   5. the executable: a runtime::Executable, a spmd::SpmdExecutable, or neither (the reference interpreter).
// jit (jit.h) runs steps 1 to 5 per call signature and caches the result; Trainer, bench, profile and the
// sharding plan reach it through jit. The backends are not included here: the program registers them at
// start-up (engine/backends/backends.h).
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/executable.h"
#include "engine/spmd/spmd.h"
#include "engine/transform/trace.h"

namespace tsr::compile {

struct Options {
  std::string name = "main";  // the program's name, first word of every error
  std::string device = "cpu";  // the registered backend that compiles the program (an SPMD program's per device)
  bool interpret = false;      // run with the reference interpreter (no backend); SPMD programs per device too
  std::vector<bool> donatable;  // per graph input: its buffer may become an output's (jit's donated args)
  bool native = true;          // CPU kernels may switch to native code once hot
};

// Step 2: the compiler's cleanup passes, in place. The error is the failing pass's.
Status optimize(ir::Graph& g);

// Whether the program is SPMD: an argument or captured constant is sharded, or the graph has a sharding
// constraint.
bool isSpmd(const ClosedGraph& cg, const std::vector<Array>& args);

// Step 3 (and 2 and 4 for the per-device program): the mesh is the sharded arguments' (all on one mesh; the
// error names the two that differ, by their paths), else the first sharding constraint's.
Result<std::shared_ptr<spmd::SpmdExecutable>> compileSpmd(const ClosedGraph& cg, const std::vector<Array>& args,
                                                          const std::vector<std::string>& paths,
                                                          const Options& options);

// Step 4: a one-device graph compiled by the backend named options.device.
Result<std::unique_ptr<runtime::Executable>> compileForDevice(const ir::Graph& g, const Options& options);

// Steps 3 to 5 for an optimised graph and the arguments it will run on. Exactly one of the two is set, or
// neither when the program is interpreted on one device.
struct Compiled {
  std::shared_ptr<runtime::Executable> exe;
  std::shared_ptr<spmd::SpmdExecutable> spmd;
};
Result<Compiled> compileProgram(const ClosedGraph& cg, const std::vector<Array>& args,
                                const std::vector<std::string>& paths, const Options& options);

}  // namespace tsr::compile
