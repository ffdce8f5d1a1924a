// Memory over a training step (engine/train/step_memory.h): each buffer's kind from the step's dataflow, the
// live bytes and the peak, checked against a hand-built step and against sizes worked out from the model; what
// [train] remat saves, and that it trains alike.
#include "tests/check.h"

#include <map>

#include "engine/ops/registry.h"
#include "engine/passes/fusion.h"
#include "engine/train/data_source.h"
#include "engine/train/profile_run.h"
#include "engine/train/setup.h"
#include "engine/train/step_memory.h"
#include "tests/temp_dir.h"
#include "tests/train/project_files.h"

using namespace tsr;
using train::MemoryKind;

namespace {

const train::MemoryBuffer* bufferOf(const train::StepMemory& m, ir::ValueId v) {
  for (const auto& b : m.buffers)
    if (b.value == v) return &b;
  return nullptr;
}

const train::MemoryBuffer* argument(const train::StepMemory& m, const std::string& what) {
  for (const auto& b : m.buffers)
    if (b.op == "argument" && b.what == what) return &b;
  return nullptr;
}

// What the chart and the list both say must agree, and the peak is the most live bytes of any kernel.
void checkConsistent(const train::StepMemory& m) {
  REQUIRE(!m.live.empty());
  int64_t most = 0;
  for (int k = 0; k < static_cast<int>(m.live.size()); ++k) most = std::max(most, m.liveAt(k));
  TSR_COMPARE(m.peakBytes, most);
  int64_t listed = 0;
  for (int i : m.atPeak) listed += m.buffers[static_cast<size_t>(i)].bytes;
  TSR_COMPARE(listed, m.peakBytes);
  REQUIRE(m.arenaPeakLiveBytes <= m.arenaBytes);
  REQUIRE(m.arenaBytes <= m.intermediateBytes);
}

}  // namespace

// loss = sum(exp(x * w)); the backward pass reads e = exp(x * w) (so e is an activation), and w - e * x is the
// new parameter, written into w's donated buffer.
TEST_CASE("kindsFollowTheDataflow") {
  const auto& reg = ops::registry();
  ir::Graph g;
  const Aval vec{Shape{1024}, DType::F32};
  ir::ValueId w = g.addInput(vec), x = g.addInput(vec);
  ir::ValueId a = (*g.addNode(reg, ir::OpCode::Mul, {x, w}, ir::NoAttrs{}))[0];
  ir::ValueId e = (*g.addNode(reg, ir::OpCode::Exp, {a}, ir::NoAttrs{}))[0];
  ir::ValueId loss = (*g.addNode(reg, ir::OpCode::ReduceSum, {e}, ir::ReduceAttrs{{0}}))[0];
  ir::ValueId gw = (*g.addNode(reg, ir::OpCode::Mul, {e, x}, ir::NoAttrs{}))[0];
  ir::ValueId w2 = (*g.addNode(reg, ir::OpCode::Sub, {w, gw}, ir::NoAttrs{}))[0];
  g.setOutputs({w2, loss});
  auto plan = passes::planFusion(g, reg);
  REQUIRE_MESSAGE(plan.ok(), plan.error().message);
  cpu::CompileOptions co;
  co.donatable = {true, false};
  auto exe = cpu::Executable::compile(g, reg, *plan, co);
  REQUIRE_MESSAGE(exe.ok(), exe.error().message);
  const std::vector<MemoryKind> in = {MemoryKind::Parameters, MemoryKind::Inputs};
  const std::vector<std::string> inNames = {"params.w", "inputs"};
  const std::vector<MemoryKind> out = {MemoryKind::Parameters, MemoryKind::Temporaries};
  const std::vector<std::string> outNames = {"params.w", "loss"};
  train::StepMemory m = train::analyzeStepMemory(**exe, in, inNames, out, outNames, /*lossOutput=*/1);
  checkConsistent(m);
  // The arguments, whole step long.
  REQUIRE(argument(m, "params.w"));
  TSR_COMPARE(argument(m, "params.w")->kind, MemoryKind::Parameters);
  TSR_COMPARE(argument(m, "params.w")->bytes, int64_t(4096));
  TSR_COMPARE(argument(m, "inputs")->kind, MemoryKind::Inputs);
  // e is read by the loss's reduction and by the backward product: it leaves its kernel, and it is kept.
  const train::MemoryBuffer* eb = bufferOf(m, e);
  REQUIRE_MESSAGE(eb, (*exe)->describe());
  TSR_COMPARE(eb->kind, MemoryKind::Activations);
  TSR_COMPARE(eb->bytes, int64_t(4096));
  TSR_COMPARE(eb->op, std::string("exp"));
  // The new parameter takes w's buffer: nothing of its own.
  REQUIRE(!bufferOf(m, w2));
  // Whatever else holds bytes: the loss (4 bytes, a temporary) and, if the fusion plan materialises them, the
  // product x * w (forward, read only by exp: a temporary) and the gradient e * x (backward).
  for (const auto& b : m.buffers) {
    if (b.value == loss) TSR_COMPARE(b.kind, MemoryKind::Temporaries);
    if (b.value == a) TSR_COMPARE(b.kind, MemoryKind::Temporaries);
    if (b.value == gw) TSR_COMPARE(b.kind, MemoryKind::Gradients);
  }
  // At least both arguments and e at the peak: 3 x 4 KiB.
  REQUIRE(m.peakBytes >= 3 * 4096);
}

TEST_CASE("mlpStepSizesAsTheModelGivesThem") {
  test::TempDir dir;
  const std::string toml =
      "[model]\nfamily = \"mlp\"\nsizes = [64, 32, 10]\n[data]\nkind = \"synthetic-digits\"\n"
      "[train]\nbatch_size = 16\nsteps = 1\noptimizer = \"adam\"\n";
  auto p = test::writeProject(dir.path(), toml);
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  auto m = train::projectStepMemory(*p);
  REQUIRE_MESSAGE(m.ok(), m.error().message);
  checkConsistent(*m);
  TSR_COMPARE(m->device, std::string("one device"));
  const int64_t paramBytes = (64 * 32 + 32 + 32 * 10 + 10) * 4;
  const auto& peak = m->live[static_cast<size_t>(m->peakKernel)];
  TSR_COMPARE(peak[size_t(MemoryKind::Parameters)], paramBytes);
  // Adam: mu and nu per parameter, and a step count.
  REQUIRE(peak[size_t(MemoryKind::OptimizerState)] >= 2 * paramBytes);
  REQUIRE(peak[size_t(MemoryKind::OptimizerState)] <= 2 * paramBytes + 16);
  TSR_COMPARE(argument(*m, "inputs")->bytes, int64_t(16 * 64 * 4));
  TSR_COMPARE(argument(*m, "params.layers.0.weight")->bytes, int64_t(64 * 32 * 4));
  // The hidden layer's activations [16, 32] are kept for the backward pass, and gradients are made.
  int64_t activations = 0, gradients = 0;
  for (const auto& row : m->live) {
    activations = std::max(activations, row[size_t(MemoryKind::Activations)]);
    gradients = std::max(gradients, row[size_t(MemoryKind::Gradients)]);
  }
  REQUIRE(activations >= 16 * 32 * 4);
  REQUIRE(gradients >= 32 * 10 * 4);
  // Every buffer names what made it.
  for (const auto& b : m->buffers) REQUIRE_MESSAGE(!b.op.empty(), b.value);
  const std::string json = train::stepMemoryJson(*m);
  REQUIRE(json.find("\"peak\"") != std::string::npos);
  REQUIRE(json.find("\"optimizer state\"") != std::string::npos);
}

// Under a mesh, the program one device runs: the batch split over 'data', the parameters whole on each.
TEST_CASE("perDeviceUnderAMesh") {
  test::TempDir dir;
  const std::string toml =
      "[model]\nfamily = \"mlp\"\nsizes = [64, 32, 10]\n[data]\nkind = \"synthetic-digits\"\n"
      "[train]\nbatch_size = 16\nsteps = 1\noptimizer = \"sgd\"\n[mesh]\nshape = [4]\naxes = [\"data\"]\n";
  auto p = test::writeProject(dir.path(), toml);
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  auto m = train::projectStepMemory(*p);
  REQUIRE_MESSAGE(m.ok(), m.error().message);
  checkConsistent(*m);
  REQUIRE_MESSAGE(m->device.find("each of 4 devices") == 0, m->device);
  TSR_COMPARE(argument(*m, "inputs")->bytes, int64_t(4 * 64 * 4));
  TSR_COMPARE(argument(*m, "params.layers.0.weight")->bytes, int64_t(64 * 32 * 4));
}

// The measured side: a profile of the step counts the live buffers as the runtime allocates them, which must
// come to the plan's footprint (arguments, constants, fresh outputs and the arena as one block) give or take
// the little the training loop holds besides (the batch it made, the loss it read).
TEST_CASE("measuredMemoryMeetsThePlan") {
  test::TempDir dir;
  const std::string toml =
      "[model]\nfamily = \"mlp\"\nsizes = [64, 256, 10]\n[data]\nkind = \"synthetic-digits\"\n"
      "[train]\nbatch_size = 64\nsteps = 4\noptimizer = \"adam\"\n";
  auto p = test::writeProject(dir.path(), toml);
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  train::ProfileOptions o;
  o.steps = 2;
  o.storePath = dir.path() + "/runs.db";
  auto report = train::profileTraining(*p, o);
  REQUIRE_MESSAGE(report.ok(), report.error().message);
  auto measured = train::latestMeasuredMemory(o.storePath);
  REQUIRE_MESSAGE(measured.ok(), measured.error().message);
  auto planned = train::projectStepMemory(*p);
  REQUIRE_MESSAGE(planned.ok(), planned.error().message);
  const int64_t footprint = train::staticFootprint(*planned);
  MESSAGE(train::explainMeasured(*planned, *measured));
  REQUIRE(measured->samples > 0);
  REQUIRE(measured->peakBytes >= footprint);
  REQUIRE(measured->peakBytes <= footprint + 64 * 1024);
  REQUIRE(measured->step.rfind("step ", 0) == 0);
}

// A profile of two ranks: each process's peak is found against its own steps and samples (figures by hand).
// Rank 0's step 2 rises from 100 to 400 bytes; rank 1 held 5000 when its step 1 began. Mixed together, rank 0's
// peak would be rank 1's 900 or 5000.
TEST_CASE("measuredMemoryIsEachRanksOwn") {
  test::TempDir dir;
  const std::string path = dir.filePath("runs.db");
  {
    auto db = store::RunStore::open(path);
    REQUIRE(db.ok());
    auto run = db->createRun("r", dir.path(), "");
    auto profile = db->createProfile(*run, "steps 1-2", 1, 2);
    REQUIRE(db->addProfileMarks(*profile, {{"step 1", 1000, 1000, 0}, {"step 2", 2000, 1000, 0},
                                           {"step 1", 1100, 1000, 1}, {"step 2", 2100, 1000, 1}}).ok());
    REQUIRE(db->addProfileMemory(*profile, {{900, 5000, 1}, {1500, 150, 0}, {1500, 900, 1}, {1900, 100, 0},
                                            {2500, 400, 0}, {2600, 300, 1}}).ok());
  }
  auto m = train::latestMeasuredMemory(path);
  REQUIRE_MESSAGE(m.ok(), m.error().message);
  TSR_COMPARE(m->step, std::string("step 2"));
  TSR_COMPARE(m->peakBytes, int64_t{400});
  TSR_COMPARE(m->atStartBytes, int64_t{100});
  TSR_COMPARE(m->riseBytes, int64_t{300});
  TSR_COMPARE(m->samples, int64_t{3});
  REQUIRE(m->ranks.size() == 2);
  TSR_COMPARE(m->ranks[0].peakBytes, int64_t{400});
  TSR_COMPARE(m->ranks[1].rank, 1);
  TSR_COMPARE(m->ranks[1].step, std::string("step 1"));
  TSR_COMPARE(m->ranks[1].peakBytes, int64_t{5000});
}

// [train] remat: a small GPT-2 whose blocks are recomputed keeps fewer activations alive at the peak, and its
// training steps give the same losses and parameters as without (the recomputation is the same arithmetic).
TEST_CASE("rematKeepsFewerActivationsAndTrainsAlike") {
  const std::string base =
      "[model]\nfamily = \"gpt2\"\nvocab_size = 96\nblock_size = 64\nn_layer = 4\nn_head = 2\nn_embd = 32\n"
      "[data]\nkind = \"text\"\n[train]\nbatch_size = 4\nseq_len = 64\nsteps = 3\noptimizer = \"adamw\"\n";
  std::map<std::string, int64_t> activations;
  std::map<std::string, std::vector<double>> losses;
  std::map<std::string, std::vector<double>> finalParams;
  // "blocks on 2": data parallel over two devices (the remat calls are inlined before the step is partitioned).
  for (const std::string remat : {"none", "blocks", "dots_saveable", "blocks on 2"}) {
    CAPTURE(remat);
    test::TempDir dir;
    const bool mesh = remat == "blocks on 2";
    auto p = test::writeProject(dir.path(), base + "remat = \"" + (mesh ? std::string("blocks") : remat) + "\"\n" +
                                                (mesh ? "[mesh]\nshape = [2]\naxes = [\"data\"]\n" : ""));
    REQUIRE_MESSAGE(p.ok(), p.error().message);
    auto m = train::projectStepMemory(*p);
    REQUIRE_MESSAGE(m.ok(), m.error().message);
    checkConsistent(*m);
    activations[remat] = m->live[static_cast<size_t>(m->peakKernel)][size_t(MemoryKind::Activations)];
    MESSAGE(remat, ": peak ", m->peakBytes, " bytes, activations at the peak ", activations[remat]);

    train::SetupOverrides o;
    o.data = false;
    auto s = train::makeTrainingSetup(*p, o);
    REQUIRE_MESSAGE(s.ok(), s.error().message);
    for (uint64_t step = 0; step < 3; ++step) {
      train::Batch batch = train::syntheticBatch(*p, 96, 100 + step);
      auto r = s->trainer->step(s->state, batch);
      REQUIRE_MESSAGE(r.ok(), r.error().message);
      losses[remat].push_back(r->loss);
    }
    finalParams[remat] = s->state.params.findPath("h.1.mlp.c_fc.weight")->leaf().toDoubles();
  }
  CHECK(activations["blocks"] * 2 < activations["none"]);
  CHECK(activations["dots_saveable"] < activations["none"]);
  for (const std::string remat : {"blocks", "dots_saveable", "blocks on 2"}) {
    CAPTURE(remat);
    for (size_t i = 0; i < 3; ++i) CHECK(std::abs(losses[remat][i] - losses["none"][i]) <= 1e-5 * losses["none"][i]);
    for (size_t i = 0; i < finalParams["none"].size(); i += 97)
      CHECK(std::abs(finalParams[remat][i] - finalParams["none"][i]) <= 1e-5);
  }
}

// A family whose model has no blocks to recompute says so, instead of ignoring the key.
TEST_CASE("rematNeedsAFamilyWithBlocks") {
  test::TempDir dir;
  auto p = test::writeProject(dir.path(),
                              "[model]\nfamily = \"mlp\"\nsizes = [8, 4]\n[data]\nkind = \"synthetic-digits\"\n"
                              "[train]\nremat = \"blocks\"\n");
  REQUIRE_FALSE(p.ok());
  CHECK(p.error().message.find("remat") != std::string::npos);
  CHECK(p.error().message.find("mlp") != std::string::npos);
  auto bad = test::writeProject(dir.path(), "[model]\nfamily = \"gpt2\"\n[train]\nremat = \"sometimes\"\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("dots_saveable") != std::string::npos);
}
