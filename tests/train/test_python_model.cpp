// Python model projects: `[model] python = "model.py"`. The file is traced in a child process; its loss is the
// one written in model.py (checked against the engine's own cross-entropy on the same parameters and batch), its
// parameters are named by their dict keys, its ops carry model.py's lines, it trains, and a model.py that fails
// (a syntax error, an exception, an endless loop, an abort) gives a clear error and leaves this process running.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/core/env_options.h"
#include "engine/nn/attention.h"
#include "engine/optim/optim.h"
#include "engine/project/new_project.h"
#include "engine/project/project.h"
#include "engine/project/python_family.h"
#include "engine/random/random.h"
#include "engine/store/run_store.h"
#include "engine/train/data_source.h"
#include "engine/train/project_model.h"
#include "engine/train/run.h"
#include "engine/train/setup.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "tests/check.h"
#include "tests/temp_dir.h"

using namespace tsr;

namespace {

// Line 14 is the first layer's matmul (the test below looks for it in the traced step).
const char* kModel = R"(import tessera.numpy as tnp
import tessera.nn as nn
from tessera import random


def init(key, cfg):
    sizes = cfg["input_shape"] + [cfg["hidden"], cfg["classes"]]
    keys = random.split(key, 2)
    return {"layers": [{"w": random.normal(keys[i], (sizes[i], sizes[i + 1])) * 0.3, "b": tnp.zeros((sizes[i + 1],))}
                       for i in range(2)]}


def logits(params, x):
    h = tnp.maximum(x @ params["layers"][0]["w"] + params["layers"][0]["b"], 0.0)
    return h @ params["layers"][1]["w"] + params["layers"][1]["b"]


def loss(params, batch, key):
    x, y = batch
    logp = nn.log_softmax(logits(params, x))
    return -tnp.mean(tnp.take_along_axis(logp, y[:, None], axis=1))
)";

const char* kProject = R"([model]
python = "model.py"
input_shape = [12]
classes = 3
hidden = 16

[data]
kind = "synthetic-digits"

[train]
batch_size = 16
optimizer = "sgd"
lr = 0.1
warmup_steps = 0
grad_clip = 0.0
)";

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

bool havePython() {
  auto fe = project::pythonFrontEnd();
  if (!fe.ok()) MESSAGE("SKIP: " << fe.error().message);
  return fe.ok();
}

Result<project::Project> projectWith(const test::TempDir& dir, const std::string& model) {
  write(dir.filePath("model.py"), model);
  write(dir.filePath("project.toml"), kProject);
  return project::loadProject(dir.path());
}

// The error of building the project's model, or "(built)".
std::string buildError(const std::string& model) {
  test::TempDir dir;
  auto p = projectWith(dir, model);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
  auto m = train::buildModel(*p, 0);
  return m.ok() ? std::string("(built)") : m.error().message;
}

}  // namespace

TEST_CASE("a model.py project is read, and its loss is the one model.py writes") {
  if (!havePython()) TSR_SKIP("no Python front end in this build");
  test::TempDir dir;
  auto p = projectWith(dir, kModel);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
  TSR_COMPARE(p->model.family, std::string("python"));
  TSR_COMPARE(std::get<int64_t>(p->model.config.at("hidden")), int64_t(16));  // an open key, as written
  auto m = train::buildModel(*p, 0);
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message.c_str()));
  TSR_COMPARE(m->numParams, int64_t(12 * 16 + 16 + 16 * 3 + 3));
  TSR_COMPARE(m->batch.inputs, (Aval{Shape{16, 12}, DType::F32}));

  Tree params = m->init(random::key(0));
  const Tree* w0 = params.findPath("layers.0.w");
  const Tree* b1 = params.findPath("layers.1.b");
  REQUIRE(w0);
  REQUIRE(b1);
  TSR_COMPARE(w0->leaf().aval(), (Aval{Shape{12, 16}, DType::F32}));
  TSR_COMPARE(b1->leaf().aval(), (Aval{Shape{3}, DType::F32}));

  // The same loss written with the engine's own ops, on the same parameters and batch.
  train::Batch b = train::syntheticBatch(m->batch, 7);
  auto leaf = [&](const char* path) { return params.findPath(path)->leaf(); };
  Array h = maximum(matmul(b.inputs, leaf("layers.0.w")) + leaf("layers.0.b"), Array::scalar(0.0));
  Array expected = optim::softmaxCrossEntropy(matmul(h, leaf("layers.1.w")) + leaf("layers.1.b"), b.targets);
  nn::Context ctx;
  Array got = m->loss(params, b, ctx);
  REQUIRE_MESSAGE(std::abs(got.item() - expected.item()) <= 1e-6 * std::abs(expected.item()),
                  got.item() << " vs " << expected.item());
  // logits(params, inputs) is the forward.
  REQUIRE(m->forward);
  TSR_COMPARE(m->forward(params, Tree(), b.inputs).aval(), (Aval{Shape{16, 3}, DType::F32}));
}

// [precision] compute = "bf16": model.py's loss and logits are traced under tessera.autocast (its products in
// bf16), its init as written. The same parameters and batch give the f32 model's loss to bf16's precision, not
// exactly; the gradients are f32, as the parameters are.
TEST_CASE("a model.py project traces under bf16 compute") {
  if (!havePython()) TSR_SKIP("no Python front end in this build");
  test::TempDir dir;
  write(dir.filePath("model.py"), kModel);
  write(dir.filePath("project.toml"), kProject);
  auto overrides = project::parseOverrides({"precision.compute=bf16"});
  REQUIRE(overrides.ok());
  auto p16 = project::loadProject(dir.path(), *overrides);
  auto p32 = project::loadProject(dir.path());
  REQUIRE((p16.ok() && p32.ok()));
  auto m16 = train::buildModel(*p16, 0);
  auto m32 = train::buildModel(*p32, 0);
  REQUIRE_MESSAGE(m16.ok(), (m16.ok() ? "" : m16.error().message.c_str()));
  REQUIRE_MESSAGE(m32.ok(), (m32.ok() ? "" : m32.error().message.c_str()));
  Tree params = m32->init(random::key(0));
  for (const Array& leaf : m16->init(random::key(0)).leaves()) TSR_COMPARE(leaf.dtype(), DType::F32);
  train::Batch b = train::syntheticBatch(m32->batch, 7);
  nn::Context c16, c32;
  const double l16 = m16->loss(params, b, c16).item(), l32 = m32->loss(params, b, c32).item();
  REQUIRE_MESSAGE(std::abs(l16 - l32) <= 2e-2 * std::abs(l32), l16 << " vs " << l32);
  REQUIRE_MESSAGE(l16 != l32, "the bf16 trace gave the f32 loss exactly: autocast did not apply");
  TSR_COMPARE(m16->forward(params, Tree(), b.inputs).dtype(), DType::F32);  // h @ w (bf16) + b (f32): f32
  // The gradient of every parameter is f32.
  Tree g = grad([&](const Tree& prm) {
    nn::Context ctx;
    return m16->loss(prm, b, ctx);
  })(params);
  for (const Array& leaf : g.leaves()) TSR_COMPARE(leaf.dtype(), DType::F32);
}

TEST_CASE("a model.py project trains, and its ops carry model.py's lines") {
  if (!havePython()) TSR_SKIP("no Python front end in this build");
  test::TempDir dir;
  // loss reports its accuracy beside it: (loss, metrics).
  std::string model = kModel;
  const std::string ret = "    return -tnp.mean(tnp.take_along_axis(logp, y[:, None], axis=1))\n";
  REQUIRE(model.find(ret) != std::string::npos);
  model.replace(model.find(ret), ret.size(),
                "    acc = tnp.mean((tnp.argmax(logp, axis=1) == y).astype(tnp.float32))\n" + ret.substr(0, ret.size() - 1) +
                    ", {'acc': acc}\n");
  auto p = projectWith(dir, model);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
  auto step = train::traceTrainingStep(*p);
  REQUIRE_MESSAGE(step.ok(), (step.ok() ? "" : step.error().message.c_str()));
  bool sawLine = false;
  for (const ir::Node& n : step->graph.nodes())
    sawLine |= n.op == ir::OpCode::DotGeneral && n.prov.file == dir.filePath("model.py") && n.prov.line == 14;
  REQUIRE_MESSAGE(sawLine, "no dot_general at model.py:14 in the traced step");

  auto setup = train::makeTrainingSetup(*p);
  REQUIRE_MESSAGE(setup.ok(), (setup.ok() ? "" : setup.error().message.c_str()));
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    auto b = setup->next();
    REQUIRE(b.ok());
    auto r = setup->trainer->step(setup->state, *b);
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message.c_str()));
    (i == 0 ? first : last) = r->loss;
    REQUIRE(r->extra.size() == 1);
    TSR_COMPARE(r->extra[0].first, std::string("acc"));
    // The accuracy of 16 examples: a multiple of 1/16 in [0, 1].
    const double acc = r->extra[0].second;
    const bool sixteenths = acc >= 0 && acc <= 1 && std::abs(acc * 16 - std::round(acc * 16)) < 1e-5;
    REQUIRE_MESSAGE(sixteenths, acc);
    if (i == 29) REQUIRE_MESSAGE(acc >= 0.5, "accuracy after 30 steps " << acc);
  }
  // Evaluation (no dropout) reports it too.
  auto b = setup->next();
  REQUIRE(b.ok());
  auto ev = setup->trainer->evaluate(setup->state, *b);
  REQUIRE_MESSAGE(ev.ok(), (ev.ok() ? "" : ev.error().message.c_str()));
  REQUIRE(ev->extra.size() == 1);
  TSR_COMPARE(ev->extra[0].first, std::string("acc"));
  REQUIRE(ev->extra[0].second >= 0.5);
  // Three classes: chance is ln 3 = 1.10; the digits are learnable.
  REQUIRE(std::isfinite(last));
  REQUIRE_MESSAGE(last < 0.8 * first, "loss " << first << " -> " << last);
}

TEST_CASE("a model.py that fails gives a clear error") {
  if (!havePython()) TSR_SKIP("no Python front end in this build");
  std::string e = buildError("def init(key, cfg)\n    return {}\n");
  REQUIRE_MESSAGE(e.find("SyntaxError") != std::string::npos, e);
  REQUIRE_MESSAGE(e.find("model.py") != std::string::npos, e);

  e = buildError("def init(key, cfg):\n    raise ValueError('no weights today')\n\ndef loss(p, b, k):\n    return 0.0\n");
  REQUIRE_MESSAGE(e.find("ValueError: no weights today") != std::string::npos, e);
  REQUIRE_MESSAGE(e.find("line 2") != std::string::npos, e);

  e = buildError("import os\nos.abort()\n");
  REQUIRE_MESSAGE(e.find("signal 6") != std::string::npos, e);

  e = buildError(std::string(kModel) + "\ndef loss(params, batch, key):\n    return 0.0, {'lr': 1.0}\n");
  REQUIRE_MESSAGE(e.find("may not be named lr") != std::string::npos, e);

  e = buildError("x = 1\n");
  REQUIRE_MESSAGE(e.find("defines neither init") != std::string::npos, e);

  // An endless loop is stopped at the timeout.
  ::setenv("TESSERA_TRACE_TIMEOUT", "2", 1);
  reloadEnvOptions();
  e = buildError("while True:\n    pass\n");
  ::unsetenv("TESSERA_TRACE_TIMEOUT");
  reloadEnvOptions();
  REQUIRE_MESSAGE(e.find("longer than 2 s") != std::string::npos, e);
}

// sample_projects/py_gpt is GPT-2 in one model.py: on the same seed and batch it has gpt2_mini's parameters, loss
// and gradients, also with its blocks under tessera.checkpoint ([model] remat, recomputed in the backward pass).
TEST_CASE("py_gpt gives the gpt2 family's loss and gradients") {
  if (!havePython()) TSR_SKIP("no Python front end in this build");
  auto gpt2 = project::loadProject(std::string(TSR_SAMPLES) + "/gpt2_mini");
  REQUIRE_MESSAGE(gpt2.ok(), (gpt2.ok() ? "" : gpt2.error().message.c_str()));
  const int64_t vocab = 512;
  auto a = train::buildModel(*gpt2, vocab);
  REQUIRE_MESSAGE(a.ok(), (a.ok() ? "" : a.error().message.c_str()));
  const Tree pa = a->init(random::key(0));
  const train::Batch batch = train::syntheticBatch(a->batch, 3);
  // model.py's nn.dot_product_attention picks the fused op as the training setup does for the family (the CPU:
  // fused, unless TESSERA_FUSED_ATTENTION says otherwise): the family's context follows the same choice.
  const bool fused = nn::fusedAttentionFor(envOptions().device, envOptions().matmulPrecision);
  auto lossOf = [&batch, fused](const train::ProjectModel& m) {
    return valueAndGrad([&](const Tree& params) {
      nn::Context ctx;
      ctx.setFusedAttention(fused);
      return m.loss(params, batch, ctx);
    });
  };
  const ValueAndGrad ga = lossOf(*a)(pa);
  for (const std::string remat : {"none", "nothing_saveable", "dots_saveable"}) {
    CAPTURE(remat);
    auto overrides = project::parseOverrides({"model.remat=\"" + remat + "\""});
    REQUIRE_MESSAGE(overrides.ok(), (overrides.ok() ? "" : overrides.error().message.c_str()));
    auto py = project::loadProject(std::string(TSR_SAMPLES) + "/py_gpt", *overrides);
    REQUIRE_MESSAGE(py.ok(), (py.ok() ? "" : py.error().message.c_str()));
    TSR_COMPARE(py->model.family, std::string("python_lm"));
    auto b = train::buildModel(*py, vocab);
    REQUIRE_MESSAGE(b.ok(), (b.ok() ? "" : b.error().message.c_str()));
    TSR_COMPARE(b->numParams, a->numParams);
    const Tree pb = b->init(random::key(0));
    // model.py's blocks are remat calls in its traced loss (two layers).
    auto traced = makeGraph(
        [&](const Tree& params) {
          nn::Context ctx;
          return Tree(b->loss(params, batch, ctx));
        },
        pb.mapWithPath([](const std::string&, const Array& x) { return x.aval(); }), "loss");
    REQUIRE_MESSAGE(traced.ok(), (traced.ok() ? "" : traced.error().message.c_str()));
    TSR_COMPARE(traced->graph.count(ir::OpCode::RematCall), remat == "none" ? 0 : 2);
    if (remat == "none") TSR_COMPARE(traced->graph.count(ir::OpCode::DotProductAttention), fused ? 2 : 0);
    const ValueAndGrad gb = lossOf(*b)(pb);
    REQUIRE_MESSAGE(std::abs(ga.value.item() - gb.value.item()) <= 1e-6 * std::abs(ga.value.item()),
                    ga.value.item() << " vs " << gb.value.item());
    int compared = 0;
    pa.visit([&](const std::string& path, const Array& w) {
      const Tree* wb = pb.findPath(path);
      REQUIRE_MESSAGE(wb, "py_gpt has no parameter " << path);
      REQUIRE_MESSAGE(w.toFloats() == wb->leaf().toFloats(), path << " differs at init");
      const std::vector<float> da = ga.grads.findPath(path)->leaf().toFloats(), db = gb.grads.findPath(path)->leaf().toFloats();
      double diff = 0, norm = 0;
      for (size_t i = 0; i < da.size(); ++i) {
        diff = std::max(diff, std::abs(double(da[i]) - double(db[i])));
        norm = std::max(norm, std::abs(double(da[i])));
      }
      REQUIRE_MESSAGE(diff <= 1e-6 * norm + 1e-12, path << ": gradients differ by " << diff << " (largest " << norm << ")");
      ++compared;
    });
    TSR_COMPARE(compared, 2 + 2 * 12 + 2);  // wte and wpe, two blocks of 12, ln_f's two
  }
}

// Instead of init and loss, a Model class (an nn.Module): its parameters from init, its logits from apply (with
// train=True and a dropout key in training), the loss [train] loss.
TEST_CASE("a model.py that defines an nn.Module trains") {
  if (!havePython()) TSR_SKIP("no Python front end in this build");
  test::TempDir dir;
  auto p = projectWith(dir, R"(import tessera.nn as nn


class Model(nn.Module):
    hidden: int
    classes: int

    @nn.compact
    def __call__(self, x, train=False):
        x = nn.Dropout(0.1, deterministic=not train)(nn.relu(nn.Dense(self.hidden)(x)))
        return nn.Dense(self.classes)(x)
)");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
  auto setup = train::makeTrainingSetup(*p);
  REQUIRE_MESSAGE(setup.ok(), (setup.ok() ? "" : setup.error().message.c_str()));
  TSR_COMPARE(setup->model.numParams, int64_t(12 * 16 + 16 + 16 * 3 + 3));
  REQUIRE(setup->model.forward);
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    auto b = setup->next();
    REQUIRE(b.ok());
    auto r = setup->trainer->step(setup->state, *b);
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message.c_str()));
    (i == 0 ? first : last) = r->loss;
  }
  REQUIRE(std::isfinite(last));
  REQUIRE_MESSAGE(last < 0.8 * first, "loss " << first << " -> " << last);
}

// A Module with BatchNorm: its running statistics are training state beside the parameters. BatchNorm reads the
// inputs themselves here, so after one step they are what Flax's update gives for that batch, worked out here
// from the batch: mean 0.01 * mean(x), var 0.99 + 0.01 * var(x) (biased), per feature. Evaluation normalises
// with them.
TEST_CASE("a model.py Module with BatchNorm trains its running statistics") {
  if (!havePython()) TSR_SKIP("no Python front end in this build");
  test::TempDir dir;
  auto p = projectWith(dir, R"(import tessera.nn as nn


class Model(nn.Module):
    hidden: int
    classes: int

    @nn.compact
    def __call__(self, x, train=False):
        x = nn.BatchNorm(use_running_average=not train)(x)
        return nn.Dense(self.classes)(nn.relu(nn.Dense(self.hidden)(x)))
)");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
  auto setup = train::makeTrainingSetup(*p);
  REQUIRE_MESSAGE(setup.ok(), (setup.ok() ? "" : setup.error().message.c_str()));
  TSR_COMPARE(setup->model.numParams, int64_t(2 * 12 + 12 * 16 + 16 + 16 * 3 + 3));  // scale, bias: parameters
  const Tree& start = setup->state.batchStats;
  REQUIRE(start.findPath("BatchNorm_0.mean"));
  REQUIRE(start.findPath("BatchNorm_0.var"));
  auto b = setup->next();
  REQUIRE(b.ok());
  auto r = setup->trainer->step(setup->state, *b);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message.c_str()));
  const std::vector<float> x = b->inputs.toFloats();
  const int64_t n = b->inputs.shape()[0], f = 12;
  std::vector<double> mean(f, 0.0), var(f, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) mean[j] += x[i * f + j] / double(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) var[j] += (x[i * f + j] - mean[j]) * (x[i * f + j] - mean[j]) / double(n);
  const std::vector<float> gotMean = setup->state.batchStats.findPath("BatchNorm_0.mean")->leaf().toFloats();
  const std::vector<float> gotVar = setup->state.batchStats.findPath("BatchNorm_0.var")->leaf().toFloats();
  double spread = 0;
  for (int64_t j = 0; j < f; ++j) {
    CHECK(gotMean[j] == doctest::Approx(0.01 * mean[j]).epsilon(1e-4).scale(1e-6));
    CHECK(gotVar[j] == doctest::Approx(0.99 + 0.01 * var[j]).epsilon(1e-5));
    spread += std::abs(var[j] - 1.0);
  }
  REQUIRE_MESSAGE(spread > 0.01, "the batch's variance is too close to 1 for the check to tell");
  // Further steps train it; the statistics keep moving.
  double first = r->loss, last = first;
  for (int i = 0; i < 30; ++i) {
    auto next = setup->next();
    REQUIRE(next.ok());
    auto s = setup->trainer->step(setup->state, *next);
    REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message.c_str()));
    last = s->loss;
  }
  REQUIRE(std::isfinite(last));
  CHECK(last < first);
  CHECK(setup->state.batchStats.findPath("BatchNorm_0.mean")->leaf().toFloats()[0] != gotMean[0]);
}

// loss and logits get the parameters in the structure init returned: a namedtuple keeps its fields (and names
// the paths), a tuple stays a tuple.
TEST_CASE("model.py's parameters keep init's structure") {
  if (!havePython()) TSR_SKIP("no Python front end in this build");
  test::TempDir dir;
  auto p = projectWith(dir, R"(from collections import namedtuple
import tessera.nn as nn
import tessera.numpy as tnp
from tessera import random

Layer = namedtuple("Layer", "w b")


def init(key, cfg):
    k = random.split(key, 2)
    return (Layer(random.normal(k[0], (12, 16)) * 0.3, tnp.zeros((16,))),
            Layer(random.normal(k[1], (16, 3)) * 0.3, tnp.zeros((3,))))


def loss(params, batch, key):
    assert isinstance(params, tuple) and isinstance(params[0], Layer), type(params)
    x, y = batch
    for layer in params[:-1]:
        x = tnp.maximum(x @ layer.w + layer.b, 0.0)
    logp = nn.log_softmax(x @ params[-1].w + params[-1].b)
    return -tnp.mean(tnp.take_along_axis(logp, y[:, None], axis=1))
)");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
  auto m = train::buildModel(*p, 0);
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message.c_str()));
  Tree params = m->init(random::key(0));
  REQUIRE(params.findPath("0.w"));
  REQUIRE(params.findPath("1.b"));
  TSR_COMPARE(params.findPath("0.w")->leaf().aval(), (Aval{Shape{12, 16}, DType::F32}));
  nn::Context ctx;
  REQUIRE(std::isfinite(m->loss(params, train::syntheticBatch(m->batch, 1), ctx).item()));
}

// A new Python project (tessera new --family python, the IDE's New Project) starts with a model.py that trains
// as it is: the classifier's loss falls and its accuracy is logged; the language model's loss falls on a corpus.
TEST_CASE("a new python project's starter model.py trains") {
  if (!havePython()) TSR_SKIP("no Python front end in this build");
  for (const std::string family : {"python", "python_lm"}) {
    CAPTURE(family);
    test::TempDir dir;
    project::NewProject spec{"starter", family, {}, family == "python_lm" ? "data/corpus.txt" : "", dir.path()};
    if (family == "python_lm") {
      std::filesystem::create_directories(dir.filePath("data"));
      std::string corpus;
      for (int i = 0; i < 200; ++i) corpus += "the cat sat on the mat and the dog sat on the log. ";
      write(dir.filePath("data/corpus.txt"), corpus);
      spec.values["block_size"] = "32";
    }
    auto toml = project::newProjectToml(spec);
    REQUIRE_MESSAGE(toml.ok(), (toml.ok() ? "" : toml.error().message.c_str()));
    REQUIRE(toml->find("python = \"model.py\"") != std::string::npos);
    auto files = project::newProjectFiles(spec);
    REQUIRE(files.size() == 1);
    TSR_COMPARE(files[0].first, std::string("model.py"));
    write(dir.filePath("project.toml"), *toml);
    write(dir.filePath("model.py"), files[0].second);
    auto overrides = project::parseOverrides({"train.steps=40", "train.eval_every=0", "train.lr=0.003"});
    REQUIRE(overrides.ok());
    auto p = project::loadProject(dir.path(), *overrides);
    REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
    std::vector<std::string> lines;
    auto s = train::runTraining(*p, {}, [&](const train::RunEvent& e) { lines.push_back(e.text); });
    REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message.c_str()));
    REQUIRE_MESSAGE(s->lastLoss < s->firstLoss * 0.8, s->firstLoss << " -> " << s->lastLoss);
    if (family == "python") {
      auto db = store::RunStore::open(s->storePath);
      REQUIRE(db.ok());
      TSR_COMPARE(db->metrics(s->runId, "accuracy")->size(), size_t(40));
    }
  }
  // A model file named outside the new folder is the user's: nothing is written for it.
  TSR_COMPARE(project::newProjectFiles({"p", "python", {{"python", "\"../mine.py\""}}, "", "."}).size(), size_t(0));
  TSR_COMPARE(project::newProjectFiles({"p", "mlp", {}, "", "."}).size(), size_t(0));
}

// Traces after the first come from the warm tracer, a child forked from an interpreter that has imported tessera:
// each still loads model.py and what it imports afresh, as a new interpreter would.
TEST_CASE("each trace of a model.py sees the files as they are now") {
  if (!havePython()) TSR_SKIP("no Python front end in this build");
  test::TempDir dir;
  const std::string model =
      "import helper\nimport tessera.numpy as tnp\n\n\ndef init(key, cfg):\n"
      "    return {'w': tnp.zeros((cfg['n'], helper.WIDTH))}\n\n\ndef loss(params, batch, key):\n"
      "    return tnp.sum(params['w'])\n";
  auto widthAfter = [&](int width, const std::string& edit) -> int64_t {
    write(dir.filePath("helper.py"), "WIDTH = " + std::to_string(width) + "\n");
    write(dir.filePath("model.py"), model + edit);  // another text: the trace cache misses
    project::PythonTraceRequest r{dir.filePath("model.py"), R"({"n": 3})", Aval{Shape{4, 3}, DType::F32},
                                  Aval{Shape{4}, DType::I32}, ""};
    auto t = project::tracePythonModel(r);
    REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
    REQUIRE((*t)->leaves.size() == 1);
    return (*t)->leaves[0].shape[1];
  };
  TSR_COMPARE(widthAfter(5, ""), int64_t{5});
  TSR_COMPARE(widthAfter(7, "# edited\n"), int64_t{7});
  // A trace that crashes its interpreter leaves the next one working.
  write(dir.filePath("model.py"), "import os\nos.abort()\n");
  auto crashed = project::tracePythonModel({dir.filePath("model.py"), "{}", Aval{Shape{4, 3}, DType::F32},
                                            Aval{Shape{4}, DType::I32}, ""});
  REQUIRE(!crashed.ok());
  TSR_COMPARE(widthAfter(9, "# again\n"), int64_t{9});
}
