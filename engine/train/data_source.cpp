#include "engine/train/data_source.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "engine/core/limits.h"
#include "engine/data/batch_loader.h"
#include "engine/data/bpe_trainer.h"
#include "engine/data/file_io.h"
#include "engine/data/synthetic_images.h"
#include "engine/data/synthetic_shapes.h"
#include "engine/data/token_file.h"
#include "engine/random/random.h"
#include "engine/train/data_source_arrays.h"

namespace tsr::train {

namespace fs = std::filesystem;

Result<int64_t> parseCount(const std::string& text, const std::string& what) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0)
    return makeError("{} is '{}', not a non-negative integer", what, text);
  return v;
}

namespace {

class TextSource : public DataSource {
 public:
  explicit TextSource(data::BatchLoader loader) : m_loader(std::move(loader)), m_start(m_loader.state()) {}
  Result<Batch> next() override {
    TSR_ASSIGN(data::TokenBatch b, m_loader.next());
    return Batch{b.inputs, b.targets};
  }
  std::string state() const override { return m_loader.state().toJson(); }
  Status restore(const std::string& s) override {
    TSR_ASSIGN(data::LoaderState st, data::LoaderState::fromJson(s));
    return m_loader.restore(st);
  }
  int64_t itemsPerBatch() const override { return m_loader.options().batchSize * m_loader.options().seqLen; }
  Status rewind() override { return m_loader.restore(m_start); }

 private:
  data::BatchLoader m_loader;
  data::LoaderState m_start;
};

class ImageSource : public DataSource {
 public:
  explicit ImageSource(data::SyntheticImages images) : m_images(std::move(images)) {}
  Result<Batch> next() override {
    TSR_ASSIGN(data::ImageBatch b, m_images.next());
    return Batch{b.images, b.labels};
  }
  std::string state() const override { return std::to_string(m_images.position()); }
  Status restore(const std::string& s) override {
    TSR_ASSIGN(int64_t first, parseCount(s, "image position"));
    m_images.seek(first);
    return {};
  }
  int64_t itemsPerBatch() const override { return m_images.options().batchSize; }
  Status rewind() override {
    m_images.seek(0);
    return {};
  }

 private:
  data::SyntheticImages m_images;
};

// Learnable synthetic digits for the tutorial MLP: class c is a faint fixed random prototype under unit noise,
// so classes overlap a little and the loss levels off above zero, as with real digits.
class DigitSource : public DataSource {
 public:
  // `start` offsets the draws: a validation source starts far from the training one.
  DigitSource(int64_t batch, int64_t dim, int64_t classes, uint64_t seed, int64_t start = 0)
      : m_batch(batch), m_dim(dim), m_classes(classes), m_key(random::key(seed)), m_step(start), m_start(start) {
    m_prototypes = random::normal(random::foldIn(m_key, 0xC0FFEEu), Shape{classes, dim});
  }
  Result<Batch> next() override {
    return capture([&] {
      Array k = random::foldIn(m_key, static_cast<uint32_t>(m_step++));
      Array keys = random::split(k, 2);
      Array labels = astype(random::bits(reshape(sliceAxis(keys, 0, 0, 1), {2}), Shape{m_batch}) %
                                Array::scalar(static_cast<double>(m_classes), DType::U32),
                            DType::I32);
      Array noise = random::normal(reshape(sliceAxis(keys, 0, 1, 2), {2}), Shape{m_batch, m_dim});
      // Prototypes scaled so that two classes lie about 4 noise deviations apart in any dimension.
      return Batch{take(m_prototypes, labels, 0) * (3.0 / std::sqrt(static_cast<double>(m_dim))) + noise, labels};
    });
  }
  std::string state() const override { return std::to_string(m_step); }
  Status restore(const std::string& s) override {
    TSR_ASSIGN(m_step, parseCount(s, "digit stream position"));
    return {};
  }
  int64_t itemsPerBatch() const override { return m_batch; }
  Status rewind() override {
    m_step = m_start;
    return {};
  }

 private:
  int64_t m_batch, m_dim, m_classes;
  Array m_key, m_prototypes;
  int64_t m_step, m_start;
};


// Segmentation batches of kind shapes: images [B, C, S, S] and masks [B, S, S] of the samples [first, first + count)
// of the dataset, rendered as they are needed (a 32x32 image takes microseconds). Training visits its samples in a
// new order every epoch when shuffling, an order drawn from the seed and the epoch alone, so a resumed run sees
// what an uninterrupted one would; validation reads its samples in order.
class ShapesSource : public DataSource {
 public:
  ShapesSource(data::ShapesOptions options, int64_t first, int64_t count, int64_t batch, bool shuffle, uint64_t seed)
      : m_opt(options), m_first(first), m_count(count), m_batch(batch), m_shuffle(shuffle), m_seed(seed) {}
  Result<Batch> next() override {
    const int64_t side = m_opt.size, pixels = side * side;
    std::vector<float> images(static_cast<size_t>(m_batch * m_opt.channels * pixels));
    std::vector<int32_t> masks(static_cast<size_t>(m_batch * pixels));
    for (int64_t b = 0; b < m_batch; ++b, ++m_position)
      data::renderShapes(m_opt, m_first + sampleAt(m_position), images.data() + b * m_opt.channels * pixels,
                         masks.data() + b * pixels);
    return capture([&] {
      return Batch{Array::fromVector(images, Shape{m_batch, m_opt.channels, side, side}),
                   Array::fromVector(masks, Shape{m_batch, side, side})};
    });
  }
  std::string state() const override { return std::to_string(m_position); }
  Status restore(const std::string& s) override {
    TSR_ASSIGN(m_position, parseCount(s, "shapes position"));
    return {};
  }
  int64_t itemsPerBatch() const override { return m_batch; }
  Status rewind() override {
    m_position = 0;
    return {};
  }

 private:
  // The sample (counted from m_first) read at `position` of the stream of epochs.
  int64_t sampleAt(int64_t position) {
    const int64_t epoch = position / m_count, i = position % m_count;
    if (!m_shuffle) return i;
    if (epoch != m_orderEpoch) {
      m_order.resize(static_cast<size_t>(m_count));
      std::iota(m_order.begin(), m_order.end(), int64_t(0));
      std::mt19937_64 gen(m_seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(epoch + 1)));
      // Fisher-Yates with the generator's raw bits (std::shuffle's draws differ between standard libraries).
      for (int64_t k = m_count - 1; k > 0; --k)
        std::swap(m_order[static_cast<size_t>(k)], m_order[static_cast<size_t>(gen() % static_cast<uint64_t>(k + 1))]);
      m_orderEpoch = epoch;
    }
    return m_order[static_cast<size_t>(i)];
  }

  data::ShapesOptions m_opt;
  int64_t m_first, m_count, m_batch;
  bool m_shuffle;
  uint64_t m_seed;
  int64_t m_position = 0;
  std::vector<int64_t> m_order;
  int64_t m_orderEpoch = -1;
};

// The shapes dataset of a project: its last val_fraction of samples validate (no evaluation when they are fewer
// than a batch), the others train.
Result<ProjectData> prepareShapes(const project::Project& p, const std::function<void(const std::string&)>& info) {
  const project::BatchSignature s = batchSignature(p, 0);
  if (s.inputs.shape.rank() != 4 || s.targets.shape.rank() != 3 || s.inputs.shape[2] != s.inputs.shape[3] ||
      s.targets.shape[1] != s.inputs.shape[2] || s.targets.shape[2] != s.inputs.shape[3])
    return makeError("{}: [data] kind 'shapes' makes square images [B, C, S, S] and masks [B, S, S]; the {} family's "
                     "batch is {} and {}",
                     p.file, p.model.family, s.inputs.toString(), s.targets.toString());
  const project::DataSection& d = p.data;
  data::ShapesOptions o;
  o.size = s.inputs.shape[2];
  o.channels = s.inputs.shape[1];
  o.classes = s.classes;
  o.maxShapes = d.maxShapes;
  o.noise = d.noise;
  o.seed = d.seed;
  TSR_TRY(data::checkShapesOptions(o, p.file + ": [data]"));
  const int64_t batch = p.train.batchSize;
  const auto nVal = static_cast<int64_t>(static_cast<double>(d.samples) * d.valFraction);
  const int64_t nTrain = d.samples - nVal;
  if (nTrain < batch)
    return makeError("{}: [data] samples = {} with val_fraction = {} leaves {} training images, fewer than [train] "
                     "batch_size = {}",
                     p.file, d.samples, d.valFraction, nTrain, batch);
  ProjectData out;
  out.train = std::make_unique<ShapesSource>(o, 0, nTrain, batch, p.train.shuffle, p.train.seed);
  if (nVal >= batch) out.val = std::make_unique<ShapesSource>(o, nTrain, nVal, batch, false, 0);
  else if (d.valFraction > 0)
    info(fmt::format("[data] holds {} validation images, fewer than a batch of {}: evaluation is skipped", nVal, batch));
  info(fmt::format("shapes: {} training and {} validation images of {}x{}, seed {}", nTrain, nVal, o.size, o.size, o.seed));
  return out;
}

// Trains (or loads the cached) tokenizer, and tokenizes the corpus into train and validation token files.
struct TextData {
  std::optional<data::BpeTokenizer> tokenizer;
  std::string trainPath, valPath;
};

Result<TextData> prepareText(const project::Project& p, const std::function<void(const std::string&)>& info) {
  std::string corpus = p.resolve(p.data.path);
  std::error_code ec;
  if (p.data.path.empty()) {
    // An empty project.toml gets here by two defaults (gpt2, and its text data): the message says which it took.
    const bool familyGiven = p.origins.count("model.family") || p.origins.count("model.python");
    const bool kindGiven = p.origins.count("data.kind");
    return makeError("{}: [data] path is required: {} trains on text ([data] kind = \"text\"{}) read from a corpus "
                     "file; add path = \"corpus.txt\" (a UTF-8 text file in the project folder) under [data]{}",
                     p.origin("data", "kind"),
                     familyGiven ? fmt::format("the {} model", p.model.family)
                                 : fmt::format("the default model ({}: project.toml names no [model] family)", p.model.family),
                     kindGiven ? "" : ", its default",
                     familyGiven ? "" : ", or name a [model] family (tessera families lists them)");
  }
  if (!fs::exists(corpus, ec)) return makeError("{}: [data] path {} does not exist", p.file, corpus);
  // The corpus is read whole: a device (/dev/zero), a pipe or a huge file would never end or never fit.
  if (!fs::is_regular_file(corpus, ec)) return makeError("{}: [data] path {} is not a regular file", p.file, corpus);
  const auto corpusBytes = static_cast<int64_t>(fs::file_size(corpus, ec));
  if (ec) return makeError("{}: [data] path {}: {}", p.file, corpus, ec.message());
  if (auto st = limits::checkRange("size of [data] path " + corpus, corpusBytes, 0, limits::kCorpusBytes); !st.ok())
    return makeError("{}: {}", p.file, st.error().message);
  for (const std::string& outside : filesOutsideProject(p))
    info(fmt::format("warning: {} reads {}, outside the project folder {}", p.file, outside, p.dir));
  fs::path cache = fs::path(p.dir) / ".tessera" / "data";
  fs::create_directories(cache, ec);
  if (ec) return makeError("cannot create {}: {}", cache.string(), ec.message());
  for (const fs::path& dir : {cache, cache / "tokenizer"})
    for (const std::string& f : data::removeOrphanTempFiles(dir.string())) info("removed " + f + ", left by an interrupted save");
  // The cache is valid for one corpus (size and mtime) and one tokenizer setting.
  auto mtime = fs::last_write_time(corpus, ec).time_since_epoch().count();
  std::string stamp = fmt::format("{} {} {} {} {} {} {}", corpusBytes, mtime, p.data.tokenizer,
                                  p.data.vocabSize, p.data.valFraction, p.data.encoderJson, p.data.vocabBpe);
  std::string stampPath = (cache / "stamp").string();
  std::string old;
  if (std::ifstream in(stampPath); in) std::getline(in, old);

  TextData d;
  d.trainPath = (cache / "train.tok").string();
  d.valPath = (cache / "val.tok").string();
  std::string tokDir = (cache / "tokenizer").string();
  bool fresh = old == stamp && fs::exists(d.trainPath, ec) && fs::exists(d.valPath, ec);
  if (p.data.tokenizer == "gpt2") {
    if (p.data.encoderJson.empty() || p.data.vocabBpe.empty())
      return makeError("{}: [data] tokenizer = 'gpt2' needs encoder_json and vocab_bpe", p.file);
    TSR_ASSIGN(d.tokenizer, data::BpeTokenizer::load(p.resolve(p.data.encoderJson), p.resolve(p.data.vocabBpe)));
  } else if (fresh) {
    TSR_ASSIGN(d.tokenizer, data::BpeTokenizer::loadDirectory(tokDir));
  } else {
    info(fmt::format("training a {}-token BPE tokenizer on {}", p.data.vocabSize, corpus));
    data::BpeTrainer trainer = std::move(data::BpeTrainer::create({p.data.vocabSize, 2, {std::string(data::kEndOfText)}})).value();
    TSR_TRY(trainer.addFile(corpus));
    TSR_ASSIGN(d.tokenizer, trainer.train());
    fs::create_directories(tokDir, ec);
    TSR_TRY(d.tokenizer->saveDirectory(tokDir));
  }
  if (fresh) return d;

  info(fmt::format("tokenizing {}", corpus));
  TSR_ASSIGN(std::string text, data::readFile(corpus));
  std::vector<data::TokenId> ids = d.tokenizer->encode(text, data::SpecialTokens::Allowed);
  auto nVal = static_cast<size_t>(static_cast<double>(ids.size()) * p.data.valFraction);
  auto vocab = static_cast<uint32_t>(d.tokenizer->vocabSize());
  std::span<const uint32_t> all(ids);
  TSR_TRY(data::writeTokenFile(d.trainPath, all.subspan(0, ids.size() - nVal), vocab));
  TSR_TRY(data::writeTokenFile(d.valPath, all.subspan(ids.size() - nVal), vocab));
  TSR_TRY(data::writeFileAtomically(stampPath, stamp + "\n"));
  info(fmt::format("{} tokens: {} for training, {} for validation (vocabulary {})", ids.size(), ids.size() - nVal,
                   nVal, vocab));
  return d;
}


}  // namespace

std::vector<std::string> filesOutsideProject(const project::Project& p) {
  std::vector<std::string> out;
  // What the kind reads: a corpus and tokenizer files, arrays ("file.npz:member" names the file), or folders.
  std::vector<std::string> paths;
  const project::DataSection& d = p.data;
  if (d.kind == "text") paths = {d.path, d.encoderJson, d.vocabBpe};
  else if (d.kind == "npy") paths = {d.x, d.y, d.valX, d.valY};
  else if (d.kind == "cifar10" || d.kind == "image_folder") paths = {d.path, d.valPath};
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(fs::absolute(p.dir, ec), ec);
  for (std::string path : paths) {
    if (path.empty()) continue;
    if (d.kind == "npy") {
      const size_t colon = path.find(".npz:");
      if (colon != std::string::npos) path.resize(colon + 4);
    }
    const fs::path file = fs::weakly_canonical(fs::absolute(p.resolve(path), ec), ec);
    const fs::path inside = file.lexically_relative(root);
    if ((inside.empty() || *inside.begin() == "..") &&
        std::find(out.begin(), out.end(), file.string()) == out.end())
      out.push_back(file.string());
  }
  return out;
}


Result<ProjectData> prepareData(const project::Project& p, const std::function<void(const std::string&)>& info) {
  const auto& t = p.train;
  ProjectData d;
  if (p.data.kind == "text") {
    if (!p.model.languageModel())
      return makeError("{}: [data] kind 'text' needs a language model; {} is not one", p.file, p.model.family);
    TSR_ASSIGN(TextData td, prepareText(p, info));
    data::LoaderOptions lo{t.batchSize, t.seqLen, t.shuffle, t.seed, 4, 0, 1};
    auto train = data::BatchLoader::open(td.trainPath, lo);
    if (!train.ok()) return Error{"training data: " + train.error().message};
    lo.shuffle = false;
    lo.prefetch = 0;
    auto val = data::BatchLoader::open(td.valPath, lo);
    if (val.ok()) d.val = std::make_unique<TextSource>(std::move(val).value());
    else info("no validation batches (" + val.error().message + "); evaluation is skipped");
    d.train = std::make_unique<TextSource>(std::move(train).value());
    d.tokenizer = std::move(td.tokenizer);
  } else if (p.data.kind == "synthetic-images") {
    const project::BatchSignature s = batchSignature(p, 0);
    if (s.inputs.shape.rank() != 4)
      return makeError("{}: [data] kind 'synthetic-images' needs [B, C, H, W] inputs; the {} family's are {}", p.file,
                       p.model.family, s.inputs.toString());
    data::SyntheticImageOptions io;
    io.batchSize = t.batchSize;
    io.channels = s.inputs.shape[1];
    io.height = s.inputs.shape[2];
    io.width = s.inputs.shape[3];
    io.numClasses = s.classes;
    io.layout = data::ImageLayout::NCHW;
    io.seed = t.seed;
    TSR_ASSIGN(data::SyntheticImages images, data::SyntheticImages::create(io));
    d.train = std::make_unique<ImageSource>(std::move(images));
  } else if (p.data.kind == "synthetic-digits") {
    const project::BatchSignature s = batchSignature(p, 0);
    if (s.inputs.shape.rank() != 2)
      return makeError("{}: [data] kind 'synthetic-digits' needs [B, D] inputs; the {} family's are {}", p.file,
                       p.model.family, s.inputs.toString());
    const int64_t dim = s.inputs.shape[1], classes = s.classes;
    // The constructor draws the class prototypes with the Array API, which raises on errors.
    auto digits = [&](int64_t start) {
      return capture([&] {
        return std::unique_ptr<DataSource>(std::make_unique<DigitSource>(t.batchSize, dim, classes, t.seed, start));
      });
    };
    TSR_ASSIGN(d.train, digits(0));
    TSR_ASSIGN(d.val, digits(1'000'000'000));
  } else if (p.data.kind == "shapes") {
    return prepareShapes(p, info);
  } else if (p.data.kind == "npy" || p.data.kind == "cifar10" || p.data.kind == "image_folder") {
    for (const std::string& outside : filesOutsideProject(p))
      info(fmt::format("warning: {} reads {}, outside the project folder {}", p.file, outside, p.dir));
    return prepareArrayData(p, info);
  } else {
    return makeError("{}: [data] kind '{}' is not one Tessera reads", p.file, p.data.kind);
  }
  return d;
}


project::BatchSignature batchSignature(const project::Project& p, int64_t vocab) {
  const project::ModelFamily* family = p.model.definition();
  if (!family || family->languageModel || !family->batch) return project::tokenBatch(p.train.batchSize, p.train.seqLen, vocab);
  return family->batch(p.model.config, p.train.batchSize);
}

Batch syntheticBatch(const project::BatchSignature& s, uint64_t seed) {
  std::mt19937_64 gen(seed);
  auto draw = [&](const Aval& a) {
    const int64_t n = a.numel();
    if (isFloating(a.dtype)) {
      std::normal_distribution<float> d;
      std::vector<float> v(static_cast<size_t>(n));
      for (auto& x : v) x = d(gen);
      return Array::fromVector(v, a.shape);
    }
    std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(s.classes - 1));
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(gen);
    return Array::fromVector(v, a.shape);
  };
  Array inputs = draw(s.inputs);
  return Batch{inputs, draw(s.targets)};
}

Batch syntheticBatch(const project::Project& p, int64_t vocab, uint64_t seed) {
  return syntheticBatch(batchSignature(p, vocab), seed);
}

}  // namespace tsr::train
