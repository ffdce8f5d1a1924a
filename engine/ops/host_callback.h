#pragma once
// host_callback in SPMD programs (the op's rules and kernel: host_callback.cpp). A partitioned program is the
// same on every device of its mesh, and so are the operands of its host calls (gathered whole). An effect runs
// on the mesh's first device alone, as JAX runs io_callback and jax.debug.print; when it has results, that
// device sends them (and whether the call failed) to the others through the communicator, so each device gets
// the same values and a failure is an error on every device. Pure calls run on every device.
//
// The kernel cannot see the mesh: the SPMD runtime names its devices by holding a CallbackMeshScope on each
// device's thread while the device runs a partitioned program. Without one (a one-device run, a shard_map body,
// whose devices hold different blocks) every device makes its own calls, effects included.
#include <span>

namespace tsr::ops {

class CallbackMeshScope {
 public:
  // devices: the mesh's positions in mesh order (the first runs the effects); they must outlive the scope.
  explicit CallbackMeshScope(std::span<const int> devices);
  ~CallbackMeshScope();
  CallbackMeshScope(const CallbackMeshScope&) = delete;
  CallbackMeshScope& operator=(const CallbackMeshScope&) = delete;

 private:
  std::span<const int> m_saved;
};

// The devices of the innermost scope on this thread; empty outside one.
std::span<const int> callbackMesh();

}  // namespace tsr::ops
