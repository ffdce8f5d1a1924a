#include "engine/inspect/sharding_view.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string_view>
#include <tuple>

#include <fmt/format.h>

#include "engine/inspect/project_edit.h"
#include "engine/ops/registry.h"

namespace tsr::inspect {

namespace {

std::vector<std::string> splitFields(const std::string& text, const std::string& seps) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text + seps[0]) {
    if (seps.find(c) != std::string::npos) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != '"' && c != '\'') {
      cur += c;
    }
  }
  return out;
}

}  // namespace

PlannableStep plannableStep(const ProjectSnapshot& project, std::shared_ptr<const ir::Graph> cleaned) {
  PlannableStep s;
  std::vector<std::string> paths = project.inputPaths;
  paths.resize(cleaned->inputs().size());
  s.paths = train::argumentPaths(paths);
  s.graph = std::move(cleaned);
  return s;
}

Result<StepShardingPlan> planSharding(const project::Project& project, const PlannableStep& step,
                                      const ShardPlanOptions& options) {
  return train::planStepSharding(project, step, options);
}

Result<sharding::Mesh> parseMesh(const std::string& shapeText, const std::string& axesText, const std::string& devicesText) {
  std::vector<int64_t> shape;
  for (const std::string& f : splitFields(shapeText, " ,x[]")) {
    try {
      size_t used = 0;
      long long v = std::stoll(f, &used);
      if (used != f.size()) throw std::invalid_argument(f);
      shape.push_back(v);
    } catch (const std::exception&) {
      return makeError("mesh shape '{}': '{}' is not a number", shapeText, f);
    }
  }
  if (shape.empty()) return makeError("mesh shape is empty");
  std::vector<std::string> axes = splitFields(axesText, " ,[]");
  if (axes.size() != shape.size())
    return makeError("mesh: {} sizes but {} axis names", shape.size(), axes.size());
  std::vector<int> devices;
  for (const std::string& f : splitFields(devicesText, " ,[]")) {
    try {
      size_t used = 0;
      int v = std::stoi(f, &used);
      if (used != f.size()) throw std::invalid_argument(f);
      devices.push_back(v);
    } catch (const std::exception&) {
      return makeError("device order '{}': '{}' is not a device number", devicesText, f);
    }
  }
  return sharding::Mesh::create(std::move(shape), std::move(axes), std::move(devices));
}

std::vector<std::string> paletteSpecs(const sharding::Mesh& mesh) {
  std::vector<std::string> out = {""};
  const auto& ax = mesh.axes;
  for (const auto& a : ax) out.push_back(a);
  for (const auto& a : ax) out.push_back("None, " + a);
  for (const auto& a : ax)
    for (const auto& b : ax)
      if (a != b) out.push_back(a + ", " + b);
  if (ax.size() > 1) {
    std::string all = "(";
    for (size_t i = 0; i < ax.size(); ++i) all += (i ? ", " : "") + ax[i];
    all += ")";
    out.push_back(all);
    out.push_back("None, " + all);
  }
  return out;
}

Result<TensorLayout> tensorLayout(const sharding::Mesh& mesh, const sharding::TensorSharding& t, const Aval& aval,
                                  const std::string& name, int rowDim, int colDim) {
  TensorLayout out;
  out.name = name;
  out.aval = aval;
  out.spec = t.toString(mesh);
  const int rank = aval.shape.rank();
  TSR_ASSIGN(sharding::NamedSharding ns, sharding::NamedSharding::create(mesh, t.toSpec(mesh)));
  TSR_ASSIGN(std::vector<sharding::Shard> shards, ns.layout(aval.shape));
  // The grid's dims: the first two split dims, filled up with the last dims that are whole.
  std::vector<int> split;
  for (int d = 0; d < rank; ++d)
    if (t.shards(mesh, d) > 1) split.push_back(d);
  std::vector<int> grid(split.begin(), split.begin() + std::min<size_t>(2, split.size()));
  for (int d = rank - 1; d >= 0 && grid.size() < 2 && static_cast<int>(grid.size()) < rank; --d)
    if (std::find(grid.begin(), grid.end(), d) == grid.end()) grid.push_back(d);
  std::sort(grid.begin(), grid.end());
  if (rowDim >= 0 || colDim >= 0) {
    if (rowDim < 0 || colDim < 0 || rowDim == colDim || rowDim >= rank || colDim >= rank)
      return makeError("{}: dims {} and {} cannot be laid out for a rank-{} array", name, rowDim, colDim, rank);
    grid = {rowDim, colDim};
  }
  if (grid.size() == 2) {
    out.rowDim = grid[0];
    out.colDim = grid[1];
  } else if (grid.size() == 1) {
    out.colDim = grid[0];  // a vector is one row of blocks
  }
  for (int d : split)
    if (d != out.rowDim && d != out.colDim) out.otherSplitDims.push_back(d);
  out.rows = out.rowDim >= 0 ? t.shards(mesh, out.rowDim) : 1;
  out.cols = out.colDim >= 0 ? t.shards(mesh, out.colDim) : 1;
  out.blockShape = t.localShape(mesh, aval.shape);
  out.blockBytes = out.blockShape.numel() * dtypeSize(aval.dtype);
  out.replicas = shards.empty() ? 1 : static_cast<int64_t>(shards.front().devices.size());
  out.cells.resize(static_cast<size_t>(out.rows * out.cols));
  for (int64_t r = 0; r < out.rows; ++r)
    for (int64_t c = 0; c < out.cols; ++c) {
      out.cells[static_cast<size_t>(r * out.cols + c)].row = r;
      out.cells[static_cast<size_t>(r * out.cols + c)].col = c;
    }
  for (const sharding::Shard& s : shards) {
    int64_t r = out.rowDim >= 0 ? s.index[static_cast<size_t>(out.rowDim)] : 0;
    int64_t c = out.colDim >= 0 ? s.index[static_cast<size_t>(out.colDim)] : 0;
    TensorLayout::Cell& cell = out.cells[static_cast<size_t>(r * out.cols + c)];
    std::string range = "[";
    for (int d = 0; d < rank; ++d)
      range += fmt::format("{}{}:{}", d ? ", " : "", s.start[static_cast<size_t>(d)], s.limit[static_cast<size_t>(d)]);
    range += "] on ";
    for (size_t i = 0; i < s.devices.size(); ++i) range += fmt::format("{}{}", i ? "," : "", s.devices[i]);
    cell.ranges.push_back(std::move(range));
    cell.devices.insert(cell.devices.end(), s.devices.begin(), s.devices.end());
  }
  for (auto& cell : out.cells) {
    std::sort(cell.devices.begin(), cell.devices.end());
    cell.devices.erase(std::unique(cell.devices.begin(), cell.devices.end()), cell.devices.end());
  }
  return out;
}

int deviceHue(int device, int numDevices) {
  // Spread over the circle, neighbours apart: step by the golden angle so that 0 and 1 differ most.
  (void)numDevices;
  return static_cast<int>(std::fmod(static_cast<double>(device) * 137.508, 360.0));
}

PlanDiff diffPlans(const StepShardingPlan& before, const StepShardingPlan& after) {
  PlanDiff d;
  using Key = std::tuple<std::string, std::string, int64_t, std::string, std::string>;
  auto key = [](const train::PlannedCollective& c) {
    return Key{c.info.opName, c.info.axisNames, c.info.bytes, c.info.reason, c.where};
  };
  // A multiset difference: two equal collectives before and one after is one removed.
  std::multiset<Key> a, b;
  for (const auto& c : before.collectives) a.insert(key(c));
  for (const auto& c : after.collectives) b.insert(key(c));
  for (const auto& c : after.collectives) {
    auto it = a.find(key(c));
    if (it != a.end()) a.erase(it);
    else d.added.push_back(c);
  }
  for (const auto& c : before.collectives) {
    auto it = b.find(key(c));
    if (it != b.end()) b.erase(it);
    else d.removed.push_back(c);
  }
  d.paramBefore = before.paramBytes;
  d.paramAfter = after.paramBytes;
  d.optBefore = before.optBytes;
  d.optAfter = after.optBytes;
  d.batchBefore = before.batchBytes;
  d.batchAfter = after.batchBytes;
  d.arenaBefore = before.arenaBytes;
  d.arenaAfter = after.arenaBytes;
  d.commBefore = before.commSeconds;
  d.commAfter = after.commSeconds;
  for (size_t i = 0; i < after.arguments.size() && i < before.arguments.size(); ++i)
    if (!(after.arguments[i].sharding == before.arguments[i].sharding)) d.changedArguments.push_back(i);
  return d;
}

std::vector<PlannedValue> planValues(const StepShardingPlan& plan) {
  const ir::Graph& g = *plan.global;
  const ir::OpRegistry& reg = ops::registry();
  std::vector<PlannedValue> out;
  auto add = [&](ir::ValueId v, std::string op) {
    out.push_back({v, std::move(op), g.aval(v).toString(), plan.plan.values[static_cast<size_t>(v)].toString(plan.mesh),
                   originText(plan, v)});
  };
  for (size_t i = 0; i < g.inputs().size(); ++i) add(g.inputs()[i], fmt::format("input {}", i));
  for (const ir::Node& n : g.nodes()) {
    const ir::OpDef* def = reg.find(n.op);
    for (ir::ValueId r : n.results) add(r, def ? def->name : "?");
  }
  return out;
}

std::string originText(const StepShardingPlan& plan, ir::ValueId v) {
  if (v < 0 || static_cast<size_t>(v) >= plan.plan.origins.size()) return "";
  return plan.plan.origins[static_cast<size_t>(v)].toString(*plan.global, ops::registry());
}

std::vector<ShardingConflict> findConflicts(const ir::Graph& g, const sharding::Mesh& mesh,
                                            const std::vector<train::PlannedArgument>& arguments) {
  const ir::OpRegistry& reg = ops::registry();
  std::map<ir::ValueId, const train::PlannedArgument*> byValue;
  for (const auto& a : arguments) byValue[a.value] = &a;
  std::vector<ShardingConflict> out;
  for (size_t id = 0; id < g.nodes().size(); ++id) {
    const ir::Node& n = g.nodes()[id];
    bool reads = false;
    for (ir::ValueId v : n.operands) reads = reads || byValue.count(v);
    if (!reads) continue;
    auto rule = sharding::shardingRuleOf(g, n, reg);
    if (!rule.ok()) continue;
    // Per factor: the first argument operand that splits it, and any other that splits it differently.
    for (size_t f = 0; f < rule->factors.size(); ++f) {
      const train::PlannedArgument* first = nullptr;
      size_t firstOperand = 0;
      const std::vector<int>* firstAxes = nullptr;
      for (size_t o = 0; o < n.operands.size(); ++o) {
        auto it = byValue.find(n.operands[o]);
        if (it == byValue.end()) continue;
        const auto& dims = rule->operandDims[o];
        for (size_t d = 0; d < dims.size(); ++d) {
          if (dims[d] != static_cast<int>(f)) continue;
          const auto& axes = it->second->sharding.dims[d];
          if (axes.empty()) continue;
          if (!first) {
            first = it->second;
            firstOperand = o;
            firstAxes = &axes;
          } else if (axes != *firstAxes && it->second != first) {
            const ir::OpDef* def = reg.find(n.op);
            ShardingConflict c;
            c.node = static_cast<ir::NodeId>(id);
            c.op = def ? def->name : "op";
            c.first = fmt::format("operand {} {} ({})", firstOperand, first->sharding.toString(mesh),
                                  first->path.toString());
            c.second = fmt::format("operand {} {} ({})", o, it->second->sharding.toString(mesh),
                                   it->second->path.toString());
            c.message = fmt::format("{} (node {}{}): conflicting explicit shardings: {} and {}", c.op, id,
                                    n.prov.empty() ? "" : ", " + n.prov.toString(), c.first, c.second);
            out.push_back(std::move(c));
          }
        }
      }
    }
  }
  return out;
}

std::string ruleForParameter(const std::string& path) {
  std::string out = "(^|\\.)";
  for (char c : path) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out + "$";
}

Result<std::string> applySharding(const std::string& text, const std::string& file, const std::string& dir,
                                  const sharding::Mesh& mesh,
                                  const std::vector<std::pair<std::string, std::string>>& rules) {
  std::string out = text;
  std::string shape = "[", axes = "[";
  for (size_t i = 0; i < mesh.shape.size(); ++i) {
    shape += fmt::format("{}{}", i ? ", " : "", mesh.shape[i]);
    axes += fmt::format("{}\"{}\"", i ? ", " : "", mesh.axes[i]);
  }
  out = setFieldValue(out, "mesh", "shape", shape + "]");
  out = setFieldValue(out, "mesh", "axes", axes + "]");
  for (const auto& [pattern, spec] : rules) {
    // A literal string key: a regex's backslashes stay as written.
    if (pattern.find('\'') != std::string::npos || pattern.find('\n') != std::string::npos)
      return makeError("sharding rule '{}': a rule may not hold a quote or a line break", pattern);
    TSR_ASSIGN(std::string literal, tomlLiteral(FieldKind::String, spec));
    // First in [sharding]: the first rule that matches wins, and this one names its parameter alone.
    out = setFieldValue(out, "sharding", "'" + pattern + "'", literal, /*first=*/true);
  }
  TSR_TRY(validateProjectText(out, file, dir));
  return out;
}

}  // namespace tsr::inspect
