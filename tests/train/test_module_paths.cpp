// Module paths through the backward pass, on gpt2_mini's training step: every op a vjp rule emits lies in the
// module of the forward op it differentiates, the layer norms are modules of their own (h.N.ln_1, h.N.ln_2),
// and the IDE's catch-all groups ("update.*", "(shared)") hold no op of the forward or backward pass.
// The forward pass is found from the graph alone: the nodes the loss depends on. The backward ops of a forward
// op are found from the values they read, never from the provenance the code under test writes.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/core/env_options.h"
#include "engine/inspect/module_tree.h"
#include "engine/inspect/project_snapshot.h"
#include "engine/nn/layers.h"
#include "engine/project/project.h"
#include "engine/train/run.h"
#include "engine/train/setup.h"
#include "engine/transform/autodiff.h"
#include "tests/check.h"

using namespace tsr;

namespace {

const std::string kMini = std::string(TSR_SAMPLES) + "/gpt2_mini";

project::Project loadMini() {
  auto p = project::loadProject(kMini);
  if (!p.ok()) TSR_FATAL(p.error().message);
  return std::move(p).value();
}

// The nodes `from` depend on (the nodes of `from` included).
std::vector<bool> ancestors(const ir::Graph& g, const std::vector<ir::NodeId>& from) {
  std::vector<bool> in(g.nodes().size(), false);
  std::vector<ir::NodeId> work = from;
  while (!work.empty()) {
    ir::NodeId n = work.back();
    work.pop_back();
    if (n == ir::kNone || in[static_cast<size_t>(n)]) continue;
    in[static_cast<size_t>(n)] = true;
    for (ir::ValueId v : g.nodes()[static_cast<size_t>(n)].operands) work.push_back(g.value(v).producer);
  }
  return in;
}

bool isLayout(ir::OpCode op) {
  return op == ir::OpCode::Transpose || op == ir::OpCode::Reshape || op == ir::OpCode::BroadcastInDim ||
         op == ir::OpCode::Convert;
}

std::string pathOf(const ir::Graph& g, ir::NodeId n) { return g.nodes()[static_cast<size_t>(n)].prov.modulePath; }

// The step's graph with the forward pass (what the loss depends on) marked.
struct Step {
  ClosedGraph traced;
  std::vector<std::string> inputPaths, outputPaths;
  std::vector<bool> forward;

  const ir::Graph& graph() const { return traced.graph; }
  ir::ValueId input(const std::string& path) const {
    auto it = std::find(inputPaths.begin(), inputPaths.end(), path);
    if (it == inputPaths.end()) TSR_FATAL("no input " << path);
    return graph().inputs()[static_cast<size_t>(it - inputPaths.begin())];
  }
  bool isForward(ir::NodeId n) const { return n != ir::kNone && forward[static_cast<size_t>(n)]; }
  // Nodes reading value v.
  std::vector<ir::NodeId> consumers(ir::ValueId v) const {
    std::vector<ir::NodeId> out;
    for (size_t i = 0; i < graph().nodes().size(); ++i) {
      const auto& ops = graph().nodes()[i].operands;
      if (std::find(ops.begin(), ops.end(), v) != ops.end()) out.push_back(static_cast<ir::NodeId>(i));
    }
    return out;
  }
};

Step traceMiniStep() {
  Step s;
  auto cg = train::traceTrainingStep(loadMini());
  if (!cg.ok()) TSR_FATAL(cg.error().message);
  s.traced = std::move(cg).value();
  s.inputPaths = inspect::treePaths(s.traced.inputTree);
  s.outputPaths = inspect::treePaths(s.traced.outputTree);
  auto loss = std::find(s.outputPaths.begin(), s.outputPaths.end(), "loss");
  REQUIRE(loss != s.outputPaths.end());
  ir::ValueId lossValue = s.graph().outputs()[static_cast<size_t>(loss - s.outputPaths.begin())];
  s.forward = ancestors(s.graph(), {s.graph().value(lossValue).producer});
  return s;
}

// The forward values a backward node reads: its operands that the forward pass (or the step's inputs) made,
// looking through the layout ops of the backward pass (a transposed activation); `chain` collects those.
void forwardReads(const Step& s, ir::NodeId n, std::set<ir::ValueId>& reads, std::vector<ir::NodeId>& chain) {
  for (ir::ValueId v : s.graph().nodes()[static_cast<size_t>(n)].operands) {
    ir::NodeId p = s.graph().value(v).producer;
    if (p == ir::kNone || s.isForward(p)) {
      reads.insert(v);
    } else if (isLayout(s.graph().nodes()[static_cast<size_t>(p)].op)) {
      chain.push_back(p);
      forwardReads(s, p, reads, chain);
    }
  }
}

}  // namespace

// The forward pass's own paths: a layer norm is a module of its own, the attention's matmuls lie in attn.
TEST_CASE("layer norms are modules of their own") {
  Step s = traceMiniStep();
  const ir::Graph& g = s.graph();
  for (int block = 0; block < 2; ++block) {
    for (const char* ln : {"ln_1", "ln_2"}) {
      const std::string module = "h." + std::to_string(block) + "." + ln;
      CAPTURE(module);
      // The norm's output: the forward add that reads its bias (broadcast to [B, T, C]).
      ir::ValueId bias = s.input("params." + module + ".bias");
      ir::NodeId out = ir::kNone;
      std::vector<ir::ValueId> biasReads = {bias};
      for (ir::NodeId c : s.consumers(bias))
        if (s.isForward(c) && g.nodes()[static_cast<size_t>(c)].op == ir::OpCode::BroadcastInDim)
          biasReads.push_back(g.nodes()[static_cast<size_t>(c)].results[0]);
      for (ir::ValueId v : biasReads)
        for (ir::NodeId c : s.consumers(v))
          if (s.isForward(c) && g.nodes()[static_cast<size_t>(c)].op == ir::OpCode::Add) out = c;
      REQUIRE(out != ir::kNone);
      // Its input x: the latest node the output depends on whose result the forward pass also reads outside
      // the norm (the residual stream feeds the norm and the residual add).
      std::vector<bool> upstream = ancestors(g, {out});
      ir::NodeId x = ir::kNone;
      for (size_t n = 0; n < g.nodes().size(); ++n) {
        if (!upstream[n] || static_cast<ir::NodeId>(n) == out) continue;
        for (ir::ValueId r : g.nodes()[n].results)
          for (ir::NodeId c : s.consumers(r))
            if (s.isForward(c) && !upstream[static_cast<size_t>(c)]) x = static_cast<ir::NodeId>(n);
      }
      REQUIRE(x != ir::kNone);
      std::vector<bool> before = ancestors(g, {x});
      std::set<ir::NodeId> norm;
      for (size_t n = 0; n < g.nodes().size(); ++n)
        if (upstream[n] && !before[n] && g.nodes()[n].op != ir::OpCode::Constant) norm.insert(static_cast<ir::NodeId>(n));
      CHECK(norm.size() >= 8);  // mean, centring, variance, rsqrt, scale and shift, with their broadcasts
      for (ir::NodeId n : norm) CHECK_MESSAGE(pathOf(g, n) == module, "forward node " << n << " is in '" << pathOf(g, n) << "'");
      // The backward ops reading the norm's inner values (not its output, which c_attn's and c_fc's weight
      // gradients read) differentiate the norm.
      int backward = 0;
      for (ir::NodeId n : norm) {
        if (n == out) continue;
        for (ir::ValueId r : g.nodes()[static_cast<size_t>(n)].results)
          for (ir::NodeId c : s.consumers(r))
            if (!s.isForward(c)) {
              ++backward;
              CHECK_MESSAGE(pathOf(g, c) == module, "backward node " << c << " is in '" << pathOf(g, c) << "'");
            }
      }
      CHECK(backward > 0);
    }
  }
}

// Each matmul of the attention (c_attn, c_proj, and unfused q.k and probs.v) has two backward matmuls, one per
// operand, and they and the layout ops between them and the forward values lie in the attention's module; fused,
// the dot_product_attention op and its gradient lie there too.
TEST_CASE("the attention's backward matmuls lie in the attention") {
  for (const char* fused : {"on", "off"}) {
    CAPTURE(fused);
    setenv("TESSERA_FUSED_ATTENTION", fused, 1);
    reloadEnvOptions();
    Step s = traceMiniStep();
    unsetenv("TESSERA_FUSED_ATTENTION");
    reloadEnvOptions();
    const ir::Graph& g = s.graph();
    for (int block = 0; block < 2; ++block) {
      const std::string attn = "h." + std::to_string(block) + ".attn";
      CAPTURE(attn);
      int attentionOps = 0;
      for (size_t n = 0; n < g.nodes().size(); ++n) {
        const ir::OpCode op = g.nodes()[n].op;
        if (pathOf(g, static_cast<ir::NodeId>(n)) == attn &&
            (op == ir::OpCode::DotProductAttention || op == ir::OpCode::DotProductAttentionGrad))
          ++attentionOps;
      }
      CHECK(attentionOps == (std::string(fused) == "on" ? 2 : 0));
      int forwardDots = 0;
      for (size_t f = 0; f < g.nodes().size(); ++f) {
        if (!s.forward[f] || g.nodes()[f].op != ir::OpCode::DotGeneral || g.nodes()[f].prov.modulePath != attn)
          continue;
        ++forwardDots;
        const auto& operands = g.nodes()[f].operands;
        int backward = 0;
        for (size_t n = 0; n < g.nodes().size(); ++n) {
          if (s.forward[n] || g.nodes()[n].op != ir::OpCode::DotGeneral) continue;
          std::set<ir::ValueId> reads;
          std::vector<ir::NodeId> chain;
          forwardReads(s, static_cast<ir::NodeId>(n), reads, chain);
          if (std::none_of(operands.begin(), operands.end(), [&](ir::ValueId v) { return reads.count(v) > 0; }))
            continue;
          ++backward;
          chain.push_back(static_cast<ir::NodeId>(n));
          for (ir::NodeId c : chain)
            CHECK_MESSAGE(pathOf(g, c) == attn,
                          "node " << c << " (backward of forward matmul " << f << ") is in '" << pathOf(g, c) << "'");
        }
        CHECK_MESSAGE(backward == 2, "forward matmul " << f << " has " << backward << " backward matmuls");
      }
      CHECK(forwardDots == (std::string(fused) == "on" ? 2 : 4));
    }
  }
}

// What the IDE groups by output ("update.<parameter>", "(shared)", "(unused)"): nodes without a module path.
// None of them is a forward op, and none reads a forward value (as every vjp rule that needs its primal does).
TEST_CASE("the catch-all groups hold no op of the forward or backward pass") {
  Step s = traceMiniStep();
  const ir::Graph& g = s.graph();
  inspect::ModuleTree tree(g, s.outputPaths);
  int catchAll = 0;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const std::string& group = tree.group(tree.groupOfNode(static_cast<ir::NodeId>(n))).path;
    bool inCatchAll = group.rfind("update", 0) == 0 || group.rfind("(shared)", 0) == 0 || group.rfind("(unused)", 0) == 0;
    if (!inCatchAll) continue;
    ++catchAll;
    CAPTURE(n);
    CAPTURE(group);
    CHECK(!s.forward[n]);
    for (ir::ValueId v : g.nodes()[n].operands) CHECK(!s.isForward(g.value(v).producer));
  }
  CHECK(catchAll > 0);  // the optimizer's update is there
}

// The gradient alone (no optimizer): with the loss's value and the parameters' gradients as outputs, every node
// the loss does not depend on is the backward pass, and each lies in a module the forward pass has.
TEST_CASE("every backward op has a module path of the forward pass") {
  project::Project p = loadMini();
  train::SetupOverrides o;
  o.data = false;
  o.materialize = false;
  o.mesh = false;
  auto setup = train::makeTrainingSetup(p, o);
  REQUIRE_MESSAGE(setup.ok(), (setup.ok() ? "" : setup.error().message.c_str()));
  const project::BatchSignature& batch = setup->model.batch;
  auto loss = setup->model.loss;
  auto traced = makeGraph(
      [&](const Tree& args) {
        train::Batch b{args.find("inputs")->leaf(), args.find("targets")->leaf()};
        auto vg = valueAndGrad([&](const Tree& prm) {
          nn::Context ctx;
          return loss(prm, b, ctx);
        })(*args.find("params"));
        return Tree::dict({{"loss", Tree(vg.value)}, {"grads", vg.grads}});
      },
      TreeOf<Aval>::dict({{"params", *setup->avals->find("params")},
                          {"inputs", TreeOf<Aval>(batch.inputs)},
                          {"targets", TreeOf<Aval>(batch.targets)}}));
  REQUIRE_MESSAGE(traced.ok(), (traced.ok() ? "" : traced.error().message.c_str()));
  const ir::Graph& g = traced->graph;
  std::vector<std::string> outputs = inspect::treePaths(traced->outputTree);
  auto at = std::find(outputs.begin(), outputs.end(), "loss");
  REQUIRE(at != outputs.end());
  std::vector<bool> forward = ancestors(g, {g.value(g.outputs()[static_cast<size_t>(at - outputs.begin())]).producer});
  std::set<std::string> modules;
  for (size_t n = 0; n < g.nodes().size(); ++n)
    if (forward[n] && g.nodes()[n].op != ir::OpCode::Constant) modules.insert(g.nodes()[n].prov.modulePath);
  CHECK(!modules.count(""));  // the loss is a module too
  CHECK(modules.count("h.1.ln_2"));
  CHECK(modules.count("loss"));
  int backward = 0;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    if (forward[n] || g.nodes()[n].op == ir::OpCode::Constant) continue;
    ++backward;
    CHECK_MESSAGE(modules.count(g.nodes()[n].prov.modulePath) > 0, "backward node " << n << " ("
                  << ir::coreOpName(g.nodes()[n].op) << ") is in '" << g.nodes()[n].prov.modulePath << "'");
  }
  CHECK(backward > 200);
}
