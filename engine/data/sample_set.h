#pragma once
// Classification datasets read sample by sample: NumPy arrays (npy_file.h), the CIFAR-10 binary files and
// folders of PNG/JPEG images, one folder per class. A sample is its values as floats in a fixed shape and an
// integer label. Files are memory-mapped or decoded when a sample is read, never loaded whole.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/data/npy_file.h"

namespace tsr::data {

class SampleSet {
 public:
  virtual ~SampleSet() = default;
  virtual int64_t size() const = 0;
  virtual std::vector<int64_t> shape() const = 0;  // one sample's: [C, H, W] for images, a row's for arrays
  // Writes sample i (shape()'s elements) to `out` and returns its label. `augmentSeed` draws the sample's random
  // crop and flip where the set augments; the same seed gives the same sample.
  virtual Result<int32_t> read(int64_t i, uint64_t augmentSeed, float* out) const = 0;
  virtual std::string where(int64_t i) const = 0;  // the file (and record) of sample i, for messages
};

// Per-channel normalisation of pixels scaled to [0, 1]: (v / 255 - mean[c]) / std[c].
struct Normalize {
  std::vector<double> mean, std;
};
inline const Normalize kCifarNormalize{{0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}};
inline const Normalize kImageNetNormalize{{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}};

// Rows [begin, end) of x with the labels of y. `scale` multiplies x (0: 1/255 for uint8, 1 otherwise). y is
// one integer label (int32, int64, uint8) per row of x; every label is checked to lie in [0, classes).
Result<std::shared_ptr<SampleSet>> npySamples(NpyArray x, NpyArray y, double scale, int64_t classes);
// The same set's rows [begin, end).
std::shared_ptr<SampleSet> sampleRange(std::shared_ptr<const SampleSet> set, int64_t begin, int64_t end);

// CIFAR-10 binary files: records of 1 label byte and 3072 pixel bytes (32x32 red, then green, then blue, row by
// row), the files' records one after another; a label over 9 is an error when its record is read. With
// `augment`, a training image is padded by 4 pixels (of value 0), cropped back to 32x32 at a random place, and
// flipped left-right with probability 1/2.
Result<std::shared_ptr<SampleSet>> cifarSamples(const std::vector<std::string>& files, const Normalize& norm,
                                                bool augment);
inline constexpr int64_t kCifarRecordBytes = 1 + 3 * 32 * 32;

// One image file and its class.
struct LabeledFile {
  std::string path;
  int32_t label = 0;
};
// The classes of an image folder (its subfolders, sorted by name; class i is the i-th) and their .png, .jpg and
// .jpeg files (sorted), other files left out.
struct ImageFolderListing {
  std::vector<std::string> classes;
  std::vector<LabeledFile> files;
};
Result<ImageFolderListing> listImageFolder(const std::string& root);

struct ImageFolderOptions {
  int64_t channels = 3, height = 224, width = 224;  // the samples' [C, H, W]; C is 3 (RGB) or 1 (grey)
  Normalize norm = kImageNetNormalize;
  // false: the shorter side scaled to the target and the centre cropped; true: the shorter side scaled to 8/7 of
  // the target, a random crop and a random left-right flip.
  bool augment = false;
  // An image that does not decode stops the read with an error naming it, or (skip) is replaced by the next one
  // that decodes, and reported once through `report`.
  bool skipBadFiles = false;
  std::function<void(const std::string&)> report;
};
Result<std::shared_ptr<SampleSet>> imageFolderSamples(std::vector<LabeledFile> files, const ImageFolderOptions& options);

}  // namespace tsr::data
