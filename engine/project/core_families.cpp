#include "engine/project/core_families.h"

#include <memory>

#include "engine/core/limits.h"
#include "engine/nn/resnet.h"
#include "engine/nn/unet.h"
#include "engine/nn/mlp.h"
#include "engine/nn/vit.h"
#include "engine/optim/metrics.h"
#include "engine/project/python_family.h"

namespace tsr::project {

FamilyKey integerKey(std::string name, int64_t def, int64_t max, std::string help) {
  FamilyKey k;
  k.name = std::move(name);
  k.type = KeyType::Integer;
  k.defaultValue = def;
  k.max = static_cast<double>(max);
  k.help = std::move(help);
  return k;
}

namespace {

FamilyKey dropoutKey() {
  FamilyKey k;
  k.name = "dropout";
  k.type = KeyType::Number;
  k.defaultValue = 0.0;
  k.min = 0;
  k.max = 1;
  k.maxOpen = true;
  k.help = "dropout probability (0: none)";
  return k;
}

// A classifier's metric on an evaluation batch: the fraction of the batch whose top logit is its label.
void classifierMetrics(const Array& logits, const Array& labels, nn::Context& ctx) {
  ctx.sow("accuracy", optim::accuracy(logits, labels));
}

// A segmentation model's metrics on an evaluation batch, over every pixel of the batch.
void segmentationMetrics(const Array& logits, const Array& labels, nn::Context& ctx) {
  ctx.sow("pixel_accuracy", optim::accuracy(logits, labels));
  // Pooled over the evaluation: its classes' intersections and unions over every batch, then their ratios.
  ctx.sowPooled("mean_iou", optim::meanIouSums(logits, labels), optim::meanIouOfSums);
}

// A model object's init and apply as a FamilyModel (the object is shared by both).
template <class Model>
FamilyModel wrap(std::shared_ptr<Model> model) {
  FamilyModel m;
  m.init = [model](const Array& key) { return model->init(key); };
  m.apply = [model](const Tree& p, const Array& x, nn::Context& ctx) { return model->apply(p, x, ctx); };
  m.numParams = model->numParams();
  return m;
}

ModelFamily gpt2Family() {
  ModelFamily f;
  f.name = "gpt2";
  f.description = "GPT-2: a decoder-only transformer over tokens (Radford et al., 2019), weights compatible with Hugging Face";
  f.keys = gpt2Keys();
  f.languageModel = true;
  f.contextKey = "block_size";
  f.rematBlocks = true;
  f.check = checkGpt2;
  f.build = [](const ModelConfig& c, const BuildContext& ctx) {
    auto model = std::make_shared<nn::Gpt2>(gpt2Config(c, ctx));
    FamilyModel m = wrap(model);
    m.trainFlopsPerItem = model->trainFlopsPerToken(ctx.seqLen);
    m.flopsRule = "6*N*tokens + 12*L*C*T*tokens (N without wpe)";
    return m;
  };
  return f;
}

nn::VitConfig vitConfig(const ModelConfig& c) {
  nn::VitConfig v;
  v.imageSize = c.integer("image_size");
  v.patchSize = c.integer("patch_size");
  v.hidden = c.integer("hidden");
  v.layers = c.integer("layers");
  v.heads = c.integer("heads");
  v.mlp = c.integer("mlp");
  v.numClasses = c.integer("num_classes");
  v.dropout = c.number("dropout");
  return v;
}

ModelFamily vitFamily() {
  ModelFamily f;
  f.name = "vit";
  f.description = "Vision Transformer: an image classifier over patches (Dosovitskiy et al., 2021), as Hugging Face's ViT";
  f.rematBlocks = true;
  f.keys = {integerKey("image_size", 224, limits::kImageSize, "pixels a side of the square RGB input"),
            integerKey("patch_size", 16, limits::kImageSize, "pixels a side of a patch (divides image_size)"),
            integerKey("hidden", 768, limits::kWidth, "width of the encoder (divisible by heads)"),
            integerKey("layers", 12, limits::kLayers, "encoder layers"),
            integerKey("heads", 12, limits::kWidth, "attention heads"),
            integerKey("mlp", 3072, limits::kWidth, "hidden width of each layer's MLP"),
            integerKey("num_classes", 1000, limits::kVocab, "classes the head predicts"),
            dropoutKey()};
  f.dataKinds = {"synthetic-images", "cifar10", "image_folder", "npy"};
  f.metrics = classifierMetrics;
  f.check = [](const ModelConfig& c) -> Status {
    nn::VitConfig v = vitConfig(c);
    if (v.imageSize % v.patchSize != 0 || v.hidden % v.heads != 0)
      return makeError("[model] image_size must be divisible by patch_size and hidden by heads");
    return {};
  };
  f.build = [](const ModelConfig& c, const BuildContext&) {
    nn::VitConfig v = vitConfig(c);
    auto model = std::make_shared<nn::Vit>(v);
    FamilyModel m = wrap(model);
    m.trainFlopsPerItem = 6.0 * static_cast<double>(m.numParams) * static_cast<double>(v.numPatches() + 1);
    m.flopsRule = "6*N*samples*(patches+1)";
    return m;
  };
  f.batch = [](const ModelConfig& c, int64_t batch) {
    nn::VitConfig v = vitConfig(c);
    return BatchSignature{Aval{Shape{batch, v.channels, v.imageSize, v.imageSize}, DType::F32},
                          Aval{Shape{batch}, DType::I32}, v.numClasses};
  };
  return f;
}

ModelFamily mlpFamily() {
  ModelFamily f;
  f.name = "mlp";
  f.description = "a multilayer perceptron classifier: Linear layers with an activation (ReLU by default) and dropout between them, as in the JAX and PyTorch tutorials";
  FamilyKey sizes;
  sizes.name = "sizes";
  sizes.type = KeyType::Sizes;
  sizes.defaultValue = std::vector<int64_t>{784, 1024, 1024, 1024, 10};
  sizes.max = static_cast<double>(limits::kWidth);
  sizes.minCount = 2;
  sizes.requirement = "at least two positive sizes";
  sizes.help = "layer widths from input features to classes, e.g. [784, 1024, 10]";
  FamilyKey activation;
  activation.name = "activation";
  activation.type = KeyType::Text;
  activation.defaultValue = std::string("relu");
  activation.choices = nn::mlpActivations();
  activation.help = "after each hidden layer: relu, gelu (tanh approximation), silu, tanh or sigmoid";
  f.keys = {sizes, activation, dropoutKey()};
  f.dataKinds = {"synthetic-digits", "npy", "cifar10", "image_folder"};
  f.metrics = classifierMetrics;
  f.build = [](const ModelConfig& c, const BuildContext&) {
    nn::MlpConfig config;
    config.sizes = c.sizes("sizes");
    config.activation = c.text("activation");
    config.dropout = c.number("dropout");
    auto model = std::make_shared<nn::Mlp>(config);
    FamilyModel m = wrap(model);
    m.trainFlopsPerItem = 6.0 * static_cast<double>(m.numParams);
    m.flopsRule = "6*N*samples";
    return m;
  };
  f.batch = [](const ModelConfig& c, int64_t batch) {
    const std::vector<int64_t>& s = c.sizes("sizes");
    return BatchSignature{Aval{Shape{batch, s.front()}, DType::F32}, Aval{Shape{batch}, DType::I32}, s.back()};
  };
  return f;
}

FamilyKey textKey(std::string name, std::string def, std::vector<std::string> choices, std::string help) {
  FamilyKey k;
  k.name = std::move(name);
  k.type = KeyType::Text;
  k.defaultValue = std::move(def);
  k.choices = std::move(choices);
  k.help = std::move(help);
  return k;
}

nn::ResNetConfig resnetConfig(const ModelConfig& c) {
  nn::ResNetConfig r;
  r.depth = c.integer("depth");
  r.numClasses = c.integer("num_classes");
  r.width = c.integer("width");
  r.stem = c.text("stem");
  r.norm = c.text("norm");
  r.imageSize = c.integer("image_size");
  return r;
}

ModelFamily resnetFamily() {
  ModelFamily f;
  f.name = "resnet";
  f.description = "ResNet-18/34/50: a convolutional image classifier (He et al., 2016) as torchvision builds it, "
                  "batch norm's running statistics kept as training state";
  FamilyKey depth = integerKey("depth", 18, 50, "layers: 18 or 34 (basic blocks), 50 (bottleneck blocks)");
  depth.min = 18;
  depth.requirement = "18, 34 or 50";
  f.keys = {depth,
            integerKey("num_classes", 1000, limits::kVocab, "classes the head predicts"),
            integerKey("width", 64, limits::kWidth, "channels of the stem and first stage; each later stage doubles them"),
            textKey("stem", "imagenet", {"imagenet", "cifar"},
                    "imagenet: 7x7 stride-2 convolution and 3x3 max pool; cifar: 3x3 stride-1 convolution, no pool"),
            textKey("norm", "batch", {"batch", "group"},
                    "batch: BatchNorm (running statistics as state, momentum 0.99); group: GroupNorm, gcd(32, channels) groups"),
            integerKey("image_size", 224, limits::kImageSize, "pixels a side of the square RGB input")};
  f.dataKinds = {"synthetic-images", "cifar10", "image_folder", "npy"};
  f.metrics = classifierMetrics;
  f.check = [](const ModelConfig& c) -> Status {
    const int64_t d = c.integer("depth");
    if (d != 18 && d != 34 && d != 50) return makeError("[model] depth must be 18, 34 or 50, got {}", d);
    return {};
  };
  f.build = [](const ModelConfig& c, const BuildContext&) {
    auto model = std::make_shared<nn::ResNet>(resnetConfig(c));
    FamilyModel m = wrap(model);
    m.initState = [model] { return model->initState(); };
    // A training step is three forward passes' worth of multiply-adds, two FLOPs each.
    m.trainFlopsPerItem = 6.0 * model->forwardMacsPerSample();
    m.flopsRule = "6*MACs*samples (convolutions and head at image_size)";
    return m;
  };
  f.batch = [](const ModelConfig& c, int64_t batch) {
    const int64_t side = c.integer("image_size");
    return BatchSignature{Aval{Shape{batch, 3, side, side}, DType::F32}, Aval{Shape{batch}, DType::I32},
                          c.integer("num_classes")};
  };
  return f;
}

nn::UNetConfig unetConfig(const ModelConfig& c) {
  nn::UNetConfig u;
  u.inChannels = c.integer("in_channels");
  u.numClasses = c.integer("num_classes");
  u.baseWidth = c.integer("base_width");
  u.depth = c.integer("depth");
  u.norm = c.text("norm");
  u.upsample = c.text("upsample");
  u.imageSize = c.integer("image_size");
  return u;
}

ModelFamily unetFamily() {
  ModelFamily f;
  f.name = "unet";
  f.description = "U-Net: a convolutional segmentation model (Ronneberger et al., 2015) giving class logits per pixel, "
                  "trained with per-pixel cross-entropy";
  FamilyKey classes = integerKey("num_classes", 4, limits::kVocab, "classes per pixel (the background counts as one)");
  classes.min = 2;
  FamilyKey depth = integerKey("depth", 3, 8, "down (and up) levels: the image is max-pooled depth times");
  f.keys = {integerKey("in_channels", 3, 64, "channels of the input images"),
            classes,
            integerKey("base_width", 16, limits::kWidth, "channels of the first level; each deeper level doubles them"),
            depth,
            textKey("norm", "batch", nn::unetNorms(),
                    "after each 3x3 convolution: batch (BatchNorm, running statistics as state), group (GroupNorm, "
                    "gcd(32, channels) groups) or none (the convolutions get biases)"),
            textKey("upsample", "transpose", nn::unetUpsamplings(),
                    "decoder: transpose (2x2 stride-2 transposed convolution), or bilinear or nearest upsampling and a "
                    "1x1 convolution"),
            integerKey("image_size", 64, limits::kImageSize, "pixels a side of the square input (divisible by 2^depth)")};
  f.dataKinds = {"shapes"};
  f.metrics = segmentationMetrics;
  f.check = [](const ModelConfig& c) -> Status {
    const int64_t side = c.integer("image_size"), depth = c.integer("depth"), base = c.integer("base_width");
    if (side % (int64_t(1) << depth) != 0)
      return makeError("[model] image_size ({}) must be divisible by 2^depth = {} (the image is halved depth = {} times)",
                       side, int64_t(1) << depth, depth);
    if ((base << depth) > limits::kWidth)
      return makeError("[model] base_width * 2^depth = {} * {} must be at most {} (the bottom block's channels)", base,
                       int64_t(1) << depth, limits::kWidth);
    return {};
  };
  f.build = [](const ModelConfig& c, const BuildContext&) {
    auto model = std::make_shared<nn::UNet>(unetConfig(c));
    FamilyModel m = wrap(model);
    m.initState = [model] { return model->initState(); };
    m.trainFlopsPerItem = 6.0 * model->forwardMacsPerSample();
    m.flopsRule = "6*MACs*samples (convolutions at image_size)";
    return m;
  };
  f.batch = [](const ModelConfig& c, int64_t batch) {
    const int64_t side = c.integer("image_size");
    return BatchSignature{Aval{Shape{batch, c.integer("in_channels"), side, side}, DType::F32},
                          Aval{Shape{batch, side, side}, DType::I32}, c.integer("num_classes")};
  };
  return f;
}

}  // namespace

std::vector<FamilyKey> gpt2Keys() {
  FamilyKey layout;
  layout.name = "qkv_layout";
  layout.type = KeyType::Text;
  layout.defaultValue = std::string("fused");
  layout.choices = {"fused", "heads"};
  layout.requirement = "fused ([C, 3C], as Hugging Face) or heads ([C, 3, H, D], for tensor parallelism)";
  layout.help = "the layout of c_attn's weight";
  return {integerKey("vocab_size", 50257, limits::kVocab,
                     "accepted for Hugging Face configs; the tokenizer sets the vocabulary ([data] vocab_size, or 50257 for tokenizer = 'gpt2')"),
          integerKey("block_size", 1024, limits::kSequence, "context length (n_positions): the longest sequence"),
          integerKey("n_layer", 12, limits::kLayers, "transformer blocks"),
          integerKey("n_head", 12, limits::kWidth, "attention heads (divides n_embd)"),
          integerKey("n_embd", 768, limits::kWidth, "embedding width"),
          dropoutKey(),
          layout};
}

nn::Gpt2Config gpt2Config(const ModelConfig& c, const BuildContext& ctx) {
  nn::Gpt2Config g;
  g.vocabSize = ctx.vocab;
  g.blockSize = c.integer("block_size");
  g.nLayer = c.integer("n_layer");
  g.nHead = c.integer("n_head");
  g.nEmbd = c.integer("n_embd");
  g.dropout = c.number("dropout");
  g.qkvHeads = c.text("qkv_layout") == "heads";
  return g;
}

Status checkGpt2(const ModelConfig& c) {
  const int64_t embd = c.integer("n_embd"), heads = c.integer("n_head");
  if (embd % heads != 0) return makeError("[model] n_embd ({}) must be divisible by n_head ({})", embd, heads);
  return {};
}

std::vector<ModelFamily> coreFamilies() {
  std::vector<ModelFamily> core = {gpt2Family(), vitFamily(), mlpFamily(), resnetFamily(), unetFamily()};
  for (ModelFamily& f : pythonFamilies()) core.push_back(std::move(f));
  for (ModelFamily& f : core) f.origin = "core";
  return core;
}

}  // namespace tsr::project
