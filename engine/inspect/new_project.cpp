#include "engine/inspect/new_project.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/data/file_io.h"
#include "engine/inspect/project_edit.h"

namespace tsr::inspect {

namespace fs = std::filesystem;

namespace {

// What a run leaves in a project folder, and caches: not part of a template.
bool runOutput(const fs::path& entry) {
  const std::string name = entry.filename().string();
  return name.empty() || name[0] == '.' || name == "checkpoints" || name.rfind("runs.db", 0) == 0;
}

Result<std::string> readText(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return makeError("{}: cannot read", file.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::vector<const project::ModelFamily*> modelFamilies() {
  std::vector<const project::ModelFamily*> out;
  for (const std::string& name : project::modelFamilyNames()) out.push_back(project::findModelFamily(name));
  return out;
}

Result<std::string> newProjectFromTemplate(const std::string& templateDir, const std::string& targetDir) {
  std::error_code ec;
  const fs::path src = fs::weakly_canonical(fs::absolute(templateDir, ec), ec);
  const fs::path dst = fs::absolute(targetDir, ec).lexically_normal();
  TSR_ASSIGN(std::string text, readText(src / "project.toml"));
  if (fs::exists(dst / "project.toml", ec)) return makeError("{} already holds a project.toml", dst.string());
  fs::create_directories(dst, ec);
  if (ec || !fs::is_directory(dst)) return makeError("cannot create {}: {}", dst.string(), ec.message());
  // Everything beside project.toml, but what runs leave there.
  for (const fs::directory_entry& e : fs::directory_iterator(src, ec)) {
    if (runOutput(e.path()) || e.path().filename() == "project.toml") continue;
    fs::copy(e.path(), dst / e.path().filename(), fs::copy_options::recursive | fs::copy_options::skip_existing, ec);
    if (ec) return makeError("cannot copy {} to {}: {}", e.path().string(), dst.string(), ec.message());
  }
  if (ec) return makeError("cannot read {}: {}", src.string(), ec.message());
  // Files the template reads from outside its folder would not resolve from the copy: into its data/.
  for (const char* key : {"path", "encoder_json", "vocab_bpe"}) {
    const std::string value = fieldValue(text, "data", key);
    if (value.empty() || fs::path(value).is_absolute()) continue;
    const fs::path file = fs::weakly_canonical(src / value, ec);
    const fs::path inside = file.lexically_relative(src);
    if (!fs::is_regular_file(file, ec) || (!inside.empty() && *inside.begin() != "..")) continue;
    const fs::path copied = fs::path("data") / file.filename();
    fs::create_directories(dst / "data", ec);
    fs::copy_file(file, dst / copied, fs::copy_options::skip_existing, ec);
    if (ec) return makeError("cannot copy {} to {}: {}", file.string(), (dst / copied).string(), ec.message());
    text = setFieldValue(text, "data", key, "\"" + copied.generic_string() + "\"");
  }
  TSR_TRY(data::writeFileAtomically((dst / "project.toml").string(), text));
  return dst.string();
}

}  // namespace tsr::inspect
