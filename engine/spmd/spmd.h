#pragma once
// The SPMD runtime: the devices of this process, programs compiled for a mesh and run on every device, and the
// Array functions that place data on a mesh.
//   - devices: N virtual CPU devices in one process (TESSERA_CPU_DEVICES=8 or setCpuDevices(8), like
//     jax_num_cpu_devices), each with its own buffers and thread; or, under mpirun, one device per process;
//   - SpmdExecutable: a global graph, the shardings of its inputs (and outputs, if asked), propagated and
//     partitioned into one per-device program, compiled by a registered backend (engine/runtime's registry:
//     "cpu", whose devices share one executable, or "cuda", one executable per local device, each on its GPU)
//     and run on every local device, collectives included;
//   - devicePut, withShardingConstraint, visualizeArraySharding: jax.device_put,
//     jax.lax.with_sharding_constraint and jax.debug.visualize_array_sharding.
#include <memory>
#include <string>
#include <vector>

#include "engine/dist/communicator.h"
#include "engine/runtime/executable.h"
#include "engine/sharding/partitioner.h"
#include "engine/transform/array.h"

namespace tsr::spmd {

// The communicator of this process's devices: MPI when launched under mpirun, else in-process devices
// (TESSERA_CPU_DEVICES, default 1). Made on first use.
Result<std::shared_ptr<dist::Communicator>> devices();
// Sets the number of virtual CPU devices (before the first use of devices(); later only the same number).
Status setCpuDevices(int n);
int numDevices();

struct SpmdOptions {
  std::string name = "spmd";
  bool interpret = false;  // run the per-device program with the reference interpreter
  std::string device = "cpu";  // the backend that compiles the per-device program
  // Per input of the global graph: its shards' buffers may become an output's (donation, as Jit's
  // setDonatedArgs): a training step then updates the parameters where they are.
  std::vector<bool> donatable;
};

// The planning half of SpmdExecutable::compile, without devices: shardings propagated from the annotations,
// the graph partitioned (with its collectives), and the per-device program after the compiler's pipeline.
// `tessera shard plan` and the IDE's sharding panel show exactly what a run would execute.
struct SpmdPlan {
  sharding::ShardingPlan plan;
  sharding::PartitionResult partitioned;  // the per-device program before optimisation, and the collectives
  ir::Graph program;                      // ... and after the compiler's pipeline
};
Result<SpmdPlan> planSpmd(const ir::Graph& global, const sharding::Mesh& mesh,
                          const sharding::ShardingAnnotations& annotations, const std::string& name);

class SpmdExecutable {
 public:
  static Result<std::unique_ptr<SpmdExecutable>> compile(const ir::Graph& global, const sharding::Mesh& mesh,
                                                         const sharding::ShardingAnnotations& annotations,
                                                         const SpmdOptions& options = {});
  // shard_map's programs: `local` is what every device runs, written per device with its own collectives; its
  // inputs and outputs are the blocks of arrays split as inShardings and outShardings, outAvals the outputs'
  // global avals. Nothing is propagated or partitioned: the compiler's pipeline runs on the program as it is.
  static Result<std::unique_ptr<SpmdExecutable>> compileManual(const ir::Graph& local, const sharding::Mesh& mesh,
                                                               std::vector<sharding::TensorSharding> inShardings,
                                                               std::vector<sharding::TensorSharding> outShardings,
                                                               std::vector<Aval> outAvals,
                                                               const SpmdOptions& options = {});
  ~SpmdExecutable();

  // inputs[i][device]: input i's block on each device of the mesh (by device id; null for devices of other
  // processes). Returns outputs the same way.
  // donated[i]: the caller gives up input i's blocks (no other reference to them remains).
  Result<std::vector<std::vector<runtime::BufferPtr>>> run(const std::vector<std::vector<runtime::BufferPtr>>& inputs,
                                                           const std::vector<bool>& donated = {});

  // This device's program, run on the calling thread: a device thread of a run on the same mesh (shard_map's
  // program inside a partitioned program, ir::ManualSharding), whose other devices run theirs at the same point
  // of their programs, so that the collectives meet. inputs: this device's blocks; returns its output blocks.
  Result<std::vector<runtime::BufferPtr>> runOnThisDevice(const std::vector<runtime::BufferPtr>& inputs);

  const sharding::Mesh& mesh() const;
  const ir::Graph& global() const;  // the graph the plan is for (compileManual's: the per-device program)
  const sharding::ShardingPlan& plan() const;
  const sharding::PartitionResult& partitioned() const;  // the per-device program before optimisation
  const ir::Graph& program() const;                       // ... and after the compiler's pipeline
  const runtime::Executable* executable() const;          // the first local device's; null when interpreting

  // Runs on arrays: a sharded input gives its blocks (it must have the sharding the program was compiled
  // for), a one-device input is read by every device as is (replicated). The outputs are sharded arrays with
  // the program's output shardings. donated[i]: the caller gives input i up; a sharded input whose blocks have no
  // other owner is then deleted (as in JAX), its buffers reused for outputs where the program planned that.
  Result<std::vector<Array>> run(const std::vector<Array>& inputs, const std::vector<bool>& donated = {});

  struct Impl;

 private:
  SpmdExecutable();
  std::unique_ptr<Impl> m;
};

// jax.device_put(x, sharding): x split over the mesh. A sharded x is resharded (with the collectives that
// takes); under a trace it is withShardingConstraint.
Result<Array> devicePut(const Array& x, const sharding::NamedSharding& sharding);
// jax.lax.with_sharding_constraint: inside a jitted function, the value must have this sharding there; eagerly,
// devicePut.
Array withShardingConstraint(const Array& x, const sharding::NamedSharding& sharding);
// The device grid of a sharded array (a one-device array is drawn as a single block on CPU 0).
Result<std::string> visualizeArraySharding(const Array& x, int width = 48);

// The whole array in this process, for the host (checkpoints, printing). A sharded array whose blocks live in
// other processes (MPI) is all-gathered first: every process must call this for the same arrays in the same
// order, as with any collective.
Result<Array> fetchWhole(const Array& x);

// Whether this process is the first of the job: always outside mpirun; rank 0 under it. It alone writes files
// and prints progress.
Result<bool> isPrimaryProcess();

// Under mpirun: returns once every process of the job has called it. Otherwise at once.
Status processBarrier();

// The attrs of a sharding_constraint to `s` (the inverse of sharding::constraintMesh and constraintSharding).
ir::ShardingConstraintAttrs constraintAttrs(const sharding::NamedSharding& s);

// The sharding an array has on `mesh`: its own, or replicated for a one-device array.
Result<sharding::TensorSharding> shardingOn(const Array& x, const sharding::Mesh& mesh);

// The sharding of a one-device array placed on `mesh` without splitting it.
sharding::NamedSharding replicatedOn(const sharding::Mesh& mesh);

// Lets eager ops on sharded arrays run (bind calls it); devicePut and sharded jit outputs install it.
void installEagerRunner();

}  // namespace tsr::spmd
