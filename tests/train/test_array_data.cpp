// The array and image [data] kinds through prepareData: batches of the family's shapes (an MLP flattens images),
// shape mismatches named by key, file shape and expected shape, validation from files or a held-out fraction,
// and a source restored to a saved state continuing as the uninterrupted one does.
#include "tests/check.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <png.h>

#include "engine/project/project.h"
#include "engine/train/data_source.h"
#include "tests/temp_dir.h"

using namespace tsr;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A version 1 .npy file: the magic, the version, the header length, the dict padded to 64 bytes, the data.
std::string npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  const auto len = static_cast<uint16_t>(header.size());
  return std::string("\x93NUMPY\x01\x00", 8) + std::string(reinterpret_cast<const char*>(&len), 2) + header + data;
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

// n rows of d floats, row r holding r + 0.25 * j, labels r % 3.
void writeRows(const test::TempDir& dir, const std::string& prefix, int n, int d) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j < d; ++j) x.push_back(static_cast<float>(r) + 0.25f * static_cast<float>(j));
    y.push_back(r % 3);
  }
  test::writeFile(dir.filePath(prefix + "_x.npy"), npy("<f4", fmt::format("({}, {})", n, d), raw(x)));
  test::writeFile(dir.filePath(prefix + "_y.npy"), npy("<i8", fmt::format("({},)", n), raw(y)));
}

project::Project projectOk(const test::TempDir& dir, const std::string& toml) {
  auto p = project::parseProject(toml, dir.filePath("project.toml"), dir.path());
  if (!p.ok()) TSR_FATAL(p.error().message);
  return std::move(p).value();
}

std::string dataError(const project::Project& p) {
  auto d = train::prepareData(p, [](const std::string&) {});
  if (d.ok()) TSR_FATAL("prepareData succeeded");
  return d.error().message;
}

std::vector<float> floats(const Array& a) {
  const auto* p = static_cast<const float*>(a.buffer()->data());
  return {p, p + a.numel()};
}

train::Batch nextOk(train::DataSource& s) {
  auto b = s.next();
  if (!b.ok()) TSR_FATAL(b.error().message);
  return std::move(b).value();
}

constexpr const char* kMlp = R"([model]
family = "mlp"
sizes = [{}, 8, 3]
[data]
kind = "npy"
x = "train_x.npy"
y = "train_y.npy"
{}
[train]
batch_size = 4
seed = 5
)";

}  // namespace

TEST_CASE("npyBatchesHaveTheFamilysShapes") {
  test::TempDir dir;
  writeRows(dir, "train", 20, 3);
  std::vector<std::string> info;
  auto d = train::prepareData(projectOk(dir, fmt::format(kMlp, 3, "val_fraction = 0.25")),
                              [&](const std::string& m) { info.push_back(m); });
  REQUIRE_MESSAGE(d.ok(), d.error().message);
  REQUIRE(d->val);
  CHECK(std::find(info.begin(), info.end(), "20 samples: 15 for training, 5 for validation") != info.end());
  // Validation is rows 15..19 in order: the first batch is rows 15..18.
  train::Batch v = nextOk(*d->val);
  CHECK(v.inputs.shape() == Shape{4, 3});
  TSR_COMPARE(floats(v.inputs)[0], 15.0f);
  TSR_COMPARE(floats(v.inputs)[11], 18.5f);
  // Training draws only rows 0..14.
  for (int i = 0; i < 8; ++i)
    for (float f : floats(nextOk(*d->train).inputs)) CHECK(f < 15.0f);
}

TEST_CASE("arrayDataResumesWhereItStopped") {
  test::TempDir dir;
  writeRows(dir, "train", 30, 2);
  const project::Project p = projectOk(dir, fmt::format(kMlp, 2, ""));
  auto a = train::prepareData(p, [](const std::string&) {});
  REQUIRE(a.ok());
  for (int i = 0; i < 9; ++i) nextOk(*a->train);  // over the first epoch's end (6 batches)
  const std::string state = a->train->state();
  auto b = train::prepareData(p, [](const std::string&) {});
  REQUIRE(b.ok());
  REQUIRE(b->train->restore(state).ok());
  for (int i = 0; i < 6; ++i) TSR_COMPARE(floats(nextOk(*b->train).inputs), floats(nextOk(*a->train).inputs));
}

TEST_CASE("shapeMismatchesNameTheKeyAndBothShapes") {
  test::TempDir dir;
  writeRows(dir, "train", 8, 4);
  std::string e = dataError(projectOk(dir, fmt::format(kMlp, 5, "")));
  CHECK(contains(e, "[data] x ("));
  CHECK(contains(e, "train_x.npy of shape (8, 4)) has samples of shape [4]; the mlp family's inputs want [5] per sample"));
  e = dataError(projectOk(dir, fmt::format(kMlp, 4, "val_x = \"missing.npy\"")));
  CHECK(contains(e, "val_x and val_y go together"));
  e = dataError(projectOk(dir, fmt::format(kMlp, 4, "val_x = \"missing.npy\"\nval_y = \"train_y.npy\"")));
  CHECK(contains(e, "[data] val_x: "));
  CHECK(contains(e, "missing.npy"));
  // CIFAR-10 images are [3, 32, 32]: a 16-pixel ViT cannot take them, an MLP of 3072 inputs can.
  fs::create_directories(dir.filePath("c"));
  std::string records;
  for (int r = 0; r < 4; ++r) records += static_cast<char>(r) + std::string(3072, static_cast<char>(r * 10));
  test::writeFile(dir.filePath("c/data_batch_1.bin"), records);
  const std::string vit = "[model]\nfamily = \"vit\"\nimage_size = {}\npatch_size = 8\nhidden = 16\nlayers = 1\n"
                          "heads = 2\nmlp = 16\nnum_classes = 10\n[data]\nkind = \"cifar10\"\npath = \"c\"\n"
                          "[train]\nbatch_size = 2\n";
  e = dataError(projectOk(dir, fmt::format(fmt::runtime(vit), 16)));
  CHECK(contains(e, "has samples of shape [3, 32, 32]; the vit family's inputs want [3, 16, 16] per sample"));
  auto d = train::prepareData(projectOk(dir, fmt::format(fmt::runtime(vit), 32)), [](const std::string&) {});
  REQUIRE_MESSAGE(d.ok(), d.error().message);
  CHECK(!d->val);  // no test_batch.bin
  CHECK(nextOk(*d->train).inputs.shape() == Shape{2, 3, 32, 32});
  auto flat = train::prepareData(projectOk(dir, "[model]\nfamily = \"mlp\"\nsizes = [3072, 10]\n[data]\nkind = "
                                                "\"cifar10\"\npath = \"c\"\nmean = [0, 0, 0]\nstd = [1, 1, 1]\n"
                                                "[train]\nbatch_size = 2\nshuffle = false\n"),
                                 [](const std::string&) {});
  REQUIRE_MESSAGE(flat.ok(), flat.error().message);
  train::Batch b = nextOk(*flat->train);
  CHECK(b.inputs.shape() == Shape{2, 3072});
  TSR_COMPARE(floats(b.inputs)[3072 + 5], 10.0f / 255.0f);  // record 1's pixels are all 10
  e = dataError(projectOk(dir, "[model]\nfamily = \"mlp\"\nsizes = [3072, 10]\n[data]\nkind = \"cifar10\"\n"));
  CHECK(contains(e, "needs path"));
}

TEST_CASE("imageFolderFeedsAVit") {
  test::TempDir dir;
  for (int c = 0; c < 2; ++c) {
    fs::create_directories(dir.filePath(fmt::format("img/class{}", c)));
    for (int i = 0; i < 3; ++i) {
      png_image png;
      std::memset(&png, 0, sizeof png);
      png.version = PNG_IMAGE_VERSION;
      png.width = 12;
      png.height = 10;
      png.format = PNG_FORMAT_RGB;
      std::vector<uint8_t> pixels(12 * 10 * 3, static_cast<uint8_t>(100 * c + i));
      REQUIRE(png_image_write_to_file(&png, dir.filePath(fmt::format("img/class{}/{}.png", c, i)).c_str(), 0,
                                      pixels.data(), 0, nullptr));
    }
  }
  test::writeFile(dir.filePath("img/class1/broken.png"), "\x89PNG\r\n\x1a\n and then nothing");
  const std::string toml = "[model]\nfamily = \"vit\"\nimage_size = 8\npatch_size = 4\nhidden = 16\nlayers = 1\n"
                           "heads = 2\nmlp = 16\nnum_classes = 2\n[data]\nkind = \"image_folder\"\npath = \"img\"\n"
                           "val_fraction = 0.0\nmean = [0, 0, 0]\nstd = [1, 1, 1]\n{}[train]\nbatch_size = 7\n";
  auto skip = train::prepareData(projectOk(dir, fmt::format(fmt::runtime(toml), "bad_files = \"skip\"\n")),
                                 [](const std::string&) {});
  REQUIRE_MESSAGE(skip.ok(), skip.error().message);
  // Skipped files are reported on stderr (from the decoding threads, while the run goes on), once each: two
  // epochs of one batch each meet the file twice.
  std::fflush(stderr);
  const int saved = dup(2), fd = ::open(dir.filePath("stderr.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE((saved >= 0 && fd >= 0));
  dup2(fd, 2);
  train::Batch b = nextOk(*skip->train);
  nextOk(*skip->train);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  CHECK(b.inputs.shape() == Shape{7, 3, 8, 8});
  std::ifstream err(dir.filePath("stderr.txt"));
  std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  const std::string start = "warning: skipped " + dir.filePath("img/class1/broken.png") + ": ";
  CHECK_MESSAGE(text.rfind(start, 0) == 0, text);
  TSR_COMPARE(std::count(text.begin(), text.end(), '\n'), 1);
  // Stop (the default): the batch that meets the file fails, naming it.
  auto stop = train::prepareData(projectOk(dir, fmt::format(fmt::runtime(toml), "")), [](const std::string&) {});
  REQUIRE(stop.ok());
  auto r = stop->train->next();
  REQUIRE(!r.ok());
  CHECK(contains(r.error().message, "broken.png"));
  // More class folders than the model has classes.
  fs::create_directories(dir.filePath("img/class2"));
  const std::string e = dataError(projectOk(dir, fmt::format(fmt::runtime(toml), "")));
  CHECK(contains(e, "[data] path: 3 class folders; the model predicts 2 classes"));
}

// Arrays read from outside the project folder are read, but the run is told so (and records them): the same
// rule as for a text corpus.
TEST_CASE("arraysOutsideTheProjectAreNamed") {
  test::TempDir data, dir;
  writeRows(data, "train", 12, 2);
  const std::string x = data.filePath("train_x.npy"), y = data.filePath("train_y.npy");
  const project::Project p = projectOk(dir, fmt::format(R"([model]
family = "mlp"
sizes = [2, 8, 3]
[data]
kind = "npy"
x = "{}"
y = "{}"
[train]
batch_size = 4
)", x, y));
  const std::vector<std::string> outside = train::filesOutsideProject(p);
  REQUIRE(outside.size() == 2);
  CHECK(contains(outside[0], "train_x.npy"));
  CHECK(contains(outside[1], "train_y.npy"));
  std::vector<std::string> info;
  auto d = train::prepareData(p, [&](const std::string& m) { info.push_back(m); });
  REQUIRE_MESSAGE(d.ok(), d.error().message);
  int warned = 0;
  for (const std::string& m : info) warned += contains(m, "outside the project folder");
  CHECK(warned == 2);
  // Inside the folder: nothing to say.
  writeRows(dir, "train", 12, 2);
  CHECK(train::filesOutsideProject(projectOk(dir, fmt::format(kMlp, 2, ""))).empty());
}
