#include "app/cli/shard_command.h"

#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "engine/core/dtype.h"
#include "engine/ops/registry.h"
#include "engine/project/project.h"
#include "engine/sharding/sharding.h"
#include "engine/spmd/spmd.h"
#include "engine/train/run.h"

namespace tsr::cli {

namespace {

struct ShardArgs {
  std::string mesh = "8";
  std::string axes;
  std::string shape;
  std::string spec;
  std::string dtype = "f32";
  int width = 48;
  // plan
  std::string project;
  double bandwidthGBs = 10.0;
  bool values = true;
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

std::string humanBytes(int64_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < 1024 * 1024) return fmt::format("{:.1f} KiB", b / 1024.0);
  if (b < int64_t(1) << 30) return fmt::format("{:.1f} MiB", b / 1048576.0);
  return fmt::format("{:.2f} GiB", b / 1073741824.0);
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
                           layout->size(), layout->size() == 1 ? "" : "s", block.toString(), humanBytes(bytes),
                           (*layout)[0].devices.size(), (*layout)[0].devices.size() == 1 ? "" : "s",
                           humanBytes(bytes));
  return 0;
}

// Seconds a collective of `bytes` per device takes over a group of n at `bw` bytes/s, by the ring algorithms'
// traffic: all_reduce sends 2(n-1)/n of its buffer, all_gather and reduce_scatter (n-1)/n of the whole,
// all_to_all (n-1)/n, a permute the buffer once.
double collectiveSeconds(const sharding::CollectiveInfo& c, const sharding::Mesh& mesh, double bw) {
  int64_t n = 1;
  for (int a : c.axes) n *= mesh.shape[static_cast<size_t>(a)];
  const double b = static_cast<double>(c.bytes), f = n > 1 ? static_cast<double>(n - 1) / static_cast<double>(n) : 0.0;
  if (c.op == ir::OpCode::AllReduce) return 2 * f * b / bw;
  if (c.op == ir::OpCode::AllGather) return f * b * static_cast<double>(n) / bw;
  if (c.op == ir::OpCode::CollectivePermute) return b / bw;
  return f * b / bw;  // reduce_scatter (its operand is the whole), all_to_all
}

int runPlan(const ShardArgs& a) {
  auto fail = [](const std::string& m) {
    std::cerr << "tessera shard plan: " << m << "\n";
    return 1;
  };
  auto p = project::loadProject(a.project);
  if (!p.ok()) return fail(p.error().message);
  int64_t meshSize = 1;
  for (int64_t d : p->mesh.shape) meshSize *= d;
  if (meshSize > dist::configuredCpuDevices() && !dist::launchedUnderMpi()) {
    // A plan needs no computation on the devices: give this process the devices the mesh names.
    auto st = spmd::setCpuDevices(static_cast<int>(meshSize));
    if (!st.ok()) return fail(st.error().message);
  }
  auto setup = train::setUpTraining(*p, p->train.steps, [](const std::string&) {});
  if (!setup.ok()) return fail(setup.error().message);
  if (!setup->trainer->sharding()) return fail(p->file + ": [mesh] is one device: nothing is split");
  auto batch = setup->next();
  if (!batch.ok()) return fail(batch.error().message);
  auto exe = setup->trainer->compileStepSpmd(setup->state, *batch);
  if (!exe.ok()) return fail(exe.error().message);
  const auto& plan = (*exe)->plan();
  const auto& g = (*exe)->global();
  const auto& mesh = plan.mesh;
  const auto& reg = ops::registry();
  std::cout << fmt::format("{}: {} over {} devices, {} sharding rules\n\n", p->name, mesh.toString(), mesh.size(),
                           p->sharding.size());

  // Arguments: parameters, optimizer state, batch.
  int64_t paramBytes = 0, optBytes = 0, batchBytes = 0;
  std::cout << "Arguments (per-device bytes, sharding, why):\n";
  const auto& ins = (*exe)->partitioned().inputShardings;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    ir::ValueId v = g.inputs()[i];
    const auto& origin = plan.origins[static_cast<size_t>(v)];
    std::string name = origin.annotation.rfind("argument ", 0) == 0 ? origin.annotation.substr(9) : fmt::format("input {}", i);
    Shape local = ins[i].localShape(mesh, g.aval(v).shape);
    int64_t bytes = local.numel() * dtypeSize(g.aval(v).dtype);
    if (name.rfind("params", 0) == 0) paramBytes += bytes;
    else if (name.rfind("opt", 0) == 0) optBytes += bytes;
    else batchBytes += bytes;
    std::cout << fmt::format("  {:<40} {:<18} {:>10}  {}\n", name, g.aval(v).toString(), humanBytes(bytes),
                             ins[i].toString(mesh));
  }
  const cpu::Executable* cpuExe = (*exe)->executable();
  std::cout << fmt::format("\nPer device: parameters {}, gradients {} (as their parameters), optimizer state {}, "
                           "batch {}, activations and other intermediates {} (the planned arena)\n",
                           humanBytes(paramBytes), humanBytes(paramBytes), humanBytes(optBytes), humanBytes(batchBytes),
                           humanBytes(cpuExe ? cpuExe->memory().arenaBytes : 0));

  // Collectives.
  const auto& colls = (*exe)->partitioned().collectives;
  double total = 0;
  std::cout << fmt::format("\nCollectives per step: {} (time at {:.0f} GB/s per device)\n", colls.size(), a.bandwidthGBs);
  for (const auto& c : colls) {
    double s = collectiveSeconds(c, mesh, a.bandwidthGBs * 1e9);
    total += s;
    std::string where;
    if (c.globalNode >= 0) {
      const ir::Node& n = g.nodes()[static_cast<size_t>(c.globalNode)];
      if (!n.prov.empty()) where = " at " + n.prov.toString();
    }
    std::cout << fmt::format("  {:<18} over {:<10} {:>10} {:>9.3f} ms  {}{}\n", c.opName, c.axisNames, humanBytes(c.bytes),
                             s * 1e3, c.reason, where);
  }
  std::cout << fmt::format("  estimated communication per step: {:.3f} ms\n", total * 1e3);
  if (a.values) std::cout << "\nEvery value of the step (sharding, and why):\n" << sharding::describePlan(g, reg, plan);
  if (a.program) std::cout << "\nThe per-device program:\n" << ir::print((*exe)->program(), reg);
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
  plan->add_flag("!--no-values", args->values, "Leave out the list of every value");
  plan->add_flag("--program", args->program, "Print the per-device program, collectives included");
  return [show, plan, args]() { return show->parsed() ? runShow(*args) : plan->parsed() ? runPlan(*args) : -1; };
}

}  // namespace tsr::cli
