// PassManager: passes run in order with a report (names, times, changed, node counts), fixed-point groups
// stop when a round changes nothing or at their bound (logged), verify names the pass that broke the graph,
// pass errors carry the pass name, snapshots hold each step's graph and text; and the standard pipeline keeps
// the results of randomly composed traced programs while removing their redundancy.
#include <QtTest>

#include <nlohmann/json.hpp>
#include <random>

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

class TestPassManager : public QObject {
  Q_OBJECT
 private slots:
  void runsPassesInOrderAndReports() {
    std::vector<std::string> order;
    passes::PassManager pm("test", verified());
    pm.add<NamedNoop>(order, "first").add<GrowPass>(order, 1).add<NamedNoop>(order, "last");
    QCOMPARE(pm.describe(), (std::vector<std::string>{"first", "grow", "last"}));
    ir::Graph g = smallGraph();
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    QVERIFY2(report.ok(), report.ok() ? "" : report.error().message.c_str());
    QCOMPARE(order, (std::vector<std::string>{"first", "grow", "last"}));
    QCOMPARE(report->steps.size(), size_t(3));
    QCOMPARE(report->steps[1].pass, std::string("grow"));
    QVERIFY(!report->steps[0].changed && report->steps[1].changed && !report->steps[2].changed);
    QCOMPARE(report->steps[1].nodesBefore, 1);
    QCOMPARE(report->steps[1].nodesAfter, 2);
    QCOMPARE(report->nodesBefore, 1);
    QCOMPARE(report->nodesAfter, 2);
    QVERIFY(report->changed());
    for (const auto& s : report->steps) QVERIFY(s.seconds >= 0);
    QVERIFY(!report->steps[0].after.graph);  // snapshots are off by default
    // The decision is stamped with the pass and its step.
    QCOMPARE(ctx.log().size(), size_t(1));
    QCOMPARE(ctx.log().all()[0].pass, std::string("grow"));
    QCOMPARE(ctx.log().all()[0].step, 1);
    QVERIFY(QString::fromStdString(report->toText()).contains("grow"));
  }

  void fixedPointStopsWhenARoundChangesNothing() {
    std::vector<std::string> order;
    std::vector<std::unique_ptr<passes::Pass>> group;
    group.push_back(std::make_unique<GrowPass>(order, 2));
    group.push_back(std::make_unique<NamedNoop>(order, "noop"));
    passes::PassManager pm("test", verified());
    pm.addFixedPoint("fix", std::move(group), 5);
    QCOMPARE(pm.describe(), (std::vector<std::string>{"fix(grow, noop)"}));
    ir::Graph g = smallGraph();
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    QVERIFY(report.ok());
    // Rounds 0 and 1 grow, round 2 changes nothing and ends the group.
    QCOMPARE(order.size(), size_t(6));
    QCOMPARE(report->groups.size(), size_t(1));
    QCOMPARE(report->groups[0].iterations, 3);
    QVERIFY(report->groups[0].converged);
    QCOMPARE(report->steps[4].iteration, 2);
    QCOMPARE(report->steps[4].group, std::string("fix"));
    QCOMPARE(static_cast<int>(g.nodes().size()), 3);
  }

  void fixedPointIsBounded() {
    std::vector<std::string> order;
    std::vector<std::unique_ptr<passes::Pass>> group;
    group.push_back(std::make_unique<GrowPass>(order, 100));
    passes::PassManager pm("test", verified());
    pm.addFixedPoint("fix", std::move(group), 4);
    ir::Graph g = smallGraph();
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    QVERIFY(report.ok());
    QCOMPARE(report->groups[0].iterations, 4);
    QVERIFY(!report->groups[0].converged);
    QVERIFY(QString::fromStdString(report->toText()).contains("did not converge"));
    const passes::Decision& last = ctx.log().all().back();
    QCOMPARE(last.kind, passes::Decision::Kind::Note);
    QVERIFY(QString::fromStdString(last.message).contains("still changing after 4 iterations"));
  }

  void verifyNamesThePassThatBrokeTheGraph() {
    std::vector<std::string> order;
    passes::PassManager pm("test", verified());
    pm.add<NamedNoop>(order, "fine").add<BreakPass>();
    ir::Graph g = smallGraph();
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    QVERIFY(!report.ok());
    const std::string& message = report.error().message;
    QVERIFY2(message.starts_with("after pass breaker (step 2) the graph is invalid"), message.c_str());

    // With verification off the same pipeline runs through (release builds by default).
    passes::PipelineOptions off;
    off.verify = false;
    passes::PassManager quiet("test", off);
    quiet.add<BreakPass>();
    ir::Graph g2 = smallGraph();
    QVERIFY(quiet.run(g2, ctx).ok());
  }

  void invalidInputIsReportedBeforeAnyPass() {
    passes::PassManager pm("test", verified());
    pm.add<FailPass>();
    ir::Graph g = smallGraph();
    g.mutableNodes()[0].op = OpCode::Reshape;  // reshape with NoAttrs
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    QVERIFY(!report.ok());
    QVERIFY(QString::fromStdString(report.error().message).contains("the input graph is invalid"));
  }

  void passErrorsCarryThePassName() {
    passes::PassManager pm("test", verified());
    pm.add<FailPass>();
    ir::Graph g = smallGraph();
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    QVERIFY(!report.ok());
    QCOMPARE(report.error().message, std::string("pass failing (step 1): kernel exploded"));
  }

  void snapshotsHoldEveryStep() {
    std::vector<std::string> order;
    passes::PipelineOptions o = verified();
    o.snapshots = true;
    std::vector<int> seen;
    o.onStep = [&](int step, const passes::PassStep& s) {
      seen.push_back(step);
      QVERIFY(s.after.graph != nullptr);
    };
    passes::PassManager pm("test", o);
    pm.add<GrowPass>(order, 1).add<GrowPass>(order, 1);
    ir::Graph g = smallGraph();
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    QVERIFY(report.ok());
    QCOMPARE(seen, (std::vector<int>{0, 1}));
    QCOMPARE(report->input.text, printGraph(smallGraph()));
    QCOMPARE(report->steps[0].after.graph->nodes().size(), size_t(2));
    QCOMPARE(report->steps[1].after.text, printGraph(g));
    QCOMPARE(report->steps[0].after.text, printGraph(*report->steps[0].after.graph));
  }

  void reportJsonIsValid() {
    std::vector<std::string> order;
    std::vector<std::unique_ptr<passes::Pass>> group;
    group.push_back(std::make_unique<GrowPass>(order, 1));
    passes::PassManager pm("named \"pipeline\"", verified());
    pm.add<NamedNoop>(order, "a").addFixedPoint("fix", std::move(group), 3);
    ir::Graph g = smallGraph();
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    QVERIFY(report.ok());
    auto j = nlohmann::json::parse(report->toJson());
    QCOMPARE(j["pipeline"].get<std::string>(), std::string("named \"pipeline\""));
    QCOMPARE(j["steps"].size(), size_t(3));
    QCOMPARE(j["steps"][1]["group"].get<std::string>(), std::string("fix"));
    QCOMPARE(j["steps"][1]["changed"].get<bool>(), true);
    QCOMPARE(j["steps"][1]["nodes_after"].get<int>(), 2);
    QCOMPARE(j["groups"][0]["iterations"].get<int>(), 2);
  }

  void standardPipelineRemovesRedundancy() {
    // y = (tanh(x) + tanh(x)) * 1 + 0 - (-(-x)) * fullLike(x, 2) * fullLike(x, 0.5)
    auto cg = makeGraph(
        [](const std::vector<Array>& in) {
          const Array& x = in[0];
          Array t = (tanh(x) + tanh(x)) * 1.0 + 0.0;
          return std::vector<Array>{t - (-(-x)) * (fullLike(x, 2.0) * fullLike(x, 0.5))};
        },
        {f32({4, 5})});
    QVERIFY(cg.ok());
    ir::Graph g = cg->graph;
    ir::Graph before = g;
    passes::PassManager pm = passes::standardPipeline(verified());
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    QVERIFY2(report.ok(), report.ok() ? "" : report.error().message.c_str());
    QVERIFY(report->groups[0].converged);
    QCOMPARE(compareResults(before, g), std::string());
    // tanh once, the add, the sub; fullLike(2) * fullLike(0.5) is a splat of 1, so x * 1 -> x.
    QCOMPARE(g.count(OpCode::Tanh), 1);
    QCOMPARE(g.count(OpCode::Neg), 0);
    QCOMPARE(g.count(OpCode::Mul), 0);
    QCOMPARE(static_cast<int>(g.nodes().size()), 3);
  }

  void standardPipelineOnAGradientGraph() {
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
    QVERIFY2(cg.ok(), cg.ok() ? "" : cg.error().message.c_str());
    ir::Graph g = cg->graph;
    ir::Graph before = g;
    passes::PassManager pm = passes::standardPipeline(verified());
    passes::PassContext ctx(reg());
    auto report = pm.run(g, ctx);
    QVERIFY2(report.ok(), report.ok() ? "" : report.error().message.c_str());
    QVERIFY(report->groups[0].converged);
    QVERIFY(g.nodes().size() < before.nodes().size());
    QCOMPARE(compareResults(before, g), std::string());
  }

  void standardPipelineKeepsResultsOfRandomPrograms() {
    for (uint32_t seed = 0; seed < 60; ++seed) {
      auto cg = makeGraph([seed](const std::vector<Array>& in) { return randomProgram(seed, in); },
                          {f32({4, 5}), f32({4, 5}), f32({5})});
      QVERIFY2(cg.ok(), cg.ok() ? "" : cg.error().message.c_str());
      ir::Graph g = cg->graph;
      ir::Graph before = g;
      passes::PassManager pm = passes::standardPipeline(verified());
      passes::PassContext ctx(reg());
      auto report = pm.run(g, ctx);
      QVERIFY2(report.ok(), report.ok() ? "" : (report.error().message + "\n" + printGraph(before)).c_str());
      QVERIFY(report->groups[0].converged);
      QVERIFY(g.nodes().size() <= before.nodes().size());
      std::string diff = compareResults(before, g);
      QVERIFY2(diff.empty(),
               (fmt::format("seed {}: {}\n", seed, diff) + printGraph(before) + "\n" + printGraph(g)).c_str());
      // Running the pipeline again finds nothing more.
      passes::PassContext again(reg());
      auto second = pm.run(g, again);
      QVERIFY(second.ok() && !second->changed());
    }
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestPassManager)
#include "test_pass_manager.moc"
