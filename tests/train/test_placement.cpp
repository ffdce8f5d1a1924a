// The placement policy (engine/train/placement.h) against hand-written expectations: typed argument paths and
// their printed form, the first matching rule, overrides over rules, optimizer state following its parameter, the
// batch split over the mesh's first axis; and Trainer putting its state where the policy says.
#include "tests/check.h"

#include "engine/optim/optim.h"
#include "engine/spmd/spmd.h"
#include "engine/train/placement.h"
#include "engine/train/trainer.h"
#include "engine/transform/api.h"

using namespace tsr;
using train::ArgumentPath;

namespace {

template <class T>
T must(Result<T> r) {
  if (!r.ok()) TSR_FATAL(r.error().message);
  return std::move(r).value();
}

sharding::Mesh mesh2x2() { return must(sharding::Mesh::create({2, 2}, {"data", "model"})); }

ArgumentPath param(const std::string& p) { return {ArgumentPath::Param{p}}; }
ArgumentPath opt(const std::string& slot, const std::string& p) { return {ArgumentPath::OptState{slot, p}}; }
ArgumentPath batch(const std::string& name) { return {ArgumentPath::Batch{name}}; }

const std::vector<std::pair<std::string, std::string>> kRules = {
    {R"(attn\.w)", "None, model"},  // first: wins over the rule below for attention weights
    {R"(\.w$)", "model"},
};

// "P(...)" of a placement, "replicated" without a spec.
std::string specOf(const train::Placement& p) { return p.spec ? p.spec->toString() : "replicated"; }

}  // namespace

// Trainer's test puts arrays on four devices.
struct FourDevices {
  FourDevices() { REQUIRE(spmd::setCpuDevices(4).ok()); }
};

TEST_CASE("typedPathsPrintAsTheStepNamesThem") {
  const std::vector<std::string> step = {"params.w",   "params.h.0.attn.w", "opt.1.count", "opt.1.mu.h.0.attn.w",
                                         "opt.1.nu.w", "opt.count",         "inputs",      "targets",
                                         "step",       ""};
  auto typed = train::argumentPaths(step);
  TSR_COMPARE(typed.size(), step.size());
  REQUIRE(typed[0] == param("w"));
  REQUIRE(typed[1] == param("h.0.attn.w"));
  REQUIRE(typed[2] == opt("1.count", ""));
  // The longest parameter path it ends with: "h.0.attn.w", not "w".
  REQUIRE(typed[3] == opt("1.mu", "h.0.attn.w"));
  REQUIRE(typed[4] == opt("1.nu", "w"));
  REQUIRE(typed[5] == opt("count", ""));
  REQUIRE(typed[6] == batch("inputs"));
  REQUIRE(typed[7] == batch("targets"));
  REQUIRE(typed[8] == ArgumentPath{ArgumentPath::Other{"step"}});
  REQUIRE(typed[9] == ArgumentPath{ArgumentPath::Other{""}});
  for (size_t i = 0; i < step.size(); ++i) TSR_COMPARE(typed[i].toString(), step[i]);
  TSR_COMPARE(typed[3].relative(), std::string("1.mu.h.0.attn.w"));
  TSR_COMPARE(typed[1].relative(), std::string("h.0.attn.w"));
}

TEST_CASE("firstMatchingRuleWins") {
  auto policy = must(train::PlacementPolicy::create(mesh2x2(), kRules, {}, "p.toml: [sharding]"));
  auto attn = must(policy.place(param("h.0.attn.w"), Shape{4, 8}));
  TSR_COMPARE(specOf(attn), std::string("P(None, 'model')"));
  TSR_COMPARE(attn.source, std::string(R"(rule 'attn\.w')"));
  auto mlp = must(policy.place(param("h.0.mlp.w"), Shape{4, 8}));
  TSR_COMPARE(specOf(mlp), std::string("P('model')"));
  TSR_COMPARE(mlp.source, std::string(R"(rule '\.w$')"));
  // A rule whose spec does not divide the shape is an error naming the rule, the parameter, its shape, the dim
  // and the mesh axis (no later rule is tried, and it is not silently replicated).
  auto odd = policy.place(param("h.1.attn.w"), Shape{4, 7});
  REQUIRE(!odd.ok());
  TSR_COMPARE(odd.error().message,
              std::string(R"(p.toml: [sharding] rule 'attn\.w' matches params.h.1.attn.w [4,7], but P(None, 'model') )"
                          R"(splits dim 1 of [4,7] into 2 shards, which does not divide 7 (mesh axis 'model' has )"
                          R"(size 2); the dim must be a multiple of 2; change the rule, or put a rule for h.1.attn.w )"
                          R"(before it)"));
  // So is the optimizer state a rule reaches.
  auto oddState = policy.place(opt("1.mu", "h.1.attn.w"), Shape{4, 7});
  REQUIRE(!oddState.ok());
  REQUIRE_MESSAGE(oddState.error().message.find("matches opt.1.mu.h.1.attn.w [4,7]") != std::string::npos,
                  oddState.error().message);
  auto none = must(policy.place(param("h.0.ln.bias"), Shape{8}));
  TSR_COMPARE(specOf(none), std::string("replicated"));
  TSR_COMPARE(none.source, std::string("no rule"));
  // A spec of more dims than the array is an error that names the rule and the argument.
  auto bad = policy.place(param("h.0.attn.w"), Shape{8});
  REQUIRE(!bad.ok());
  TSR_COMPARE(bad.error().message, std::string(R"(p.toml: [sharding] rule 'attn\.w' matches params.h.0.attn.w [8], )"
                                            R"(but its spec P(None, 'model') has 2 dims)"));
}

TEST_CASE("overridesWinOverRules") {
  auto policy = must(train::PlacementPolicy::create(mesh2x2(), kRules,
                                                    {{"h.0.attn.w", "model, None"}, {"targets", ""}}, "sharding"));
  auto p = must(policy.place(param("h.0.attn.w"), Shape{4, 8}));
  TSR_COMPARE(specOf(p), std::string("P('model', None)"));
  TSR_COMPARE(p.source, std::string("set here"));
  // The other attention weight still follows its rule.
  TSR_COMPARE(specOf(must(policy.place(param("h.1.attn.w"), Shape{4, 8}))), std::string("P(None, 'model')"));
  // An override of the batch: targets whole, inputs still split.
  TSR_COMPARE(specOf(must(policy.place(batch("targets"), Shape{8}))), std::string("P()"));
  TSR_COMPARE(specOf(must(policy.place(batch("inputs"), Shape{8, 3}))), std::string("P('data')"));
  // An override that does not fit its array is an error naming the argument.
  auto bad = policy.place(param("h.0.attn.w"), Shape{3, 8});
  REQUIRE(!bad.ok());
  REQUIRE_MESSAGE(bad.error().message.rfind("params.h.0.attn.w: ", 0) == 0, bad.error().message);
}

TEST_CASE("optimizerStateFollowsItsParameter") {
  auto policy = must(train::PlacementPolicy::create(mesh2x2(), kRules, {{"h.1.mlp.w", "None, model"}}, "sharding"));
  auto mu = must(policy.place(opt("1.mu", "h.0.attn.w"), Shape{4, 8}));
  TSR_COMPARE(specOf(mu), std::string("P(None, 'model')"));
  TSR_COMPARE(mu.source, std::string(R"(rule 'attn\.w')"));
  TSR_COMPARE(specOf(must(policy.place(opt("1.nu", "h.0.mlp.w"), Shape{4, 8}))), std::string("P('model')"));
  // The parameter's override covers its state.
  auto over = must(policy.place(opt("1.mu", "h.1.mlp.w"), Shape{4, 8}));
  TSR_COMPARE(specOf(over), std::string("P(None, 'model')"));
  TSR_COMPARE(over.source, std::string("set here"));
  // State of its own (the step count) follows no parameter: no rule names it.
  auto count = must(policy.place(opt("1.count", ""), Shape{}));
  TSR_COMPARE(specOf(count), std::string("replicated"));
  TSR_COMPARE(count.source, std::string("no rule"));
}

TEST_CASE("batchSplitsOverTheFirstAxis") {
  auto policy = must(train::PlacementPolicy::create(mesh2x2(), kRules, {}, "sharding"));
  auto in = must(policy.place(batch("inputs"), Shape{8, 16}));
  TSR_COMPARE(specOf(in), std::string("P('data')"));
  TSR_COMPARE(in.source, std::string("the batch, over 'data'"));
  // A batch the first axis does not divide is an error, not a batch silently left whole on every device.
  auto odd = policy.place(batch("targets"), Shape{3, 16});
  REQUIRE(!odd.ok());
  TSR_COMPARE(odd.error().message, std::string("targets [3,16]: the batch is split over the mesh's first axis 'data' "
                                               "of size 2, which does not divide its 3 rows; make the batch size a "
                                               "multiple of 2"));
  TSR_COMPARE(specOf(must(policy.place(batch("targets"), Shape{}))), std::string("replicated"));
  // Rules name parameters only: a rule matching "step" leaves it alone.
  auto step = must(train::PlacementPolicy::create(mesh2x2(), {{"step", "data"}}, {}, "sharding"))
                  .place(ArgumentPath{ArgumentPath::Other{"step"}}, Shape{2});
  TSR_COMPARE(specOf(must(std::move(step))), std::string("replicated"));
}

TEST_CASE("badRulesAreRefused") {
  auto regex = train::PlacementPolicy::create(mesh2x2(), {{"(", "model"}}, {}, "sharding");
  REQUIRE(!regex.ok());
  REQUIRE_MESSAGE(regex.error().message.rfind("sharding rule '(': not a regular expression", 0) == 0,
                  regex.error().message);
  auto axis = train::PlacementPolicy::create(mesh2x2(), {{"w", "pipe"}}, {}, "p.toml: [sharding]");
  REQUIRE(!axis.ok());
  REQUIRE_MESSAGE(axis.error().message.rfind("p.toml: [sharding] rule 'w': ", 0) == 0, axis.error().message);
}

// Trainer asks the same policy: each parameter and each optimizer-state leaf is placed as the plan places it.
TEST_CASE_FIXTURE(FourDevices, "trainerPlacesStateByThePolicy") {
  train::TrainLossFn loss = [](const Tree& p, const train::Batch& b, nn::Context&) {
    return sum(matmul(b.inputs, p.find("h.0.attn.w")->leaf())) + sum(p.find("h.0.mlp.w")->leaf());
  };
  optim::Schedule lr = optim::constantSchedule(1e-3);
  train::Trainer trainer(loss, optim::adamw(lr, 0.9, 0.95, 1e-8, 0.1), lr, 0);
  REQUIRE(trainer.setSharding(train::TrainSharding{mesh2x2(), kRules}).ok());
  Tree params = Tree::dict(
      {{"h", Tree::dict({{"0", Tree::dict({{"attn", Tree::dict({{"w", Tree(Array::zeros(Shape{4, 8}))}})},
                                           {"mlp", Tree::dict({{"w", Tree(Array::zeros(Shape{4, 8}))}})},
                                           {"ln", Tree::dict({{"bias", Tree(Array::zeros(Shape{8}))}})}})}})}});
  train::TrainState st = trainer.init(params);
  std::map<std::string, std::string> got;
  auto record = [&](const std::string& prefix) {
    return [&got, prefix](const std::string& path, const Array& a) {
      got[prefix + path] = a.sharding() ? a.sharding()->spec.toString() : "none";
    };
  };
  st.params.visit(record("params."));
  st.optState.visit(record("opt."));
  TSR_COMPARE(got["params.h.0.attn.w"], std::string("P(None, 'model')"));
  // (devicePut pads a spec with None to the array's rank.)
  TSR_COMPARE(got["params.h.0.mlp.w"], std::string("P('model', None)"));
  TSR_COMPARE(got["params.h.0.ln.bias"], std::string("P(None)"));
  int followed = 0;
  for (const auto& [path, spec] : got) {
    if (path.rfind("opt.", 0) != 0) continue;
    if (path.size() > 11 && path.compare(path.size() - 10, 10, "h.0.attn.w") == 0) {
      TSR_COMPARE(spec, std::string("P(None, 'model')"));
      ++followed;
    } else if (path.size() > 10 && path.compare(path.size() - 9, 9, "h.0.mlp.w") == 0) {
      TSR_COMPARE(spec, std::string("P('model', None)"));
      ++followed;
    } else {
      const std::string what = path + " " + spec;  // clang 14 cannot capture structured bindings in the message
      REQUIRE_MESSAGE((spec == "P()" || spec == "P(None)"), what);  // replicated
    }
  }
  TSR_COMPARE(followed, 4);  // adamw's mu and nu of each
}
