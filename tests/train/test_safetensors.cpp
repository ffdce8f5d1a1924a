// safetensors headers a damaged or hostile file may hold: each must be refused with the file and the tensor
// named, never loaded as wrong weights. The files are written byte by byte here, not by the writer under test.
#include "tests/check.h"

#include <fstream>

#include "engine/train/safetensors.h"
#include "tests/temp_dir.h"

using namespace tsr;

namespace {

// An 8-byte little-endian length, the header, then the data bytes.
std::string safetensorsBytes(const std::string& header, size_t dataBytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  for (size_t i = 0; i < dataBytes; ++i) out += static_cast<char>(i & 0x7f);
  return out;
}

// Each test case writes its files into a folder of its own.
struct SafetensorsFiles {
  test::TempDir dir;

  std::string write(const char* name, const std::string& bytes) {
    std::string path = dir.filePath(name);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // The read fails with a message holding the file's name and every one of `parts`.
  void refused(const char* name, const std::string& header, size_t dataBytes, std::vector<std::string> parts) {
    std::string path = write(name, safetensorsBytes(header, dataBytes));
    auto r = train::readSafetensors(path);
    REQUIRE_MESSAGE(!r.ok(), name);
    parts.push_back(path);
    for (const auto& part : parts)
      REQUIRE_MESSAGE(r.error().message.find(part) != std::string::npos, r.error().message << " lacks " << part);
  }
};

}  // namespace

// Two f32[2] tensors tiling 16 bytes: the reference the damaged headers below differ from.
TEST_CASE_FIXTURE(SafetensorsFiles, "aWellFormedFileLoads") {
  auto r = train::readSafetensors(write(
      "good.safetensors",
      safetensorsBytes(R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},)"
                       R"( "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                       16)));
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  TSR_COMPARE(r->tensors.size(), size_t(2));
}

TEST_CASE_FIXTURE(SafetensorsFiles, "overlappingOffsets") {
  refused("overlap.safetensors",
          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
          R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
          12, {"'b'", "overlaps", "'a'"});
}

// b starts one byte late: its size is right, but a byte of the data belongs to no tensor.
TEST_CASE_FIXTURE(SafetensorsFiles, "offByOneOffsets") {
  refused("offbyone.safetensors",
          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
          R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [9, 17]}})",
          17, {"'b'", "unused"});
}

TEST_CASE_FIXTURE(SafetensorsFiles, "dataLeftOverAtTheEnd") {
  refused("trailing.safetensors", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 9,
          {"end at byte 8", "9 bytes"});
}

TEST_CASE_FIXTURE(SafetensorsFiles, "offsetsPastTheFile") {
  refused("past.safetensors", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 8,
          {"'a'", "outside the 8 bytes"});
}

TEST_CASE_FIXTURE(SafetensorsFiles, "sizeIsNotDtypeTimesShape") {
  refused("size.safetensors", R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 16,
          {"'a'", "(8 bytes) for its 12 bytes"});
}

// nlohmann keeps the last of two equal keys; the first would be loaded silently as the second.
TEST_CASE_FIXTURE(SafetensorsFiles, "duplicateNames") {
  refused("dup.safetensors",
          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
          R"( "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
          16, {"'a' appears twice"});
}

// A shape whose byte count overflows 64 bits must not wrap around to a small number.
TEST_CASE_FIXTURE(SafetensorsFiles, "shapeThatOverflows") {
  refused("overflow.safetensors",
          R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", 0, {"'a'"});
}

TEST_CASE_FIXTURE(SafetensorsFiles, "headerLengthIsBounded") {
  std::string bytes(8, '\0');
  bytes[4] = 1;  // 2^32 bytes of header
  auto r = train::readSafetensors(write("huge.safetensors", bytes + "{}"));
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find("above the limit of 104857600 bytes") != std::string::npos,
                  r.error().message.c_str());
}
