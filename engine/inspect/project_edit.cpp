#include "engine/inspect/project_edit.h"

#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "engine/project/project.h"
#include "engine/project/model_family.h"

namespace tsr::inspect {

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::string cur;
  std::istringstream in(text);
  while (std::getline(in, cur)) lines.push_back(cur);
  return lines;
}

// The section a line opens ("[train]" -> "train"), or "" when it opens none.
std::string sectionOf(const std::string& line) {
  std::string t = trim(line);
  if (t.size() < 3 || t[0] != '[' || t[1] == '[') return "";
  size_t close = t.find(']');
  return close == std::string::npos ? "" : trim(t.substr(1, close - 1));
}

// Where a key line's value starts and ends (before trailing spaces and the comment); false if the line does
// not set `key`.
bool valueSpan(const std::string& line, const std::string& key, size_t& begin, size_t& end) {
  size_t k = line.find_first_not_of(" \t");
  if (k == std::string::npos || line.compare(k, key.size(), key) != 0) return false;
  size_t eq = line.find_first_not_of(" \t", k + key.size());
  if (eq == std::string::npos || line[eq] != '=') return false;
  begin = line.find_first_not_of(" \t", eq + 1);
  if (begin == std::string::npos) begin = line.size();
  // The comment starts at a '#' outside quotes.
  char quote = 0;
  size_t comment = line.size();
  for (size_t i = begin; i < line.size(); ++i) {
    char c = line[i];
    if (quote) {
      if (c == '\\' && quote == '"') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#') {
      comment = i;
      break;
    }
  }
  end = comment;
  while (end > begin && (line[end - 1] == ' ' || line[end - 1] == '\t')) --end;
  return true;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

bool parseInt(const std::string& s, long long& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && *end == 0;
}

bool parseFloat(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  std::strtod(s.c_str(), &end);
  return errno == 0 && *end == 0;
}

std::vector<std::string> splitList(std::string s) {
  s = trim(s);
  if (!s.empty() && s.front() == '[') s = s.substr(1);
  if (!s.empty() && s.back() == ']') s.pop_back();
  std::vector<std::string> items;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, ',')) {
    cur = trim(cur);
    if (!cur.empty()) items.push_back(cur);
  }
  return items;
}

}  // namespace

std::vector<ProjectField> projectFields(std::string_view family) {
  std::string families;
  for (const std::string& n : project::modelFamilyNames()) families += (families.empty() ? "" : " | ") + n;
  std::vector<ProjectField> fields = {{"project", "name", FieldKind::String, "shown in the runs table"},
                                      {"model", "family", FieldKind::String, families}};
  // The family's own keys, as it declares them.
  if (const project::ModelFamily* f = project::findModelFamily(family)) {
    for (const project::FamilyKey& k : f->keys) {
      FieldKind kind = FieldKind::String;
      switch (k.type) {
        case project::KeyType::Integer: kind = FieldKind::Int; break;
        case project::KeyType::Number: kind = FieldKind::Float; break;
        case project::KeyType::Text: kind = FieldKind::String; break;
        case project::KeyType::Sizes: kind = FieldKind::IntList; break;
      }
      fields.push_back({"model", k.name, kind, fmt::format("{} ({})", k.help, k.describeRequirement())});
    }
  }
  static const std::vector<ProjectField> kRest = {
      {"data", "kind", FieldKind::String, "text | synthetic-images | synthetic-digits | npy | cifar10 | image_folder | shapes"},
      {"data", "path", FieldKind::String, "text corpus, CIFAR-10 or image folder, relative to the project"},
      {"data", "vocab_size", FieldKind::Int, "BPE vocabulary (at least 257)"},
      {"data", "val_fraction", FieldKind::Float, "the share of the data kept for validation, in [0, 1)"},
      {"data", "samples", FieldKind::Int, "shapes: images generated (at least 2)"},
      {"data", "max_shapes", FieldKind::Int, "shapes: most shapes in one image (1 to 64)"},
      {"data", "noise", FieldKind::Float, "shapes: the background noise, in [0, 10]"},
      {"data", "seed", FieldKind::Int, "shapes: the seed the images are drawn from"},
      {"train", "steps", FieldKind::Int, "optimizer steps"},
      {"train", "batch_size", FieldKind::Int, ""},
      {"train", "seq_len", FieldKind::Int, ""},
      {"train", "optimizer", FieldKind::String, "adamw | adam | sgd"},
      {"train", "lr", FieldKind::Float, "peak learning rate"},
      {"train", "min_lr", FieldKind::Float, "end of the cosine schedule"},
      {"train", "warmup_steps", FieldKind::Int, ""},
      {"train", "schedule", FieldKind::String, "warmup_cosine | constant | linear | cosine | step | wsd"},
      {"train", "weight_decay", FieldKind::Float, "adamw: decoupled (default 0.1); sgd, adam: L2 (default 0)"},
      {"train", "momentum", FieldKind::Float, "sgd"},
      {"train", "grad_clip", FieldKind::Float, "0 disables clipping"},
      {"train", "accumulate", FieldKind::Int, "micro-batches per optimizer step"},
      {"train", "remat", FieldKind::String, "none | blocks | dots_saveable: recompute each block in the backward pass"},
      {"train", "eval_every", FieldKind::Int, "0: never"},
      {"train", "eval_steps", FieldKind::Int, "validation batches per evaluation"},
      {"train", "checkpoint_every", FieldKind::Int, "0: only at the end"},
      {"train", "log_every", FieldKind::Int, ""},
      {"train", "seed", FieldKind::Int, ""},
      {"mesh", "shape", FieldKind::IntList, "devices per mesh axis, e.g. 2, 4"},
      {"mesh", "axes", FieldKind::StringList, "axis names, e.g. data, model"},
  };
  fields.insert(fields.end(), kRest.begin(), kRest.end());
  return fields;
}

std::string fieldValue(const std::string& text, const std::string& section, const std::string& key) {
  std::string current;
  for (const std::string& line : splitLines(text)) {
    std::string s = sectionOf(line);
    if (!s.empty()) {
      current = s;
      continue;
    }
    size_t b = 0, e = 0;
    if (current == section && valueSpan(line, key, b, e)) {
      std::string v = line.substr(b, e - b);
      if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "";
}

Result<std::string> tomlLiteral(FieldKind kind, const std::string& typed) {
  std::string t = trim(typed);
  switch (kind) {
    case FieldKind::String:
      return quote(t);
    case FieldKind::Bool:
      if (t == "true" || t == "false") return t;
      return makeError("'{}' is not true or false", t);
    case FieldKind::Int: {
      long long v = 0;
      if (!parseInt(t, v)) return makeError("'{}' is not an integer", t);
      return t;
    }
    case FieldKind::Float:
      if (!parseFloat(t)) return makeError("'{}' is not a number", t);
      return t;
    case FieldKind::IntList: {
      std::string out = "[";
      for (const std::string& item : splitList(t)) {
        long long v = 0;
        if (!parseInt(item, v)) return makeError("'{}' is not an integer", item);
        out += (out.size() > 1 ? ", " : "") + item;
      }
      return out + "]";
    }
    case FieldKind::StringList: {
      std::string out = "[";
      for (std::string item : splitList(t)) {
        if (item.size() >= 2 && item.front() == '"' && item.back() == '"') item = item.substr(1, item.size() - 2);
        out += (out.size() > 1 ? ", " : "") + quote(item);
      }
      return out + "]";
    }
  }
  return makeError("unknown field kind");
}

std::string setFieldValue(const std::string& text, const std::string& section, const std::string& key,
                          const std::string& literal, bool first) {
  std::vector<std::string> lines = splitLines(text);
  std::string current;
  int sectionEnd = -1;    // the line after the last non-blank line of the section
  int sectionStart = -1;  // the line after its header
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string s = sectionOf(lines[i]);
    if (!s.empty()) {
      current = s;
      if (current == section) sectionEnd = sectionStart = static_cast<int>(i) + 1;
      continue;
    }
    if (current != section) continue;
    size_t b = 0, e = 0;
    if (valueSpan(lines[i], key, b, e)) {
      std::string& line = lines[i];
      std::string rest = line.substr(e);  // spaces and the comment
      // Keep the comment in its column where the new value leaves room.
      size_t spaces = rest.find_first_not_of(" \t");
      if (spaces != std::string::npos && spaces > 0) {
        long pad = static_cast<long>(spaces) - (static_cast<long>(literal.size()) - static_cast<long>(e - b));
        rest = std::string(static_cast<size_t>(std::max(1L, pad)), ' ') + rest.substr(spaces);
      }
      line = line.substr(0, b) + literal + rest;
      std::string out;
      for (const std::string& l : lines) out += l + "\n";
      return out;
    }
    if (!trim(lines[i]).empty()) sectionEnd = static_cast<int>(i) + 1;
  }
  std::string entry = key + " = " + literal;
  if (sectionEnd >= 0) {
    lines.insert(lines.begin() + (first ? sectionStart : sectionEnd), entry);
  } else {
    if (!lines.empty() && !trim(lines.back()).empty()) lines.push_back("");
    lines.push_back("[" + section + "]");
    lines.push_back(entry);
  }
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

Status validateProjectText(const std::string& text, const std::string& file, const std::string& dir) {
  auto p = project::parseProject(text, file, dir);
  if (!p.ok()) return p.takeError();
  return {};
}

TextLocation errorLocation(const std::string& message) {
  // The first "FILE:LINE:" whose FILE ends in ".toml": a path may hold colons of its own.
  auto number = [&](size_t at, size_t& end) {
    end = at;
    while (end < message.size() && message[end] >= '0' && message[end] <= '9') ++end;
    return end > at && end - at < 9 ? std::atoi(message.substr(at, end - at).c_str()) : 0;
  };
  for (size_t colon = message.find(".toml:"); colon != std::string::npos; colon = message.find(".toml:", colon + 1)) {
    size_t end = 0;
    int line = number(colon + 6, end);
    if (line <= 0) continue;
    TextLocation loc;
    loc.file = message.substr(0, colon + 5);
    loc.line = line;
    if (end < message.size() && message[end] == ':') loc.column = number(end + 1, end);
    return loc;
  }
  return {};
}

std::string modelSourceFile(const std::string& projectPath) {
  auto p = project::loadProject(projectPath);
  if (!p.ok() || !p->model.config.has("python")) return {};
  const auto* file = std::get_if<std::string>(&p->model.config.at("python"));
  if (!file || file->empty()) return {};
  return std::filesystem::absolute(p->resolve(*file)).lexically_normal().string();
}

PythonTraceback parseTraceback(const std::string& message) {
  static const std::regex frame(R"re(^\s*File "([^"]+)", line (\d+)(?:, in (.+))?$)re");
  static const std::regex exception(R"re(^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)\b.*)$)re");
  PythonTraceback t;
  std::istringstream in(message);
  std::string line;
  TracebackFrame* last = nullptr;
  bool expectCode = false;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, frame)) {
      t.frames.push_back({m[1].str(), std::atoi(m[2].str().c_str()), m[3].matched ? m[3].str() : "", ""});
      last = &t.frames.back();
      expectCode = true;
      continue;
    }
    if (expectCode && last && !line.empty()) {
      const size_t start = line.find_first_not_of(' ');
      // Python 3.11 underlines the expression on the next line; the first line after the frame is its code.
      if (start != std::string::npos) last->code = line.substr(start);
      expectCode = false;
      continue;
    }
    if (std::regex_match(line, m, exception)) t.exception = m[1].str();
  }
  return t;
}

}  // namespace tsr::inspect
