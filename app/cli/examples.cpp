#include "app/cli/examples.h"

#include "engine/transform/api.h"
#include "engine/transform/control_flow.h"

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

// Twelve identical 256-wide Dense + ReLU layers, the stack a transformer's blocks are: written out layer by layer
// (mlp12: 12 copies in the IR) and as a scan over the stacked weights (mlp12-scan: one body, whatever the depth).
constexpr int64_t kDeepLayers = 12;
constexpr int64_t kDeepWidth = 256;

// params: layers.i.{kernel [256, 256], bias [256]}; x: [B, 256] -> [B, 256].
Tree mlp12Forward(const Tree& args) {
  const Tree& layers = *args.find("params")->find("layers");
  Array h = args.find("x")->leaf();
  for (size_t i = 0; i < layers.size(); ++i) {
    ModuleScope scope("layers." + std::to_string(i));
    h = relu(matmul(h, layers.child(i).find("kernel")->leaf()) + layers.child(i).find("bias")->leaf());
  }
  return Tree(h);
}

// params: layers.{kernel [12, 256, 256], bias [12, 256]}, scanned over their leading dim; x: [B, 256] -> [B, 256].
Tree mlp12ScanForward(const Tree& args) {
  ModuleScope scope("layers");
  auto layer = [](const Tree& h, const Tree& p) {
    Array y = relu(matmul(h.leaf(), p.find("kernel")->leaf()) + p.find("bias")->leaf());
    return std::make_pair(Tree(y), Tree());
  };
  return scan(layer, *args.find("x"), *args.find("params")->find("layers")).first;
}

TreeOf<Aval> mlp12Avals(int64_t batch, bool stacked) {
  const Aval x{Shape{batch, kDeepWidth}, DType::F32};
  TreeOf<Aval> layers;
  if (stacked) {
    layers = TreeOf<Aval>::dict({{"kernel", Aval{Shape{kDeepLayers, kDeepWidth, kDeepWidth}, DType::F32}},
                                 {"bias", Aval{Shape{kDeepLayers, kDeepWidth}, DType::F32}}});
  } else {
    std::vector<TreeOf<Aval>> items;
    for (int64_t i = 0; i < kDeepLayers; ++i)
      items.push_back(TreeOf<Aval>::dict({{"kernel", Aval{Shape{kDeepWidth, kDeepWidth}, DType::F32}},
                                          {"bias", Aval{Shape{kDeepWidth}, DType::F32}}}));
    layers = TreeOf<Aval>::list(std::move(items));
  }
  return TreeOf<Aval>::dict({{"x", x}, {"params", TreeOf<Aval>::dict({{"layers", std::move(layers)}})}});
}

}  // namespace

std::vector<std::string> exampleNames() { return {"mlp", "mlp12", "mlp12-scan"}; }

Result<ClosedGraph> traceExample(const std::string& name, int64_t batch) {
  if (batch <= 0) return makeError("batch size must be positive, got {}", batch);
  if (name == "mlp") return makeGraph(mlpForward, mlpAvals(batch), "mlp");
  if (name == "mlp12") return makeGraph(mlp12Forward, mlp12Avals(batch, false), "mlp12");
  if (name == "mlp12-scan") return makeGraph(mlp12ScanForward, mlp12Avals(batch, true), "mlp12_scan");
  return makeError("unknown example '{}' (known: mlp, mlp12, mlp12-scan)", name);
}

}  // namespace tsr::cli
