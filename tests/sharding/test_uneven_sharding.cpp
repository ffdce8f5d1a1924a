// Shardings a project asks for must divide what they split, as JAX's device_put and jit refuse a sharding that
// does not: a [sharding] rule over a weight of 1023 columns on a 2-device 'model' axis, or a batch of 15 on a
// 2-device 'data' axis, is an error naming the file, the rule or the batch, the tensor, its shape, the dim and the
// mesh axis. Nothing is silently replicated. The same projects with shapes that divide train on the mesh to the
// one-device losses, with the tensors split as asked. Training (makeTrainingSetup) and the plan (`tessera shard
// plan`, the IDE's Sharding panel) check alike. Runs on 2 virtual CPU devices.
#include "tests/check.h"

#include <cmath>
#include <iomanip>
#include <vector>

#include "engine/project/project.h"
#include "engine/spmd/spmd.h"
#include "engine/train/data_source.h"
#include "engine/train/setup.h"
#include "engine/train/sharding_plan.h"
#include "tests/sharding/sharding_test_util.h"

using namespace tsr;
using tsr::test::must;

namespace {

constexpr int kSteps = 3;

struct TwoDevices {
  TwoDevices() { REQUIRE(spmd::setCpuDevices(2).ok()); }
};

// An MLP of `sizes` (input, hidden, classes) on synthetic digits, with the mesh and rules given.
project::Project mlpProject(const std::string& sizes, int64_t batch, const std::string& mesh, const std::string& rules) {
  const std::string toml = "[model]\nfamily = \"mlp\"\nsizes = [" + sizes +
                           "]\n[data]\nkind = \"synthetic-digits\"\n[train]\nbatch_size = " + std::to_string(batch) +
                           "\nsteps = 3\noptimizer = \"adamw\"\nlr = 0.01\n" + mesh + "[sharding]\n" + rules;
  return must(project::parseProject(toml, "project.toml", "/nonexistent/uneven"));
}

const std::string kModelMesh = "[mesh]\nshape = [1, 2]\naxes = [\"data\", \"model\"]\n";
const std::string kDataMesh = "[mesh]\nshape = [2]\naxes = [\"data\"]\n";

Result<train::TrainingSetup> setup(const project::Project& p, bool mesh) {
  train::SetupOverrides o;
  o.data = false;
  o.mesh = mesh;
  return train::makeTrainingSetup(p, o);
}

// kSteps on one synthetic batch of the project's shapes.
std::vector<double> losses(train::TrainingSetup& s) {
  train::Batch b = train::syntheticBatch(s.project, 0, 5);
  std::vector<double> out;
  for (int i = 0; i < kSteps; ++i) out.push_back(must(s.trainer->step(s.state, b)).loss);
  return out;
}

void requireSameLosses(const std::vector<double>& single, const std::vector<double>& sharded) {
  for (size_t i = 0; i < single.size(); ++i)
    REQUIRE_MESSAGE(std::abs(single[i] - sharded[i]) <= 1e-5 * std::abs(single[i]),
                    "step " << i << ": one device " << std::setprecision(10) << single[i] << ", sharded " << sharded[i]);
}

std::string specOf(const Tree& params, const std::string& path) {
  const std::vector<std::string> paths = params.paths();
  const std::vector<Array> leaves = params.leaves();
  for (size_t i = 0; i < paths.size(); ++i)
    if (paths[i] == path) return leaves[i].isSharded() ? leaves[i].sharding()->spec.toString() : "one device";
  return "absent";
}

std::string argumentSpec(const train::StepShardingPlan& plan, const std::string& path) {
  for (const auto& a : plan.arguments)
    if (a.path.toString() == path) return a.sharding.toString(plan.mesh);
  return "absent";
}

// The plan as `tessera shard plan` makes it, without compiling the per-device program (its arena).
train::ShardPlanOptions noCompile() {
  train::ShardPlanOptions o;
  o.compile = false;
  return o;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE_FIXTURE(TwoDevices, "aRuleThatDoesNotDivideItsParameterIsAnError") {
  const std::string rule = "'layers\\.0\\.weight' = \"None, model\"\n";
  const std::string expected =
      R"(project.toml: [sharding] rule 'layers\.0\.weight' matches params.layers.0.weight [16,1023], but )"
      R"(P(None, 'model') splits dim 1 of [16,1023] into 2 shards, which does not divide 1023 (mesh axis 'model' )"
      R"(has size 2); the dim must be a multiple of 2; change the rule, or put a rule for layers.0.weight before it)";
  project::Project odd = mlpProject("16, 1023, 10", 8, kModelMesh, rule);
  auto trained = setup(odd, true);
  REQUIRE(!trained.ok());
  TSR_COMPARE(trained.error().message, expected);
  // The plan (tessera shard plan, the Sharding panel) refuses it with the same words.
  auto planned = train::planStepSharding(odd, noCompile());
  REQUIRE(!planned.ok());
  REQUIRE_MESSAGE(contains(planned.error().message, expected), planned.error().message);

  // 1024 columns divide: the weight is split, and the losses are the one-device run's.
  project::Project even = mlpProject("16, 1024, 10", 8, kModelMesh, rule);
  auto single = must(setup(even, false));
  auto sharded = must(setup(even, true));
  TSR_COMPARE(specOf(sharded.state.params, "layers.0.weight"), std::string("P(None, 'model')"));
  requireSameLosses(losses(single), losses(sharded));
  auto plan = must(train::planStepSharding(even, noCompile()));
  TSR_COMPARE(argumentSpec(plan, "params.layers.0.weight"), std::string("P(None, 'model')"));
}

TEST_CASE_FIXTURE(TwoDevices, "aRuleMatchingManyParametersNamesTheOneItDoesNotDivide") {
  // 'weight' reaches both weights: [16,1024] divides over 'model', [1024,9] does not.
  const std::string broad = "'weight' = \"None, model\"\n";
  auto bad = setup(mlpProject("16, 1024, 9", 8, kModelMesh, broad), true);
  REQUIRE(!bad.ok());
  REQUIRE_MESSAGE(contains(bad.error().message, "rule 'weight' matches params.layers.1.weight [1024,9], but "
                                                "P(None, 'model') splits dim 1 of [1024,9] into 2 shards, which "
                                                "does not divide 9 (mesh axis 'model' has size 2)"),
                  bad.error().message);
  // A rule before it for that weight places it otherwise (first match wins): explicitly replicated here.
  auto fixed = setup(mlpProject("16, 1024, 9", 8, kModelMesh, "'layers\\.1\\.weight' = \"\"\n" + broad), true);
  REQUIRE_MESSAGE(fixed.ok(), fixed.error().message);
  TSR_COMPARE(specOf(fixed->state.params, "layers.0.weight"), std::string("P(None, 'model')"));
  TSR_COMPARE(specOf(fixed->state.params, "layers.1.weight"), std::string("P(None, None)"));
}

TEST_CASE_FIXTURE(TwoDevices, "aBatchTheDataAxisDoesNotDivideIsAnError") {
  project::Project odd = mlpProject("16, 32, 10", 15, kDataMesh, "");
  auto trained = setup(odd, true);
  REQUIRE(!trained.ok());
  TSR_COMPARE(trained.error().message,
              std::string("project.toml: [train] batch_size 15 is split over the mesh's first axis 'data' of size 2, "
                          "which does not divide it; make batch_size a multiple of 2"));
  auto planned = train::planStepSharding(odd, noCompile());
  REQUIRE(!planned.ok());
  REQUIRE_MESSAGE(contains(planned.error().message, "inputs [15,16]: the batch is split over the mesh's first axis "
                                                    "'data' of size 2, which does not divide its 15 rows"),
                  planned.error().message);

  // 16 divides: each device takes 8 rows, and the losses are the one-device run's.
  project::Project even = mlpProject("16, 32, 10", 16, kDataMesh, "");
  auto single = must(setup(even, false));
  auto sharded = must(setup(even, true));
  requireSameLosses(losses(single), losses(sharded));
  auto plan = must(train::planStepSharding(even, noCompile()));
  TSR_COMPARE(argumentSpec(plan, "inputs"), std::string("P('data', None)"));
  // A batch of another size handed to the same trainer is refused as it is placed.
  auto odd15 = sharded.trainer->step(sharded.state, train::syntheticBatch(odd, 0, 5));
  REQUIRE(!odd15.ok());
  REQUIRE_MESSAGE(contains(odd15.error().message, "inputs [15,16]: the batch is split over the mesh's first axis"),
                  odd15.error().message);
}
