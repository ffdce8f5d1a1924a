#pragma once
// The runtime's view of a compiled program and of the backends that make them, as PJRT is for JAX:
//   - Executable: a program compiled for one device; it runs on host buffers, one per graph input;
//   - Backend: turns a graph (after the compiler's passes) into an Executable (fusion planning, memory
//     planning and code generation are the backend's own business);
//   - BackendRegistry: the backends of this process by name ("cpu", "cuda"). The program that links them
//     registers each one at start-up with an explicit call (registerCpuBackend(registry), ...; app/cli, the IDE
//     and every test do it through registerBackends in engine/backends/backends.h). Nothing in the engine below
//     that program includes a backend's headers: the compile sequence (engine/compile) and the SPMD runner
//     (engine/spmd) find their backend here, by name.
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/result.h"
#include "engine/ir/graph.h"
#include "engine/runtime/buffer.h"

namespace tsr::runtime {

class Executable {
 public:
  virtual ~Executable() = default;
  // Runs the program. inputs: one buffer per graph input. donated[i]: the caller holds no other reference to
  // inputs[i], so the program may write an output into it (only a backend whose donates() is true does).
  virtual Result<std::vector<BufferPtr>> run(std::span<const BufferPtr> inputs,
                                             const std::vector<bool>& donated = {}) = 0;
  // Whether run() may take donated inputs' buffers (the caller then deletes the donated arrays).
  virtual bool donates() const { return false; }
  // What a compile log says of it after the node count: ", 12 kernels, 3.4 MiB arena", ", on cuda".
  virtual std::string summary() const = 0;
  // Bytes of the one block the intermediates live in, where the backend plans one (0 otherwise).
  virtual int64_t arenaBytes() const { return 0; }
};

struct CompileOptions {
  std::string name = "main";
  // Per graph input: the caller may give up its buffer (JAX's donate_argnums).
  std::vector<bool> donatable;
  // Kernels may switch to native code once the executable is hot (the CPU backend); off for executables
  // compiled only to be inspected.
  bool native = false;
  // Which of the process's local devices (dist::Communicator::localDevices, by index) the program runs for. A
  // backend with a processor per device (the CUDA backend: a GPU each) compiles for that one; the CPU backend's
  // devices share its threads and ignore it.
  int localDevice = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Why this backend cannot run programs in this process ("no CUDA GPU: ..."), or "" when it can.
  virtual std::string unavailableReason() const { return ""; }
  virtual Result<std::unique_ptr<Executable>> compile(const ir::Graph& g, const ir::OpRegistry& reg,
                                                      const CompileOptions& options) = 0;
};

class BackendRegistry {
 public:
  // Adds a backend; a second one of the same name is refused (returns false), so registering twice is harmless.
  bool add(std::unique_ptr<Backend> backend);
  // Null when no backend of that name was registered.
  Backend* find(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  mutable std::mutex m_mutex;
  std::vector<std::unique_ptr<Backend>> m_backends;
};

// The process's registry: what registerBackends fills at start-up and what the compile sequence reads.
BackendRegistry& backends();

// Compiles g with the registered backend `name`; an error names the backend when none of that name is
// registered (a program that did not call registerBackends at start-up).
Result<std::unique_ptr<Executable>> compileOn(std::string_view name, const ir::Graph& g, const ir::OpRegistry& reg,
                                              const CompileOptions& options);

}  // namespace tsr::runtime
