#include "engine/data/sample_set.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "engine/data/file_io.h"
#include "engine/data/image_decode.h"

namespace tsr::data {

namespace {

namespace fs = std::filesystem;

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class NpySamples : public SampleSet {
 public:
  NpySamples(NpyArray x, NpyArray y, float scale) : m_x(std::move(x)), m_y(std::move(y)), m_scale(scale) {}
  int64_t size() const override { return m_x.rows(); }
  std::vector<int64_t> shape() const override { return {m_x.shape().begin() + 1, m_x.shape().end()}; }
  Result<int32_t> read(int64_t i, uint64_t, float* out) const override {
    m_x.rowAsFloat(i, m_scale, out);
    return static_cast<int32_t>(m_y.integerAt(i));
  }
  std::string where(int64_t i) const override { return fmt::format("{} row {}", m_x.name(), i); }

 private:
  NpyArray m_x, m_y;
  float m_scale;
};

class SampleRange : public SampleSet {
 public:
  SampleRange(std::shared_ptr<const SampleSet> set, int64_t begin, int64_t end)
      : m_set(std::move(set)), m_begin(begin), m_end(end) {}
  int64_t size() const override { return m_end - m_begin; }
  std::vector<int64_t> shape() const override { return m_set->shape(); }
  Result<int32_t> read(int64_t i, uint64_t seed, float* out) const override { return m_set->read(m_begin + i, seed, out); }
  std::string where(int64_t i) const override { return m_set->where(m_begin + i); }

 private:
  std::shared_ptr<const SampleSet> m_set;
  int64_t m_begin, m_end;
};

// Writes an [H, W, C] 8-bit image, normalised, as [C, H, W] floats; (x0, y0) is the crop's corner in the image,
// which may lie outside it (padding: pixels of value 0), and `flip` mirrors the crop left-right.
void normaliseCrop(const uint8_t* hwc, int64_t imageH, int64_t imageW, int64_t imageC, int64_t outC, int64_t outH,
                   int64_t outW, int64_t y0, int64_t x0, bool flip, bool chw, const Normalize& norm, float* out) {
  for (int64_t c = 0; c < outC; ++c) {
    const auto mean = static_cast<float>(norm.mean[static_cast<size_t>(c)]);
    const auto inv = static_cast<float>(1.0 / norm.std[static_cast<size_t>(c)]);
    for (int64_t y = 0; y < outH; ++y)
      for (int64_t x = 0; x < outW; ++x) {
        const int64_t sy = y0 + y, sx = x0 + (flip ? outW - 1 - x : x);
        float v = 0;
        if (sy >= 0 && sy < imageH && sx >= 0 && sx < imageW) {
          if (chw) v = hwc[(c * imageH + sy) * imageW + sx];  // the source is [C, H, W] already
          else if (outC == imageC) v = hwc[(sy * imageW + sx) * imageC + c];
          else {  // RGB to grey (ITU-R BT.601 luma)
            const uint8_t* p = hwc + (sy * imageW + sx) * imageC;
            v = 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2];
          }
        }
        out[(c * outH + y) * outW + x] = (v / 255.0f - mean) * inv;
      }
  }
}

class CifarSamples : public SampleSet {
 public:
  CifarSamples(std::vector<MappedFile> files, Normalize norm, bool augment)
      : m_files(std::move(files)), m_norm(std::move(norm)), m_augment(augment) {
    for (const MappedFile& f : m_files) m_starts.push_back((m_starts.empty() ? 0 : m_starts.back()) + records(f));
  }
  int64_t size() const override { return m_starts.empty() ? 0 : m_starts.back(); }
  std::vector<int64_t> shape() const override { return {3, 32, 32}; }
  Result<int32_t> read(int64_t i, uint64_t seed, float* out) const override {
    auto [file, record] = locate(i);
    const uint8_t* r = m_files[file].data() + record * kCifarRecordBytes;
    int64_t dy = 0, dx = 0;
    bool flip = false;
    if (m_augment) {
      const uint64_t h = mix(seed);
      dy = static_cast<int64_t>(h % 9) - 4;
      dx = static_cast<int64_t>((h >> 8) % 9) - 4;
      flip = ((h >> 16) & 1) != 0;
    }
    // Labels are checked as records are read: checking them up front would page in the whole file.
    if (r[0] > 9) return makeError("{} has label {}; CIFAR-10 labels are 0..9", where(i), r[0]);
    normaliseCrop(r + 1, 32, 32, 3, 3, 32, 32, dy, dx, flip, true, m_norm, out);
    return static_cast<int32_t>(r[0]);
  }
  std::string where(int64_t i) const override {
    auto [file, record] = locate(i);
    return fmt::format("{} record {} (byte {})", m_files[file].path(), record, record * kCifarRecordBytes);
  }

 private:
  static int64_t records(const MappedFile& f) { return static_cast<int64_t>(f.size()) / kCifarRecordBytes; }
  std::pair<size_t, int64_t> locate(int64_t i) const {
    const auto it = std::upper_bound(m_starts.begin(), m_starts.end(), i);
    const auto file = static_cast<size_t>(it - m_starts.begin());
    return {file, i - (file == 0 ? 0 : m_starts[file - 1])};
  }
  std::vector<MappedFile> m_files;
  std::vector<int64_t> m_starts;  // the sample index after each file's last
  Normalize m_norm;
  bool m_augment;
};

class ImageFolderSamples : public SampleSet {
 public:
  ImageFolderSamples(std::vector<LabeledFile> files, ImageFolderOptions options)
      : m_files(std::move(files)), m_options(std::move(options)) {}
  int64_t size() const override { return static_cast<int64_t>(m_files.size()); }
  std::vector<int64_t> shape() const override { return {m_options.channels, m_options.height, m_options.width}; }

  Result<int32_t> read(int64_t i, uint64_t seed, float* out) const override {
    // A bad file is replaced by the next one that decodes, so that a sample depends only on the files.
    for (int64_t k = 0; k < size(); ++k) {
      const LabeledFile& f = m_files[static_cast<size_t>((i + k) % size())];
      Result<Image> image = decodeImage(f.path);
      if (image.ok()) {
        transform(*image, seed, out);
        return f.label;
      }
      if (!m_options.skipBadFiles) return image.error();
      reportOnce(f.path, image.error().message);
    }
    return makeError("no image of the {} in the folder decodes", size());
  }
  std::string where(int64_t i) const override { return m_files[static_cast<size_t>(i)].path; }

 private:
  void transform(const Image& image, uint64_t seed, float* out) const {
    const ImageFolderOptions& o = m_options;
    // Scale the shorter side to the target (8/7 of it to leave room for a random crop), keeping the aspect.
    const double side = static_cast<double>(std::max(o.height, o.width)) * (o.augment ? 8.0 / 7.0 : 1.0);
    const double s = side / static_cast<double>(std::min(image.height, image.width));
    const int64_t w = std::max(o.width, static_cast<int64_t>(std::lround(static_cast<double>(image.width) * s)));
    const int64_t h = std::max(o.height, static_cast<int64_t>(std::lround(static_cast<double>(image.height) * s)));
    const Image scaled = resize(image, w, h);
    int64_t y0 = (h - o.height) / 2, x0 = (w - o.width) / 2;
    bool flip = false;
    if (o.augment) {
      const uint64_t r = mix(seed);
      y0 = static_cast<int64_t>(r % static_cast<uint64_t>(h - o.height + 1));
      x0 = static_cast<int64_t>((r >> 20) % static_cast<uint64_t>(w - o.width + 1));
      flip = ((r >> 40) & 1) != 0;
    }
    normaliseCrop(scaled.pixels.data(), h, w, scaled.channels, o.channels, o.height, o.width, y0, x0, flip, false,
                  o.norm, out);
  }

  void reportOnce(const std::string& path, const std::string& why) const {
    std::lock_guard lock(m_mutex);
    if (!m_reported.insert(path).second) return;
    if (m_options.report) m_options.report("skipped " + why);
  }

  std::vector<LabeledFile> m_files;
  ImageFolderOptions m_options;
  mutable std::mutex m_mutex;
  mutable std::set<std::string> m_reported;
};

Status checkNormalize(const Normalize& n, int64_t channels, const std::string& what) {
  if (static_cast<int64_t>(n.mean.size()) != channels || static_cast<int64_t>(n.std.size()) != channels)
    return makeError("{}: mean and std need {} values (one per channel); they have {} and {}", what, channels,
                     n.mean.size(), n.std.size());
  for (double s : n.std)
    if (!(s > 0)) return makeError("{}: std values must be positive, not {}", what, s);
  return {};
}

bool isImageFile(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

}  // namespace

Result<std::shared_ptr<SampleSet>> npySamples(NpyArray x, NpyArray y, double scale, int64_t classes) {
  if (x.shape().empty()) return makeError("{}: a scalar, not an array of samples", x.name());
  const bool labelShape = y.shape().size() == 1 || (y.shape().size() == 2 && y.shape()[1] == 1);
  if (!labelShape) return makeError("{}: labels of shape {}; expected one label per sample, ({},)", y.name(), y.shapeText(), x.rows());
  if (y.rows() != x.rows())
    return makeError("{}: {} labels for the {} samples of {} ({})", y.name(), y.rows(), x.rows(), x.name(), x.shapeText());
  if (!y.isInteger())
    return makeError("{}: labels of dtype {}; class labels must be int32, int64 or uint8", y.name(), npyDTypeName(y.dtype()));
  for (int64_t i = 0; i < y.rows(); ++i)
    if (int64_t v = y.integerAt(i); v < 0 || v >= classes)
      return makeError("{}: label {} of row {} is outside the model's {} classes [0, {})", y.name(), v, i, classes, classes);
  const double s = scale != 0 ? scale : (x.dtype() == NpyDType::U8 ? 1.0 / 255.0 : 1.0);
  return std::shared_ptr<SampleSet>(std::make_shared<NpySamples>(std::move(x), std::move(y), static_cast<float>(s)));
}

std::shared_ptr<SampleSet> sampleRange(std::shared_ptr<const SampleSet> set, int64_t begin, int64_t end) {
  return std::make_shared<SampleRange>(std::move(set), begin, end);
}

Result<std::shared_ptr<SampleSet>> cifarSamples(const std::vector<std::string>& files, const Normalize& norm,
                                                bool augment) {
  TSR_TRY(checkNormalize(norm, 3, "CIFAR-10 data"));
  std::vector<MappedFile> mapped;
  for (const std::string& path : files) {
    TSR_ASSIGN(MappedFile f, MappedFile::open(path));
    if (f.size() == 0 || f.size() % kCifarRecordBytes != 0)
      return makeError("{}: {} bytes, not a whole number of CIFAR-10 records of {} bytes (1 label + 3072 pixels)",
                       path, f.size(), kCifarRecordBytes);
    mapped.push_back(std::move(f));
  }
  return std::shared_ptr<SampleSet>(std::make_shared<CifarSamples>(std::move(mapped), norm, augment));
}

Result<ImageFolderListing> listImageFolder(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return makeError("{}: not a folder (an image folder holds one folder per class)", root);
  ImageFolderListing out;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory(ec)) out.classes.push_back(e.path().filename().string());
  if (ec) return makeError("{}: {}", root, ec.message());
  std::sort(out.classes.begin(), out.classes.end());
  if (out.classes.empty()) return makeError("{}: no class folders (an image folder holds one folder per class)", root);
  for (size_t c = 0; c < out.classes.size(); ++c) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(fs::path(root) / out.classes[c], ec))
      if (e.is_regular_file(ec) && isImageFile(e.path())) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (std::string& f : files) out.files.push_back({std::move(f), static_cast<int32_t>(c)});
  }
  if (ec) return makeError("{}: {}", root, ec.message());
  if (out.files.empty()) return makeError("{}: no .png, .jpg or .jpeg files in its class folders", root);
  return out;
}

Result<std::shared_ptr<SampleSet>> imageFolderSamples(std::vector<LabeledFile> files, const ImageFolderOptions& o) {
  if (o.channels != 1 && o.channels != 3)
    return makeError("image folder: images have 1 (grey) or 3 (RGB) channels; the model wants {}", o.channels);
  if (o.height < 1 || o.width < 1) return makeError("image folder: image size {}x{}", o.height, o.width);
  TSR_TRY(checkNormalize(o.norm, o.channels, "image folder"));
  return std::shared_ptr<SampleSet>(std::make_shared<ImageFolderSamples>(std::move(files), o));
}

}  // namespace tsr::data
