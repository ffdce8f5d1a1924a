#pragma once
// Host callbacks: functions of the host program (a Python function, a C++ lambda) that a traced program calls
// with its values, as jax.pure_callback, io_callback and jax.debug.callback/print do. The host_callback op's
// attrs hold one (HostCallbackAttrs); it lives as long as a graph or a program holds it, and has an id unique in
// the process, by which the text form names it (so a printed graph parses back only where its callbacks live).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/ir/attrs.h"
#include "engine/ir/op_def.h"

namespace tsr::ir {

// How vmap batches a call (jax.pure_callback's vmap_method): once per example with its slices, or once with the
// whole batch, the unbatched operands given a leading dim of 1 (expand_dims) or broadcast to the batch; or not
// at all (JAX's default for pure_callback: the function's author says how).
enum class VmapMethod : uint8_t { Sequential, ExpandDims, BroadcastAll, Refused };

// A call whose operands and results are split over a mesh: shard_map's program inside a program that the SPMD
// partitioner splits over the same mesh. The partitioner gives each device its blocks (the operands resharded as
// `operands` say) and calls perDevice, which takes and gives blocks, in place of the call; its results are split
// as `results` say. Every other host_callback reads whole arrays on every device.
struct ManualSharding {
  std::vector<ShardingConstraintAttrs> operands, results;  // each: the mesh and the spec
  HostCallbackPtr perDevice;
};

struct HostCallback {
  // Reads the operands, writes every element of the results; throws std::exception with a message on failure
  // (the program's run fails with it).
  using Fn = std::function<void(std::span<const TensorView> operands, std::span<const MutableTensorView> results)>;
  std::string name;            // for messages: "debug_print", "pure_callback(f)"
  std::vector<Aval> operands;  // what it takes
  std::vector<Aval> results;   // what it gives
  // An effect (a print, a write): kept when its results are unused, never merged with another call, run in
  // program order with the program's other effects. A pure call may be removed, merged or moved like any op.
  bool effectful = false;
  VmapMethod vmap = VmapMethod::Sequential;
  Fn fn;
  std::shared_ptr<const ManualSharding> manual;  // null: whole arrays
  // The error when a cotangent reaches the call; empty: "a host callback has no derivative" with what to do.
  std::string noDerivative;
  int64_t id = 0;  // set by makeHostCallback
};

// Gives the callback its id and returns the handle graphs hold.
HostCallbackPtr makeHostCallback(HostCallback callback);
// The callback the attrs name: the one they hold, else the live one with their id (a parsed graph); null when
// none is alive.
HostCallbackPtr hostCallbackOf(const HostCallbackAttrs& attrs);

}  // namespace tsr::ir
