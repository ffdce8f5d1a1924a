#pragma once
// Where each argument of the training step lives on a mesh, decided in one place: Trainer asks it when it puts
// the parameters, the optimizer state and each batch on the devices, the sharding plan (tessera shard plan, the
// IDE's Sharding panel) when it plans the step from avals. The policy:
//   - an override (the Sharding panel's edits) wins over every rule;
//   - a parameter takes the first [sharding] rule whose regex occurs in its path; a spec the shape does not
//     divide, or of more dims than the array, is an error naming the rule and the parameter;
//   - optimizer state follows its parameter: the rules are searched in the state's own path ("1.mu" and the
//     parameter's path), and an override of the parameter covers its state;
//   - the batch is split over the mesh's first axis; a leading dim that axis does not divide is an error;
//   - everything else (the step counter, the model's state "batch_stats.*", captured constants) is replicated.
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/core/result.h"
#include "engine/core/shape.h"
#include "engine/sharding/sharding.h"

namespace tsr::train {

// An argument of the training step by what it is. The step's arguments are the tree {params, opt, inputs,
// targets, step}, and batch_stats for a model with state (an Other); toString() gives the path that tree names
// it by, the form every printout uses.
struct ArgumentPath {
  struct Param {  // "params.h.0.attn.c_attn.weight": path "h.0.attn.c_attn.weight"
    std::string path;
    bool operator==(const Param&) const = default;
  };
  // "opt.1.mu.h.0.attn.c_attn.weight": slot "1.mu", param "h.0.attn.c_attn.weight". State of its own, which
  // follows no parameter ("opt.1.count"), has an empty param.
  struct OptState {
    std::string slot, param;
    bool operator==(const OptState&) const = default;
  };
  struct Batch {  // "inputs" or "targets"
    std::string name;
    bool operator==(const Batch&) const = default;
  };
  struct Other {  // "step"; "" for a constant the trace captured
    std::string path;
    bool operator==(const Other&) const = default;
  };

  std::variant<Param, OptState, Batch, Other> v = Other{};

  template <class T>
  const T* as() const {
    return std::get_if<T>(&v);
  }
  // "params.h.0.ln_1.weight", "opt.1.mu.h.0.ln_1.weight", "opt.1.count", "inputs", "step", "".
  std::string toString() const;
  // The path below the argument's own subtree: the parameter's path, the state's path in the optimizer state
  // ("1.mu.h.0.ln_1.weight"), the batch's name. Rules are searched in it; overrides are keyed by it.
  std::string relative() const;
  bool operator==(const ArgumentPath&) const = default;
};

// An optimizer-state path ("1.mu.h.0.ln_1.weight", relative to the optimizer state) split at the longest of
// `params` it ends with after a dot.
ArgumentPath optStatePath(const std::string& path, const std::vector<std::string>& params);
// The step's argument paths ("params.x", "opt.1.mu.x", "inputs", "targets", "step", ""), typed.
std::vector<ArgumentPath> argumentPaths(const std::vector<std::string>& stepPaths);

// Where one argument goes, and why.
struct Placement {
  std::optional<sharding::PartitionSpec> spec;  // none: replicated
  std::string source;  // "rule 'attn\.c_attn\.weight'", "set here", "the batch, over 'data'", "no rule", ""
};

class PlacementPolicy {
 public:
  PlacementPolicy() = default;
  // `rules`: (parameter-path regex, PartitionSpec), the first match wins. `overrides`: specs by an argument's
  // relative path (a parameter's covers its optimizer state; "inputs" / "targets" the batch). `where` begins
  // the messages about a rule ("project.toml: [sharding]" gives "project.toml: [sharding] rule 'x': ...").
  // Errors: a rule that is not a regex, whose spec does not parse or names an axis the mesh lacks.
  static Result<PlacementPolicy> create(sharding::Mesh mesh,
                                        const std::vector<std::pair<std::string, std::string>>& rules,
                                        std::map<std::string, std::string> overrides, std::string where);

  // The argument's placement for an array of `shape`. Errors: a rule's spec of more dims than the array or
  // that does not divide it, an override that does not parse or does not fit the array (named by its path), a
  // batch the mesh's first axis does not divide.
  Result<Placement> place(const ArgumentPath& path, const Shape& shape) const;
  // The same as a sharding on the mesh (replicated where the placement has no spec).
  Result<sharding::NamedSharding> sharding(const ArgumentPath& path, const Shape& shape) const;

  const sharding::Mesh& mesh() const { return m_mesh; }
  size_t numRules() const { return m_rules.size(); }

 private:
  struct Rule {
    std::string pattern;
    std::regex re;
    sharding::PartitionSpec spec;
  };
  Result<Placement> byRule(const ArgumentPath& path, const Shape& shape) const;
  Result<Placement> ofBatch(const ArgumentPath& path, const Shape& shape) const;
  const std::string* overrideFor(const ArgumentPath& path) const;

  sharding::Mesh m_mesh;
  std::vector<Rule> m_rules;
  std::map<std::string, std::string> m_overrides;
  std::string m_where;
};

}  // namespace tsr::train
