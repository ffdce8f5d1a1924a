#include "engine/backends/cuda/step_graphs.h"

#include <algorithm>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "engine/backends/cuda/cuda_status.h"

namespace tsr::cuda {

struct StepGraphs::Entry {
  std::vector<void*> key;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::unique_ptr<PinnedBuffer> table;  // read by the graph's copy of the loop groups' table at every replay
  uint64_t lastUse = 0;
  ~Entry() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

StepGraphs::StepGraphs(Device& device, std::string name, std::string off)
    : m_device(device), m_name(std::move(name)), m_off(std::move(off)) {}

StepGraphs::~StepGraphs() {
  // A graph may still be running: its pinned table must outlive it (the executable is going, errors are moot).
  if (m_entries.empty()) return;
  cudaStreamSynchronize(static_cast<cudaStream_t>(m_device.computeStream()));
  m_entries.clear();
  // The graph memory no other graph uses goes back to the driver (a later launch of another remaps its own).
  cudaDeviceGraphMemTrim(m_device.ordinal());
}

StepGraphs::Entry* StepGraphs::find(const std::vector<void*>& key) {
  for (auto& e : m_entries)
    if (e->key == key) return e.get();
  return nullptr;
}

Result<StepGraphs::Entry*> StepGraphs::capture(const std::vector<void*>& key, int64_t tableBytes,
                                               const Enqueue& enqueue) {
  auto stream = static_cast<cudaStream_t>(m_device.computeStream());
  auto e = std::make_unique<Entry>();
  e->key = key;
  // Before the capture: pinning memory synchronises, which a capturing thread may not.
  if (tableBytes > 0) {
    TSR_ASSIGN(e->table, PinnedBuffer::allocate(tableBytes));
  }
  TSR_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  Status queued = enqueue(e->table ? e->table->data() : nullptr);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!queued.ok() || ended != cudaSuccess || !graph) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // a failed capture leaves its error as the thread's last one, not the context's
    if (!queued.ok()) return queued.error();
    return checkCuda(ended, "cudaStreamEndCapture").error();
  }
  e->graph = graph;
  if (const cudaError_t made = cudaGraphInstantiate(&e->exec, graph, 0); made != cudaSuccess) {
    cudaGetLastError();
    return checkCuda(made, "cudaGraphInstantiate").error();
  }
  // The eager runs' arena and scratch wait in the pool for reuse, while the graph has memory of its own: the
  // pool gives them back before the graph's first launch maps its memory (GPT-2 124M's arena is gigabytes).
  if (m_captures == 0) TSR_TRY(m_device.trimPool());
  if (m_entries.size() >= static_cast<size_t>(kMaxGraphs)) {
    // The least recently replayed goes; its pinned table only once its last replay is done.
    auto oldest = std::min_element(m_entries.begin(), m_entries.end(),
                                   [](const auto& a, const auto& b) { return a->lastUse < b->lastUse; });
    TSR_CUDA(cudaStreamSynchronize(stream));
    m_entries.erase(oldest);
  }
  e->lastUse = ++m_clock;
  m_entries.push_back(std::move(e));
  return m_entries.back().get();
}

void StepGraphs::giveUp(std::string why, bool tell) {
  if (tell) fmt::print(stderr, "tessera: {}: runs kernel by kernel, not as a CUDA graph: {}\n", m_name, why);
  m_off = std::move(why);
  if (!m_entries.empty()) cudaStreamSynchronize(static_cast<cudaStream_t>(m_device.computeStream()));
  m_entries.clear();
}

Status StepGraphs::run(const std::vector<void*>& key, int64_t tableBytes, const char* eagerBecause,
                       const Enqueue& enqueue) {
  ++m_runs;
  if (!m_off.empty()) return enqueue(nullptr);
  if (eagerBecause || m_runs == 1) {
    m_lastEager = eagerBecause ? eagerBecause : "the first run (modules loaded, staging kernels compiled, pools grown)";
    return enqueue(nullptr);
  }
  auto stream = static_cast<cudaStream_t>(m_device.computeStream());
  if (Entry* e = find(key)) {
    m_misses = 0;
    ++m_replays;
    e->lastUse = ++m_clock;
    TSR_CUDA(cudaGraphLaunch(e->exec, stream));
    return {};
  }
  if (m_misses >= kMaxMisses) {
    giveUp(fmt::format("its buffers' addresses were new at each of {} runs in a row (a graph replays only at the "
                       "addresses it was captured with)",
                       kMaxMisses),
           false);
    return enqueue(nullptr);
  }
  ++m_misses;
  Result<Entry*> captured = capture(key, tableBytes, enqueue);
  if (captured.ok()) {
    const cudaError_t launched = cudaGraphLaunch((*captured)->exec, stream);
    if (launched == cudaSuccess) {
      ++m_captures;
      return {};
    }
    cudaGetLastError();
    captured = checkCuda(launched, "cudaGraphLaunch of a new graph").error();
  }
  // Nothing of this run has run yet: it runs eagerly, now and from now on.
  giveUp("capturing it failed: " + captured.error().message, true);
  return enqueue(nullptr);
}

std::string StepGraphs::describe() const {
  if (!m_off.empty()) return "runs kernel by kernel, not as a CUDA graph: " + m_off;
  std::string s = m_captures == 0 ? std::string("runs as a CUDA graph from its second run")
                                  : fmt::format("runs as a CUDA graph: {} captured ({} kept), {} replays", m_captures,
                                                m_entries.size(), m_replays);
  if (!m_lastEager.empty()) s += "; the latest run kernel by kernel: " + m_lastEager;
  return s;
}

}  // namespace tsr::cuda
