#include "engine/train/safetensors.h"


#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "engine/core/limits.h"
#include "engine/data/file_io.h"

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

}  // namespace

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
  return data::writeFileAtomically(path, bytes);
}

namespace {

// A safetensors file's header, read and checked against the file's size; the tensors' bytes are not read.
struct Header {
  struct Entry {
    std::string name;
    Aval aval;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
  uint64_t dataStart = 0;
};

Result<Header> readHeader(std::ifstream& in, const std::string& path) {
  // Every check the safetensors library makes on load: a bounded header, no name twice, each tensor's bytes
  // exactly its dtype times its shape, and the tensors tiling the data from its first byte to the file's end
  // (in order of offset, no overlap, no gap). A damaged file then fails here, naming the file and the tensor,
  // instead of loading wrong weights.
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  if (end < 0) return makeError("{}: cannot read its size", path);
  const auto size = static_cast<uint64_t>(end);
  in.seekg(0);
  unsigned char lenBytes[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(lenBytes), 8)) return makeError("{}: too short for safetensors", path);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | lenBytes[i];
  if (len > static_cast<uint64_t>(limits::kSafetensorsHeaderBytes))
    return makeError("{}: header length {} is above the limit of {} bytes", path, len, limits::kSafetensorsHeaderBytes);
  if (len > size - 8) return makeError("{}: header length {} runs past the end of the file ({} bytes)", path, len, size);
  std::string json(len, '\0');
  if (!in.read(json.data(), static_cast<std::streamsize>(len))) return makeError("{}: reading the header failed", path);
  // nlohmann keeps the last of two equal keys: the parser callback sees every top-level key first.
  std::string duplicate;
  std::set<std::string> names;
  nlohmann::json::parser_callback_t seen = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string() &&
        !names.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json header = nlohmann::json::parse(json, seen, false);
  if (header.is_discarded() || !header.is_object()) return makeError("{}: the header is not a JSON object", path);
  if (!duplicate.empty()) return makeError("{}: tensor '{}' appears twice in the header", path, duplicate);
  const uint64_t dataStart = 8 + len, dataSize = size - dataStart;
  using Entry = Header::Entry;
  std::vector<Entry> entries;
  Header file;
  file.dataStart = dataStart;
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
    uint64_t bytes = static_cast<uint64_t>(dtypeSize(*dtype));
    for (const auto& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return makeError("{}: tensor '{}' has a bad shape", path, name);
      const auto n = static_cast<uint64_t>(d.get<int64_t>());
      // Bytes beyond the data section cannot be right; stopping there keeps the product from overflowing.
      if (n != 0 && bytes > dataSize / n)
        return makeError("{}: tensor '{}' has shape {}, more bytes than the file's {} of data", path, name,
                         t["shape"].dump(), dataSize);
      bytes *= n;
      dims.push_back(static_cast<int64_t>(n));
    }
    Aval aval{Shape(dims), *dtype};
    const auto& off = t["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return makeError("{}: tensor '{}' has bad data_offsets", path, name);
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > dataSize)
      return makeError("{}: tensor '{}' has data_offsets [{}, {}] outside the {} bytes of data", path, name, begin, end,
                       dataSize);
    if (end - begin != bytes)
      return makeError("{}: tensor '{}' ({}) has data_offsets [{}, {}] ({} bytes) for its {} bytes", path, name,
                       aval.toString(), begin, end, end - begin, bytes);
    entries.push_back(Entry{name, aval, begin, end});
  }
  std::vector<const Entry*> byOffset;
  for (const auto& e : entries) byOffset.push_back(&e);
  std::sort(byOffset.begin(), byOffset.end(),
            [](const Entry* a, const Entry* b) { return std::tie(a->begin, a->end) < std::tie(b->begin, b->end); });
  uint64_t expected = 0;
  const Entry* previous = nullptr;
  for (const Entry* e : byOffset) {
    if (e->begin < expected)
      return makeError("{}: tensor '{}' at data_offsets [{}, {}] overlaps tensor '{}', which ends at {}", path, e->name,
                       e->begin, e->end, previous->name, expected);
    if (e->begin > expected)
      return makeError("{}: tensor '{}' at data_offsets [{}, {}] leaves bytes [{}, {}) of the data unused", path,
                       e->name, e->begin, e->end, expected, e->begin);
    expected = e->end;
    previous = e;
  }
  if (expected != dataSize)
    return makeError("{}: the tensors end at byte {} of the data, but the file holds {} bytes of data", path, expected,
                     dataSize);
  file.entries = std::move(entries);
  return file;
}

}  // namespace

Result<std::map<std::string, std::string>> readSafetensorsMetadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError("cannot open {}", path);
  TSR_ASSIGN(Header header, readHeader(in, path));
  return std::move(header.metadata);
}

Result<SafetensorsFile> readSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError("cannot open {}", path);
  TSR_ASSIGN(Header header, readHeader(in, path));
  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  for (const Header::Entry& e : header.entries) {
    auto buf = runtime::Buffer::allocate(e.aval.bytes());
    if (!buf.ok()) return makeError("{}: tensor '{}': {}", path, e.name, buf.error().message);
    in.seekg(static_cast<std::streamoff>(header.dataStart + e.begin));
    if (!in.read(static_cast<char*>((*buf)->data()), static_cast<std::streamsize>(e.aval.bytes())))
      return makeError("{}: reading tensor '{}' failed", path, e.name);
    file.tensors[e.name] = Array::fromBuffer(*buf, e.aval);
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
