// Model families: the core ones declare their keys and data kinds; project.toml is read from the declaration
// alone (defaults, ranges, choices, unknown keys, data kinds); a family registered at run time is as usable as a
// core one, from project.toml to trained steps; new projects are written from the declaration and open.
#include <cmath>
#include <filesystem>
#include <mutex>
#include <numbers>

#include "engine/nn/mlp.h"
#include "engine/project/model_family.h"
#include "engine/project/new_project.h"
#include "engine/project/project.h"
#include "engine/train/run.h"
#include "engine/train/setup.h"
#include "tests/check.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::project;

namespace {

std::string parseError(const std::string& text) {
  auto p = parseProject(text, "p/project.toml", "p");
  return p.ok() ? std::string("(parsed)") : p.error().message;
}

const FamilyKey* keyOf(const ModelFamily& f, const std::string& name) {
  for (const FamilyKey& k : f.keys)
    if (k.name == name) return &k;
  return nullptr;
}

// A classifier family that is not a core one: an MLP of `depth` hidden layers of `width`, on synthetic digits.
ModelFamily toyFamily() {
  ModelFamily f;
  f.name = "toy_mlp";
  f.description = "a test family";
  FamilyKey width;
  width.name = "width";
  width.defaultValue = int64_t(16);
  width.min = 2;
  width.max = 4096;
  width.help = "hidden width";
  FamilyKey act;
  act.name = "act";
  act.type = KeyType::Text;
  act.defaultValue = std::string("relu");
  act.choices = {"relu", "gelu"};
  act.help = "activation";
  f.keys = {width, act};
  f.dataKinds = {"synthetic-digits"};
  f.build = [](const ModelConfig& c, const BuildContext&) {
    auto model = std::make_shared<nn::Mlp>(nn::MlpConfig{{12, c.integer("width"), 3}});
    FamilyModel m;
    m.init = [model](const Array& key) { return model->init(key); };
    m.apply = [model](const Tree& p, const Array& x, nn::Context& ctx) { return model->apply(p, x, ctx); };
    m.numParams = model->numParams();
    m.trainFlopsPerItem = 6.0 * static_cast<double>(m.numParams);
    return m;
  };
  f.batch = [](const ModelConfig&, int64_t batch) {
    return BatchSignature{Aval{Shape{batch, 12}, DType::F32}, Aval{Shape{batch}, DType::I32}, 3};
  };
  return f;
}

// Registers toy_mlp once, for the test cases that read it (in any order).
void registerToy() {
  static const bool registered = registerModelFamily(toyFamily()).ok();
  REQUIRE(registered);
}

std::string tempDir() { return std::filesystem::temp_directory_path().string(); }

}  // namespace

TEST_CASE("the core families declare their keys") {
  registerToy();
  std::vector<std::string> names = modelFamilyNames();
  REQUIRE(names.size() >= 3);
  TSR_COMPARE(names[0], std::string("gpt2"));
  TSR_COMPARE(names[1], std::string("vit"));
  TSR_COMPARE(names[2], std::string("mlp"));
  const ModelFamily* gpt2 = findModelFamily("gpt2");
  REQUIRE(gpt2);
  REQUIRE(gpt2->languageModel);
  TSR_COMPARE(gpt2->origin, std::string("core"));
  TSR_COMPARE(gpt2->contextKey, std::string("block_size"));
  TSR_COMPARE(gpt2->dataKinds, std::vector<std::string>{"text"});
  // GPT-2 small's configuration, as Hugging Face's GPT2Config has it.
  TSR_COMPARE(std::get<int64_t>(keyOf(*gpt2, "n_layer")->defaultValue), int64_t(12));
  TSR_COMPARE(std::get<int64_t>(keyOf(*gpt2, "n_embd")->defaultValue), int64_t(768));
  TSR_COMPARE(std::get<int64_t>(keyOf(*gpt2, "block_size")->defaultValue), int64_t(1024));
  TSR_COMPARE(keyOf(*gpt2, "dropout")->describeRequirement(), std::string("in [0, 1)"));
  TSR_COMPARE(keyOf(*gpt2, "n_head")->describeRequirement(), std::string("positive"));
  const ModelFamily* vit = findModelFamily("vit");
  REQUIRE(vit);
  REQUIRE(!vit->languageModel);
  TSR_COMPARE(vit->dataKinds, (std::vector<std::string>{"synthetic-images", "cifar10", "image_folder", "npy"}));
  TSR_COMPARE(std::get<int64_t>(keyOf(*vit, "patch_size")->defaultValue), int64_t(16));
  const ModelFamily* mlp = findModelFamily("mlp");
  REQUIRE(mlp);
  TSR_COMPARE(std::get<std::vector<int64_t>>(keyOf(*mlp, "sizes")->defaultValue),
              (std::vector<int64_t>{784, 1024, 1024, 1024, 10}));
  // Every key has a doc string: the IDE's form and `tessera families` show it.
  for (const std::string n : {"gpt2", "vit", "mlp"})
    for (const FamilyKey& k : findModelFamily(n)->keys) REQUIRE_MESSAGE(!k.help.empty(), k.name.c_str());
}

// A Python model project: the family follows from [data] kind, and keys no family declares are kept as written
// (the model's cfg), of the types TOML and the model share.
TEST_CASE("a python model project keeps its own [model] keys") {
  auto p = parseProject("[model]\npython = \"model.py\"\nwidth = 64\nrate = 0.5\nact = \"gelu\"\nsizes = [3, 4]\n",
                        "p/project.toml", "p");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
  TSR_COMPARE(p->model.family, std::string("python"));
  TSR_COMPARE(p->data.kind, std::string("synthetic-digits"));
  TSR_COMPARE(std::get<int64_t>(p->model.config.at("width")), int64_t(64));
  TSR_COMPARE(std::get<double>(p->model.config.at("rate")), 0.5);
  TSR_COMPARE(std::get<std::string>(p->model.config.at("act")), std::string("gelu"));
  TSR_COMPARE(std::get<std::vector<int64_t>>(p->model.config.at("sizes")), (std::vector<int64_t>{3, 4}));
  // The resolved configuration names them too, so it trains the same model.
  const std::string resolved = resolvedToml(*p);
  REQUIRE_MESSAGE(resolved.find("\nwidth = 64\n") != std::string::npos, resolved);
  REQUIRE_MESSAGE(resolved.find("\nsizes = [3, 4]\n") != std::string::npos, resolved);
  auto lm = parseProject("[model]\npython = \"model.py\"\nblock_size = 32\n[data]\nkind = \"text\"\npath = \"c.txt\"\n"
                         "[train]\nseq_len = 32\n", "p/project.toml", "p");
  REQUIRE_MESSAGE(lm.ok(), (lm.ok() ? "" : lm.error().message.c_str()));
  TSR_COMPARE(lm->model.family, std::string("python_lm"));
  REQUIRE(lm->model.languageModel());
  TSR_COMPARE(parseError("[model]\npython = \"model.py\"\nuse_bias = true\n"),
              std::string("p/project.toml:3: 'use_bias' must be an integer, a number, a string or an array of integers"));
  TSR_COMPARE(parseError("[model]\npython = \"\"\n"),
              std::string("p/project.toml: [model] python must name the model file, e.g. python = \"model.py\""));
  // A built-in family's keys stay closed.
  TSR_COMPARE(parseError("[model]\nfamily = \"mlp\"\nwidth = 64\n"), std::string("p/project.toml:3: unknown key 'width' in [model]"));
}

// A model file named by a [model] key that is not there: building the model (model-info, compile, train, the
// IDE's trace) says so at the key's line, or at the --set that named it; it named the key and the file alone.
TEST_CASE("a missing model file is said at its key's line") {
  test::TempDir dir;
  REQUIRE(dir.isValid());
  test::writeFile(dir.filePath("project.toml"),
                  "[project]\nname = \"py\"\n[model]\npython = \"model.py\"\ninput_shape = [4]\nclasses = 2\n");
  const std::string toml = dir.filePath("project.toml");
  const std::string missing = (std::filesystem::path(dir.path()) / "model.py").string();
  auto p = loadProject(dir.path());
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
  auto info = train::describeModel(*p);
  REQUIRE(!info.ok());
  TSR_COMPARE(info.error().message, toml + ":4: [model] python = \"model.py\": " + missing + " does not exist");

  auto set = loadProject(dir.path(), {{"model", "python", "other.py"}});
  REQUIRE(set.ok());
  auto setInfo = train::describeModel(*set);
  REQUIRE(!setInfo.ok());
  TSR_COMPARE(setInfo.error().message, "--set model.python=other.py (over " + toml + "): [model] python = \"other.py\": " +
                                           dir.filePath("other.py") + " does not exist");

  std::filesystem::create_directory(missing);  // a folder of that name
  auto folder = train::describeModel(*p);
  REQUIRE(!folder.ok());
  TSR_COMPARE(folder.error().message, toml + ":4: [model] python = \"model.py\": " + missing + " is not a file");
  TSR_COMPARE(p->origin("model", "input_shape"), toml + ":5");
  TSR_COMPARE(p->origin("train", "steps"), toml);  // not written: the file alone
}

TEST_CASE("projects are read from the declaration") {
  auto vit = parseProject("[model]\nfamily = \"vit\"\nimage_size = 32\npatch_size = 8\nhidden = 64\nheads = 4\n",
                          "p/project.toml", "p");
  REQUIRE_MESSAGE(vit.ok(), (vit.ok() ? "" : vit.error().message.c_str()));
  TSR_COMPARE(vit->model.config.integer("image_size"), int64_t(32));
  TSR_COMPARE(vit->model.config.integer("layers"), int64_t(12));  // the default, filled in
  TSR_COMPARE(vit->model.config.number("dropout"), 0.0);
  TSR_COMPARE(vit->data.kind, std::string("synthetic-images"));  // the family's data kind when none is given
  REQUIRE(!vit->model.languageModel());
  TSR_COMPARE(parseError("[model]\nfamily = \"vit\"\n[data]\nkind = \"text\"\n"),
              std::string("p/project.toml:4: 'kind' must be synthetic-images or cifar10 or image_folder or npy (what the vit family trains on)"));
  TSR_COMPARE(parseError("[model]\nfamily = \"vit\"\nn_layer = 2\n"),
              std::string("p/project.toml:3: unknown key 'n_layer' in [model]"));
  TSR_COMPARE(parseError("[model]\nfamily = \"mlp\"\nsizes = [5]\n"),
              std::string("p/project.toml:3: 'sizes' must be at least two positive sizes"));
  TSR_COMPARE(parseError("[model]\nqkv_layout = \"rows\"\n"),
              std::string("p/project.toml:2: 'qkv_layout' must be fused ([C, 3C], as Hugging Face) or heads ([C, 3, H, "
                          "D], for tensor parallelism)"));
  TSR_COMPARE(parseError("[model]\ndropout = 1.0\n"), std::string("p/project.toml:2: 'dropout' must be in [0, 1)"));
  TSR_COMPARE(parseError("[model]\nfamily = \"vit\"\nimage_size = 30\npatch_size = 8\n"),
              std::string("p/project.toml: [model] image_size must be divisible by patch_size and hidden by heads"));
  TSR_COMPARE(parseError("[model]\nblock_size = 8\n[train]\nseq_len = 16\n"),
              std::string("p/project.toml: [train] seq_len (16) exceeds [model] block_size (8)"));
}

TEST_CASE("a registered family is read as core ones are") {
  registerToy();
  TSR_COMPARE(modelFamilyNames().back(), std::string("toy_mlp"));
  TSR_COMPARE(parseError("[model]\nfamily = \"toy_mlp\"\nwidth = 1\n"),
              std::string("p/project.toml:3: 'width' must be at least 2"));
  TSR_COMPARE(parseError("[model]\nfamily = \"toy_mlp\"\nact = \"tanh\"\n"),
              std::string("p/project.toml:3: 'act' must be relu or gelu"));
  TSR_COMPARE(parseError("[model]\nfamily = \"toy_mlp\"\nwidth = 5000\n"),
              std::string("p/project.toml:3: 'width' is 5000, above the limit of 4096"));
  TSR_COMPARE(parseError("[model]\nfamily = \"rnn\"\n"),
              std::string("p/project.toml:2: 'family' must be one of gpt2, vit, mlp, resnet, unet, python, python_lm, toy_mlp"));
  // Names are unique, a core family's included; a classifier must say what its batch is.
  ModelFamily again = toyFamily();
  TSR_COMPARE(registerModelFamily(again).error().message, std::string("model family 'toy_mlp' is already registered"));
  again.name = "gpt2";
  TSR_COMPARE(registerModelFamily(again).error().message, std::string("model family 'gpt2' is a core family"));
  again.name = "toy2";
  again.batch = nullptr;
  REQUIRE(registerModelFamily(again).error().message.find("no batch function") != std::string::npos);
  again = toyFamily();
  again.name = "toy3";
  again.keys[0].defaultValue = 1.5;  // an integer key with a number for default
  REQUIRE(registerModelFamily(again).error().message.find("the default of 'width' is not of its type (integer)") !=
          std::string::npos);
}

// From project.toml to the traced step and trained steps, with no name of the family anywhere but its
// declaration.
TEST_CASE("a registered family trains") {
  registerToy();
  auto p = parseProject(
      "[model]\nfamily = \"toy_mlp\"\nwidth = 32\n[train]\nbatch_size = 16\noptimizer = \"sgd\"\n"
      "lr = 0.1\nwarmup_steps = 0\ngrad_clip = 0.0\n",
      "p/project.toml", tempDir());
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
  TSR_COMPARE(p->data.kind, std::string("synthetic-digits"));
  auto step = train::traceTrainingStep(*p);
  REQUIRE_MESSAGE(step.ok(), (step.ok() ? "" : step.error().message.c_str()));
  bool sawBatch = false;
  for (ir::ValueId v : step->graph.inputs()) sawBatch |= step->graph.aval(v) == Aval{Shape{16, 12}, DType::F32};
  REQUIRE(sawBatch);
  auto setup = train::makeTrainingSetup(*p);
  REQUIRE_MESSAGE(setup.ok(), (setup.ok() ? "" : setup.error().message.c_str()));
  TSR_COMPARE(setup->model.numParams, int64_t(12 * 32 + 32 + 32 * 3 + 3));
  TSR_COMPARE(setup->itemsPerBatch, int64_t(16));
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    auto b = setup->next();
    REQUIRE(b.ok());
    TSR_COMPARE(b->inputs.aval(), (Aval{Shape{16, 12}, DType::F32}));
    auto m = setup->trainer->step(setup->state, *b);
    REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message.c_str()));
    (i == 0 ? first : last) = m->loss;
  }
  // Three classes: chance is ln 3 = 1.10; the digits are learnable, so the loss falls well below it.
  REQUIRE(std::isfinite(last));
  REQUIRE_MESSAGE(last < 0.8 * first, "loss " << first << " -> " << last);
}

// A model whose state cannot fit is refused before anything is allocated, with both sizes.
TEST_CASE("a state that cannot fit is refused before allocation") {
  // GPT-2 with 200 blocks of width 8192: V C + T C + L (12 C^2 + 13 C) + 2 C parameters (tied head), with
  // AdamW's two moments, 12 bytes each: 1933142065152 bytes.
  auto p =
      parseProject("[model]\nn_layer = 200\nn_embd = 8192\nn_head = 64\nblock_size = 1024\n[train]\nseq_len = 64\n",
                   "p/project.toml", tempDir());
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
  train::SetupOverrides o;
  o.data = false;
  auto setup = train::makeTrainingSetup(*p, o);
  REQUIRE(!setup.ok());
  REQUIRE_MESSAGE(
      setup.error().message.find("the parameters and adamw state of gpt2 (161095172096 parameters) need 1800.38 GiB") !=
          std::string::npos,
      setup.error().message.c_str());
  REQUIRE_MESSAGE(setup.error().message.find("available; make the model smaller in [model]") != std::string::npos,
                  setup.error().message.c_str());
  // Described from shapes alone, the same model is fine: nothing is allocated.
  o.materialize = false;
  REQUIRE(train::makeTrainingSetup(*p, o).ok());
}

TEST_CASE("new projects are written from the declaration and open") {
  registerToy();
  for (const std::string family : {"mlp", "vit", "toy_mlp"}) {
    auto text = newProjectToml({"demo", family, {}, "", "."});
    REQUIRE_MESSAGE(text.ok(), (text.ok() ? family.c_str() : text.error().message.c_str()));
    auto p = parseProject(*text, "n/project.toml", "n");
    REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
    TSR_COMPARE(p->model.family, family);
    TSR_COMPARE(p->name, std::string("demo"));
    // Every key is written with its doc string.
    for (const FamilyKey& k : findModelFamily(family)->keys) REQUIRE(text->find(k.name + " = ") != std::string::npos);
  }
  auto mlp = newProjectToml({"m", "mlp", {{"sizes", "[8, 4]"}}, "", "."});
  REQUIRE(mlp.ok());
  TSR_COMPARE(parseProject(*mlp, "f", ".")->model.config.sizes("sizes"), (std::vector<int64_t>{8, 4}));
  // A language model needs a corpus; its first run's sequences fit its context.
  TSR_COMPARE(newProjectToml({"g", "gpt2", {}, "", "."}).error().message,
              std::string("the gpt2 family trains on text: choose a corpus (a UTF-8 text file)"));
  auto gpt2 = newProjectToml({"g", "gpt2", {{"block_size", "32"}, {"n_layer", "2"}}, "data/c.txt", "."});
  REQUIRE_MESSAGE(gpt2.ok(), (gpt2.ok() ? "" : gpt2.error().message.c_str()));
  auto g = parseProject(*gpt2, "f", ".");
  REQUIRE(g.ok());
  TSR_COMPARE(g->train.seqLen, int64_t(32));
  TSR_COMPARE(g->model.config.integer("n_layer"), int64_t(2));
  TSR_COMPARE(g->data.path, std::string("data/c.txt"));
  // Mistakes name the key.
  TSR_COMPARE(newProjectToml({"m", "mlp", {{"n_layer", "2"}}, "", "."}).error().message,
              std::string("[model] n_layer: the mlp family has no such key"));
  TSR_COMPARE(newProjectToml({"g", "gpt2", {{"n_layer", "two"}}, "c.txt", "."}).error().message,
              std::string("[model] n_layer: 'two' is not an integer"));
  REQUIRE(newProjectToml({"g", "gpt2", {{"n_head", "5"}}, "c.txt", "."}).error().message.find("divisible") !=
          std::string::npos);
}

// Every [train] schedule, as makeSchedule builds it from project.toml, against its formula written out.
TEST_CASE("every train schedule follows its formula") {
  auto lrAt = [](const std::string& extra, int64_t step) {
    auto p = parseProject("[model]\nfamily = \"mlp\"\n[train]\nlr = 1.0\nmin_lr = 0.1\nwarmup_steps = 10\n" + extra,
                          "p/project.toml", ".");
    REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
    return train::makeSchedule(p->train, 110)(Array::scalar(static_cast<double>(step), DType::I32)).item();
  };
  const double pi = std::numbers::pi;
  for (int64_t s : {0, 5, 10, 11, 40, 60, 100, 109, 110, 150}) {
    const double warm = s / 10.0, t = std::min(1.0, (s - 10) / 100.0);  // t: progress after the warmup
    auto near = [&](const char* name, double got, double want) {
      REQUIRE_MESSAGE(std::fabs(got - want) < 1e-6, name << " at " << s << ": " << got << " vs " << want);
    };
    near("constant", lrAt("schedule = \"constant\"\n", s), s < 10 ? warm : 1.0);
    near("linear", lrAt("schedule = \"linear\"\n", s), s < 10 ? warm : 1.0 + t * (0.1 - 1.0));
    near("cosine", lrAt("schedule = \"cosine\"\n", s), s < 10 ? warm : 0.1 + 0.45 * (1 + std::cos(pi * t)));
    near("warmup_cosine", lrAt("", s), s < 10 ? warm : 0.1 + 0.45 * (1 + std::cos(pi * t)));
    near("step", lrAt("schedule = \"step\"\nstep_every = 25\nstep_gamma = 0.5\n", s),
         s < 10 ? warm : std::pow(0.5, static_cast<double>((s - 10) / 25)));
    // WSD: stable until the last 20% of 110 steps (step 88), then linear to min_lr at 110.
    near("wsd", lrAt("schedule = \"wsd\"\n", s),
         s < 10 ? warm : s < 88 ? 1.0 : 1.0 + std::min(1.0, (s - 88) / 22.0) * (0.1 - 1.0));
  }
  TSR_COMPARE(parseError("[train]\nschedule = \"exp\"\n"),
              std::string("p/project.toml:2: 'schedule' must be one of warmup_cosine, constant, linear, cosine, step, wsd"));
  TSR_COMPARE(parseError("[train]\nstep_gamma = 0.0\n"), std::string("p/project.toml:2: 'step_gamma' must be in (0, 1]"));
}

// [train] nesterov reaches the optimiser: two SGD updates by hand, with and without it.
TEST_CASE("nesterov from project.toml follows the formula") {
  auto updates = [](bool nesterov) {
    auto p = parseProject(std::string("[model]\nfamily = \"mlp\"\n[train]\noptimizer = \"sgd\"\nlr = 0.1\nmomentum = 0.5\n"
                                      "warmup_steps = 0\nschedule = \"constant\"\ngrad_clip = 0.0\nnesterov = ") +
                              (nesterov ? "true" : "false") + "\n",
                          "p/project.toml", ".");
    REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
    optim::GradientTransformation opt = train::makeOptimizer(p->train, train::makeSchedule(p->train, 10));
    Tree params = Tree::dict({{"w", Tree(Array::scalar(1.0))}});
    Tree state = opt.init(params);
    std::vector<double> out;
    for (double g : {1.0, 2.0}) {
      auto [u, next] = opt.update(Tree::dict({{"w", Tree(Array::scalar(g))}}), state, params);
      out.push_back(u.find("w")->leaf().item());
      state = next;
    }
    return out;
  };
  // Momentum trace m = 0.5 m + g: 1, then 2.5. Plain: -lr m. Nesterov: -lr (0.5 m + g).
  const std::vector<double> plain = updates(false), nesterov = updates(true);
  CHECK(std::fabs(plain[0] - -0.1) < 1e-7);
  CHECK(std::fabs(plain[1] - -0.25) < 1e-7);
  CHECK(std::fabs(nesterov[0] - -0.15) < 1e-7);
  CHECK(std::fabs(nesterov[1] - -0.325) < 1e-7);
}

// The mlp family's activation and dropout: written to new projects, read into the model, a wrong name listed.
TEST_CASE("the mlp family takes an activation and dropout") {
  auto p = parseProject("[model]\nfamily = \"mlp\"\nsizes = [8, 4]\nactivation = \"gelu\"\ndropout = 0.1\n", "p/project.toml", ".");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message.c_str()));
  TSR_COMPARE(p->model.config.text("activation"), std::string("gelu"));
  TSR_COMPARE(p->model.config.number("dropout"), 0.1);
  auto bad = parseProject("[model]\nfamily = \"mlp\"\nactivation = \"swish\"\n", "p/project.toml", ".");
  REQUIRE_FALSE(bad.ok());
  REQUIRE_MESSAGE(bad.error().message.find("relu, gelu, silu, tanh or sigmoid") != std::string::npos, bad.error().message);
  REQUIRE_MESSAGE(bad.error().message.find("project.toml:3") != std::string::npos, bad.error().message);
  auto text = newProjectToml({"m", "mlp", {{"activation", "silu"}}, "", "."});
  REQUIRE(text.ok());
  REQUIRE(text->find("activation = \"silu\"") != std::string::npos);
}
