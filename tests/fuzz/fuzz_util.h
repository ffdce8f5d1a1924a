#pragma once
// Helpers shared by the fuzz harnesses (tests/fuzz/fuzz_*.cpp). Each harness is one LLVMFuzzerTestOneInput:
// built with clang's libFuzzer by scripts/fuzz.sh, and with replay_main.cpp in the normal build, where a CTest
// test runs it over every file of its corpus (tests/fuzz/corpus/NAME/).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace tsr::fuzz {

inline std::string_view text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A file of this process that holds the input, for APIs that read paths (SQLite, the safetensors reader).
// `name` is the file name inside a folder of this process's own.
inline std::string writeTemp(const uint8_t* data, size_t size, const char* name) {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string d = std::string(tmp && *tmp ? tmp : "/tmp") + "/tessera_fuzz_" + std::to_string(getpid());
    std::string cmd = "mkdir -p '" + d + "'";
    if (std::system(cmd.c_str()) != 0) std::abort();
    return d;
  }();
  std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// Reads small numbers from the front of the input, then hands out the rest (as FuzzedDataProvider does, which
// only clang ships).
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : m_data(data), m_size(size) {}
  uint8_t byte() { return m_pos < m_size ? m_data[m_pos++] : 0; }
  // In [0, n).
  uint32_t below(uint32_t n) { return n ? byte() % n : 0; }
  std::string_view rest() { return {reinterpret_cast<const char*>(m_data + m_pos), m_size - m_pos}; }
  bool empty() const { return m_pos >= m_size; }

 private:
  const uint8_t* m_data;
  size_t m_size;
  size_t m_pos = 0;
};

}  // namespace tsr::fuzz
