// The sharding planner on random meshes and specs: a small MLP's training step (traced once per layer sizes)
// planned on a mesh of 1 to 3 axes whose sizes, names and device counts come from the input, with rules and
// overrides whose PartitionSpecs are built from the mesh's axes, other names, None and tuples. Every plan
// succeeds or is an error; nothing crashes. The graph is verified once after each pass pipeline rather than
// after every pass (TESSERA_VERIFY_PASSES=end unless set): a broken graph is still caught, at about a quarter
// less time per input.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "engine/core/env_options.h"
#include "engine/project/project.h"
#include "engine/train/sharding_plan.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace tsr;

const char* kAxisNames[] = {"data", "model", "x", "", "data"};
const char* kParams[] = {"layers\\.0\\.weight", "layers\\.1\\.weight", "bias", "weight", ".*", "(", "layers"};

// One dim of a PartitionSpec: None, an axis of the mesh, another name, or a tuple of two.
std::string specDim(fuzz::Bytes& in, const std::vector<std::string>& axes) {
  switch (in.below(5)) {
    case 0: return "None";
    case 1: case 2: return axes.empty() ? "None" : axes[in.below(uint32_t(axes.size()))];
    case 3: {
      return kAxisNames[in.below(5)];
    }
    default: {
      std::string a = axes.empty() ? "x" : axes[in.below(uint32_t(axes.size()))];
      std::string b = axes.empty() ? "y" : axes[in.below(uint32_t(axes.size()))];
      return "(" + a + ", " + b + ")";
    }
  }
}

std::string spec(fuzz::Bytes& in, const std::vector<std::string>& axes) {
  uint32_t rank = in.below(4);
  std::string s;
  for (uint32_t d = 0; d < rank; ++d) s += (d ? ", " : "") + specDim(in, axes);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool verifyAtEnd = [] {
    setenv("TESSERA_VERIFY_PASSES", "end", 0);
    reloadEnvOptions();
    return true;
  }();
  (void)verifyAtEnd;
  fuzz::Bytes in(data, size);
  // Layer sizes from a few choices, so that the traced steps can be kept.
  static const int64_t kSizes[] = {1, 2, 3, 4, 6, 8};
  int64_t a = kSizes[in.below(6)], b = kSizes[in.below(6)], c = kSizes[in.below(6)];
  // The mesh: 1 to 3 axes; sizes 0 to 9 (0 and a size that does not divide a dim included).
  uint32_t rank = 1 + in.below(3);
  std::vector<int64_t> shape;
  std::vector<std::string> axes;
  for (uint32_t i = 0; i < rank; ++i) {
    shape.push_back(in.below(10));
    axes.push_back(i == 0 ? "data" : (i == 1 ? "model" : "z"));
  }
  if (in.below(4) == 0) axes.pop_back();  // axis names and shape of different lengths
  std::string toml = fmt::format("[model]\nfamily = \"mlp\"\nsizes = [{}, {}, {}]\n[data]\nkind = \"synthetic-digits\"\n"
                                 "[train]\nbatch_size = {}\nsteps = 2\n[mesh]\nshape = [",
                                 a, b, c, kSizes[in.below(6)]);
  for (size_t i = 0; i < shape.size(); ++i) toml += (i ? ", " : "") + std::to_string(shape[i]);
  toml += "]\naxes = [";
  for (size_t i = 0; i < axes.size(); ++i) toml += (i ? ", \"" : "\"") + axes[i] + "\"";
  toml += "]\n[sharding]\n";
  uint32_t rules = in.below(4);
  for (uint32_t i = 0; i < rules; ++i)
    toml += fmt::format("'{}' = \"{}\"\n", kParams[in.below(7)], spec(in, axes));
  static const bool verbose = std::getenv("TSR_FUZZ_VERBOSE") != nullptr;
  auto p = project::parseProject(toml, "project.toml", "/nonexistent/fuzz");
  if (verbose) std::fprintf(stderr, "%s-> %s\n", toml.c_str(), p.ok() ? "parsed" : p.error().message.c_str());
  if (!p.ok()) return 0;

  static std::map<std::string, std::shared_ptr<train::PlannableStep>> traced;
  std::string key = fmt::format("{}-{}-{}-{}", a, b, c, p->train.batchSize);
  if (!traced.count(key)) {
    auto step = train::traceStepForPlan(*p);
    traced[key] = step.ok() ? std::make_shared<train::PlannableStep>(std::move(*step)) : nullptr;
  }
  if (!traced[key]) return 0;
  train::ShardPlanOptions options;
  options.compile = false;
  if (in.below(2)) options.overrides["inputs"] = spec(in, axes);
  if (in.below(2)) options.overrides["params.layers.0.weight"] = spec(in, axes);
  auto plan = train::planStepSharding(*p, *traced[key], options);
  if (verbose) std::fprintf(stderr, "plan: %s\n", plan.ok() ? "ok" : plan.error().message.c_str());
  return 0;
}
