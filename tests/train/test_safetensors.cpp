// safetensors headers a damaged or hostile file may hold: each must be refused with the file and the tensor
// named, never loaded as wrong weights. The files are written byte by byte here, not by the writer under test.
#include <QtTest>

#include "tests/test_main.h"

#include <QTemporaryDir>
#include <fstream>

#include "engine/train/safetensors.h"

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

}  // namespace

class TestSafetensors : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;

  std::string write(const char* name, const std::string& bytes) {
    std::string path = m_dir.filePath(name).toStdString();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // The read fails with a message holding the file's name and every one of `parts`.
  void refused(const char* name, const std::string& header, size_t dataBytes, std::vector<std::string> parts) {
    std::string path = write(name, safetensorsBytes(header, dataBytes));
    auto r = train::readSafetensors(path);
    QVERIFY2(!r.ok(), name);
    parts.push_back(path);
    for (const auto& part : parts)
      QVERIFY2(r.error().message.find(part) != std::string::npos, (r.error().message + " lacks " + part).c_str());
  }

 private slots:
  // Two f32[2] tensors tiling 16 bytes: the reference the damaged headers below differ from.
  void aWellFormedFileLoads() {
    auto r = train::readSafetensors(write(
        "good.safetensors",
        safetensorsBytes(R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},)"
                         R"( "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                         16)));
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    QCOMPARE(r->tensors.size(), size_t(2));
  }

  void overlappingOffsets() {
    refused("overlap.safetensors",
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
            R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
            12, {"'b'", "overlaps", "'a'"});
  }

  // b starts one byte late: its size is right, but a byte of the data belongs to no tensor.
  void offByOneOffsets() {
    refused("offbyone.safetensors",
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
            R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [9, 17]}})",
            17, {"'b'", "unused"});
  }

  void dataLeftOverAtTheEnd() {
    refused("trailing.safetensors", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 9,
            {"end at byte 8", "9 bytes"});
  }

  void offsetsPastTheFile() {
    refused("past.safetensors", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 8,
            {"'a'", "outside the 8 bytes"});
  }

  void sizeIsNotDtypeTimesShape() {
    refused("size.safetensors", R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 16,
            {"'a'", "(8 bytes) for its 12 bytes"});
  }

  // nlohmann keeps the last of two equal keys; the first would be loaded silently as the second.
  void duplicateNames() {
    refused("dup.safetensors",
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
            R"( "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
            16, {"'a' appears twice"});
  }

  // A shape whose byte count overflows 64 bits must not wrap around to a small number.
  void shapeThatOverflows() {
    refused("overflow.safetensors",
            R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", 0, {"'a'"});
  }

  void headerLengthIsBounded() {
    std::string bytes(8, '\0');
    bytes[4] = 1;  // 2^32 bytes of header
    auto r = train::readSafetensors(write("huge.safetensors", bytes + "{}"));
    QVERIFY(!r.ok());
    QVERIFY2(r.error().message.find("above the limit of 104857600 bytes") != std::string::npos, r.error().message.c_str());
  }
};

TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestSafetensors)
#include "test_safetensors.moc"
