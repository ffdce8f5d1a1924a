#pragma once
// Python model projects: `[model] python = "model.py"` in project.toml. The model file is traced once per
// configuration and batch shape by `python3 -m tessera.project_trace` in a child process (so a model.py that
// raises, loops or crashes the interpreter gives an error with its traceback, never takes down the program); the
// child hands back the parameters' layout and the IR text of init, loss and logits, each op with the user's
// file:line. The engine replays those graphs into its own traces: training is the compiled step, with no Python.
//
// Two families read such projects: `python` (a classifier: inputs of [model] input_shape, labels in [0,
// classes)) and `python_lm` (a language model on [data] text: tokens [B, T] -> logits [B, T, V]). A project
// with a `python` key and no `family` gets python_lm when its [data] kind is text, python otherwise. Both take
// any other [model] key as written and hand the whole table to the model as its cfg.
#include <memory>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/core/shape.h"
#include "engine/ir/graph.h"
#include "engine/project/model_family.h"

namespace tsr::project {

std::vector<ModelFamily> pythonFamilies();

// The model.py a new project of a Python family starts with ("python": an MLP classifier, "python_lm": a small
// causal transformer), which trains as it is; "" for any other family.
std::string pythonStarterModel(const std::string& family);

// Where the Python front end is: the interpreter (TESSERA_PYTHON, else the one the package was built for) and
// the folder holding the `tessera` package. An error when this build has none.
struct PythonFrontEnd {
  std::string interpreter;
  std::string packageDir;
};
Result<PythonFrontEnd> pythonFrontEnd();

// One trace of a model file.
struct PythonTraceRequest {
  std::string modelFile;   // absolute
  std::string configJson;  // the [model] table (and vocab_size for a language model) as a JSON object
  Aval inputs, targets;    // the batch it is traced for
  std::string compute;     // "bf16": loss and logits traced under tessera.autocast ([precision] compute)
};

// The traced model: parameter layout and graphs (null where model.py does not define the function).
struct PythonTrace {
  TreeOf<int> params;                 // the parameters' tree, leaves numbered in the order of `leaves`
  std::vector<Aval> leaves;           // each leaf's shape and dtype
  // A Module's running statistics ("batch_stats": BatchNorm's), numbered in the order of `stateLeaves`; empty
  // for a model without. They follow the parameters in init's outputs and in logits' inputs.
  TreeOf<int> state;
  std::vector<Aval> stateLeaves;
  ir::GraphPtr init;          // key -> leaves, state leaves
  ir::GraphPtr loss;          // leaves, inputs, targets, key -> loss, metrics...
  ir::GraphPtr logits;        // leaves, state leaves, inputs -> logits
  ir::GraphPtr logitsTrain;   // leaves, state leaves, inputs, key -> logits, updated state leaves (a Module
                              // with dropout or batch statistics)
  std::vector<std::string> lossOutputs;           // "loss", then the metrics' names
};

// Runs the child and reads what it hands back. Traces are cached in the process by the file's contents and the
// request, so building the same model twice traces once. Errors quote model.py's traceback.
Result<std::shared_ptr<const PythonTrace>> tracePythonModel(const PythonTraceRequest& request);

}  // namespace tsr::project
