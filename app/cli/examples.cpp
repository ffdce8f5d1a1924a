#include "app/cli/examples.h"

#include "engine/transform/api.h"

namespace tsr::cli {

namespace {

// The MLP 784-1024-1024-1024-10 with ReLU of the distributed-arrays tutorial.
// params: layers.i.{kernel [in, out], bias [out]}; x: [B, 784] -> logits [B, 10].
Tree mlpForward(const Tree& args) {
  const Tree& params = *args.find("params");
  Array h = args.find("x")->leaf();
  size_t n = params.find("layers")->size();
  for (size_t i = 0; i < n; ++i) {
    ModuleScope scope("layers." + std::to_string(i));
    const Tree& layer = params.find("layers")->child(i);
    h = matmul(h, layer.find("kernel")->leaf()) + layer.find("bias")->leaf();
    if (i + 1 < n) h = relu(h);
  }
  return Tree(h);
}

TreeOf<Aval> mlpAvals(int64_t batch) {
  const std::vector<int64_t> sizes = {784, 1024, 1024, 1024, 10};
  std::vector<TreeOf<Aval>> layers;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    layers.push_back(TreeOf<Aval>::dict({{"kernel", Aval{Shape{sizes[i], sizes[i + 1]}, DType::F32}},
                                         {"bias", Aval{Shape{sizes[i + 1]}, DType::F32}}}));
  }
  return TreeOf<Aval>::dict({{"x", Aval{Shape{batch, 784}, DType::F32}},
                             {"params", TreeOf<Aval>::dict({{"layers", TreeOf<Aval>::list(std::move(layers))}})}});
}

}  // namespace

std::vector<std::string> exampleNames() { return {"mlp"}; }

Result<ClosedGraph> traceExample(const std::string& name, int64_t batch) {
  if (batch <= 0) return makeError("batch size must be positive, got {}", batch);
  if (name == "mlp") return makeGraph(mlpForward, mlpAvals(batch), "mlp");
  return makeError("unknown example '{}' (known: mlp)", name);
}

}  // namespace tsr::cli
