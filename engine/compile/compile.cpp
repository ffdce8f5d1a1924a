#include "engine/compile/compile.h"

#include <optional>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "engine/passes/pipeline.h"
#include "engine/sharding/sharding.h"

namespace tsr::compile {

namespace {

std::string describeArg(const std::vector<std::string>& paths, size_t i) {
  if (i < paths.size() && !paths[i].empty()) return fmt::format("argument {} ('{}')", i, paths[i]);
  return fmt::format("argument {}", i);
}

}  // namespace

Status optimize(ir::Graph& g) {
  passes::PassManager pm = passes::standardPipeline();
  passes::PassContext ctx(ops::registry());
  auto report = pm.run(g, ctx);
  if (!report.ok()) return report.takeError();
  return {};
}

bool isSpmd(const ClosedGraph& cg, const std::vector<Array>& args) {
  bool sharded = cg.graph.count(ir::OpCode::ShardingConstraint) > 0;
  for (const auto& a : args) sharded = sharded || a.isSharded();
  for (const auto& c : cg.consts) sharded = sharded || c.isSharded();
  return sharded;
}

Result<std::shared_ptr<spmd::SpmdExecutable>> compileSpmd(const ClosedGraph& cg, const std::vector<Array>& args,
                                                          const std::vector<std::string>& paths,
                                                          const Options& options) {
  const std::string& name = options.name;
  std::optional<sharding::Mesh> mesh;
  std::string meshFrom;
  std::vector<Array> inputs = args;
  inputs.insert(inputs.end(), cg.consts.begin(), cg.consts.end());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].isSharded()) continue;
    std::string who = i < args.size() ? describeArg(paths, i) : "a captured constant";
    const sharding::Mesh& m = inputs[i].sharding()->mesh;
    if (!mesh) {
      mesh = m;
      meshFrom = who;
    } else if (!(*mesh == m)) {
      return makeError("{}: {} is on {}, but {} is on {}", name, meshFrom, mesh->toString(), who, m.toString());
    }
  }
  if (!mesh)
    for (const ir::Node& n : cg.graph.nodes())
      if (n.op == ir::OpCode::ShardingConstraint) {
        TSR_ASSIGN(sharding::Mesh m, sharding::constraintMesh(std::get<ir::ShardingConstraintAttrs>(n.attrs)));
        mesh = std::move(m);
        break;
      }
  sharding::ShardingAnnotations ann;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TSR_ASSIGN(sharding::TensorSharding t, spmd::shardingOn(inputs[i], *mesh));
    ann.inputs.push_back(std::move(t));
    ann.inputNames.push_back(i < paths.size() ? paths[i] : "");
  }
  spmd::SpmdOptions o;
  o.name = name;
  o.interpret = options.interpret;
  o.donatable = options.donatable;
  o.device = options.device;
  if (!options.interpret && !runtime::backends().find(o.device))
    return makeError("{}: device {}: this build has no such backend{}", name, o.device,
                     o.device == "cuda" ? " (configure where the CUDA toolkit is)" : "");
  auto exe = spmd::SpmdExecutable::compile(cg.graph, *mesh, ann, o);
  if (!exe.ok()) return Error{fmt::format("{}: {}", name, exe.error().message)};
  return std::shared_ptr<spmd::SpmdExecutable>(std::move(exe).value());
}

Result<std::unique_ptr<runtime::Executable>> compileForDevice(const ir::Graph& g, const Options& options) {
  runtime::CompileOptions co;
  co.name = options.name;
  co.donatable = options.donatable;
  co.native = options.native;
  if (options.device == "cuda" && !runtime::backends().find("cuda"))
    return makeError("{}: device cuda: this build has no CUDA backend (configure where the CUDA toolkit is)",
                     options.name);
  auto exe = runtime::compileOn(options.device, g, ops::registry(), co);
  if (!exe.ok()) return Error{fmt::format("{}: {}", options.name, exe.error().message)};
  return exe;
}

Result<Compiled> compileProgram(const ClosedGraph& cg, const std::vector<Array>& args,
                                const std::vector<std::string>& paths, const Options& options) {
  if (options.device != "cpu" && options.device != "cuda" && !runtime::backends().find(options.device)) {
    std::string known;
    for (const auto& n : runtime::backends().names()) known += ", " + n;
    return makeError("{}: unknown device '{}' (expected cpu or cuda{})", options.name, options.device,
                     known.empty() ? std::string(": no backend is registered") : "; registered: " + known.substr(2));
  }
  Compiled out;
  if (isSpmd(cg, args)) {
    TSR_ASSIGN(out.spmd, compileSpmd(cg, args, paths, options));
  } else if (!options.interpret) {
    TSR_ASSIGN(out.exe, compileForDevice(cg.graph, options));
  }
  return out;
}

}  // namespace tsr::compile
