#include "app/cli/shard_command.h"

#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "app/cli/project_args.h"
#include "engine/core/bytes.h"

#include "engine/core/dtype.h"
#include "engine/core/limits.h"
#include "engine/ops/registry.h"
#include "engine/project/project.h"
#include "engine/sharding/sharding.h"
#include "engine/spmd/spmd.h"
#include "engine/train/sharding_plan.h"

namespace tsr::cli {

namespace {

struct ShardArgs {
  std::vector<std::string> sets;  // --set overrides
  std::string mesh = "8";
  std::string axes;
  std::string shape;
  std::string spec;
  std::string dtype = "f32";
  int width = 48;
  // plan
  std::string project;
  double bandwidthGBs = 10.0;
  bool noValues = false;
  bool program = false;
};

Result<std::vector<int64_t>> parseInts(const std::string& text, char sep, const char* what) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, sep)) {
    try {
      size_t used = 0;
      long long v = std::stoll(part, &used);
      if (used != part.size()) throw std::invalid_argument(part);
      out.push_back(v);
    } catch (const std::exception&) {
      return makeError("{} '{}': '{}' is not a number", what, text, part);
    }
  }
  if (out.empty()) return makeError("{} is empty", what);
  return out;
}

int runShow(const ShardArgs& a) {
  auto fail = [](const std::string& m) {
    std::cerr << "tessera shard show: " << m << "\n";
    return 1;
  };
  auto meshShape = parseInts(a.mesh, 'x', "--mesh");
  if (!meshShape.ok()) return fail(meshShape.error().message);
  std::vector<std::string> axes;
  if (a.axes.empty()) {
    const char* defaults[] = {"a", "b", "c", "d", "e", "f"};
    for (size_t i = 0; i < meshShape->size() && i < 6; ++i) axes.push_back(defaults[i]);
  } else {
    std::stringstream ss(a.axes);
    std::string part;
    while (std::getline(ss, part, ',')) axes.push_back(part);
  }
  auto mesh = sharding::Mesh::create(*meshShape, axes);
  if (!mesh.ok()) return fail(mesh.error().message);
  auto shape = parseInts(a.shape, ',', "--shape");
  if (!shape.ok()) return fail(shape.error().message);
  if (auto n = limits::checkedProduct("--shape", *shape, limits::kArrayElements); !n.ok()) return fail(n.error().message);
  // The drawing is width columns of text per row of boxes: bounded before a line is made that long.
  if (auto st = limits::checkRange("--width", a.width, 1, limits::kDrawingWidth); !st.ok()) return fail(st.error().message);
  auto spec = sharding::PartitionSpec::parse(a.spec);
  if (!spec.ok()) return fail(spec.error().message);
  auto ns = sharding::NamedSharding::create(*mesh, *spec);
  if (!ns.ok()) return fail(ns.error().message);
  auto dt = parseDType(a.dtype);
  if (!dt) return fail(fmt::format("unknown dtype '{}'", a.dtype));
  Shape s(*shape);
  auto text = sharding::visualizeSharding(s, *ns, a.width);
  if (!text.ok()) return fail(text.error().message);
  auto layout = ns->layout(s);
  Shape block = ns->shardShape(s);
  int64_t bytes = block.numel() * dtypeSize(*dt);
  std::cout << ns->toString() << " on " << dtypeName(*dt) << s.toString() << "\n" << *text;
  std::cout << fmt::format("{} distinct shard{} of {} ({} each), each held by {} device{}; {} per device\n",
                           layout->size(), layout->size() == 1 ? "" : "s", block.toString(), formatBytes(bytes),
                           (*layout)[0].devices.size(), (*layout)[0].devices.size() == 1 ? "" : "s",
                           formatBytes(bytes));
  return 0;
}

int runPlan(const ShardArgs& a) {
  auto fail = [](const std::string& m) {
    std::cerr << "tessera shard plan: " << m << "\n";
    return 1;
  };
  auto p = loadProject(a.project, a.sets);
  if (!p.ok()) return fail(p.error().message);
  auto meshOf = train::projectMesh(*p);
  if (!meshOf.ok()) return fail(meshOf.error().message);
  if (meshOf->size() <= 1) return fail(p->file + ": [mesh] is one device: nothing is split");
  if (auto st = checkBatchOnMesh(*p); !st.ok()) return fail(st.error().message);
  // A plan needs no devices: the step is traced from avals and partitioned on the mesh alone.
  train::ShardPlanOptions options;
  options.bandwidthGBs = a.bandwidthGBs;
  auto planned = train::planStepSharding(*p, options);
  if (!planned.ok()) return fail(planned.error().message);
  const train::StepShardingPlan& sp = *planned;
  const auto& g = *sp.global;
  const auto& mesh = sp.mesh;
  const auto& reg = ops::registry();
  std::cout << fmt::format("{}: {} over {} devices, {} sharding rules\n\n", sp.name, mesh.toString(), mesh.size(),
                           sp.numRules);

  // Arguments: parameters, optimizer state, batch.
  std::cout << "Arguments (per-device bytes, sharding, why):\n";
  for (size_t i = 0; i < sp.arguments.size(); ++i) {
    const auto& arg = sp.arguments[i];
    std::string name = arg.path.toString();
    if (name.empty()) name = fmt::format("{}", i);
    std::cout << fmt::format("  {:<40} {:<18} {:>10}  {}\n", name, g.aval(arg.value).toString(),
                             formatBytes(arg.bytes), arg.sharding.toString(mesh));
  }
  std::cout << fmt::format("\nPer device: parameters {}, gradients {} (as their parameters), optimizer state {}, "
                           "batch {}, activations and other intermediates {} (the planned arena)\n",
                           formatBytes(sp.paramBytes), formatBytes(sp.paramBytes),
                           formatBytes(sp.optBytes), formatBytes(sp.batchBytes),
                           formatBytes(sp.arenaBytes));

  // Collectives.
  std::cout << fmt::format("\nCollectives per step: {} (time at {:.0f} GB/s per device)\n", sp.collectives.size(),
                           sp.bandwidthGBs);
  for (const auto& c : sp.collectives)
    std::cout << fmt::format("  {:<18} over {:<10} {:>10} {:>9.3f} ms  {}{}\n", c.info.opName, c.info.axisNames,
                             formatBytes(c.info.bytes), c.seconds * 1e3, c.info.reason,
                             c.where.empty() ? "" : " at " + c.where);
  std::cout << fmt::format("  estimated communication per step: {:.3f} ms\n", sp.commSeconds * 1e3);
  if (!a.noValues) std::cout << "\nEvery value of the step (sharding, and why):\n" << sharding::describePlan(g, reg, sp.plan);
  if (a.program) std::cout << "\nThe per-device program:\n" << ir::print(*sp.program, reg);
  return 0;
}

}  // namespace

std::function<int()> addShardCommand(CLI::App& app) {
  auto args = std::make_shared<ShardArgs>();
  CLI::App* shard = app.add_subcommand("shard", "Meshes and PartitionSpecs: how an array is laid out over devices");
  shard->require_subcommand(1);
  CLI::App* show = shard->add_subcommand("show", "Draw the device grid of an array, like jax.debug.visualize_array_sharding");
  show->add_option("--mesh", args->mesh, "Mesh shape, e.g. 4x2")->capture_default_str();
  show->add_option("--axes", args->axes, "Mesh axis names, e.g. a,b (default a,b,...)");
  show->add_option("--shape", args->shape, "Array shape, e.g. 8192,8192")->required();
  show->add_option("--spec", args->spec, "PartitionSpec, e.g. 'a,b', '(a,b),None', 'None,b'; empty: replicated");
  show->add_option("--dtype", args->dtype, "Element type, for the bytes per device")->capture_default_str();
  show->add_option("--width", args->width, "Width of the drawing in columns")->capture_default_str();
  CLI::App* plan = shard->add_subcommand("plan", "A project's training step on its mesh: every argument and value with "
                                                  "its sharding and why, bytes per device, the collectives and their time");
  plan->add_option("project", args->project, "Project folder or project.toml")->required();
  plan->add_option("--bandwidth", args->bandwidthGBs, "Interconnect bandwidth per device in GB/s, for the time estimates")
      ->capture_default_str();
  plan->add_flag("--no-values", args->noValues, "Leave out the list of every value");
  plan->add_flag("--program", args->program, "Print the per-device program, collectives included");
  addSetOption(plan, args->sets);
  return [show, plan, args]() { return show->parsed() ? runShow(*args) : plan->parsed() ? runPlan(*args) : -1; };
}

}  // namespace tsr::cli
