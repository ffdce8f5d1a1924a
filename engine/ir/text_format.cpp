#include "engine/ir/text_format.h"

#include <bit>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace tsr::ir {

// Literal bytes are host order; the text promises little-endian bytes, which is the same thing here.
static_assert(std::endian::native == std::endian::little, "the IR text form assumes a little-endian host");

namespace {

template <class T>
std::string formatFloating(T v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return fmt::format("{}", v);  // shortest spelling that reads back to the same value
}

Result<uint64_t> parseHalf(DType t, std::string_view text);

// The fewest significant digits that read back to the same bf16/f16 ("0.1", not the float's 0.100097656);
// the float's own shortest spelling always does, as every bf16/f16 value is an exact float.
std::string formatHalf(DType t, float v, uint64_t bits) {
  if (std::isnan(v) || std::isinf(v)) return formatFloating(v);
  for (int digits = 1; digits < 9; ++digits) {
    std::string s = fmt::format("{:.{}g}", v, digits);
    auto back = parseHalf(t, s);
    if (back.ok() && *back == bits) return s;
  }
  return formatFloating(v);
}

std::string formatDecimal(DType t, uint64_t bits) {
  switch (t) {
    case DType::F32: return formatFloating(std::bit_cast<float>(static_cast<uint32_t>(bits)));
    case DType::F64: return formatFloating(std::bit_cast<double>(bits));
    case DType::BF16: return formatHalf(t, bf16BitsToFloat(static_cast<uint16_t>(bits)), bits);
    case DType::F16: return formatHalf(t, f16BitsToFloat(static_cast<uint16_t>(bits)), bits);
    case DType::I32: return std::to_string(static_cast<int32_t>(static_cast<uint32_t>(bits)));
    case DType::I64: return std::to_string(static_cast<int64_t>(bits));
    case DType::U8:
    case DType::U32: return std::to_string(bits);
    case DType::Bool: return bits ? "true" : "false";
  }
  return "?";
}

std::string formatBits(DType t, uint64_t bits) {
  return fmt::format("0x{:0{}x}", bits, static_cast<int>(dtypeSize(t) * 2));
}

template <class T>
Result<T> parseFloating(DType t, std::string_view text) {
  if (text == "nan") return std::numeric_limits<T>::quiet_NaN();
  if (text == "inf") return std::numeric_limits<T>::infinity();
  if (text == "-inf") return -std::numeric_limits<T>::infinity();
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, std::chars_format::general);
  if (ec == std::errc::result_out_of_range) return makeError("'{}' is out of range for {}", text, dtypeName(t));
  if (ec != std::errc() || end != text.data() + text.size())
    return makeError("malformed number '{}' for {}", text, dtypeName(t));
  return v;
}

Result<uint64_t> parseHalf(DType t, std::string_view text) {
  TSR_ASSIGN(float f, parseFloating<float>(t, text));
  uint16_t bits = t == DType::BF16 ? floatToBf16Bits(f) : floatToF16Bits(f);
  float back = t == DType::BF16 ? bf16BitsToFloat(bits) : f16BitsToFloat(bits);
  if (std::isinf(back) && !std::isinf(f)) return makeError("'{}' is out of range for {}", text, dtypeName(t));
  return bits;
}

Result<uint64_t> parseInteger(DType t, std::string_view text) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (isUnsigned(t)) {
    if (!text.empty() && text[0] == '-') return makeError("negative value '{}' for {}", text, dtypeName(t));
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(first, last, v);
    uint64_t max = t == DType::U8 ? 0xffu : 0xffffffffu;
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && v > max))
      return makeError("'{}' is out of range for {}", text, dtypeName(t));
    if (ec != std::errc() || end != last) return makeError("malformed integer '{}' for {}", text, dtypeName(t));
    return v;
  }
  int64_t v = 0;
  auto [end, ec] = std::from_chars(first, last, v);
  bool narrow = t == DType::I32 && (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max());
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && narrow))
    return makeError("'{}' is out of range for {}", text, dtypeName(t));
  if (ec != std::errc() || end != last) return makeError("malformed integer '{}' for {}", text, dtypeName(t));
  if (t == DType::I32) return static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v)));
  return static_cast<uint64_t>(v);
}

uint64_t loadElement(const uint8_t* p, int64_t size) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, static_cast<size_t>(size));
  return bits;
}

}  // namespace

Result<uint64_t> parseElement(DType t, std::string_view text) {
  if (text.size() >= 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    uint64_t v = 0;
    const char* last = text.data() + text.size();
    auto [end, ec] = std::from_chars(text.data() + 2, last, v, 16);
    if (ec == std::errc::result_out_of_range) return makeError("'{}' does not fit in 64 bits", text);
    if (ec != std::errc() || end != last) return makeError("malformed hex element '{}'", text);
    int64_t width = dtypeSize(t) * 8;
    if (width < 64 && (v >> width) != 0)
      return makeError("'{}' does not fit in {} ({} bits)", text, dtypeName(t), width);
    return v;
  }
  switch (t) {
    case DType::F32: {
      TSR_ASSIGN(float f, parseFloating<float>(t, text));
      return static_cast<uint64_t>(std::bit_cast<uint32_t>(f));
    }
    case DType::F64: {
      TSR_ASSIGN(double d, parseFloating<double>(t, text));
      return std::bit_cast<uint64_t>(d);
    }
    case DType::BF16:
    case DType::F16: return parseHalf(t, text);
    case DType::Bool:
      if (text == "true") return uint64_t{1};
      if (text == "false") return uint64_t{0};
      return makeError("expected true or false for bool, found '{}'", text);
    default: return parseInteger(t, text);
  }
}

std::string formatElement(DType t, uint64_t bits) {
  std::string text = formatDecimal(t, bits);
  auto back = parseElement(t, text);
  if (back.ok() && *back == bits) return text;
  return formatBits(t, bits);
}

std::string formatLiteral(const Literal& lit) {
  std::string out = "dense<" + lit.aval.toString() + ">";
  size_t have = lit.data ? lit.data->size() : 0;
  const uint8_t* bytes = lit.data ? lit.data->data() : nullptr;
  auto numel = checkedNumel(lit.aval);
  auto need = checkedBytes(lit.aval);
  // A literal whose bytes do not match its aval prints what it has; the parser then rejects it.
  bool consistent = numel.ok() && need.ok() && static_cast<uint64_t>(*need) == have;
  if (!consistent || *numel > kMaxListedElements) return out + "hex\"" + encodeHex(bytes, have) + "\"";
  int64_t size = dtypeSize(lit.aval.dtype);
  out += '[';
  for (int64_t i = 0; i < *numel; ++i) {
    if (i) out += ", ";
    out += formatElement(lit.aval.dtype, loadElement(bytes + i * size, size));
  }
  out += ']';
  return out;
}

std::string quoteString(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += ch;
    }
  }
  out += '"';
  return out;
}

std::string encodeHex(const uint8_t* bytes, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

bool decodeHex(std::string_view hex, std::vector<uint8_t>& out) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2) return false;
  out.assign(hex.size() / 2, 0);
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

Result<int64_t> checkedNumel(const Aval& aval) {
  int64_t n = 1;
  for (int64_t d : aval.shape.dims()) {
    if (d < 0) return makeError("{} has a negative dimension", aval.toString());
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      return makeError("{} has more elements than fit in int64", aval.toString());
    n *= d;
  }
  return n;
}

Result<int64_t> checkedBytes(const Aval& aval) {
  TSR_ASSIGN(int64_t n, checkedNumel(aval));
  int64_t size = dtypeSize(aval.dtype);
  if (n > std::numeric_limits<int64_t>::max() / size)
    return makeError("{} has more bytes than fit in int64", aval.toString());
  return n * size;
}

bool isBareName(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  return true;
}

}  // namespace tsr::ir
