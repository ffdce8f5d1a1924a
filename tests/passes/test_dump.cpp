// The DOT emitter (labels with op and aval, clusters by module path, edges incl. multi-result indices) and
// dumpPipeline (a .tir and a .dot per step, timings.json, decisions.txt) on a traced two-layer MLP.
#include "tests/check.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/passes/dot.h"
#include "engine/passes/dump.h"
#include "engine/passes/fusion.h"
#include "engine/passes/pipeline.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"
#include "tests/passes/pass_test_util.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;

namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int countOf(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

// x: [B, 8] -> layers.0 (8 -> 16, relu) -> layers.1 (16 -> 4), with redundancy for the cleanup passes.
ir::Graph tracedMlp() {
  auto cg = makeGraph(
      [](const std::vector<Array>& in) {
        Array h = in[0];
        for (int i = 0; i < 2; ++i) {
          ModuleScope scope("layers." + std::to_string(i));
          h = matmul(h, in[static_cast<size_t>(1 + 2 * i)]) + in[static_cast<size_t>(2 + 2 * i)];
          if (i == 0) h = relu(h) * 1.0;
        }
        return std::vector<Array>{h};
      },
      {f32({2, 8}), f32({8, 16}), f32({16}), f32({16, 4}), f32({4})}, "mlp");
  if (!cg.ok()) TSR_FATAL(cg.error().message);
  return cg->graph;
}

}  // namespace

TEST_CASE("dotHasLabelsClustersAndEdges") {
  Builder b("g");
  auto x = b.input(f32({2, 3}));
  Aval u = Aval{Shape{4}, DType::U32};
  auto k = b.input(u);
  auto e = b.add(OpCode::Exp, {x}, ir::NoAttrs{}, ir::Provenance{"blocks.0.attn", "m.cpp", 1});
  auto r = b.add(OpCode::Relu, {e}, ir::NoAttrs{}, ir::Provenance{"blocks.0.mlp", "m.cpp", 2});
  auto half = b.scalar(0.5);
  auto bits = b.addMulti(OpCode::Threefry2x32, {k, k, k, k});
  ir::Graph g = b.done({r, bits[1], half});
  std::string dot = passes::toDot(g, reg());
  REQUIRE(dot.starts_with("digraph \"g\" {"));
  REQUIRE(dot.find("label=\"exp\\n%2: f32[2,3]\"") != std::string::npos);
  REQUIRE(dot.find("label=\"constant 0.5\\n%4: f32[]\"") != std::string::npos);
  REQUIRE(dot.find("label=\"%0: f32[2,3]\"") != std::string::npos);
  // blocks > blocks.0 > {blocks.0.attn, blocks.0.mlp}
  TSR_COMPARE(countOf(dot, "subgraph cluster_"), 4);
  REQUIRE(dot.find("label=\"blocks.0.attn\"") != std::string::npos);
  REQUIRE(dot.find("label=\"blocks.0\"") != std::string::npos);
  REQUIRE(dot.find("in0 -> n0;") != std::string::npos);
  REQUIRE(dot.find("n0 -> n1;") != std::string::npos);
  REQUIRE(dot.find("n3 -> out1 [label=\"#1\"];") != std::string::npos);
  TSR_COMPARE(countOf(dot, " -> "), 1 + 1 + 4 + 3);
  TSR_COMPARE(countOf(dot, "{"), countOf(dot, "}"));

  passes::DotOptions flat;
  flat.clusters = false;
  TSR_COMPARE(countOf(passes::toDot(g, reg(), flat), "subgraph"), 0);
}

TEST_CASE("dumpWritesEveryStep") {
  TempDir tmp;
  REQUIRE(tmp.isValid());
  std::string dir = tmp.path() + "/dump";
  ir::Graph g = tracedMlp();
  auto r = passes::dumpPipeline(g, dir, reg());
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  const auto& steps = r->report.steps;
  REQUIRE(steps.size() >= 4);

  TSR_COMPARE(readFile(dir + "/00_input.tir"), printGraph(g));
  REQUIRE(readFile(dir + "/00_input.dot").starts_with("digraph \"mlp\""));
  for (size_t i = 0; i < steps.size(); ++i) {
    std::string stem = dir + "/" + fmt::format("{:02}_{}", i + 1, steps[i].pass);
    REQUIRE_MESSAGE(std::filesystem::exists(stem + ".tir"), stem.c_str());
    REQUIRE_MESSAGE(std::filesystem::exists(stem + ".dot"), stem.c_str());
  }
  std::string last = dir + "/" + fmt::format("{:02}_{}.tir", steps.size(), steps.back().pass);
  TSR_COMPARE(readFile(last), printGraph(r->graph));
  // The pipeline starts by inlining custom_vjp calls, then cleans up, simplify first.
  TSR_COMPARE(steps[0].pass, std::string("inline_calls"));
  REQUIRE(readFile(dir + "/02_simplify.dot").find("cluster_") != std::string::npos);

  auto j = nlohmann::json::parse(readFile(dir + "/timings.json"));
  TSR_COMPARE(j["steps"].size(), steps.size());
  TSR_COMPARE(j["steps"][1]["pass"].get<std::string>(), std::string("simplify"));
  std::string decisions = readFile(dir + "/decisions.txt");
  REQUIRE_MESSAGE(decisions.find("mul(x, 1) -> x") != std::string::npos, decisions.c_str());
  REQUIRE(decisions.find("layers.0") != std::string::npos);
  REQUIRE(std::filesystem::exists(dir + "/pipeline.txt"));
  TSR_COMPARE(compareResults(g, r->graph), std::string());

  // The last step is fusion: its kernels (one line each, as many as an independent plan has groups), its
  // .dot with one cluster per fused kernel, and its reasons in the decision log.
  TSR_COMPARE(steps.back().pass, std::string("fusion"));
  std::string stem = dir + "/" + fmt::format("{:02}_fusion", steps.size());
  auto plan = passes::planFusion(r->graph, reg());
  REQUIRE(plan.ok());
  std::string kernels = readFile(stem + ".kernels.txt");
  TSR_COMPARE(countOf(kernels, "\n"), static_cast<int>(plan->groups.size()));
  int fused = 0;
  for (const auto& gr : plan->groups) fused += gr.nodes.size() > 1;
  REQUIRE(fused > 0);
  TSR_COMPARE(countOf(readFile(stem + ".dot"), "(gemm)") + countOf(readFile(stem + ".dot"), "(loop)") +
                  countOf(readFile(stem + ".dot"), "(reduction)"),
              fused);
  REQUIRE_MESSAGE(decisions.find("[" + std::to_string(steps.size() - 1) + " fusion]") != std::string::npos,
                  decisions.c_str());
  REQUIRE(decisions.find("fused into fusion.") != std::string::npos);
}

TEST_CASE("dumpIntoAFileFails") {
  TempDir tmp;
  std::string file = tmp.path() + "/plain";
  std::ofstream(file) << "x";
  auto r = passes::dumpPipeline(tracedMlp(), file, reg());
  REQUIRE(!r.ok());
  REQUIRE(r.error().message.find("cannot create the dump folder") != std::string::npos);
}
