#pragma once
// Native kernels: the C++ of fused loops (native_codegen.h) compiled by the host C++ compiler into a shared
// library, cached on disk by content hash and loaded with dlopen, as TorchInductor does on the CPU.
//
// TESSERA_CPU_CODEGEN chooses when:
//   async (default)  an executable's kernels start on the tile interpreter; on its second run (it is hot) its
//                    loop kernels are queued for one background compile and switch to native code as soon as
//                    it lands. Compiling never delays a step, and programs run once never pay for it.
//   sync             compiled when the executable is compiled (what tests and benchmarks use to see native
//                    code from the first run).
//   off              the interpreter only.
// TESSERA_CXX names the compiler (default: the one that built the engine, else c++ on the PATH). The cache is
// TESSERA_KERNEL_CACHE/cpu, else $XDG_CACHE_HOME/tessera/kernels/cpu or ~/.cache/tessera/kernels/cpu; with
// TESSERA_KERNEL_CACHE=off the libraries go to a temporary folder and are removed once loaded. The cache keeps
// the 512 most recently used libraries. If no compiler works, the kernels stay on the interpreter and
// nativeStats() says why (once, on stderr, too).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "engine/backends/cpu/native_codegen.h"
#include "engine/core/result.h"

namespace tsr::cpu {

enum class NativeMode { Off, Async, Sync };
// From TESSERA_CPU_CODEGEN unless setNativeMode was called.
NativeMode nativeMode();
void setNativeMode(NativeMode mode);
const char* nativeModeName(NativeMode mode);

// The loop kernels of one executable. Function pointers are null until their library is loaded; they never
// change after that, and libraries stay loaded for the life of the process.
class NativeKernelSet {
 public:
  explicit NativeKernelSet(std::vector<NativeSource> sources);
  // The kernel's function (a NativeLoopFn or NativeReduceFn, as its source was generated), or null.
  void* get(size_t i) const { return m_fns[i].load(std::memory_order_acquire); }
  void set(size_t i, void* f) { m_fns[i].store(f, std::memory_order_release); }
  const std::vector<NativeSource>& sources() const { return m_sources; }
  size_t size() const { return m_sources.size(); }

 private:
  std::vector<NativeSource> m_sources;
  std::unique_ptr<std::atomic<void*>[]> m_fns;
};

// Compiles what is not loaded yet and fills in the set, on the calling thread.
Status compileNative(NativeKernelSet& set);
// Queues the set for the background compiler.
void requestNative(std::shared_ptr<NativeKernelSet> set);

// "c++ -x c++ -std=c++17 -O2 ...": how native kernels are compiled (the compiler and its flags).
std::string nativeCompileCommand();

struct NativeStats {
  int64_t libraries = 0;       // compiled by the compiler in this process
  int64_t cachedLibraries = 0;  // loaded from the disk cache
  int64_t kernels = 0;         // distinct native kernels loaded
  double compileSeconds = 0;   // wall time spent in the compiler
  std::string error;           // the last failure, if any
};
NativeStats nativeStats();

}  // namespace tsr::cpu
