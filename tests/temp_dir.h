#pragma once
// A fresh folder for one test under $TMPDIR (or /tmp), removed with everything in it when the object goes.
#include <string>
#include <string_view>

namespace tsr::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // False when the folder could not be made (path() is then empty).
  bool isValid() const { return !m_path.empty(); }
  const std::string& path() const { return m_path; }
  std::string filePath(std::string_view name) const { return m_path + "/" + std::string(name); }

 private:
  std::string m_path;
};

// Writes these bytes to path as they are (binary), replacing what was there.
void writeFile(const std::string& path, std::string_view bytes);

// How many regular files lie directly in dir; those whose names start with '.' count only with hidden.
int countFiles(const std::string& dir, bool hidden = false);

}  // namespace tsr::test
