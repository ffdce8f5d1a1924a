#include "app/cli/memory_command.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string_view>

#include <fmt/format.h>

#include "app/cli/project_args.h"
#include "engine/core/bytes.h"
#include "engine/train/step_memory.h"

namespace tsr::cli {

namespace {

struct MemoryArgs {
  std::string project;
  std::vector<std::string> sets;
  MemoryPrintOptions print;
};

// Live bytes over the kernels as one line of block characters (each column the most of its kernels), and a
// caret under the peak's column.
std::string sparkline(const train::StepMemory& m, int width) {
  static const char* kBlocks[] = {" ", "\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
  const int n = static_cast<int>(m.live.size());
  const int columns = std::clamp(width, 1, std::max(n, 1));
  std::string line, marks;
  for (int c = 0; c < columns; ++c) {
    const int from = c * n / columns, to = std::max((c + 1) * n / columns, from + 1);
    int64_t most = 0;
    for (int k = from; k < to && k < n; ++k) most = std::max(most, m.liveAt(k));
    const int level = m.peakBytes > 0 ? static_cast<int>((most * 8 + m.peakBytes - 1) / m.peakBytes) : 0;
    line += kBlocks[std::clamp(level, 0, 8)];
    marks += m.peakKernel >= from && m.peakKernel < to ? '^' : ' ';
  }
  while (!marks.empty() && marks.back() == ' ') marks.pop_back();
  return fmt::format("  {}\n  {} the peak\n", line, marks);
}

}  // namespace

int printStepMemory(const std::string& command, const std::string& project, const std::vector<std::string>& sets,
                    const MemoryPrintOptions& o) {
  auto p = loadProject(project, sets);
  if (!p.ok()) {
    std::cerr << "tessera " << command << ": " << p.error().message << "\n";
    return 1;
  }
  if (auto st = checkBatchOnMesh(*p); !st.ok()) {
    std::cerr << "tessera " << command << ": " << st.error().message << "\n";
    return 1;
  }
  auto m = train::projectStepMemory(*p);
  if (!m.ok()) {
    std::cerr << "tessera " << command << ": " << m.error().message << "\n";
    return 1;
  }
  if (o.json) {
    std::cout << train::stepMemoryJson(*m) << "\n";
    return 0;
  }
  const int numKernels = static_cast<int>(m->kernels.size());
  std::cout << fmt::format("{}: the training step's memory on {}, from the memory plan\n", p->name, m->device);
  std::cout << fmt::format("peak {} while kernel {} of {} runs ({})\n", formatBytes(m->peakBytes), m->peakKernel + 1,
                           numKernels, numKernels ? m->kernels[static_cast<size_t>(m->peakKernel)] : "");
  const auto& peak = m->live[static_cast<size_t>(m->peakKernel)];
  for (int k = 0; k < train::kNumMemoryKinds; ++k)
    std::cout << fmt::format("  {:<17}{:>12}\n", train::memoryKindName(static_cast<train::MemoryKind>(k)),
                             formatBytes(peak[static_cast<size_t>(k)]));
  std::cout << fmt::format(
      "intermediates: one arena of {}; their live bytes peak at {} (the other {} is space their offsets leave "
      "between them); {} without reuse\n\n",
      formatBytes(m->arenaBytes), formatBytes(m->arenaPeakLiveBytes),
      formatBytes(std::max<int64_t>(m->arenaBytes - m->arenaPeakLiveBytes, 0)), formatBytes(m->intermediateBytes));
  // The measured side, from the project's latest profile where there is one.
  const std::string db = (std::filesystem::path(p->dir) / "runs.db").string();
  std::error_code ec;
  if (std::filesystem::exists(db, ec)) {
    auto measured = train::latestMeasuredMemory(db);
    if (measured.ok()) std::cout << train::explainMeasured(*m, *measured) << "\n\n";
    else std::cout << "measured: " << measured.error().message << "\n\n";
  } else {
    std::cout << "measured: no profile yet (tessera profile PROJECT records the step's allocations)\n\n";
  }
  std::cout << fmt::format("live bytes over the step's {} kernels:\n", numKernels) << sparkline(*m, o.width) << "\n";
  const size_t shown = std::min(m->atPeak.size(), static_cast<size_t>(std::max(o.top, 0)));
  std::cout << fmt::format("buffers live at the peak, largest first ({} of {}):\n", shown, m->atPeak.size());
  // The op column as wide as its longest name, so that a long one (softmax_cross_entropy_grad) keeps its gap.
  size_t opWidth = std::string_view("made by").size();
  for (size_t i = 0; i < shown; ++i) opWidth = std::max(opWidth, m->buffers[static_cast<size_t>(m->atPeak[i])].op.size());
  std::cout << fmt::format("  {:>10}  {:<16} {:<{}} {:>6}  {}\n", "bytes", "kind", "made by", opWidth, "node",
                           "what / where");
  for (size_t i = 0; i < shown; ++i) {
    const train::MemoryBuffer& b = m->buffers[static_cast<size_t>(m->atPeak[i])];
    std::string place = b.what.empty() ? b.where : b.where.empty() ? b.what : b.what + " at " + b.where;
    std::cout << fmt::format("  {:>10}  {:<16} {:<{}} {:>6}  {}\n", formatBytes(b.bytes), train::memoryKindName(b.kind),
                             b.op, opWidth, b.node == ir::kNone ? std::string("-") : "%" + std::to_string(b.node), place);
  }
  return 0;
}

std::function<int()> addMemoryCommand(CLI::App& app) {
  auto a = std::make_shared<MemoryArgs>();
  CLI::App* cmd = app.add_subcommand(
      "memory", "A project's training step: live bytes over its kernels by kind, the peak and the buffers live there");
  cmd->add_option("project", a->project, "Project folder or project.toml")->required();
  addSetOption(cmd, a->sets);
  cmd->add_flag("--json", a->print.json, "Everything as JSON: per kernel the live bytes by kind, every buffer");
  cmd->add_option("--top", a->print.top, "How many of the buffers live at the peak to list")->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--width", a->print.width, "Columns of the chart")->capture_default_str()->check(CLI::Range(1, 1000));
  return [cmd, a]() { return cmd->parsed() ? printStepMemory("memory", a->project, a->sets, a->print) : -1; };
}

}  // namespace tsr::cli
