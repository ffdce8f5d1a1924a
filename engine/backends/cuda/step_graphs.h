#pragma once
// A CUDA executable's runs as CUDA graphs (stream capture, then one cudaGraphLaunch a run), as PyTorch's
// CUDAGraph (torch.compile mode="reduce-overhead") and XLA's command buffers do.
//
// What changes between runs is where the buffers are: the inputs the caller passes, the fresh outputs, and the
// step's own memory (its arena, bf16 operand copies, cuBLASLt's and cuDNN's scratch, the loop groups' table).
// The step's own memory is allocated and freed inside the captured region, so it becomes graph memory
// (cudaMallocAsync under capture): addresses fixed for the graph, physical memory shared with the other graphs
// launched into the same stream. The inputs' and outputs' addresses are baked into the captured kernels, so a
// graph is kept per set of addresses (the key: every input, constant and output pointer) and replayed while the
// key repeats. A training loop alternates: its parameters come back as outputs and go in as the next inputs, so
// the executable hands its output buffers out again once the caller has dropped them (executable.cpp), and two
// graphs replay in turn.
//
// A key not seen yet is captured anew, not patched into an existing graph with cudaGraphExecUpdate: the graph
// memory of a capture belongs to that capture's graph, and cuBLASLt's and cuDNN's kernels keep their pointers in
// parameters only they know, so an update would have to come from a fresh capture anyway (as XLA re-records a
// command buffer whose allocations moved). A capture costs about one eager run of host time; when addresses keep
// changing (kMaxMisses captures in a row without a replay) the executable stops capturing and runs eagerly.
//
// Runs eagerly, with the reason kept for describe():
//   - the first run (modules loaded, staging kernels compiled on first use, pools grown: work a capture must
//     not do);
//   - a profiled run (CUDA events around every kernel);
//   - every run of a program with a kernel on host copies (a device-to-host round trip and a synchronisation
//     inside the step), or with graphs switched off (TESSERA_CUDA_GRAPHS=off, CompileOptions::graphs);
//   - every run after a failed capture or instantiation (said once on stderr, never an error of the run).
// The capture is thread-local (cudaStreamCaptureModeThreadLocal): this thread may not synchronise while it
// captures, others may. Work another thread queued on the compute stream meanwhile would be captured too: an
// executable's runs come from one thread (the trainer's), and nothing else uses the compute stream then.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backends/cuda/device.h"

namespace tsr::cuda {

class StepGraphs {
 public:
  // off: why this program never runs as a graph ("" where it may).
  StepGraphs(Device& device, std::string name, std::string off);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Whether runs may still become graphs (not switched off, no failed capture, addresses not always new).
  bool active() const { return m_off.empty(); }

  // The work of one run, queued on the compute stream. pinnedTable: null when run eagerly; while captured, host
  // memory of tableBytes that stays with the graph (copied to the device by the graph at every replay).
  using Enqueue = std::function<Status(void* pinnedTable)>;
  // Runs the program for these addresses: eagerly (eagerBecause: this run must, e.g. it is profiled), or by
  // replaying the graph captured for `key`, or by capturing one first.
  Status run(const std::vector<void*>& key, int64_t tableBytes, const char* eagerBecause, const Enqueue& enqueue);

  // "runs as a CUDA graph: 2 captured, 48 replays" or "runs kernel by kernel: <why>".
  std::string describe() const;
  int captures() const { return m_captures; }
  int replays() const { return m_replays; }

  static constexpr int kMaxGraphs = 4;
  static constexpr int kMaxMisses = 4;

 private:
  struct Entry;
  Entry* find(const std::vector<void*>& key);
  Result<Entry*> capture(const std::vector<void*>& key, int64_t tableBytes, const Enqueue& enqueue);
  void giveUp(std::string why, bool tell);

  Device& m_device;
  std::string m_name;
  std::string m_off;
  std::string m_lastEager;  // why the latest eager run was eager while graphs were on
  std::vector<std::unique_ptr<Entry>> m_entries;
  uint64_t m_clock = 0;
  int m_runs = 0, m_captures = 0, m_replays = 0, m_misses = 0;
};

}  // namespace tsr::cuda
