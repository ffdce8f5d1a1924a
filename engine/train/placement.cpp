#include "engine/train/placement.h"

#include <fmt/format.h>

namespace tsr::train {

namespace {

const std::string kParams = "params.", kOpt = "opt.";

std::string joined(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "." + b;
}

bool startsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

std::string ArgumentPath::relative() const {
  struct {
    std::string operator()(const Param& p) const { return p.path; }
    std::string operator()(const OptState& s) const { return joined(s.slot, s.param); }
    std::string operator()(const Batch& b) const { return b.name; }
    std::string operator()(const Other& o) const { return o.path; }
  } visitor;
  return std::visit(visitor, v);
}

std::string ArgumentPath::toString() const {
  if (as<Param>()) return kParams + relative();
  if (as<OptState>()) return kOpt + relative();
  return relative();
}

ArgumentPath optStatePath(const std::string& path, const std::vector<std::string>& params) {
  const std::string* best = nullptr;
  for (const std::string& p : params) {
    if (p.empty() || p.size() > path.size() || (best && p.size() <= best->size())) continue;
    const size_t at = path.size() - p.size();
    if (path.compare(at, p.size(), p) == 0 && (at == 0 || path[at - 1] == '.')) best = &p;
  }
  if (!best) return {ArgumentPath::OptState{path, ""}};
  const size_t at = path.size() - best->size();
  return {ArgumentPath::OptState{at == 0 ? "" : path.substr(0, at - 1), *best}};
}

std::vector<ArgumentPath> argumentPaths(const std::vector<std::string>& stepPaths) {
  std::vector<std::string> params;
  for (const std::string& p : stepPaths)
    if (startsWith(p, kParams)) params.push_back(p.substr(kParams.size()));
  std::vector<ArgumentPath> out;
  out.reserve(stepPaths.size());
  for (const std::string& p : stepPaths) {
    if (startsWith(p, kParams)) out.push_back({ArgumentPath::Param{p.substr(kParams.size())}});
    else if (startsWith(p, kOpt)) out.push_back(optStatePath(p.substr(kOpt.size()), params));
    else if (p == "inputs" || p == "targets") out.push_back({ArgumentPath::Batch{p}});
    else out.push_back({ArgumentPath::Other{p}});
  }
  return out;
}

Result<PlacementPolicy> PlacementPolicy::create(sharding::Mesh mesh,
                                                const std::vector<std::pair<std::string, std::string>>& rules,
                                                std::map<std::string, std::string> overrides, std::string where) {
  PlacementPolicy out;
  // Each rule's spec is checked against the mesh: a rule naming an axis the mesh lacks is an error that names the
  // rule (the mesh may have been edited after the rules were written).
  for (const auto& [pattern, spec] : rules) {
    Rule r;
    r.pattern = pattern;
    try {
      r.re = std::regex(pattern);
    } catch (const std::regex_error& e) {
      return makeError("{} rule '{}': not a regular expression ({})", where, pattern, e.what());
    }
    auto p = sharding::PartitionSpec::parse(spec);
    if (!p.ok()) return makeError("{} rule '{}': {}", where, pattern, p.error().message);
    if (auto ns = sharding::NamedSharding::create(mesh, *p); !ns.ok())
      return makeError("{} rule '{}': {}", where, pattern, ns.error().message);
    r.spec = std::move(*p);
    out.m_rules.push_back(std::move(r));
  }
  out.m_mesh = std::move(mesh);
  out.m_overrides = std::move(overrides);
  out.m_where = std::move(where);
  return out;
}

// An argument's own override, else (optimizer state) its parameter's.
const std::string* PlacementPolicy::overrideFor(const ArgumentPath& path) const {
  if (auto it = m_overrides.find(path.relative()); it != m_overrides.end()) return &it->second;
  if (const auto* s = path.as<ArgumentPath::OptState>(); s && !s->param.empty())
    if (auto it = m_overrides.find(s->param); it != m_overrides.end()) return &it->second;
  return nullptr;
}

// The first rule whose regex occurs in the relative path. A spec of more dims than the array cannot be meant for
// it, and one that does not divide its dims cannot split it: both are errors naming the rule and the argument,
// as JAX refuses such a sharding wherever it comes from (a Flax logical-axis rule too). Replicating the argument
// instead would leave the user believing it split.
Result<Placement> PlacementPolicy::byRule(const ArgumentPath& path, const Shape& shape) const {
  const std::string rel = path.relative();
  for (const Rule& r : m_rules) {
    if (!std::regex_search(rel, r.re)) continue;
    if (r.spec.dims.size() > static_cast<size_t>(shape.rank()))
      return makeError("{} rule '{}' matches {} {}, but its spec {} has {} dims", m_where, r.pattern, path.toString(),
                       shape.toString(), r.spec.toString(), r.spec.dims.size());
    if (auto st = sharding::NamedSharding{m_mesh, r.spec}.check(shape); !st.ok()) {
      // The way out names the parameter (a rule for it also reaches its optimizer state).
      const auto* state = path.as<ArgumentPath::OptState>();
      return makeError("{} rule '{}' matches {} {}, but {}; change the rule, or put a rule for {} before it",
                       m_where, r.pattern, path.toString(), shape.toString(), st.error().message,
                       state && !state->param.empty() ? state->param : rel);
    }
    return Placement{r.spec, fmt::format("rule '{}'", r.pattern)};
  }
  return Placement{std::nullopt, "no rule"};
}

// The batch is split over the mesh's first axis: a leading dim that axis does not divide is an error (the step
// would otherwise run whole on every device, without the data parallelism the mesh asks for).
Result<Placement> PlacementPolicy::ofBatch(const ArgumentPath& path, const Shape& shape) const {
  if (m_mesh.axes.empty()) return Placement{};
  if (shape.rank() == 0) return Placement{std::nullopt, "the batch, whole"};
  const std::string& axis = m_mesh.axes[0];
  const int64_t n = m_mesh.axisSize(axis);
  if (shape[0] % n != 0)
    return makeError("{} {}: the batch is split over the mesh's first axis '{}' of size {}, which does not divide "
                     "its {} rows; make the batch size a multiple of {}",
                     path.toString(), shape.toString(), axis, n, shape[0], n);
  return Placement{sharding::PartitionSpec{{{axis}}}, fmt::format("the batch, over '{}'", axis)};
}

Result<Placement> PlacementPolicy::place(const ArgumentPath& path, const Shape& shape) const {
  if (const std::string* s = overrideFor(path)) {
    auto spec = sharding::PartitionSpec::parse(*s);
    if (!spec.ok()) return makeError("{}: {}", path.toString(), spec.error().message);
    auto named = sharding::NamedSharding::create(m_mesh, *spec);
    if (!named.ok()) return makeError("{}: {}", path.toString(), named.error().message);
    if (auto st = named->check(shape); !st.ok()) return makeError("{}: {}", path.toString(), st.error().message);
    return Placement{std::move(*spec), "set here"};
  }
  if (path.as<ArgumentPath::Param>() || path.as<ArgumentPath::OptState>()) return byRule(path, shape);
  if (path.as<ArgumentPath::Batch>()) return ofBatch(path, shape);
  return Placement{};
}

Result<sharding::NamedSharding> PlacementPolicy::sharding(const ArgumentPath& path, const Shape& shape) const {
  TSR_ASSIGN(Placement p, place(path, shape));
  return sharding::NamedSharding{m_mesh, p.spec ? *p.spec : sharding::PartitionSpec{}};
}

}  // namespace tsr::train
