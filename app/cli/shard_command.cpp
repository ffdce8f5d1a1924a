#include "app/cli/shard_command.h"

#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "engine/core/dtype.h"
#include "engine/sharding/sharding.h"

namespace tsr::cli {

namespace {

struct ShardArgs {
  std::string mesh = "8";
  std::string axes;
  std::string shape;
  std::string spec;
  std::string dtype = "f32";
  int width = 48;
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
  return [show, args]() { return show->parsed() ? runShow(*args) : -1; };
}

}  // namespace tsr::cli
