#include "engine/passes/dump.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "engine/passes/dot.h"
#include "engine/passes/fusion.h"
#include "engine/passes/pipeline.h"

namespace tsr::passes {

namespace {

namespace fs = std::filesystem;

Status writeFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return makeError("cannot write {}", path.string());
  return {};
}

// "constant_folding" stays; anything but [A-Za-z0-9_-] becomes '_'.
std::string fileStem(int step, std::string_view pass) {
  std::string s = fmt::format("{:02}_", step);
  for (char c : pass) s += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ? c : '_';
  return s;
}

Status writeGraph(const fs::path& dir, const std::string& stem, const ir::Graph& g, const std::string& text,
                  const ir::OpRegistry& reg, const FusionPlan* plan = nullptr) {
  TSR_TRY(writeFile(dir / (stem + ".tir"), text));
  DotOptions o;
  o.fusion = plan;
  TSR_TRY(writeFile(dir / (stem + ".dot"), toDot(g, reg, o)));
  // After fusion: the kernels, one per line, with their members, inputs, outputs and why they formed.
  if (plan) TSR_TRY(writeFile(dir / (stem + ".kernels.txt"), plan->describe(g, reg)));
  return {};
}

}  // namespace

Result<DumpResult> dumpPipeline(const ir::Graph& g, const std::string& dir, PassManager& pm, PassContext& ctx) {
  fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root)) return makeError("cannot create the dump folder {}: {}", dir, ec.message());
  const ir::OpRegistry& reg = ctx.registry();
  TSR_TRY(writeGraph(root, "00_input", g, ir::print(g, reg), reg));

  PipelineOptions saved = pm.options();
  std::optional<Error> writeError;
  pm.options().snapshots = true;
  pm.options().onStep = [&](int step, const PassStep& s) {
    if (saved.onStep) saved.onStep(step, s);
    if (writeError) return;
    const FusionPlan* plan = s.pass == "fusion" ? ctx.fusionPlan().get() : nullptr;
    auto st = writeGraph(root, fileStem(step + 1, s.pass), *s.after.graph, s.after.text, reg, plan);
    if (!st.ok()) writeError = st.takeError();
  };
  DumpResult result{g, {}};
  auto report = pm.run(result.graph, ctx);
  pm.options() = std::move(saved);

  TSR_TRY(writeFile(root / "decisions.txt", ctx.log().toText()));
  // Reports passes wrote for people (a plugin's op statistics): one file each, named by the pass.
  for (const PassContext::Report& r : ctx.reports()) {
    std::string name = fs::path(r.name).filename().string();  // never outside the folder
    if (!name.empty() && name != "." && name != "..") TSR_TRY(writeFile(root / name, r.text));
  }
  if (!report.ok()) return report.takeError();
  if (writeError) return std::move(*writeError);
  result.report = std::move(report).value();
  TSR_TRY(writeFile(root / "timings.json", result.report.toJson()));
  TSR_TRY(writeFile(root / "pipeline.txt", result.report.toText()));
  return result;
}

Result<DumpResult> dumpPipeline(const ir::Graph& g, const std::string& dir, const ir::OpRegistry& reg) {
  PipelineOptions options;
  options.verify = true;
  PassManager pm = compilerPipeline(options);
  PassContext ctx(reg);
  return dumpPipeline(g, dir, pm, ctx);
}

}  // namespace tsr::passes
