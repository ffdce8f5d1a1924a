#include "engine/data/npy_file.h"

#include <cctype>
#include <cstring>
#include <limits>
#include <map>
#include <optional>

#include <fmt/format.h>

namespace tsr::data {

namespace {

constexpr char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

uint16_t u16At(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32At(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t u64At(const uint8_t* p) { return u32At(p) | (static_cast<uint64_t>(u32At(p + 4)) << 32); }

// The header's dict, a Python literal: string keys; values that are strings, True/False or tuples of integers.
struct HeaderDict {
  std::map<std::string, std::string> strings;
  std::map<std::string, bool> bools;
  std::map<std::string, std::vector<int64_t>> tuples;
};

class DictParser {
 public:
  explicit DictParser(std::string_view text) : m_s(text) {}

  Result<HeaderDict> parse() {
    HeaderDict d;
    skip();
    if (!eat('{')) return fail("does not start with '{'");
    while (true) {
      skip();
      if (eat('}')) break;
      TSR_ASSIGN(std::string key, string());
      skip();
      if (!eat(':')) return fail("has no ':' after '" + key + "'");
      skip();
      if (peek() == '\'' || peek() == '"') {
        TSR_ASSIGN(d.strings[key], string());
      } else if (peek() == '(') {
        TSR_ASSIGN(d.tuples[key], tuple());
      } else if (word("True")) {
        d.bools[key] = true;
      } else if (word("False")) {
        d.bools[key] = false;
      } else {
        return fail("has a value for '" + key + "' that is not a string, True, False or a tuple");
      }
      skip();
      if (eat(',')) continue;
      skip();
      if (eat('}')) break;
      return fail("has no ',' or '}' after '" + key + "'");
    }
    skip();
    if (m_i != m_s.size()) return fail("has text after the closing '}'");
    return d;
  }

 private:
  char peek() const { return m_i < m_s.size() ? m_s[m_i] : '\0'; }
  bool eat(char c) {
    if (peek() != c) return false;
    ++m_i;
    return true;
  }
  void skip() {
    while (m_i < m_s.size() && (m_s[m_i] == ' ' || m_s[m_i] == '\n' || m_s[m_i] == '\t')) ++m_i;
  }
  bool word(std::string_view w) {
    if (m_s.substr(m_i, w.size()) != w) return false;
    m_i += w.size();
    return true;
  }
  Error fail(const std::string& what) const { return Error{"the header's dict " + what}; }

  Result<std::string> string() {
    const char q = peek();
    if (q != '\'' && q != '"') return fail("has a key that is not a quoted string");
    ++m_i;
    const size_t end = m_s.find(q, m_i);
    if (end == std::string_view::npos) return fail("has an unterminated string");
    std::string out(m_s.substr(m_i, end - m_i));
    m_i = end + 1;
    return out;
  }

  Result<std::vector<int64_t>> tuple() {
    std::vector<int64_t> out;
    eat('(');
    while (true) {
      skip();
      if (eat(')')) return out;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) return fail("has a shape entry that is not a non-negative integer");
      int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return fail("has a shape entry too large");
        v = v * 10 + (m_s[m_i++] - '0');
      }
      // Python longs in old files: 3L.
      eat('L');
      out.push_back(v);
      skip();
      if (eat(',')) continue;
      skip();
      if (eat(')')) return out;
      return fail("has a shape that is not a tuple of integers");
    }
  }

  std::string_view m_s;
  size_t m_i = 0;
};

std::optional<NpyDType> dtypeOf(const std::string& descr) {
  // '|' (not applicable) for single bytes, '<' little-endian; '=' is the writer's native order, little-endian here.
  if (descr == "|u1" || descr == "<u1" || descr == "=u1") return NpyDType::U8;
  if (descr.size() != 3 || (descr[0] != '<' && descr[0] != '=')) return std::nullopt;
  const std::string t = descr.substr(1);
  if (t == "f4") return NpyDType::F32;
  if (t == "f2") return NpyDType::F16;
  if (t == "i4") return NpyDType::I32;
  if (t == "i8") return NpyDType::I64;
  return std::nullopt;
}

// One member of a zip archive, from its central directory.
struct ZipMember {
  std::string name;
  uint16_t method = 0;  // 0 stored, 8 deflated
  uint64_t compressedSize = 0, size = 0, localHeader = 0;
};

// The central directory of a zip archive (with the zip64 extensions numpy uses for large members).
Result<std::vector<ZipMember>> zipMembers(const MappedFile& f) {
  const uint8_t* d = f.data();
  const size_t n = f.size();
  if (n < 22) return makeError("{}: too short for a zip archive ({} bytes)", f.path(), n);
  // The end-of-central-directory record is in the last 22 + 65535 (comment) bytes.
  size_t eocd = std::string::npos;
  for (size_t i = n - 22 + 1; i-- > (n > 22 + 65535 ? n - 22 - 65535 : 0);)
    if (u32At(d + i) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) return makeError("{}: not a zip archive (no end of central directory)", f.path());
  uint64_t count = u16At(d + eocd + 10), dirOffset = u32At(d + eocd + 16);
  if ((count == 0xFFFF || dirOffset == 0xFFFFFFFF) && eocd >= 20 && u32At(d + eocd - 20) == 0x07064b50) {
    const uint64_t z64 = u64At(d + eocd - 20 + 8);
    if (z64 + 56 > n || u32At(d + z64) != 0x06064b50) return makeError("{}: damaged zip64 directory", f.path());
    count = u64At(d + z64 + 32);
    dirOffset = u64At(d + z64 + 48);
  }
  std::vector<ZipMember> out;
  uint64_t at = dirOffset;
  for (uint64_t m = 0; m < count; ++m) {
    if (at + 46 > n || u32At(d + at) != 0x02014b50)
      return makeError("{}: damaged zip central directory (entry {})", f.path(), m);
    ZipMember z;
    z.method = u16At(d + at + 10);
    z.compressedSize = u32At(d + at + 20);
    z.size = u32At(d + at + 24);
    const uint16_t nameLen = u16At(d + at + 28), extraLen = u16At(d + at + 30), commentLen = u16At(d + at + 32);
    z.localHeader = u32At(d + at + 42);
    if (at + 46 + nameLen + extraLen + commentLen > n) return makeError("{}: damaged zip central directory", f.path());
    z.name.assign(reinterpret_cast<const char*>(d + at + 46), nameLen);
    // Zip64: the sizes and offset saturated at 0xFFFFFFFF are in extra field 0x0001, in this order.
    for (uint64_t e = at + 46 + nameLen; e + 4 <= at + 46 + nameLen + extraLen;) {
      const uint16_t id = u16At(d + e), len = u16At(d + e + 2);
      if (id == 0x0001) {
        uint64_t p = e + 4;
        for (uint64_t* field : {&z.size, &z.compressedSize, &z.localHeader})
          if (*field == 0xFFFFFFFF && p + 8 <= e + 4 + len) {
            *field = u64At(d + p);
            p += 8;
          }
      }
      e += 4 + len;
    }
    out.push_back(std::move(z));
    at += 46 + nameLen + extraLen + commentLen;
  }
  return out;
}

}  // namespace

const char* npyDTypeName(NpyDType t) {
  switch (t) {
    case NpyDType::F32: return "float32";
    case NpyDType::F16: return "float16";
    case NpyDType::I32: return "int32";
    case NpyDType::I64: return "int64";
    case NpyDType::U8: return "uint8";
  }
  return "?";
}

int npyDTypeBytes(NpyDType t) {
  switch (t) {
    case NpyDType::F32: case NpyDType::I32: return 4;
    case NpyDType::F16: return 2;
    case NpyDType::I64: return 8;
    case NpyDType::U8: return 1;
  }
  return 1;
}

float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000 | (mant << 13);  // inf, nan
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3FF) << 13);
    }
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

Result<NpyArray> NpyArray::open(const std::string& spec) {
  std::string path = spec, member;
  if (const size_t colon = spec.rfind(':'); colon != std::string::npos && spec.find(".npz", 0) < colon) {
    path = spec.substr(0, colon);
    member = spec.substr(colon + 1);
  }
  TSR_ASSIGN(MappedFile mapped, MappedFile::open(path));
  auto file = std::make_shared<const MappedFile>(std::move(mapped));
  const bool isZip = file->size() >= 4 && u32At(file->data()) == 0x04034b50;
  if (!isZip) {
    if (!member.empty()) return makeError("{}: not an .npz archive, so it has no member '{}'", path, member);
    return parse(file, 0, file->size(), path);
  }
  TSR_ASSIGN(std::vector<ZipMember> members, zipMembers(*file));
  std::string names;
  for (const ZipMember& z : members) names += (names.empty() ? "" : ", ") + z.name;
  const ZipMember* chosen = nullptr;
  if (member.empty()) {
    if (members.size() != 1)
      return makeError("{}: an .npz with {} members ({}); name one as \"{}:NAME\"", path, members.size(), names, path);
    chosen = &members[0];
  } else {
    for (const ZipMember& z : members)
      if (z.name == member || z.name == member + ".npy") chosen = &z;
    if (!chosen) return makeError("{}: no member '{}' (it holds {})", path, member, names.empty() ? "none" : names);
  }
  const std::string name = path + ":" + chosen->name;
  if (chosen->method != 0)
    return makeError("{}: the member is compressed (zip method {}, as np.savez_compressed writes); Tessera maps "
                     "arrays without reading them into memory, which needs stored members: save with np.savez",
                     name, chosen->method);
  const uint8_t* d = file->data();
  const uint64_t lh = chosen->localHeader;
  if (lh + 30 > file->size() || u32At(d + lh) != 0x04034b50) return makeError("{}: damaged zip local header", name);
  const uint64_t start = lh + 30 + u16At(d + lh + 26) + u16At(d + lh + 28);
  if (start > file->size() || chosen->size > file->size() - start)
    return makeError("{}: the member's {} bytes run past the end of the archive", name, chosen->size);
  return parse(file, start, chosen->size, name);
}

Result<NpyArray> NpyArray::parse(std::shared_ptr<const MappedFile> file, size_t offset, size_t size,
                                 const std::string& name) {
  const uint8_t* p = file->data() + offset;
  if (size < 10 || std::memcmp(p, kMagic, 6) != 0) return makeError("{}: not a .npy array (no \\x93NUMPY magic)", name);
  const int major = p[6], minor = p[7];
  if (major < 1 || major > 3)
    return makeError("{}: .npy format version {}.{}; Tessera reads versions 1, 2 and 3", name, major, minor);
  const size_t lenBytes = major == 1 ? 2 : 4;
  if (size < 8 + lenBytes) return makeError("{}: the .npy header is cut short", name);
  const size_t headerLen = major == 1 ? u16At(p + 8) : u32At(p + 8);
  const size_t dataStart = 8 + lenBytes + headerLen;
  if (dataStart > size) return makeError("{}: the .npy header says {} bytes, more than the file holds", name, headerLen);
  std::string_view header(reinterpret_cast<const char*>(p + 8 + lenBytes), headerLen);
  auto dict = DictParser(header).parse();
  if (!dict.ok()) return makeError("{}: {}", name, dict.error().message);
  for (const char* key : {"descr", "fortran_order", "shape"}) {
    const bool has = dict->strings.count(key) || dict->bools.count(key) || dict->tuples.count(key);
    if (!has) return makeError("{}: the .npy header has no '{}'", name, key);
  }
  if (dict->strings.size() + dict->bools.size() + dict->tuples.size() != 3)
    return makeError("{}: the .npy header has keys other than descr, fortran_order and shape", name);
  if (!dict->strings.count("descr")) return makeError("{}: the .npy header's descr is not a string", name);
  if (!dict->bools.count("fortran_order")) return makeError("{}: the .npy header's fortran_order is not True or False", name);
  if (!dict->tuples.count("shape")) return makeError("{}: the .npy header's shape is not a tuple", name);
  const std::string& descr = dict->strings["descr"];
  std::optional<NpyDType> dtype = dtypeOf(descr);
  if (!dtype)
    return makeError("{}: dtype '{}'; Tessera reads little-endian float32, float16, int32, int64 and uint8", name, descr);
  if (dict->bools["fortran_order"])
    return makeError("{}: the array is in Fortran order; save it in C order (np.ascontiguousarray)", name);
  NpyArray a;
  a.m_file = std::move(file);
  a.m_name = name;
  a.m_dtype = *dtype;
  a.m_shape = dict->tuples["shape"];
  a.m_data = p + dataStart;
  // The element count, guarded against overflow: a damaged header must not make a huge product wrap around.
  uint64_t bytes = static_cast<uint64_t>(npyDTypeBytes(*dtype));
  for (int64_t d : a.m_shape) {
    if (d != 0 && bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
      return makeError("{}: shape {} is too large", name, a.shapeText());
    bytes *= static_cast<uint64_t>(d);
  }
  if (bytes != size - dataStart)
    return makeError("{}: shape {} of {} needs {} bytes of data; the file holds {}", name, a.shapeText(),
                     npyDTypeName(*dtype), bytes, size - dataStart);
  return a;
}

std::string NpyArray::shapeText() const {
  std::string s = "(";
  for (size_t i = 0; i < m_shape.size(); ++i) s += (i ? ", " : "") + std::to_string(m_shape[i]);
  return s + (m_shape.size() == 1 ? ",)" : ")");
}

int64_t NpyArray::rowElements() const {
  int64_t n = 1;
  for (size_t i = 1; i < m_shape.size(); ++i) n *= m_shape[i];
  return n;
}

void NpyArray::rowAsFloat(int64_t row, float scale, float* out) const {
  const int64_t n = rowElements();
  const uint8_t* src = m_data + row * n * npyDTypeBytes(m_dtype);
  // Elements may be unaligned (the header length is the writer's choice), so each is copied out.
  for (int64_t i = 0; i < n; ++i) {
    float v = 0;
    switch (m_dtype) {
      case NpyDType::F32: std::memcpy(&v, src + 4 * i, 4); break;
      case NpyDType::F16: v = halfToFloat(u16At(src + 2 * i)); break;
      case NpyDType::I32: v = static_cast<float>(static_cast<int32_t>(u32At(src + 4 * i))); break;
      case NpyDType::I64: v = static_cast<float>(static_cast<int64_t>(u64At(src + 8 * i))); break;
      case NpyDType::U8: v = static_cast<float>(src[i]); break;
    }
    out[i] = v * scale;
  }
}

int64_t NpyArray::integerAt(int64_t i) const {
  switch (m_dtype) {
    case NpyDType::I32: return static_cast<int32_t>(u32At(m_data + 4 * i));
    case NpyDType::I64: return static_cast<int64_t>(u64At(m_data + 8 * i));
    case NpyDType::U8: return m_data[i];
    default: return 0;
  }
}

}  // namespace tsr::data
