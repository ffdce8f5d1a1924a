// project.toml: values land in the right fields; every mistake names the file, the line and the key.
#include "tests/check.h"

#include "engine/project/project.h"

using namespace tsr;
using namespace tsr::project;

namespace {

std::string parseError(const std::string& text) {
  auto p = parseProject(text, "p/project.toml", "p");
  return p.ok() ? std::string("(parsed)") : p.error().message;
}

}  // namespace

TEST_CASE("readsEverySection") {
  auto p = parseProject(R"(
# comment
[project]
name = "demo"
[model]
family = "gpt2"
n_layer = 3
n_head = 2
n_embd = 32
block_size = 16
[data]
kind = "text"
path = "data/corpus.txt"
vocab_size = 300
[train]
steps = 7
seq_len = 16
lr = 1e-3
shuffle = false
[mesh]
shape = [4, 2]
axes = ["data", "model"]
[sharding]
"h\\.\\d+\\.mlp\\.c_fc\\.weight" = "None, model"
[precision]
compute = "bf16"
)",
                        "p/project.toml", "p");
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  TSR_COMPARE(p->name, std::string("demo"));
  TSR_COMPARE(p->model.config.integer("n_layer"), int64_t(3));
  TSR_COMPARE(p->model.config.integer("n_embd"), int64_t(32));
  TSR_COMPARE(p->data.vocabSize, int64_t(300));
  TSR_COMPARE(p->train.steps, int64_t(7));
  TSR_COMPARE(p->train.lr, 1e-3);
  TSR_COMPARE(p->train.shuffle, false);
  TSR_COMPARE(p->mesh.shape, (std::vector<int64_t>{4, 2}));
  TSR_COMPARE(p->sharding.size(), size_t(1));
  TSR_COMPARE(p->sharding[0].spec, std::string("None, model"));
  TSR_COMPARE(p->sharding[0].line, 24);
  TSR_COMPARE(p->precision, std::string("bf16"));
  TSR_COMPARE(p->resolve("data/corpus.txt"), std::string("p/data/corpus.txt"));
}

TEST_CASE("shardingRulesKeepTheFileOrder") {
  // The first matching rule wins, so "z" (first in the file) must come before "a" whatever order TOML sorts
  // keys into.
  auto p = parseProject("[sharding]\n'z' = \"model\"\n'b' = \"None\"\n'a' = \"data\"\n", "p/project.toml", "p");
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  TSR_COMPARE(p->sharding.size(), size_t(3));
  TSR_COMPARE(p->sharding[0].pattern, std::string("z"));
  TSR_COMPARE(p->sharding[1].pattern, std::string("b"));
  TSR_COMPARE(p->sharding[2].pattern, std::string("a"));
  TSR_COMPARE(p->sharding[2].line, 4);
}

TEST_CASE("errorsNameFileLineAndKey") {
  TSR_COMPARE(parseError("[train]\nstpes = 3\n"),
              std::string("p/project.toml:2: unknown key 'stpes' in [train] (did you mean 'steps'?)"));
  TSR_COMPARE(parseError("[train]\n\nsteps = \"many\"\n"), std::string("p/project.toml:3: 'steps' must be an integer"));
  TSR_COMPARE(parseError("[train]\nlr = -1.0\n"), std::string("p/project.toml:2: 'lr' must be positive"));
  TSR_COMPARE(parseError("[model]\nfamily = \"rnn\"\n"),
              std::string("p/project.toml:2: 'family' must be one of gpt2, vit, mlp, resnet, unet, python, python_lm"));
  TSR_COMPARE(parseError("[modle]\nx = 1\n"), std::string("p/project.toml:1: unknown section [modle]"));
  REQUIRE(parseError("[train\nsteps = 1\n").find("p/project.toml:1:") == 0);  // a syntax error with its position
  REQUIRE(parseError("[model]\nn_embd = 30\nn_head = 4\n").find("divisible") != std::string::npos);
  auto missing = loadProject("/nonexistent/folder");
  REQUIRE(!missing.ok());
  REQUIRE_MESSAGE(missing.error().message.find("/nonexistent/folder: no such file") == 0,
                  missing.error().message.c_str());
}

// [mesh] shape and axes of different lengths: the error is at the axes' line (the key that names them), at the
// shape's when the axes are the default, and at the --set that gave either.
TEST_CASE("meshSizesAndAxisNamesThatDisagreeNameTheLine") {
  TSR_COMPARE(parseError("[mesh]\nshape = [2, 2, 1]\naxes = [\"data\", \"model\"]\n"),
              std::string("p/project.toml:3: [mesh] has 3 sizes (shape = [2, 2, 1]) but 2 axis names (axes = "
                          "[\"data\", \"model\"]): give one name per size"));
  TSR_COMPARE(parseError("[project]\nname = \"m\"\n[mesh]\nshape = [2, 2]\n"),
              std::string("p/project.toml:4: [mesh] has 2 sizes (shape = [2, 2]) but 1 axis name (axes = [\"data\"]): "
                          "give one name per size"));
  auto set = parseProject("[mesh]\nshape = [2]\naxes = [\"data\"]\n", "p/project.toml", "p",
                          {{"mesh", "axes", "[\"a\", \"b\"]"}});
  REQUIRE(!set.ok());
  TSR_COMPARE(set.error().message,
              std::string("--set mesh.axes=[\"a\", \"b\"] (over p/project.toml): [mesh] has 1 size (shape = [2]) but 2 "
                          "axis names (axes = [\"a\", \"b\"]): give one name per size"));
}

// What toml++ 3.3 would mishandle (undefined behaviour on non-ASCII text where it looks for whitespace, failed
// assertions on control characters and on a table header that begins with no key) is refused first, with the
// line and column; non-ASCII text in strings and comments, where TOML allows it, still parses.
TEST_CASE("textTomlWouldMishandleIsRefusedWithItsPosition") {
  const std::string outside = "a non-ASCII character outside a string or comment (TOML allows them only there)";
  TSR_COMPARE(parseError("\xc6\x8d[train]\nsteps = 3\n"), "p/project.toml:1:1: " + outside);
  TSR_COMPARE(parseError("[train]\nsteps = 3 \xc2\xa0\n"), "p/project.toml:2:11: " + outside);
  TSR_COMPARE(parseError("[train]\nsteps = \x01\n"),
              std::string("p/project.toml:2:9: control character U+0001 (TOML allows none but tab)"));
  TSR_COMPARE(parseError("# x\n  [*o]\n"), std::string("p/project.toml:2:3: a table header must begin with a key"));
  TSR_COMPARE(parseError("[[\x01z]]\n"), std::string("p/project.toml:1:1: a table header must begin with a key"));
  // A quote inside a bare value: toml++ 3.3 asserts on this one while guessing the value's type.
  const std::string quote = "a quote inside a bare value (a string is quoted from its start)";
  TSR_COMPARE(parseError("[train]\nsteps=2--\"------ 3 =\n"), "p/project.toml:2:10: " + quote);
  TSR_COMPARE(parseError("[train]\nsteps = 3 'x'\n"), "p/project.toml:2:11: " + quote);
  // A quote after a number's point is no dotted key (toml++ reached __builtin_unreachable on this one).
  TSR_COMPARE(parseError("[train]\nlr = 0.'\xef\xbb\xb5" "b0'\n"), "p/project.toml:2:8: " + quote);
  // A value missing where one must be: toml++ 3.3 asserts on these too.
  TSR_COMPARE(parseError("[train]\nlog_every =[[[}[\n"), std::string("p/project.toml:2:15: a value is missing before '}'"));
  TSR_COMPARE(parseError("[mesh]\nshape = [1,,2]\n"), std::string("p/project.toml:2:12: a value is missing before ','"));
  TSR_COMPARE(parseError("[train]\nsteps = , 3\n"), std::string("p/project.toml:2:9: a value is missing before ','"));
  TSR_COMPARE(parseError("[train]\nsteps =[\n\n # c\n}h\n"), std::string("p/project.toml:5:1: a value is missing before '}'"));
  TSR_COMPARE(parseError("[train]\nsteps =\nlr = 1\n"),
              std::string("p/project.toml:2:8: a value is missing before the line's end"));
  // Empty arrays, trailing commas, arrays over lines and inline tables are values as TOML has them.
  auto arrays = parseProject("[mesh]\nshape = [\n  2,\n  1,\n]\naxes = [ \"data\", \"model\", ]\n[sharding]\n",
                             "p/project.toml", "p");
  REQUIRE_MESSAGE(arrays.ok(), arrays.error().message);
  // A dotted key with quoted parts passes the text check (and is then a table, which [sharding] refuses).
  TSR_COMPARE(parseError("[sharding]\n\"x\".'y' = \"data\"\n"),
              std::string("p/project.toml:2: sharding rule 'x' must be a string PartitionSpec"));
  // Quotes where TOML has strings: keys, values, arrays, inline tables, dotted keys, table names.
  auto q = parseProject("[\"project\"]\n\"name\" = 'x'\n[model]\nfamily='mlp'\nsizes = [ 4,2 ]\n"
                        "[sharding]\n'a.*' = \"data\"\n[data]\nkind = \"synthetic-digits\"\n",
                        "p/project.toml", "p");
  REQUIRE_MESSAGE(q.ok(), q.error().message);
  // Allowed in comments and strings, where a quote of another kind or a # ends nothing.
  auto p = parseProject("# \xc3\xa9t\xc3\xa9 \"\n[project]\nname = \"\"\"caf\xc3\xa9 ''' # \"\" \"\"\"\n"
                        "[train]\nsteps = 3 # \xc2\xa0 '\n",
                        "p/project.toml", "p");
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  TSR_COMPARE(p->name, std::string("caf\xc3\xa9 ''' # \"\" "));
  TSR_COMPARE(p->train.steps, int64_t(3));
}

// Sizes are bounded when the file is read, before anything is allocated from them; the message names the
// key, the value and the limit (n_layer = 100000 used to end in std::bad_alloc, a huge mesh in length_error).
TEST_CASE("sizesAreBoundedWithTheKeyValueAndLimit") {
  TSR_COMPARE(parseError("[model]\nn_layer = 100000\n"),
              std::string("p/project.toml:2: 'n_layer' is 100000, above the limit of 4096"));
  TSR_COMPARE(parseError("[model]\nvocab_size = 1000000000\n"),
              std::string("p/project.toml:2: 'vocab_size' is 1000000000, above the limit of 16777216"));
  TSR_COMPARE(parseError("[train]\nbatch_size = 9000000\n"),
              std::string("p/project.toml:2: 'batch_size' is 9000000, above the limit of 1048576"));
  TSR_COMPARE(parseError("[model]\nfamily = \"mlp\"\nsizes = [784, 10000000, 10]\n"),
              std::string("p/project.toml:3: 'sizes' is 10000000, above the limit of 131072"));
  TSR_COMPARE(parseError("[mesh]\nshape = [9223372036854775807, 2]\naxes = [\"a\", \"b\"]\n"),
              std::string("p/project.toml:2: 'shape' is 9223372036854775807, above the limit of 1048576"));
  // Each dim within the limit, their product not (and not overflowing on the way).
  TSR_COMPARE(
      parseError("[mesh]\nshape = [1048576, 1048576, 1048576, 1048576]\naxes = [\"a\", \"b\", \"c\", \"d\"]\n"),
      std::string(
          "p/project.toml:2: 'shape' is 1048576 x 1048576 x 1048576 x 1048576, more than the limit of 1048576"));
  TSR_COMPARE(parseError("[mesh]\nshape = [1024, 1024]\naxes = [\"a\", \"b\"]\n"), std::string("(parsed)"));
}

TEST_CASE("sampleProjectsLoad") {
  for (const char* name : {"gpt2_mini", "gpt2_124m", "mlp_sharding", "vit_tiny", "vit_base", "resnet_cifar", "unet_toy"}) {
    auto p = loadProject(std::string(TSR_SAMPLES) + "/" + name);
    REQUIRE_MESSAGE(p.ok(), (p.ok() ? name : p.error().message.c_str()));
    TSR_COMPARE(p->name, std::string(name));
  }
}

// --set replaces or adds a key before the file is checked; values are TOML, bare text is a string; a bad value
// is refused with the --set that gave it.
TEST_CASE("overridesReplaceAndAddKeys") {
  const std::string text = R"([model]
family = "gpt2"
n_layer = 3
n_head = 2
n_embd = 32
block_size = 16
[train]
lr = 1e-3
seq_len = 16
)";
  auto overrides = parseOverrides({"train.lr=3e-4", "model.n_layer=4", "train.schedule=cosine", "train.shuffle=false",
                                   "mesh.shape=[2, 1]", "mesh.axes=[\"data\", \"model\"]"});
  REQUIRE_MESSAGE(overrides.ok(), overrides.error().message);
  auto p = parseProject(text, "p/project.toml", "p", *overrides);
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  TSR_COMPARE(p->train.lr, 3e-4);
  TSR_COMPARE(p->model.config.integer("n_layer"), int64_t(4));
  TSR_COMPARE(p->train.schedule, std::string("cosine"));
  TSR_COMPARE(p->train.shuffle, false);
  TSR_COMPARE(p->mesh.shape, (std::vector<int64_t>{2, 1}));
  TSR_COMPARE(p->overrides.size(), size_t(6));
  TSR_COMPARE(p->text, text);  // the file as written; the overrides are kept beside it

  auto error = [&](const std::string& spec) {
    auto o = parseOverride(spec);
    if (!o.ok()) return o.error().message;
    auto q = parseProject(text, "p/project.toml", "p", {*o});
    return q.ok() ? std::string("(parsed)") : q.error().message;
  };
  TSR_COMPARE(error("train.lr=-1"), std::string("--set train.lr=-1 (over p/project.toml): 'lr' must be positive"));
  TSR_COMPARE(error("train.steps=1e3"),
              std::string("--set train.steps=1e3 (over p/project.toml): 'steps' must be an integer"));
  TSR_COMPARE(error("train.lrr=1"),
              std::string("--set train.lrr=1 (over p/project.toml): unknown key 'lrr' in [train] (did you mean 'lr'?)"));
  TSR_COMPARE(error("trian.lr=1"), std::string("--set trian.lr=1: unknown section [trian] (one of project, model, "
                                               "data, train, mesh, sharding, precision)"));
  TSR_COMPARE(error("lr=1"), std::string("--set lr=1: expected SECTION.KEY=VALUE, e.g. train.lr=3e-4"));
  TSR_COMPARE(error("train.lr"), std::string("--set train.lr: expected SECTION.KEY=VALUE, e.g. train.lr=3e-4"));
  // A rule across keys, broken by an override, is still found.
  TSR_COMPARE(error("model.n_head=5").find("p/project.toml: "), size_t(0));
}

// The resolved config lists every key the parser reads, defaults included, and reads back to the same project.
TEST_CASE("resolvedConfigHasEveryKeyAndReadsBack") {
  auto p = parseProject(R"([model]
family = "gpt2"
n_layer = 2
n_head = 2
n_embd = 32
block_size = 16
[train]
lr = 2e-3
seq_len = 16
[sharding]
"z.*" = "data"
"a.*" = "None, data"
)", "p/project.toml", "p", *parseOverrides({"train.steps=9", "data.path=\"corpus \\\"q\\\".txt\""}));
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  const std::string resolved = resolvedToml(*p);
  // Keys the file never names, with their defaults; the overrides' values; rules in the file's order.
  for (const char* line : {"steps = 9\n", "batch_size = 8\n", "lr = 0.002\n", "schedule = \"warmup_cosine\"\n",
                           "accumulate = 1\n", "keep_checkpoints = 0\n", "best_metric = \"val_loss\"\n",
                           "dropout = ", "path = \"corpus \\\"q\\\".txt\"\n", "compute = \"f32\"\n",
                           "shape = [1]\n", "axes = [\"data\"]\n", "name = \"p\"\n"})
    REQUIRE_MESSAGE(resolved.find(line) != std::string::npos, line << " missing from\n" << resolved);
  REQUIRE(resolved.find("\"z.*\" = \"data\"") < resolved.find("\"a.*\" = \"None, data\""));
  auto again = parseProject(resolved, "resolved.toml", "p");
  REQUIRE_MESSAGE(again.ok(), again.error().message << "\n" << resolved);
  TSR_COMPARE(again->train.steps, int64_t(9));
  TSR_COMPARE(again->data.path, std::string("corpus \"q\".txt"));
  TSR_COMPARE(again->sharding.front().pattern, std::string("z.*"));
  // Same settings, so the same text (but for the first comment line, which names the file).
  auto body = [](const std::string& s) { return s.substr(s.find('\n')); };
  TSR_COMPARE(body(resolvedToml(*again)), body(resolved));
  TSR_COMPARE(again->settings.size(), p->settings.size());
}

// The keys of the array and image kinds: read for their kind only (unknown for any other), with per-kind
// defaults, checked values and a resolved config that reads back the same.
TEST_CASE("arrayAndImageDataKeys") {
  auto p = parseProject(R"([model]
family = "mlp"
sizes = [4, 8, 3]
[data]
kind = "npy"
x = "d.npz:x"
y = "d.npz:y"
val_x = "vx.npy"
val_y = "vy.npy"
scale = 0.5
)", "p/project.toml", "p");
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  TSR_COMPARE(p->data.x, std::string("d.npz:x"));
  TSR_COMPARE(p->data.valY, std::string("vy.npy"));
  TSR_COMPARE(p->data.scale, 0.5);
  auto again = parseProject(resolvedToml(*p), "resolved.toml", "p");
  REQUIRE_MESSAGE(again.ok(), again.error().message);
  TSR_COMPARE(again->data.valX, std::string("vx.npy"));

  const std::string vit = "[model]\nfamily = \"vit\"\nimage_size = 32\npatch_size = 8\nhidden = 16\nlayers = 1\n"
                          "heads = 2\nmlp = 16\nnum_classes = 10\n[data]\n";
  auto cifar = parseProject(vit + "kind = \"cifar10\"\npath = \"c\"\n", "p/project.toml", "p");
  REQUIRE_MESSAGE(cifar.ok(), cifar.error().message);
  TSR_COMPARE(cifar->data.mean, (std::vector<double>{0.4914, 0.4822, 0.4465}));
  TSR_COMPARE(cifar->data.stddev, (std::vector<double>{0.2470, 0.2435, 0.2616}));
  TSR_COMPARE(cifar->data.augment, false);
  const std::string resolved = resolvedToml(*cifar);
  REQUIRE_MESSAGE(resolved.find("mean = [0.4914, 0.4822, 0.4465]\n") != std::string::npos, resolved);
  auto folder = parseProject(vit + "kind = \"image_folder\"\npath = \"f\"\nmean = [0.5, 0.5, 1]\nstd = [1, 2, 3]\n"
                                   "bad_files = \"skip\"\nval_path = \"v\"\n",
                             "p/project.toml", "p");
  REQUIRE_MESSAGE(folder.ok(), folder.error().message);
  TSR_COMPARE(folder->data.augment, true);
  TSR_COMPARE(folder->data.mean, (std::vector<double>{0.5, 0.5, 1}));
  TSR_COMPARE(folder->data.badFiles, std::string("skip"));

  // A key of another kind is unknown, with its line.
  TSR_COMPARE(parseError(vit + "kind = \"cifar10\"\npath = \"c\"\nx = \"a.npy\"\n"),
              std::string("p/project.toml:13: unknown key 'x' in [data]"));
  TSR_COMPARE(parseError("[model]\nfamily = \"mlp\"\n[data]\nkind = \"npy\"\naugment = true\n"),
              std::string("p/project.toml:5: unknown key 'augment' in [data]"));
  TSR_COMPARE(parseError("[model]\nfamily = \"mlp\"\n[data]\nkind = \"synthetic-digits\"\nx = \"a.npy\"\n"),
              std::string("p/project.toml:5: unknown key 'x' in [data]"));
  TSR_COMPARE(parseError(vit + "kind = \"image_folder\"\nbad_files = \"ignore\"\n"),
              std::string("p/project.toml:12: 'bad_files' must be stop or skip"));
  TSR_COMPARE(parseError(vit + "kind = \"cifar10\"\nstd = [0.2, 0, 0.2]\n"),
              std::string("p/project.toml:12: 'std' must be an array of positive numbers, one per channel"));
  TSR_COMPARE(parseError(vit + "kind = \"cifar10\"\nmean = \"zero\"\n"),
              std::string("p/project.toml:12: 'mean' must be an array of numbers"));
  TSR_COMPARE(parseError("[model]\nfamily = \"mlp\"\n[data]\nkind = \"npy\"\nscale = -1.0\n"),
              std::string("p/project.toml:5: 'scale' must be a non-negative number (0: 1/255 for uint8 inputs, 1 otherwise)"));
  REQUIRE(parseError("[data]\nkind = \"npy\"\n").find("'kind' must be text (what the gpt2 family trains on)") !=
          std::string::npos);
}

TEST_CASE("weightDecayDefaultsToAdamWsOnly") {
  auto decay = [](const std::string& train) {
    auto p = parseProject("[train]\n" + train, "p/project.toml", "p");
    REQUIRE(p.ok());
    return p->train.weightDecay;
  };
  CHECK(decay("optimizer = \"adamw\"\n") == doctest::Approx(0.1));
  CHECK(decay("optimizer = \"sgd\"\n") == 0.0);  // L2 in sgd and adam only when asked for
  CHECK(decay("optimizer = \"adam\"\n") == 0.0);
  CHECK(decay("optimizer = \"sgd\"\nweight_decay = 5e-4\n") == doctest::Approx(5e-4));
}
