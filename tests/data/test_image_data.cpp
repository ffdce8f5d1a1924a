// The array and image data: .npy headers and values (hand-built files), .npz members (a zip written by hand),
// CIFAR-10 records at byte offsets computed by hand, PNG and JPEG decoding (images written with libpng and
// libjpeg here), image folders with bad files (stop and skip), and the sample loader's shuffling, augmentation
// and resume.
#include "tests/check.h"

#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <jpeglib.h>
#include <png.h>

#include "engine/data/image_decode.h"
#include "engine/data/npy_file.h"
#include "engine/data/sample_loader.h"
#include "engine/data/sample_set.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::data;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

// A .npy file as the format's documentation describes it: magic, version, header length, the dict padded with
// spaces to a multiple of 64 bytes (ending in a newline), then the data.
std::string npy(const std::string& dict, const std::string& data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const auto len = static_cast<uint32_t>(header.size());
  out.append(reinterpret_cast<const char*>(&len), major == 1 ? 2 : 4);
  return out + header + data;
}

std::vector<float> row(const NpyArray& a, int64_t r, float scale = 1) {
  std::vector<float> out(static_cast<size_t>(a.rowElements()));
  a.rowAsFloat(r, scale, out.data());
  return out;
}

NpyArray openOk(const std::string& spec) {
  auto a = NpyArray::open(spec);
  if (!a.ok()) TSR_FATAL(a.error().message);
  return std::move(a).value();
}

std::string openError(const std::string& spec) {
  auto a = NpyArray::open(spec);
  if (a.ok()) TSR_FATAL(spec << " opened");
  return a.error().message;
}

// A zip archive of stored (method 0) or "deflated" (method 8; the bytes are not really compressed, the reader
// must refuse them from the method alone) members, as APPNOTE.TXT lays it out.
std::string zip(const std::vector<std::pair<std::string, std::string>>& members, uint16_t method = 0) {
  std::string out, dir;
  auto u16 = [](std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); };
  auto u32 = [](std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); };
  for (const auto& [name, bytes] : members) {
    const auto offset = static_cast<uint32_t>(out.size());
    u32(out, 0x04034b50);
    u16(out, 20), u16(out, 0), u16(out, method), u16(out, 0), u16(out, 0);
    u32(out, 0), u32(out, static_cast<uint32_t>(bytes.size())), u32(out, static_cast<uint32_t>(bytes.size()));
    u16(out, static_cast<uint16_t>(name.size())), u16(out, 0);
    out += name + bytes;
    u32(dir, 0x02014b50);
    u16(dir, 20), u16(dir, 20), u16(dir, 0), u16(dir, method), u16(dir, 0), u16(dir, 0);
    u32(dir, 0), u32(dir, static_cast<uint32_t>(bytes.size())), u32(dir, static_cast<uint32_t>(bytes.size()));
    u16(dir, static_cast<uint16_t>(name.size())), u16(dir, 0), u16(dir, 0), u16(dir, 0), u16(dir, 0);
    u32(dir, 0), u32(dir, offset);
    dir += name;
  }
  const auto dirOffset = static_cast<uint32_t>(out.size());
  out += dir;
  u32(out, 0x06054b50);
  u16(out, 0), u16(out, 0), u16(out, static_cast<uint16_t>(members.size())), u16(out, static_cast<uint16_t>(members.size()));
  u32(out, static_cast<uint32_t>(dir.size())), u32(out, dirOffset), u16(out, 0);
  return out;
}

// An RGB (channels 3) or grey (1) PNG written with libpng's simplified API.
void writePng(const std::string& path, int w, int h, int channels, const std::vector<uint8_t>& pixels) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(w);
  png.height = static_cast<png_uint_32>(h);
  png.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  REQUIRE(png_image_write_to_file(&png, path.c_str(), 0, pixels.data(), 0, nullptr));
}

// An RGB JPEG written with libjpeg at quality 100.
void writeJpeg(const std::string& path, int w, int h, const std::vector<uint8_t>& pixels) {
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f);
  jpeg_compress_struct info;
  jpeg_error_mgr err;
  info.err = jpeg_std_error(&err);
  jpeg_create_compress(&info);
  jpeg_stdio_dest(&info, f);
  info.image_width = static_cast<JDIMENSION>(w);
  info.image_height = static_cast<JDIMENSION>(h);
  info.input_components = 3;
  info.in_color_space = JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 100, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    auto* r = const_cast<JSAMPROW>(pixels.data() + static_cast<size_t>(info.next_scanline) * w * 3);
    jpeg_write_scanlines(&info, &r, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  std::fclose(f);
}

// Pixel (x, y, c) of a test image: distinct values in every channel.
uint8_t pattern(int x, int y, int c) { return static_cast<uint8_t>((37 * x + 91 * y + 53 * c + 11) % 256); }
std::vector<uint8_t> patternImage(int w, int h) {
  std::vector<uint8_t> p;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) p.push_back(pattern(x, y, c));
  return p;
}

SampleLoader loaderOk(std::shared_ptr<const SampleSet> set, SampleLoaderOptions o) {
  auto l = SampleLoader::create(std::move(set), o);
  if (!l.ok()) TSR_FATAL(l.error().message);
  return std::move(l).value();
}

std::vector<float> floats(const Array& a) {
  const auto* p = static_cast<const float*>(a.buffer()->data());
  return {p, p + a.numel()};
}
std::vector<int32_t> ints(const Array& a) {
  const auto* p = static_cast<const int32_t*>(a.buffer()->data());
  return {p, p + a.numel()};
}

SampleBatch nextOk(SampleLoader& l) {
  auto b = l.next();
  if (!b.ok()) TSR_FATAL(b.error().message);
  return std::move(b).value();
}

// N rows of D floats where row r holds r*D .. r*D + D - 1, and labels r % classes, as an npy sample set.
std::shared_ptr<SampleSet> rowSet(const test::TempDir& dir, int64_t n, int64_t d, int64_t classes) {
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int64_t i = 0; i < n * d; ++i) x.push_back(static_cast<float>(i));
  for (int64_t i = 0; i < n; ++i) y.push_back(static_cast<int32_t>(i % classes));
  test::writeFile(dir.filePath("x.npy"), npy(fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", n, d), raw(x)));
  test::writeFile(dir.filePath("y.npy"), npy(fmt::format("{{'descr': '<i4', 'fortran_order': False, 'shape': ({},), }}", n), raw(y)));
  auto set = npySamples(openOk(dir.filePath("x.npy")), openOk(dir.filePath("y.npy")), 0, classes);
  if (!set.ok()) TSR_FATAL(set.error().message);
  return *set;
}

}  // namespace

TEST_CASE("npyReadsEachDtypeAndVersion") {
  test::TempDir dir;
  // float32 [2, 3], version 1
  test::writeFile(dir.filePath("f.npy"), npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                      raw(std::vector<float>{1, 2, 3, -4, 5.5f, 6})));
  NpyArray f = openOk(dir.filePath("f.npy"));
  CHECK(f.dtype() == NpyDType::F32);
  TSR_COMPARE(f.shape(), (std::vector<int64_t>{2, 3}));
  TSR_COMPARE(row(f, 1), (std::vector<float>{-4, 5.5f, 6}));
  TSR_COMPARE(row(f, 0, 2), (std::vector<float>{2, 4, 6}));
  // float16 [4], version 2: 1.0, -2.0, 65504 (the largest half) and 2^-24 (the smallest subnormal)
  test::writeFile(dir.filePath("h.npy"), npy("{'descr': '<f2', 'fortran_order': False, 'shape': (1, 4), }",
                                      raw(std::vector<uint16_t>{0x3C00, 0xC000, 0x7BFF, 0x0001}), 2));
  TSR_COMPARE(row(openOk(dir.filePath("h.npy")), 0), (std::vector<float>{1, -2, 65504, std::ldexp(1.0f, -24)}));
  // int64 and int32 labels, version 3
  test::writeFile(dir.filePath("l.npy"), npy("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                                      raw(std::vector<int64_t>{7, 0, 9}), 3));
  NpyArray l = openOk(dir.filePath("l.npy"));
  TSR_COMPARE(l.integerAt(0), 7);
  TSR_COMPARE(l.integerAt(2), 9);
  TSR_COMPARE(l.shapeText(), std::string("(3,)"));
  test::writeFile(dir.filePath("i.npy"), npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
                                      raw(std::vector<int32_t>{-3, 5})));
  TSR_COMPARE(openOk(dir.filePath("i.npy")).integerAt(0), -3);
  // uint8 images: scale 0 means 1/255
  test::writeFile(dir.filePath("u.npy"), npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }", std::string("\x00\xff\x33\x66", 4)));
  test::writeFile(dir.filePath("uy.npy"), npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", std::string("\x01\x00", 2)));
  auto set = npySamples(openOk(dir.filePath("u.npy")), openOk(dir.filePath("uy.npy")), 0, 2);
  REQUIRE(set.ok());
  std::vector<float> out(2);
  TSR_COMPARE(*(*set)->read(1, 0, out.data()), 0);
  TSR_COMPARE(out[0], 0x33 / 255.0f);
  TSR_COMPARE(out[1], 0x66 / 255.0f);
  TSR_COMPARE(*(*set)->read(0, 0, out.data()), 1);
  TSR_COMPARE(out[0], 0.0f);
  TSR_COMPARE(out[1], 1.0f);
}

TEST_CASE("npyHeaderErrorsNameTheFileAndTheProblem") {
  test::TempDir dir;
  const std::string data = raw(std::vector<float>{1, 2, 3, 4});
  auto error = [&](const std::string& name, const std::string& bytes) {
    test::writeFile(dir.filePath(name), bytes);
    return openError(dir.filePath(name));
  };
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  std::string e = error("magic.npy", "NUMPY!" + npy(ok, data).substr(6));
  CHECK(contains(e, "magic.npy"));
  CHECK(contains(e, "magic"));
  std::string v4 = npy(ok, data);
  v4[6] = 4;
  e = error("v4.npy", v4);
  CHECK(contains(e, "v4.npy"));
  CHECK(contains(e, "version 4"));
  e = error("fortran.npy", npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", data));
  CHECK(contains(e, "fortran.npy"));
  CHECK(contains(e, "Fortran order"));
  e = error("big.npy", npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", data));
  CHECK(contains(e, "'>f4'"));
  e = error("f8.npy", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", data));
  CHECK(contains(e, "'<f8'"));
  e = error("short.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data));
  CHECK(contains(e, "short.npy"));
  CHECK(contains(e, "shape (2, 3) of float32 needs 24 bytes of data; the file holds 16"));
  e = error("long.npy", npy(ok, data + "xxxx"));
  CHECK(contains(e, "the file holds 20"));
  e = error("noshape.npy", npy("{'descr': '<f4', 'fortran_order': False, }", data));
  CHECK(contains(e, "no 'shape'"));
  e = error("extra.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': (1,), }", data));
  CHECK(contains(e, "keys other than"));
  e = error("notdict.npy", npy("['descr']", data));
  CHECK(contains(e, "does not start with '{'"));
  e = error("negative.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 2), }", data));
  CHECK(contains(e, "not a non-negative integer"));
  std::string cut = npy(ok, data).substr(0, 9);
  e = error("cut.npy", cut);
  CHECK(contains(e, "cut.npy"));
  e = error("hugelen.npy", npy(ok, data).substr(0, 8) + "\xff\xff" + std::string(20, ' '));
  CHECK(contains(e, "more than the file holds"));
  CHECK(contains(openError(dir.filePath("missing.npy")), "missing.npy"));
}

TEST_CASE("npzStoredMembersAreMappedAndCompressedOnesRefused") {
  test::TempDir dir;
  const std::string x = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }", raw(std::vector<float>{3, 4}));
  const std::string y = npy("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", raw(std::vector<int64_t>{1}));
  test::writeFile(dir.filePath("d.npz"), zip({{"x.npy", x}, {"y.npy", y}}));
  TSR_COMPARE(row(openOk(dir.filePath("d.npz") + ":x"), 0), (std::vector<float>{3, 4}));
  TSR_COMPARE(openOk(dir.filePath("d.npz") + ":y.npy").integerAt(0), 1);
  TSR_COMPARE(openOk(dir.filePath("d.npz") + ":x").name(), dir.filePath("d.npz") + ":x.npy");
  std::string e = openError(dir.filePath("d.npz"));
  CHECK(contains(e, "2 members (x.npy, y.npy)"));
  e = openError(dir.filePath("d.npz") + ":z");
  CHECK(contains(e, "no member 'z'"));
  test::writeFile(dir.filePath("one.npz"), zip({{"arr_0.npy", x}}));
  TSR_COMPARE(row(openOk(dir.filePath("one.npz")), 0), (std::vector<float>{3, 4}));
  test::writeFile(dir.filePath("c.npz"), zip({{"x.npy", x}}, 8));
  e = openError(dir.filePath("c.npz") + ":x");
  CHECK(contains(e, dir.filePath("c.npz") + ":x.npy"));
  CHECK(contains(e, "compressed"));
  test::writeFile(dir.filePath("trunc.npz"), zip({{"x.npy", x}}).substr(0, 40));
  CHECK(contains(openError(dir.filePath("trunc.npz")), "trunc.npz"));
}

TEST_CASE("npyLabelsAreChecked") {
  test::TempDir dir;
  test::writeFile(dir.filePath("x.npy"), npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }", raw(std::vector<float>{1, 2})));
  test::writeFile(dir.filePath("y.npy"), npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", raw(std::vector<int32_t>{0, 5})));
  test::writeFile(dir.filePath("y3.npy"), npy("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", raw(std::vector<int32_t>{0, 1, 1})));
  test::writeFile(dir.filePath("yf.npy"), npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", raw(std::vector<float>{0, 1})));
  auto x = [&] { return openOk(dir.filePath("x.npy")); };
  auto e = npySamples(x(), openOk(dir.filePath("y.npy")), 0, 5);
  REQUIRE(!e.ok());
  CHECK(contains(e.error().message, "label 5 of row 1 is outside the model's 5 classes"));
  e = npySamples(x(), openOk(dir.filePath("y3.npy")), 0, 5);
  REQUIRE(!e.ok());
  CHECK(contains(e.error().message, "3 labels for the 2 samples"));
  e = npySamples(x(), openOk(dir.filePath("yf.npy")), 0, 5);
  REQUIRE(!e.ok());
  CHECK(contains(e.error().message, "dtype float32"));
}

TEST_CASE("cifarRecordsAreReadAtTheirByteOffsets") {
  test::TempDir dir;
  // Two files of 3 and 2 records; byte k of record r of file f is (f * 7 + r * 13 + k) % 256, label r + f.
  std::vector<std::string> files;
  for (int f = 0; f < 2; ++f) {
    std::string bytes;
    for (int r = 0; r < 3 - f; ++r) {
      bytes += static_cast<char>(r + f);
      for (int k = 0; k < 3072; ++k) bytes += static_cast<char>((f * 7 + r * 13 + k) % 256);
    }
    files.push_back(dir.filePath(fmt::format("data_batch_{}.bin", f + 1)));
    test::writeFile(files.back(), bytes);
  }
  auto set = cifarSamples(files, {{0, 0, 0}, {1, 1, 1}}, false);
  REQUIRE(set.ok());
  TSR_COMPARE((*set)->size(), 5);
  std::vector<float> out(3072);
  // Sample 4 is file 2's record 1 (byte offset 3073 of data_batch_2.bin): label 2; channel c, row y, column x
  // at pixel byte c*1024 + y*32 + x.
  TSR_COMPARE(*(*set)->read(4, 0, out.data()), 2);
  for (int c = 0; c < 3; ++c)
    for (int y : {0, 17, 31})
      for (int x : {0, 5, 31}) {
        const int k = c * 1024 + y * 32 + x;
        TSR_COMPARE(out[static_cast<size_t>(k)], static_cast<float>((7 + 13 + k) % 256) / 255.0f);
      }
  TSR_COMPARE((*set)->where(4), files[1] + " record 1 (byte 3073)");
  // Normalisation: (v / 255 - mean) / std per channel.
  auto norm = cifarSamples(files, {{0.5, 0.25, 0}, {2, 4, 0.5}}, false);
  REQUIRE(norm.ok());
  std::vector<float> n(3072);
  TSR_COMPARE(*(*norm)->read(0, 0, n.data()), 0);
  TSR_COMPARE(n[1024 + 3], (static_cast<float>((1024 + 3) % 256) / 255.0f - 0.25f) / 4.0f);
  // A file that is not whole records, and a label over 9, are errors naming the file.
  test::writeFile(dir.filePath("bad.bin"), std::string(3073 + 5, '\0'));
  auto bad = cifarSamples({dir.filePath("bad.bin")}, kCifarNormalize, false);
  REQUIRE(!bad.ok());
  CHECK(contains(bad.error().message, "bad.bin: 3078 bytes, not a whole number of CIFAR-10 records"));
  test::writeFile(dir.filePath("label.bin"), "\x0c" + std::string(3072, '\0'));
  auto label = cifarSamples({dir.filePath("label.bin")}, kCifarNormalize, false);
  REQUIRE(label.ok());
  auto read = (*label)->read(0, 0, out.data());
  REQUIRE(!read.ok());
  CHECK(contains(read.error().message, "label.bin record 0 (byte 0) has label 12"));
}

TEST_CASE("cifarAugmentationIsAPaddedCropAndFlip") {
  test::TempDir dir;
  std::string bytes = "\x03";
  for (int k = 0; k < 3072; ++k) bytes += static_cast<char>(1 + k % 200);  // no pixel is 0, the padding's value
  test::writeFile(dir.filePath("b.bin"), bytes);
  auto plain = cifarSamples({dir.filePath("b.bin")}, {{0, 0, 0}, {1, 1, 1}}, false);
  auto aug = cifarSamples({dir.filePath("b.bin")}, {{0, 0, 0}, {1, 1, 1}}, true);
  REQUIRE((plain.ok() && aug.ok()));
  std::vector<float> img(3072), out(3072);
  REQUIRE((*plain)->read(0, 0, img.data()).ok());
  std::set<std::tuple<int, int, bool>> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    REQUIRE((*aug)->read(0, seed, out.data()).ok());
    // The output must equal the image shifted by some (dy, dx) in [-4, 4], maybe mirrored, with 0 outside.
    bool found = false;
    for (int dy = -4; dy <= 4 && !found; ++dy)
      for (int dx = -4; dx <= 4 && !found; ++dx)
        for (bool flip : {false, true}) {
          bool same = true;
          for (int c = 0; c < 3 && same; ++c)
            for (int y = 0; y < 32 && same; ++y)
              for (int x = 0; x < 32 && same; ++x) {
                const int sy = y + dy, sx = (flip ? 31 - x : x) + dx;
                const float want = sy >= 0 && sy < 32 && sx >= 0 && sx < 32 ? img[static_cast<size_t>((c * 32 + sy) * 32 + sx)] : 0.0f;
                same = out[static_cast<size_t>((c * 32 + y) * 32 + x)] == want;
              }
          if (same) {
            found = true;
            seen.insert({dy, dx, flip});
            break;
          }
        }
    REQUIRE_MESSAGE(found, "seed " << seed << " gave no padded crop of the image");
  }
  CHECK(seen.size() > 50);  // the crops and flips vary
  std::vector<float> again(3072);
  REQUIRE((*aug)->read(0, 7, out.data()).ok());
  REQUIRE((*aug)->read(0, 7, again.data()).ok());
  CHECK(out == again);
}

TEST_CASE("pngAndJpegDecodeToThePixelsWritten") {
  test::TempDir dir;
  const int w = 5, h = 3;
  writePng(dir.filePath("rgb.png"), w, h, 3, patternImage(w, h));
  auto png = decodeImage(dir.filePath("rgb.png"));
  REQUIRE_MESSAGE(png.ok(), png.error().message);
  TSR_COMPARE(png->width, w);
  TSR_COMPARE(png->height, h);
  TSR_COMPARE(png->pixels, patternImage(w, h));
  // Grey PNGs become RGB with three equal channels.
  writePng(dir.filePath("grey.png"), 2, 2, 1, {0, 100, 200, 255});
  auto grey = decodeImage(dir.filePath("grey.png"));
  REQUIRE(grey.ok());
  TSR_COMPARE(grey->pixels, (std::vector<uint8_t>{0, 0, 0, 100, 100, 100, 200, 200, 200, 255, 255, 255}));
  // JPEG is lossy: at quality 100 a smooth image comes back within a few levels.
  std::vector<uint8_t> smooth;
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c) smooth.push_back(static_cast<uint8_t>(20 + 6 * x + 3 * y + 20 * c));
  writeJpeg(dir.filePath("s.jpg"), 16, 16, smooth);
  auto jpg = decodeImage(dir.filePath("s.jpg"));
  REQUIRE_MESSAGE(jpg.ok(), jpg.error().message);
  TSR_COMPARE(jpg->width, 16);
  TSR_COMPARE(jpg->height, 16);
  int worst = 0;
  for (size_t i = 0; i < smooth.size(); ++i) worst = std::max(worst, std::abs(int(jpg->pixels[i]) - int(smooth[i])));
  CHECK(worst <= 4);
  // Damaged and foreign files are errors naming the file.
  test::writeFile(dir.filePath("text.png"), "not an image");
  auto e = decodeImage(dir.filePath("text.png"));
  REQUIRE(!e.ok());
  CHECK(contains(e.error().message, "text.png: neither a PNG nor a JPEG"));
  std::string pngBytes = *readFile(dir.filePath("rgb.png"));
  test::writeFile(dir.filePath("cut.png"), pngBytes.substr(0, pngBytes.size() / 2));
  e = decodeImage(dir.filePath("cut.png"));
  REQUIRE(!e.ok());
  CHECK(contains(e.error().message, "cut.png"));
  std::string jpgBytes = *readFile(dir.filePath("s.jpg"));
  test::writeFile(dir.filePath("cut.jpg"), jpgBytes.substr(0, 40));
  e = decodeImage(dir.filePath("cut.jpg"));
  REQUIRE(!e.ok());
  CHECK(contains(e.error().message, "cut.jpg"));
}

TEST_CASE("imageFolderClassesBadFilesStopOrSkip") {
  test::TempDir dir;
  namespace fs = std::filesystem;
  for (const char* c : {"cat", "ant", "bee"}) fs::create_directories(dir.filePath(c));
  // Class index = sorted folder name: ant 0, bee 1, cat 2. Each image is one flat colour: its class * 50.
  for (int cls = 0; cls < 3; ++cls)
    for (int i = 0; i < 2; ++i)
      writePng(dir.filePath(fmt::format("{}/{}.png", std::vector<std::string>{"ant", "bee", "cat"}[cls], i)), 4, 4, 3,
               std::vector<uint8_t>(48, static_cast<uint8_t>(cls * 50 + i)));
  test::writeFile(dir.filePath("bee/notes.txt"), "not an image, and not an image's name");
  test::writeFile(dir.filePath("bee/1.png"), "broken");
  auto listing = listImageFolder(dir.path());
  REQUIRE(listing.ok());
  TSR_COMPARE(listing->classes, (std::vector<std::string>{"ant", "bee", "cat"}));
  TSR_COMPARE(listing->files.size(), size_t(6));
  TSR_COMPARE(listing->files[3].path, dir.filePath("bee/1.png"));
  TSR_COMPARE(listing->files[3].label, 1);

  ImageFolderOptions o;
  o.height = o.width = 4;
  o.norm = {{0, 0, 0}, {1, 1, 1}};
  auto stop = imageFolderSamples(listing->files, o);
  REQUIRE(stop.ok());
  std::vector<float> out(48);
  TSR_COMPARE(*(*stop)->read(4, 0, out.data()), 2);
  TSR_COMPARE(out[0], 100.0f / 255.0f);
  auto e = (*stop)->read(3, 0, out.data());
  REQUIRE(!e.ok());
  CHECK(contains(e.error().message, dir.filePath("bee/1.png")));

  std::vector<std::string> reports;
  o.skipBadFiles = true;
  o.report = [&](const std::string& m) { reports.push_back(m); };
  auto skip = imageFolderSamples(listing->files, o);
  REQUIRE(skip.ok());
  // The bad file's place is taken by the next image (cat/0.png), and it is reported once however often read.
  TSR_COMPARE(*(*skip)->read(3, 0, out.data()), 2);
  TSR_COMPARE(out[0], 100.0f / 255.0f);
  TSR_COMPARE(*(*skip)->read(3, 1, out.data()), 2);
  TSR_COMPARE(reports.size(), size_t(1));
  CHECK(contains(reports[0], "bee/1.png"));
  // Through a loader: every batch of an epoch comes, with the bad file's sample replaced.
  SampleLoaderOptions lo;
  lo.batchSize = 3;
  lo.prefetch = 1;
  lo.threads = 2;
  SampleLoader loader = loaderOk(*skip, lo);
  for (int b = 0; b < 4; ++b) CHECK(nextOk(loader).inputs.shape() == Shape{3, 3, 4, 4});
  TSR_COMPARE(reports.size(), size_t(1));

  auto none = listImageFolder(dir.filePath("ant/0.png"));
  REQUIRE(!none.ok());
  CHECK(contains(none.error().message, "not a folder"));
}

TEST_CASE("imageFolderResizesAndCropsToTheModelsSize") {
  test::TempDir dir;
  std::filesystem::create_directories(dir.filePath("a"));
  // 8x4 (w x h): the shorter side (4) is scaled to 2, so 4x2, then the centre 2x2 is cropped: columns 1..2 of
  // the half-size image. Left half 0, right half 200: the centre crop's left column averages the edge.
  std::vector<uint8_t> p;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 8; ++x)
      for (int c = 0; c < 3; ++c) p.push_back(x < 4 ? 0 : 200);
  writePng(dir.filePath("a/x.png"), 8, 4, 3, p);
  ImageFolderOptions o;
  o.height = o.width = 2;
  o.norm = {{0, 0, 0}, {1, 1, 1}};
  auto set = imageFolderSamples({{dir.filePath("a/x.png"), 0}}, o);
  REQUIRE(set.ok());
  std::vector<float> out(12);
  REQUIRE((*set)->read(0, 0, out.data()).ok());
  // Bilinear at half size: output column j samples source x = 2j + 0.5, between pixels 2j and 2j + 1. Cropped
  // columns 1 and 2 sample x = 2.5 (both 0) and x = 4.5 (both 200).
  TSR_COMPARE(out[0], 0.0f);
  TSR_COMPARE(out[1], 200.0f / 255.0f);
  TSR_COMPARE(out[2], 0.0f);
  TSR_COMPARE(out[3], 200.0f / 255.0f);
}

TEST_CASE("sampleLoaderShufflesEachEpochAndResumes") {
  test::TempDir dir;
  auto set = rowSet(dir, 10, 2, 3);
  SampleLoaderOptions o;
  o.batchSize = 3;
  o.seed = 42;
  SampleLoader a = loaderOk(set, o);
  TSR_COMPARE(a.batchesPerEpoch(), 3);
  // Every epoch visits 9 distinct samples of the 10, in an order that changes with the epoch.
  for (int e = 0; e < 3; ++e) {
    std::set<int64_t> seen;
    for (int b = 0; b < 3; ++b)
      for (int64_t s : a.batchSamples(e, b)) seen.insert(s);
    TSR_COMPARE(seen.size(), size_t(9));
  }
  CHECK(a.batchSamples(0, 0) != a.batchSamples(1, 0));
  // A batch holds its samples' rows: row r is r*2, r*2 + 1, label r % 3.
  SampleBatch first = nextOk(a);
  const std::vector<int64_t> idx = a.batchSamples(0, 0);
  for (int i = 0; i < 3; ++i) {
    TSR_COMPARE(floats(first.inputs)[static_cast<size_t>(2 * i)], static_cast<float>(idx[static_cast<size_t>(i)] * 2));
    TSR_COMPARE(ints(first.labels)[static_cast<size_t>(i)], idx[static_cast<size_t>(i)] % 3);
  }
  // Resume: a loader restored to the state after 4 batches returns what the first returns next.
  for (int i = 0; i < 3; ++i) nextOk(a);
  const std::string state = a.state();
  SampleLoader b = loaderOk(set, o);
  REQUIRE(b.restore(state).ok());
  for (int i = 0; i < 5; ++i) {
    SampleBatch x = nextOk(a), y = nextOk(b);
    TSR_COMPARE(floats(x.inputs), floats(y.inputs));
    TSR_COMPARE(ints(x.labels), ints(y.labels));
  }
  // A state saved for other data is refused.
  o.batchSize = 2;
  SampleLoader c = loaderOk(set, o);
  auto st = c.restore(state);
  REQUIRE(!st.ok());
  CHECK(contains(st.error().message, "batch size 3"));
  CHECK(!c.restore("{").ok());
  // Rewind gives the first batch again.
  a.rewind();
  TSR_COMPARE(floats(nextOk(a).inputs), floats(first.inputs));
  // The same seed gives the same batches with any number of threads and without prefetch.
  o.batchSize = 3;
  o.threads = 3;
  o.prefetch = 0;
  SampleLoader t = loaderOk(set, o);
  TSR_COMPARE(floats(nextOk(t).inputs), floats(first.inputs));
  // Too few samples for one batch.
  o.batchSize = 11;
  auto tooFew = SampleLoader::create(set, o);
  REQUIRE(!tooFew.ok());
  CHECK(contains(tooFew.error().message, "10 samples"));
}

TEST_CASE("sampleLoaderAugmentsDeterministically") {
  test::TempDir dir;
  std::string bytes;
  for (int r = 0; r < 4; ++r) {
    bytes += static_cast<char>(r);
    for (int k = 0; k < 3072; ++k) bytes += static_cast<char>((k * 7 + r) % 251);
  }
  test::writeFile(dir.filePath("b.bin"), bytes);
  auto set = cifarSamples({dir.filePath("b.bin")}, kCifarNormalize, true);
  REQUIRE(set.ok());
  SampleLoaderOptions o;
  o.batchSize = 2;
  o.seed = 3;
  SampleLoader a = loaderOk(*set, o), b = loaderOk(*set, o);
  std::vector<std::vector<float>> first;
  for (int i = 0; i < 4; ++i) {
    std::vector<float> x = floats(nextOk(a).inputs);
    TSR_COMPARE(x, floats(nextOk(b).inputs));
    first.push_back(std::move(x));
  }
  // Another seed draws other crops (and another order).
  o.seed = 4;
  SampleLoader c = loaderOk(*set, o);
  CHECK(floats(nextOk(c).inputs) != first[0]);
}
