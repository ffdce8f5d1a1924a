#include "engine/train/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/transform/api.h"
#include "engine/transform/trace.h"

namespace tsr::train {

namespace {

const char* safetensorsDtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::U32: return "U32";
    case DType::Bool: return "BOOL";
  }
  return "?";
}

std::optional<DType> parseSafetensorsDtype(const std::string& s) {
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8, DType::U32,
                  DType::Bool})
    if (s == safetensorsDtype(t)) return t;
  return std::nullopt;
}

Status writeAll(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return makeError("writing {}: {}", path, std::strerror(errno));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return {};
}

}  // namespace

Status writeFileAtomic(const std::string& path, const std::string& bytes) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) return makeError("cannot create a temporary file next to {}: {}", path, std::strerror(errno));
  Status st = writeAll(fd, bytes.data(), bytes.size(), path);
  if (st.ok() && ::fsync(fd) != 0) st = makeError("fsync {}: {}", tmp, std::strerror(errno));
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = makeError("rename to {}: {}", path, std::strerror(errno));
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // Make the rename itself durable.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

Status writeSafetensors(const std::string& path, const SafetensorsFile& file) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  size_t offset = 0;
  for (const auto& [name, a] : file.tensors) {
    if (!a.isConcrete()) return makeError("{}: tensor '{}' is not a concrete array", path, name);
    size_t n = static_cast<size_t>(a.aval().bytes());
    header[name] = {{"dtype", safetensorsDtype(a.dtype())},
                    {"shape", a.shape().dims()},
                    {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // keep the data 8-byte aligned, as the format recommends
  std::string bytes(8, '\0');
  uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  bytes += json;
  bytes.reserve(bytes.size() + offset);
  for (const auto& [name, a] : file.tensors) {
    Array whole = a.gathered();  // a sharded array is written whole
    bytes.append(static_cast<const char*>(whole.buffer()->data()), static_cast<size_t>(whole.aval().bytes()));
  }
  return writeFileAtomic(path, bytes);
}

Result<SafetensorsFile> readSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError("cannot open {}", path);
  in.seekg(0, std::ios::end);
  auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char lenBytes[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(lenBytes), 8)) return makeError("{}: too short for safetensors", path);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | lenBytes[i];
  if (len > size - 8 || len > (100u << 20)) return makeError("{}: header length {} is invalid", path, len);
  std::string json(len, '\0');
  in.read(json.data(), static_cast<std::streamsize>(len));
  nlohmann::json header = nlohmann::json::parse(json, nullptr, false);
  if (header.is_discarded() || !header.is_object()) return makeError("{}: the header is not a JSON object", path);
  uint64_t dataStart = 8 + len, dataSize = size - dataStart;
  SafetensorsFile file;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) return makeError("{}: __metadata__ must be an object", path);
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) file.metadata[m.key()] = m->get<std::string>();
      continue;
    }
    const auto& t = *it;
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets") ||
        !t["dtype"].is_string() || !t["shape"].is_array() || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2)
      return makeError("{}: tensor '{}' has a malformed entry", path, name);
    auto dtype = parseSafetensorsDtype(t["dtype"].get<std::string>());
    if (!dtype) return makeError("{}: tensor '{}' has unsupported dtype {}", path, name, t["dtype"].dump());
    std::vector<int64_t> dims;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return makeError("{}: tensor '{}' has a bad shape", path, name);
      dims.push_back(d.get<int64_t>());
    }
    Aval aval{Shape(dims), *dtype};
    const auto& off = t["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return makeError("{}: tensor '{}' has bad data_offsets", path, name);
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > dataSize || end - begin != static_cast<uint64_t>(aval.bytes()))
      return makeError("{}: tensor '{}' ({}) has data_offsets [{}, {}] that do not fit its {} bytes", path, name,
                       aval.toString(), begin, end, aval.bytes());
    auto buf = runtime::Buffer::allocate(aval.bytes());
    if (!buf.ok()) return buf.takeError();
    in.seekg(static_cast<std::streamoff>(dataStart + begin));
    if (!in.read(static_cast<char*>((*buf)->data()), static_cast<std::streamsize>(aval.bytes())))
      return makeError("{}: reading tensor '{}' failed", path, name);
    file.tensors[name] = Array::fromBuffer(*buf, aval);
  }
  return file;
}

SafetensorsFile treeToSafetensors(const Tree& tree, std::map<std::string, std::string> metadata) {
  SafetensorsFile f;
  f.metadata = std::move(metadata);
  tree.visit([&](const std::string& path, const Array& a) { f.tensors[path] = a; });
  return f;
}

Result<Tree> treeFromSafetensors(const SafetensorsFile& file, const Tree& like, const std::string& prefix) {
  std::string missing;
  Tree out = like.mapWithPath([&](const std::string& path, const Array& want) -> Array {
    auto it = file.tensors.find(prefix + path);
    if (it == file.tensors.end()) {
      if (missing.empty()) missing = "missing tensor '" + prefix + path + "'";
      return want;
    }
    if (!(it->second.aval() == want.aval())) {
      if (missing.empty())
        missing = "tensor '" + prefix + path + "' is " + it->second.aval().toString() + ", expected " + want.aval().toString();
      return want;
    }
    return it->second;
  });
  if (!missing.empty()) return Error{missing};
  return out;
}

Result<Tree> treeFromHuggingFace(const SafetensorsFile& file, const Tree& like) {
  std::vector<std::string> paths = like.paths();
  if (paths.empty()) return makeError("the model has no parameters");
  std::string prefix;
  for (const char* candidate : {"", "transformer."})
    if (file.tensors.count(candidate + paths.front())) {
      prefix = candidate;
      break;
    }
  SafetensorsFile converted;
  for (const auto& path : paths) {
    auto it = file.tensors.find(prefix + path);
    if (it == file.tensors.end()) continue;  // reported by treeFromSafetensors
    const Array& want = like.findPath(path)->leaf();
    const Array& got = it->second;
    // The same elements in another shape: GPT-2's c_attn viewed by head ([C, 3C] -> [C, 3, H, D]).
    const bool reshaped = got.shape() != want.shape() && got.shape().numel() == want.shape().numel();
    bool convert = got.dtype() != want.dtype() && isFloating(got.dtype()) && isFloating(want.dtype());
    if (!convert && !reshaped) {
      converted.tensors[path] = got;
      continue;
    }
    TSR_ASSIGN(converted.tensors[path], capture([&] {
      Array a = reshaped ? reshape(got, want.shape().dims()) : got;
      return convert ? astype(a, want.dtype()) : a;
    }));
  }
  return treeFromSafetensors(converted, like);
}

}  // namespace tsr::train
