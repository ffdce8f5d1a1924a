#include "engine/project/python_family.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/env_options.h"
#include "engine/core/hash.h"
#include "engine/core/limits.h"
#include "engine/core/subprocess.h"
#include "engine/ops/registry.h"
#include "engine/project/core_families.h"
#include "engine/project/trace_server.h"
#include "engine/python_paths.h"
#include "engine/random/random.h"
#include "engine/transform/control_flow.h"
#include "engine/transform/trace.h"

namespace tsr::project {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The parameters' structure as the child writes it: {"dict": [[key, node], ...]}, {"list": [...]},
// {"leaf": i} or {"none": null}.
Result<TreeOf<int>> treeOf(const json& node, size_t numLeaves) {
  if (!node.is_object() || node.size() != 1) return makeError("a parameter tree node is not one of dict, list, leaf, none");
  const auto& [kind, value] = *node.items().begin();
  if (kind == "none") return TreeOf<int>();
  if (kind == "leaf") {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<size_t>() >= numLeaves)
      return makeError("a parameter leaf's index is out of range");
    return TreeOf<int>(value.get<int>());
  }
  if (!value.is_array()) return makeError("a parameter tree's {} is not an array", kind);
  if (kind == "list") {
    std::vector<TreeOf<int>> items;
    for (const json& item : value) {
      TSR_ASSIGN(TreeOf<int> t, treeOf(item, numLeaves));
      items.push_back(std::move(t));
    }
    return TreeOf<int>::list(std::move(items));
  }
  if (kind != "dict") return makeError("unknown parameter tree node '{}'", kind);
  std::vector<std::pair<std::string, TreeOf<int>>> items;
  for (const json& item : value) {
    if (!item.is_array() || item.size() != 2 || !item[0].is_string()) return makeError("a parameter dict entry is malformed");
    TSR_ASSIGN(TreeOf<int> t, treeOf(item[1], numLeaves));
    items.emplace_back(item[0].get<std::string>(), std::move(t));
  }
  return TreeOf<int>::dict(std::move(items));
}

// One of the traced functions' IR text, parsed and checked; null where the child traced none.
Result<ir::GraphPtr> graphOf(const json& out, const char* name, const std::string& modelFile) {
  if (!out.contains(name) || out[name].is_null()) return ir::GraphPtr();
  if (!out[name].is_string()) return makeError("{}: the trace of {} is not text", modelFile, name);
  auto g = ir::parse(out[name].get<std::string>(), ops::registry());
  if (!g.ok()) return makeError("{}: the traced {} does not parse: {}", modelFile, name, g.error().message);
  if (auto st = ir::verify(*g, ops::registry()); !st.ok())
    return makeError("{}: the traced {} is not a valid graph: {}", modelFile, name, st.error().message);
  return ir::GraphPtr(std::make_shared<const ir::Graph>(std::move(g).value()));
}

Result<PythonTrace> readTrace(const std::string& text, const PythonTraceRequest& r) {
  json out;
  try {
    out = json::parse(text);
  } catch (const json::exception& e) {
    return makeError("{}: the tracer's output is not JSON: {}", r.modelFile, e.what());
  }
  if (!out.is_object() || out.value("version", 0) != 1 || !out.contains("leaves") || !out["leaves"].is_array())
    return makeError("{}: the tracer's output is not what this version of Tessera reads", r.modelFile);
  PythonTrace t;
  try {
    for (const json& leaf : out["leaves"]) {
      auto dtype = parseDType(leaf.at("dtype").get<std::string>());
      if (!dtype) return makeError("{}: parameter {} has an unknown dtype", r.modelFile, leaf.at("path").dump());
      t.leaves.push_back(Aval{Shape(leaf.at("shape").get<std::vector<int64_t>>()), *dtype});
    }
    TSR_ASSIGN(t.params, treeOf(out.at("params"), t.leaves.size()));
    if (out.contains("state_leaves")) {
      for (const json& leaf : out["state_leaves"]) {
        auto dtype = parseDType(leaf.at("dtype").get<std::string>());
        if (!dtype) return makeError("{}: statistic {} has an unknown dtype", r.modelFile, leaf.at("path").dump());
        t.stateLeaves.push_back(Aval{Shape(leaf.at("shape").get<std::vector<int64_t>>()), *dtype});
      }
      TSR_ASSIGN(t.state, treeOf(out.at("state"), t.stateLeaves.size()));
    }
    if (out.contains("loss_outputs")) t.lossOutputs = out["loss_outputs"].get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    return makeError("{}: the tracer's output is malformed: {}", r.modelFile, e.what());
  }
  TSR_ASSIGN(t.init, graphOf(out, "init", r.modelFile));
  TSR_ASSIGN(t.loss, graphOf(out, "loss", r.modelFile));
  TSR_ASSIGN(t.logits, graphOf(out, "logits", r.modelFile));
  TSR_ASSIGN(t.logitsTrain, graphOf(out, "logits_train", r.modelFile));
  if (!t.init) return makeError("{}: the tracer gave no init", r.modelFile);
  if (t.init->outputs().size() != t.leaves.size() + t.stateLeaves.size())
    return makeError("{}: init gives {} arrays for {} parameters and {} statistics", r.modelFile,
                     t.init->outputs().size(), t.leaves.size(), t.stateLeaves.size());
  if (t.logitsTrain && t.logitsTrain->outputs().size() != 1 + t.stateLeaves.size())
    return makeError("{}: the training logits give {} arrays for the logits and {} statistics", r.modelFile,
                     t.logitsTrain->outputs().size(), t.stateLeaves.size());
  return t;
}

Result<PythonTrace> runTracer(const PythonTraceRequest& r) {
  TSR_ASSIGN(PythonFrontEnd fe, pythonFrontEnd());
  static std::atomic<int> counter{0};
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec) / fmt::format("tessera-trace-{}-{}", ::getpid(), counter++);
  fs::create_directories(dir, ec);
  if (ec) return makeError("cannot make a folder for tracing {}: {}", r.modelFile, ec.message());
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{dir};
  const std::string out = (dir / "trace.json").string(), log = (dir / "trace.log").string();
  std::vector<std::string> args = {"--model",  r.modelFile,          "--config",  r.configJson,
                                   "--inputs", r.inputs.toString(), "--targets", r.targets.toString(),
                                   "--out",    out};
  if (!r.compute.empty() && r.compute != "f32") args.insert(args.end(), {"--compute", r.compute});
  const EnvLocations where = envLocations();
  std::vector<std::pair<std::string, std::string>> env = {
      {"PYTHONPATH", where.pythonPath.empty() ? fe.packageDir : fe.packageDir + ":" + where.pythonPath},
      {"PYTHONDONTWRITEBYTECODE", "1"}};  // no __pycache__ beside the user's model.py
  const double timeout = envOptions().traceTimeout;
  // A child of the warm tracer when it can take the trace, else a fresh interpreter. Both run in this process's
  // group, so that Ctrl-C in a terminal stops the tracer too (Python raises KeyboardInterrupt) instead of leaving
  // it running.
  std::optional<ProcessExit> served;
  if (envOptions().traceServer) served = traceWithServer({fe.interpreter, env, args, log, timeout});
  ProcessExit exit;
  if (served) {
    exit = *served;
  } else {
    SpawnOptions o;
    o.argv = {fe.interpreter, "-m", "tessera.project_trace"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.log = log;
    o.setEnv = std::move(env);
    TSR_ASSIGN(pid_t pid, spawnProcess(o));
    exit = waitProcess(pid, timeout);
  }
  if (exit.timedOut)
    return makeError("{}: tracing took longer than {:g} s and was stopped (does it loop forever? "
                     "TESSERA_TRACE_TIMEOUT sets the limit)\n{}", r.modelFile, timeout, logTail(log));
  if (!exit.ok())
    return makeError("{}: tracing failed ({}):\n{}", r.modelFile, exit.describe(), logTail(log));
  return readTrace(readText(out), r);
}

struct TraceCache {
  std::mutex mu;
  std::map<uint64_t, std::shared_ptr<const PythonTrace>> traces;
};

TraceCache& traceCache() {
  static TraceCache c;
  return c;
}

// The [model] table as the model's cfg: every key as written, and a language model's vocab_size (the
// tokenizer's) and seq_len.
std::string configJson(const ModelConfig& c, const BuildContext& ctx, bool languageModel) {
  json j = json::object();
  for (const auto& [key, v] : c.values()) {
    const std::string& k = key;  // clang 14 (the sanitizer build) cannot capture a structured binding
    std::visit([&j, &k](const auto& x) { j[k] = x; }, v);
  }
  if (languageModel) j["vocab_size"] = ctx.vocab;
  j["seq_len"] = ctx.seqLen;
  return j.dump();
}

// A traced model file: its graphs replayed into whatever trace is active (the jitted step), traced again for a
// batch of another shape (evaluation, a one-sequence forward for generation) the first time one comes.
class PythonModel {
 public:
  PythonModel(PythonTraceRequest request, std::shared_ptr<const PythonTrace> primary, bool languageModel)
      : m_request(std::move(request)), m_primary(std::move(primary)), m_languageModel(languageModel) {}

  const PythonTrace& primary() const { return *m_primary; }

  Tree init(const Array& key) const {
    const std::vector<Array> leaves = bindGraph(*m_primary->init, {key});
    return m_primary->params.map([&](int i) { return leaves[static_cast<size_t>(i)]; });
  }

  // The running statistics at the start: init's outputs after the parameters (they draw no randomness).
  Tree initState() const {
    const std::vector<Array> leaves = bindGraph(*m_primary->init, {random::key(0)});
    const size_t first = m_primary->leaves.size();
    return m_primary->state.map([&](int i) { return leaves[first + static_cast<size_t>(i)]; });
  }

  bool hasState() const { return !m_primary->stateLeaves.empty(); }

  Array loss(const Tree& params, const Array& inputs, const Array& targets, nn::Context& ctx) const {
    const PythonTrace& t = at(inputs.aval(), targets.aval());
    std::vector<Array> xs = leavesOf(params);
    xs.push_back(inputs);
    xs.push_back(targets);
    xs.push_back(keyOf(ctx));
    std::vector<Array> out = bindGraph(*t.loss, xs);
    // (loss, metrics): each metric is reported beside the loss, and a run logs it.
    for (size_t i = 1; i < out.size() && i < t.lossOutputs.size(); ++i) ctx.sow(t.lossOutputs[i], out[i]);
    return out[0];
  }

  Array apply(const Tree& params, const Array& inputs, nn::Context& ctx) const {
    // Labels as the batch has them: next tokens for a language model, one class per example otherwise.
    const Aval targets{m_languageModel ? inputs.shape() : Shape{inputs.shape()[0]}, DType::I32};
    const PythonTrace& t = at(inputs.aval(), targets);
    std::vector<Array> xs = leavesOf(params);
    if (hasState()) {
      std::vector<Array> stats = ctx.state().leaves();
      if (stats.size() != m_primary->stateLeaves.size())
        raise(makeError("{}: the model's batch_stats have {} arrays but its init makes {}", m_request.modelFile,
                        stats.size(), m_primary->stateLeaves.size()));
      xs.insert(xs.end(), stats.begin(), stats.end());
    }
    xs.push_back(inputs);
    if (ctx.training() && t.logitsTrain) {
      xs.push_back(ctx.nextKey());
      std::vector<Array> out = bindGraph(*t.logitsTrain, xs);
      if (hasState())
        ctx.setUpdatedState(m_primary->state.map([&](int i) { return out[1 + static_cast<size_t>(i)]; }));
      return out[0];
    }
    if (!t.logits) raise(makeError("{} defines no logits(params, inputs)", m_request.modelFile));
    return bindGraph(*t.logits, xs)[0];
  }

 private:
  const PythonTrace& at(const Aval& inputs, const Aval& targets) const {
    if (inputs == m_request.inputs && targets == m_request.targets) return *m_primary;
    PythonTraceRequest r = m_request;
    r.inputs = inputs;
    r.targets = targets;
    auto traced = tracePythonModel(r);
    if (!traced.ok()) raise(traced.error());
    return **traced;  // the cache holds it for the process's life
  }

  std::vector<Array> leavesOf(const Tree& params) const {
    std::vector<Array> leaves = params.leaves();
    if (leaves.size() != m_primary->leaves.size())
      raise(makeError("{}: the parameters have {} arrays but its init makes {}", m_request.modelFile, leaves.size(),
                      m_primary->leaves.size()));
    return leaves;
  }

  // Dropout's key in training; a fixed one in evaluation, where the model should not draw.
  static Array keyOf(nn::Context& ctx) { return ctx.training() ? ctx.nextKey() : random::key(0); }

  PythonTraceRequest m_request;
  std::shared_ptr<const PythonTrace> m_primary;
  bool m_languageModel;
};

FamilyKey textKey(std::string name, std::string def, std::string help) {
  FamilyKey k;
  k.name = std::move(name);
  k.type = KeyType::Text;
  k.defaultValue = std::move(def);
  k.help = std::move(help);
  return k;
}

Status checkModelFile(const ModelConfig& c) {
  if (c.text("python").empty()) return makeError("[model] python must name the model file, e.g. python = \"model.py\"");
  return {};
}

// The python family's batch: inputs [B, input_shape...], one label per example.
BatchSignature classifierBatch(const ModelConfig& c, int64_t batchSize) {
  std::vector<int64_t> dims = {batchSize};
  for (int64_t d : c.sizes("input_shape")) dims.push_back(d);
  return BatchSignature{Aval{Shape(dims), DType::F32}, Aval{Shape{batchSize}, DType::I32}, c.integer("classes")};
}

FamilyModel buildPython(const ModelConfig& c, const BuildContext& ctx, const BatchSignature& batch, bool languageModel) {
  const fs::path file = fs::absolute(fs::path(ctx.projectDir) / c.text("python")).lexically_normal();
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) raise(makeError("[model] python: {} does not exist", file.string()));
  PythonTraceRequest request{file.string(), configJson(c, ctx, languageModel), batch.inputs, batch.targets,
                             ctx.compute};
  auto traced = tracePythonModel(request);
  if (!traced.ok()) raise(traced.error());
  auto model = std::make_shared<PythonModel>(std::move(request), *traced, languageModel);
  const PythonTrace& t = model->primary();
  FamilyModel m;
  m.init = [model](const Array& key) { return model->init(key); };
  if (t.logits)
    m.apply = [model](const Tree& p, const Array& x, nn::Context& ctx) { return model->apply(p, x, ctx); };
  if (t.loss)
    m.loss = [model](const Tree& p, const Array& x, const Array& y, nn::Context& ctx) { return model->loss(p, x, y, ctx); };
  if (model->hasState()) m.initState = [model] { return model->initState(); };
  for (const Aval& a : t.leaves) m.numParams += a.numel();
  // FLOPs from each op's cost rule over the traced forward (the loss, or the logits), three times for a step.
  const ir::Graph& forward = t.loss ? *t.loss : *t.logits;
  const double items = static_cast<double>(languageModel ? batch.inputs.numel() : batch.inputs.shape[0]);
  m.trainFlopsPerItem = 3.0 * ir::graphCost(forward, ops::registry()).flops / std::max(items, 1.0);
  m.flopsRule = fmt::format("3 * the traced {}'s FLOPs per {}", t.loss ? "loss" : "logits", languageModel ? "token" : "sample");
  return m;
}

}  // namespace

Result<PythonFrontEnd> pythonFrontEnd() {
  PythonFrontEnd fe;
  fe.packageDir = kPythonPackageDir;
  if (fe.packageDir.empty())
    return makeError("this build of Tessera has no Python front end, which Python model projects need (pybind11-dev "
                     "and python3-dev were missing when it was built: run scripts/bootstrap.sh and build again)");
  std::error_code ec;
  if (!fs::exists(fs::path(fe.packageDir) / "tessera" / "__init__.py", ec))
    return makeError("the Python package is not in {} (build the _tessera target)", fe.packageDir);
  const std::string chosen = envLocations().python;
  fe.interpreter = chosen.empty() ? kPythonExecutable : chosen;
  return fe;
}

Result<std::shared_ptr<const PythonTrace>> tracePythonModel(const PythonTraceRequest& r) {
  std::error_code ec;
  if (!fs::is_regular_file(r.modelFile, ec)) return makeError("{} does not exist", r.modelFile);
  if (auto size = fs::file_size(r.modelFile, ec); !ec && size > static_cast<uintmax_t>(limits::kProjectFileBytes))
    return makeError("{} is {} bytes, more than a model file may be ({})", r.modelFile, size, limits::kProjectFileBytes);
  uint64_t key = fnv1a(readText(r.modelFile));
  for (const std::string& part : {r.modelFile, r.configJson, r.inputs.toString(), r.targets.toString(), r.compute})
    key = fnv1a(part, fnv1a("\x1f", key));
  TraceCache& cache = traceCache();
  std::lock_guard lock(cache.mu);
  if (auto it = cache.traces.find(key); it != cache.traces.end()) return it->second;
  TSR_ASSIGN(PythonTrace t, runTracer(r));
  auto shared = std::make_shared<const PythonTrace>(std::move(t));
  cache.traces[key] = shared;
  return std::shared_ptr<const PythonTrace>(shared);
}

std::vector<ModelFamily> pythonFamilies() {
  FamilyKey file = textKey("python", "", "the model file, relative to the project: init(key, cfg), loss(params, batch, key)");
  file.projectFile = true;
  ModelFamily classifier;
  classifier.name = "python";
  classifier.description = "a model written in Python (model.py: init, loss, logits), here a classifier of [model] input_shape";
  FamilyKey shape;
  shape.name = "input_shape";
  shape.type = KeyType::Sizes;
  shape.defaultValue = std::vector<int64_t>{784};
  shape.max = static_cast<double>(limits::kWidth);
  shape.product = limits::kWidth * 64;
  shape.help = "the shape of one example's inputs, e.g. [784] or [3, 32, 32]";
  classifier.keys = {file, shape, integerKey("classes", 10, limits::kVocab, "the classes its labels take")};
  classifier.openKeys = true;
  classifier.dataKinds = {"synthetic-digits", "synthetic-images", "npy", "cifar10", "image_folder"};
  classifier.check = checkModelFile;
  classifier.batch = classifierBatch;
  classifier.build = [](const ModelConfig& c, const BuildContext& ctx) {
    return buildPython(c, ctx, classifierBatch(c, ctx.batchSize), false);
  };

  ModelFamily lm;
  lm.name = "python_lm";
  lm.description = "a language model written in Python (model.py: init, loss, logits) over [data] text";
  lm.keys = {file, integerKey("block_size", 1024, limits::kSequence, "the longest sequence the model reads")};
  lm.openKeys = true;
  lm.dataKinds = {"text"};
  lm.languageModel = true;
  lm.contextKey = "block_size";
  lm.check = checkModelFile;
  lm.build = [](const ModelConfig& c, const BuildContext& ctx) {
    return buildPython(c, ctx, tokenBatch(ctx.batchSize, ctx.seqLen, ctx.vocab), true);
  };
  return {classifier, lm};
}

}  // namespace tsr::project
