#include "engine/train/data_source_arrays.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "engine/data/batch_loader.h"
#include "engine/data/sample_loader.h"
#include "engine/data/sample_set.h"

namespace tsr::train {

namespace {

namespace fs = std::filesystem;

class SampleSource : public DataSource {
 public:
  explicit SampleSource(data::SampleLoader loader) : m_loader(std::move(loader)) {}
  Result<Batch> next() override {
    TSR_ASSIGN(data::SampleBatch b, m_loader.next());
    return Batch{b.inputs, b.labels};
  }
  std::string state() const override { return m_loader.state(); }
  Status restore(const std::string& s) override { return m_loader.restore(s); }
  int64_t itemsPerBatch() const override { return m_loader.options().batchSize; }
  Status rewind() override {
    m_loader.rewind();
    return {};
  }

 private:
  data::SampleLoader m_loader;
};

std::string shapeText(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// What the family wants of one sample: its input shape after the batch axis, and the label range.
struct Wanted {
  std::vector<int64_t> sample;
  int64_t classes = 0;
};

Result<Wanted> wanted(const project::Project& p) {
  const project::BatchSignature s = batchSignature(p, 0);
  if (s.inputs.shape.rank() < 2 || s.inputs.dtype != DType::F32 || s.targets.shape.rank() != 1 ||
      s.targets.dtype != DType::I32)
    return makeError("{}: [data] kind '{}' makes f32 inputs [B, ...] and i32 labels [B]; the {} family's batch is {} "
                     "and {}",
                     p.file, p.data.kind, p.model.family, s.inputs.toString(), s.targets.toString());
  Wanted w;
  const auto& dims = s.inputs.shape.dims();
  w.sample.assign(dims.begin() + 1, dims.end());
  w.classes = s.classes;
  return w;
}

// The batch's sample shape for samples of `shape`: the family's own, when the shapes agree or the family takes
// flat vectors of as many values (an MLP on images).
Result<std::vector<int64_t>> matchShape(const project::Project& p, const Wanted& w, const std::vector<int64_t>& shape,
                                        const std::string& key, const std::string& source) {
  if (shape == w.sample || (w.sample.size() == 1 && product(shape) == w.sample[0])) return w.sample;
  return makeError("{}: [data] {} ({}) has samples of shape {}; the {} family's inputs want {} per sample", p.file,
                   key, source, shapeText(shape), p.model.family, shapeText(w.sample));
}

Result<std::unique_ptr<DataSource>> source(std::shared_ptr<const data::SampleSet> set, const project::Project& p,
                                           const Wanted& w, std::vector<int64_t> inputShape, bool train, int threads) {
  data::SampleLoaderOptions o;
  o.batchSize = p.train.batchSize;
  o.shuffle = train && p.train.shuffle;
  o.seed = p.train.seed;
  o.prefetch = 2;
  o.threads = threads;
  o.inputShape = std::move(inputShape);
  o.classes = w.classes;
  TSR_ASSIGN(data::SampleLoader loader, data::SampleLoader::create(std::move(set), o));
  return std::unique_ptr<DataSource>(std::make_unique<SampleSource>(std::move(loader)));
}

// Validation from a held-out fraction: too few samples for one batch means no evaluation, as for text.
void addValidation(ProjectData& d, Result<std::unique_ptr<DataSource>> val,
                   const std::function<void(const std::string&)>& info) {
  if (val.ok()) d.val = std::move(val).value();
  else info("no validation batches (" + val.error().message + "); evaluation is skipped");
}

Result<ProjectData> prepareNpy(const project::Project& p, const Wanted& w,
                               const std::function<void(const std::string&)>& info) {
  const project::DataSection& c = p.data;
  if (c.x.empty() || c.y.empty())
    return makeError("{}: [data] kind 'npy' needs x and y (the .npy files, or NAME.npz:MEMBER, of inputs and labels)", p.file);
  if (c.valX.empty() != c.valY.empty()) return makeError("{}: [data] val_x and val_y go together", p.file);
  auto open = [&](const std::string& key, const std::string& spec) -> Result<data::NpyArray> {
    auto a = data::NpyArray::open(p.resolve(spec));
    if (!a.ok()) return makeError("{}: [data] {}: {}", p.file, key, a.error().message);
    return a;
  };
  auto samples = [&](const std::string& xKey, const std::string& xSpec, const std::string& yKey,
                     const std::string& ySpec) -> Result<std::pair<std::shared_ptr<data::SampleSet>, std::vector<int64_t>>> {
    TSR_ASSIGN(data::NpyArray x, open(xKey, xSpec));
    TSR_ASSIGN(data::NpyArray y, open(yKey, ySpec));
    const std::string name = x.name(), shape = x.shapeText();
    auto set = data::npySamples(std::move(x), std::move(y), c.scale, w.classes);
    if (!set.ok()) return makeError("{}: [data] {}: {}", p.file, yKey, set.error().message);
    TSR_ASSIGN(std::vector<int64_t> in, matchShape(p, w, (*set)->shape(), xKey, name + " of shape " + shape));
    return std::make_pair(std::move(set).value(), std::move(in));
  };
  TSR_ASSIGN(auto train, samples("x", c.x, "y", c.y));
  ProjectData d;
  if (!c.valX.empty()) {
    TSR_ASSIGN(auto val, samples("val_x", c.valX, "val_y", c.valY));
    TSR_ASSIGN(d.val, source(val.first, p, w, val.second, false, 1));
    TSR_ASSIGN(d.train, source(train.first, p, w, train.second, true, 1));
    return d;
  }
  // The last val_fraction of the rows, as text holds out the end of its corpus.
  const int64_t n = train.first->size();
  const auto nVal = static_cast<int64_t>(static_cast<double>(n) * c.valFraction);
  TSR_ASSIGN(d.train, source(data::sampleRange(train.first, 0, n - nVal), p, w, train.second, true, 1));
  if (nVal > 0) addValidation(d, source(data::sampleRange(train.first, n - nVal, n), p, w, train.second, false, 1), info);
  info(fmt::format("{} samples: {} for training, {} for validation", n, n - nVal, nVal));
  return d;
}

Result<ProjectData> prepareCifar(const project::Project& p, const Wanted& w,
                                 const std::function<void(const std::string&)>& info) {
  if (p.data.path.empty()) return makeError("{}: [data] kind 'cifar10' needs path (the folder of data_batch_N.bin)", p.file);
  const std::string dir = p.resolve(p.data.path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return makeError("{}: [data] path {} is not a folder", p.file, dir);
  std::vector<std::pair<int, std::string>> batches;
  static const std::regex kBatch(R"(data_batch_(\d+)\.bin)");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, kBatch)) batches.emplace_back(std::stoi(m[1].str()), e.path().string());
  }
  std::sort(batches.begin(), batches.end());
  if (batches.empty()) return makeError("{}: [data] path {} has no data_batch_N.bin files (CIFAR-10's binary version)", p.file, dir);
  std::vector<std::string> files;
  for (auto& b : batches) files.push_back(b.second);
  const data::Normalize norm{p.data.mean, p.data.stddev};
  auto open = [&](const std::vector<std::string>& f, bool augment) -> Result<std::shared_ptr<data::SampleSet>> {
    auto set = data::cifarSamples(f, norm, augment);
    if (!set.ok()) return makeError("{}: [data] {}", p.file, set.error().message);
    return set;
  };
  TSR_ASSIGN(auto train, open(files, p.data.augment));
  TSR_ASSIGN(std::vector<int64_t> in, matchShape(p, w, train->shape(), "path", dir + ", CIFAR-10 images [3, 32, 32]"));
  if (w.classes < 10) return makeError("{}: CIFAR-10 has 10 classes; the model predicts {}", p.file, w.classes);
  ProjectData d;
  TSR_ASSIGN(d.train, source(train, p, w, in, true, 1));
  const std::string test = (fs::path(dir) / "test_batch.bin").string();
  if (fs::exists(test, ec)) {
    TSR_ASSIGN(auto val, open({test}, false));
    addValidation(d, source(val, p, w, in, false, 1), info);
    info(fmt::format("CIFAR-10: {} training images in {} files, {} test images for validation", train->size(),
                     files.size(), val->size()));
  } else {
    info(fmt::format("CIFAR-10: {} training images; no test_batch.bin in {}, so evaluation is skipped", train->size(), dir));
  }
  return d;
}

Result<ProjectData> prepareImageFolder(const project::Project& p, const Wanted& w,
                                       const std::function<void(const std::string&)>& info) {
  const project::DataSection& c = p.data;
  if (c.path.empty()) return makeError("{}: [data] kind 'image_folder' needs path (a folder of one folder per class)", p.file);
  if (w.sample.size() != 3 || (w.sample[0] != 1 && w.sample[0] != 3))
    return makeError("{}: [data] kind 'image_folder' makes images [C, H, W] with C = 1 or 3; the {} family's inputs "
                     "want {} per sample",
                     p.file, p.model.family, shapeText(w.sample));
  auto list = [&](const std::string& key, const std::string& path) -> Result<data::ImageFolderListing> {
    auto l = data::listImageFolder(p.resolve(path));
    if (!l.ok()) return makeError("{}: [data] {}: {}", p.file, key, l.error().message);
    if (static_cast<int64_t>(l->classes.size()) > w.classes)
      return makeError("{}: [data] {}: {} class folders; the model predicts {} classes", p.file, key,
                       l->classes.size(), w.classes);
    return l;
  };
  TSR_ASSIGN(data::ImageFolderListing all, list("path", c.path));
  std::vector<data::LabeledFile> trainFiles, valFiles;
  if (!c.valPath.empty()) {
    TSR_ASSIGN(data::ImageFolderListing val, list("val_path", c.valPath));
    if (val.classes != all.classes)
      return makeError("{}: [data] val_path's class folders ({}) are not path's ({})", p.file,
                       fmt::format("{}", fmt::join(val.classes, ", ")), fmt::format("{}", fmt::join(all.classes, ", ")));
    trainFiles = std::move(all.files);
    valFiles = std::move(val.files);
  } else {
    // A fixed pseudo-random val_fraction of the files, the same for every seed, so that runs compare.
    const auto n = static_cast<uint64_t>(all.files.size());
    const auto nVal = static_cast<uint64_t>(static_cast<double>(n) * c.valFraction);
    const data::Permutation perm(n, 0x1A6E5F01D3Bull);
    for (uint64_t i = 0; i < n; ++i) (perm(i) < nVal ? valFiles : trainFiles).push_back(all.files[i]);
  }
  data::ImageFolderOptions o;
  o.channels = w.sample[0];
  o.height = w.sample[1];
  o.width = w.sample[2];
  o.norm = {c.mean, c.stddev};
  // Grey images with the (RGB) defaults: their averages.
  if (o.channels == 1 && c.mean.size() == 3 && c.stddev.size() == 3)
    o.norm = {{(c.mean[0] + c.mean[1] + c.mean[2]) / 3}, {(c.stddev[0] + c.stddev[1] + c.stddev[2]) / 3}};
  o.skipBadFiles = c.badFiles == "skip";
  // Reported from the worker threads while the run goes on, when the setup's `info` may be gone: straight to
  // stderr, one line each (a single fprintf is not interleaved with others).
  o.report = [](const std::string& m) { std::fprintf(stderr, "warning: %s\n", m.c_str()); };
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  ProjectData d;
  const size_t nTrain = trainFiles.size(), nVal = valFiles.size();
  o.augment = c.augment;
  auto train = data::imageFolderSamples(std::move(trainFiles), o);
  if (!train.ok()) return makeError("{}: [data] {}", p.file, train.error().message);
  TSR_ASSIGN(d.train, source(*train, p, w, w.sample, true, threads));
  if (nVal > 0) {
    o.augment = false;
    TSR_ASSIGN(auto val, data::imageFolderSamples(std::move(valFiles), o));
    addValidation(d, source(val, p, w, w.sample, false, threads), info);
  }
  info(fmt::format("{} images in {} classes: {} for training, {} for validation", nTrain + nVal, all.classes.size(),
                   nTrain, nVal));
  return d;
}

}  // namespace

Result<ProjectData> prepareArrayData(const project::Project& p, const std::function<void(const std::string&)>& info) {
  TSR_ASSIGN(Wanted w, wanted(p));
  if (p.data.kind == "npy") return prepareNpy(p, w, info);
  if (p.data.kind == "cifar10") return prepareCifar(p, w, info);
  if (p.data.kind == "image_folder") return prepareImageFolder(p, w, info);
  return makeError("{}: [data] kind '{}' is not an array or image kind", p.file, p.data.kind);
}

}  // namespace tsr::train
