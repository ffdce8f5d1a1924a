// PassManager: passes run in order with a report (names, times, changed, node counts), fixed-point groups
// stop when a round changes nothing or at their bound (logged), verify names the pass that broke the graph,
// pass errors carry the pass name, snapshots hold each step's graph and text; and the standard pipeline keeps
// the results of randomly composed traced programs while removing their redundancy.
#include "tests/check.h"

#include <nlohmann/json.hpp>
#include <random>

#include "engine/core/env_options.h"
#include "engine/passes/pipeline.h"
#include "engine/passes/rewrite.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"
#include "tests/passes/pass_test_util.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;

namespace {

// Appends neg(neg(output)) `times` times over its runs, then reports no change.
class GrowPass : public passes::Pass {
 public:
  GrowPass(std::vector<std::string>& order, int times) : m_order(order), m_times(times) {}
  std::string_view name() const override { return "grow"; }
  Result<bool> run(ir::Graph& g, passes::PassContext& ctx) override {
    m_order.push_back("grow");
    if (m_times-- <= 0) return false;
    auto n = g.addNode(ctx.registry(), OpCode::Neg, {g.outputs()[0]}, ir::NoAttrs{});
    g.setOutputs({(*n)[0]});
    ctx.record(g, static_cast<ir::NodeId>(g.nodes().size() - 1), "grew");
    return true;
  }

 private:
  std::vector<std::string>& m_order;
  int m_times;
};

class NamedNoop : public passes::Pass {
 public:
  NamedNoop(std::vector<std::string>& order, std::string name) : m_order(order), m_name(std::move(name)) {}
  std::string_view name() const override { return m_name; }
  Result<bool> run(ir::Graph&, passes::PassContext&) override {
    m_order.push_back(m_name);
    return false;
  }

 private:
  std::vector<std::string>& m_order;
  std::string m_name;
};

// Gives a node a wrong result aval: verify must catch it and name this pass.
class BreakPass : public passes::Pass {
 public:
  std::string_view name() const override { return "breaker"; }
  Result<bool> run(ir::Graph& g, passes::PassContext&) override {
    g.addNodeWithAvals(OpCode::Exp, {g.inputs()[0]}, ir::NoAttrs{}, {f32({7})});
    return true;
  }
};

class FailPass : public passes::Pass {
 public:
  std::string_view name() const override { return "failing"; }
  Result<bool> run(ir::Graph&, passes::PassContext&) override { return makeError("kernel exploded"); }
};

ir::Graph smallGraph() {
  Builder b;
  auto x = b.input(f32({3}));
  return b.done({b.add(OpCode::Exp, {x})});
}

passes::PipelineOptions verified() {
  passes::PipelineOptions o;
  o.verify = true;
  return o;
}

// A random program like test_jit's, with redundancy the cleanup passes should find.
std::vector<Array> randomProgram(uint32_t seed, const std::vector<Array>& in) {
  std::mt19937 rng(seed);
  std::vector<Array> pool = {in[0], in[1]};
  const Array& row = in[2];
  auto pick = [&]() -> const Array& { return pool[rng() % pool.size()]; };
  int steps = 4 + static_cast<int>(rng() % 10);
  for (int s = 0; s < steps; ++s) {
    const Array& a = pick();
    const Array& b = pick();
    switch (rng() % 14) {
      case 0: pool.push_back(tanh(a) + tanh(a)); break;
      case 1: pool.push_back(a * 1.0 + 0.0); break;
      case 2: pool.push_back(-(-(sin(a) * 0.5))); break;
      case 3: pool.push_back(relu(a) - abs(b)); break;
      case 4: pool.push_back(a * (fullLike(a, 2.0) * fullLike(a, 0.25))); break;
      case 5: pool.push_back(a * b + a * b); break;
      case 6: pool.push_back(maximum(a, b) - 0.25); break;
      case 7: pool.push_back(a + row); break;
      case 8: pool.push_back(transpose(transpose(a)) * 2.0); break;
      case 9: pool.push_back(a - mean(a, {1}, true)); break;
      case 10: pool.push_back(reshape(reshape(a, {20}) + 1.0, {4, 5})); break;
      case 11: pool.push_back(where(a > b, a, a)); break;
      case 12: pool.push_back(concatenate({sliceAxis(a, 1, 0, 5)}, 1) / 1.0); break;
      case 13: pool.push_back(astype(astype(a, DType::F32), DType::F32) + exp(Array::scalar(0.5))); break;
    }
  }
  return {pool.back(), sum(pool[pool.size() / 2], {0})};
}

}  // namespace

TEST_CASE("runsPassesInOrderAndReports") {
  std::vector<std::string> order;
  passes::PassManager pm("test", verified());
  pm.add<NamedNoop>(order, "first").add<GrowPass>(order, 1).add<NamedNoop>(order, "last");
  TSR_COMPARE(pm.describe(), (std::vector<std::string>{"first", "grow", "last"}));
  ir::Graph g = smallGraph();
  passes::PassContext ctx(reg());
  auto report = pm.run(g, ctx);
  REQUIRE_MESSAGE(report.ok(), report.error().message);
  TSR_COMPARE(order, (std::vector<std::string>{"first", "grow", "last"}));
  TSR_COMPARE(report->steps.size(), size_t(3));
  TSR_COMPARE(report->steps[1].pass, std::string("grow"));
  REQUIRE((!report->steps[0].changed && report->steps[1].changed && !report->steps[2].changed));
  TSR_COMPARE(report->steps[1].nodesBefore, 1);
  TSR_COMPARE(report->steps[1].nodesAfter, 2);
  TSR_COMPARE(report->nodesBefore, 1);
  TSR_COMPARE(report->nodesAfter, 2);
  REQUIRE(report->changed());
  for (const auto& s : report->steps) REQUIRE(s.seconds >= 0);
  REQUIRE(!report->steps[0].after.graph);  // snapshots are off by default
  // The decision is stamped with the pass and its step.
  TSR_COMPARE(ctx.log().size(), size_t(1));
  TSR_COMPARE(ctx.log().all()[0].pass, std::string("grow"));
  TSR_COMPARE(ctx.log().all()[0].step, 1);
  REQUIRE(report->toText().find("grow") != std::string::npos);
}

TEST_CASE("fixedPointStopsWhenARoundChangesNothing") {
  std::vector<std::string> order;
  std::vector<std::unique_ptr<passes::Pass>> group;
  group.push_back(std::make_unique<GrowPass>(order, 2));
  group.push_back(std::make_unique<NamedNoop>(order, "noop"));
  passes::PassManager pm("test", verified());
  pm.addFixedPoint("fix", std::move(group), 5);
  TSR_COMPARE(pm.describe(), (std::vector<std::string>{"fix(grow, noop)"}));
  ir::Graph g = smallGraph();
  passes::PassContext ctx(reg());
  auto report = pm.run(g, ctx);
  REQUIRE(report.ok());
  // Rounds 0 and 1 grow, round 2 changes nothing and ends the group.
  TSR_COMPARE(order.size(), size_t(6));
  TSR_COMPARE(report->groups.size(), size_t(1));
  TSR_COMPARE(report->groups[0].iterations, 3);
  REQUIRE(report->groups[0].converged);
  TSR_COMPARE(report->steps[4].iteration, 2);
  TSR_COMPARE(report->steps[4].group, std::string("fix"));
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 3);
}

TEST_CASE("fixedPointIsBounded") {
  std::vector<std::string> order;
  std::vector<std::unique_ptr<passes::Pass>> group;
  group.push_back(std::make_unique<GrowPass>(order, 100));
  passes::PassManager pm("test", verified());
  pm.addFixedPoint("fix", std::move(group), 4);
  ir::Graph g = smallGraph();
  passes::PassContext ctx(reg());
  auto report = pm.run(g, ctx);
  REQUIRE(report.ok());
  TSR_COMPARE(report->groups[0].iterations, 4);
  REQUIRE(!report->groups[0].converged);
  REQUIRE(report->toText().find("did not converge") != std::string::npos);
  const passes::Decision& last = ctx.log().all().back();
  TSR_COMPARE(last.kind, passes::Decision::Kind::Note);
  REQUIRE(last.message.find("still changing after 4 iterations") != std::string::npos);
}

TEST_CASE("verifyNamesThePassThatBrokeTheGraph") {
  std::vector<std::string> order;
  passes::PassManager pm("test", verified());
  pm.add<NamedNoop>(order, "fine").add<BreakPass>();
  ir::Graph g = smallGraph();
  passes::PassContext ctx(reg());
  auto report = pm.run(g, ctx);
  REQUIRE(!report.ok());
  const std::string& message = report.error().message;
  REQUIRE_MESSAGE(message.starts_with("after pass breaker (step 2) the graph is invalid"), message.c_str());

  // With verification off the same pipeline runs through (release builds by default).
  passes::PipelineOptions off;
  off.verify = false;
  passes::PassManager quiet("test", off);
  quiet.add<BreakPass>();
  ir::Graph g2 = smallGraph();
  REQUIRE(quiet.run(g2, ctx).ok());
}

// TESSERA_VERIFY_PASSES overrides the pipeline's option: `end` checks once after the last pass (the broken graph
// is still caught, without the pass's name), `off` not at all, `each` after every pass even where the options
// say not to.
TEST_CASE("verifyPassesFromTheEnvironment") {
  struct Restore {
    ~Restore() {
      unsetenv("TESSERA_VERIFY_PASSES");
      reloadEnvOptions();
    }
  } restore;
  auto run = [](const char* mode, bool verify) {
    setenv("TESSERA_VERIFY_PASSES", mode, 1);
    reloadEnvOptions();
    std::vector<std::string> order;
    passes::PipelineOptions options;
    options.verify = verify;
    passes::PassManager pm("test", options);
    pm.add<BreakPass>().add<NamedNoop>(order, "after");
    ir::Graph g = smallGraph();
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    return report.ok() ? std::string() : report.error().message;
  };
  const std::string atEnd = run("end", true);
  REQUIRE_MESSAGE(atEnd.starts_with("after pipeline test the graph is invalid"), atEnd.c_str());
  TSR_COMPARE(run("off", true), std::string());
  const std::string each = run("each", false);
  REQUIRE_MESSAGE(each.starts_with("after pass breaker (step 1) the graph is invalid"), each.c_str());
}

TEST_CASE("invalidInputIsReportedBeforeAnyPass") {
  passes::PassManager pm("test", verified());
  pm.add<FailPass>();
  ir::Graph g = smallGraph();
  g.mutableNodes()[0].op = OpCode::Reshape;  // reshape with NoAttrs
  passes::PassContext ctx(reg());
  auto report = pm.run(g, ctx);
  REQUIRE(!report.ok());
  REQUIRE(report.error().message.find("the input graph is invalid") != std::string::npos);
}

TEST_CASE("passErrorsCarryThePassName") {
  passes::PassManager pm("test", verified());
  pm.add<FailPass>();
  ir::Graph g = smallGraph();
  passes::PassContext ctx(reg());
  auto report = pm.run(g, ctx);
  REQUIRE(!report.ok());
  TSR_COMPARE(report.error().message, std::string("pass failing (step 1): kernel exploded"));
}

TEST_CASE("snapshotsHoldEveryStep") {
  std::vector<std::string> order;
  passes::PipelineOptions o = verified();
  o.snapshots = true;
  std::vector<int> seen;
  o.onStep = [&](int step, const passes::PassStep& s) {
    seen.push_back(step);
    REQUIRE(s.after.graph != nullptr);
  };
  passes::PassManager pm("test", o);
  pm.add<GrowPass>(order, 1).add<GrowPass>(order, 1);
  ir::Graph g = smallGraph();
  passes::PassContext ctx(reg());
  auto report = pm.run(g, ctx);
  REQUIRE(report.ok());
  TSR_COMPARE(seen, (std::vector<int>{0, 1}));
  TSR_COMPARE(report->input.text, printGraph(smallGraph()));
  TSR_COMPARE(report->steps[0].after.graph->nodes().size(), size_t(2));
  TSR_COMPARE(report->steps[1].after.text, printGraph(g));
  TSR_COMPARE(report->steps[0].after.text, printGraph(*report->steps[0].after.graph));
}

TEST_CASE("reportJsonIsValid") {
  std::vector<std::string> order;
  std::vector<std::unique_ptr<passes::Pass>> group;
  group.push_back(std::make_unique<GrowPass>(order, 1));
  passes::PassManager pm("named \"pipeline\"", verified());
  pm.add<NamedNoop>(order, "a").addFixedPoint("fix", std::move(group), 3);
  ir::Graph g = smallGraph();
  passes::PassContext ctx(reg());
  auto report = pm.run(g, ctx);
  REQUIRE(report.ok());
  auto j = nlohmann::json::parse(report->toJson());
  TSR_COMPARE(j["pipeline"].get<std::string>(), std::string("named \"pipeline\""));
  TSR_COMPARE(j["steps"].size(), size_t(3));
  TSR_COMPARE(j["steps"][1]["group"].get<std::string>(), std::string("fix"));
  TSR_COMPARE(j["steps"][1]["changed"].get<bool>(), true);
  TSR_COMPARE(j["steps"][1]["nodes_after"].get<int>(), 2);
  TSR_COMPARE(j["groups"][0]["iterations"].get<int>(), 2);
}

TEST_CASE("standardPipelineRemovesRedundancy") {
  // y = (tanh(x) + tanh(x)) * 1 + 0 - (-(-x)) * fullLike(x, 2) * fullLike(x, 0.5)
  auto cg = makeGraph(
      [](const std::vector<Array>& in) {
        const Array& x = in[0];
        Array t = (tanh(x) + tanh(x)) * 1.0 + 0.0;
        return std::vector<Array>{t - (-(-x)) * (fullLike(x, 2.0) * fullLike(x, 0.5))};
      },
      {f32({4, 5})});
  REQUIRE(cg.ok());
  ir::Graph g = cg->graph;
  ir::Graph before = g;
  passes::PassManager pm = passes::standardPipeline(verified());
  passes::PassContext ctx(reg());
  auto report = pm.run(g, ctx);
  REQUIRE_MESSAGE(report.ok(), report.error().message);
  REQUIRE(report->groups[0].converged);
  TSR_COMPARE(compareResults(before, g), std::string());
  // tanh once, the add, the sub; fullLike(2) * fullLike(0.5) is a splat of 1, so x * 1 -> x.
  TSR_COMPARE(g.count(OpCode::Tanh), 1);
  TSR_COMPARE(g.count(OpCode::Neg), 0);
  TSR_COMPARE(g.count(OpCode::Mul), 0);
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 3);
}

TEST_CASE("standardPipelineOnAGradientGraph") {
  // The gradient of a small classifier's loss: the vjp rules leave zeros, ones and repeated broadcasts.
  auto cg = makeGraph(
      [](const std::vector<Array>& in) {
        auto loss = [](const std::vector<Array>& p) {
          Array h = tanh(matmul(p[0], p[1]) + p[2]);  // [4, 3]
          return std::vector<Array>{-mean(logSoftmax(h) * 1.0)};
        };
        VjpOutput out = vjp(loss, in);
        std::vector<Array> grads = out.pullback({onesLike(out.outputs[0])});
        grads.push_back(out.outputs[0]);
        return grads;
      },
      {f32({4, 5}), f32({5, 3}), f32({3})});
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  ir::Graph g = cg->graph;
  ir::Graph before = g;
  passes::PassManager pm = passes::standardPipeline(verified());
  passes::PassContext ctx(reg());
  auto report = pm.run(g, ctx);
  REQUIRE_MESSAGE(report.ok(), report.error().message);
  REQUIRE(report->groups[0].converged);
  REQUIRE(g.nodes().size() < before.nodes().size());
  TSR_COMPARE(compareResults(before, g), std::string());
}

TEST_CASE("standardPipelineKeepsResultsOfRandomPrograms") {
  for (uint32_t seed = 0; seed < 60; ++seed) {
    auto cg = makeGraph([seed](const std::vector<Array>& in) { return randomProgram(seed, in); },
                        {f32({4, 5}), f32({4, 5}), f32({5})});
    REQUIRE_MESSAGE(cg.ok(), cg.error().message);
    ir::Graph g = cg->graph;
    ir::Graph before = g;
    passes::PassManager pm = passes::standardPipeline(verified());
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    REQUIRE_MESSAGE(report.ok(), (report.ok() ? "" : (report.error().message + "\n" + printGraph(before)).c_str()));
    REQUIRE(report->groups[0].converged);
    REQUIRE(g.nodes().size() <= before.nodes().size());
    std::string diff = compareResults(before, g);
    REQUIRE_MESSAGE(diff.empty(),
                    (fmt::format("seed {}: {}\n", seed, diff) + printGraph(before) + "\n" + printGraph(g)).c_str());
    // Running the pipeline again finds nothing more.
    passes::PassContext again(reg());
    auto second = pm.run(g, again);
    REQUIRE((second.ok() && !second->changed()));
  }
}
