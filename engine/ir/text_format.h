#pragma once
// Spellings shared by the IR printer and parser: literal elements, quoted strings and hex bytes.
// The printer checks every element it writes by reading it back with parseElement(), so the text form
// round-trips bit-exactly by construction (NaN payloads, -0, bf16/f16 included).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/result.h"
#include "engine/core/shape.h"
#include "engine/ir/attrs.h"

namespace tsr::ir {

// Literals with more elements than this print their raw bytes as hex"..." instead of a list.
inline constexpr int64_t kMaxListedElements = 16;

// One element given by its raw little-endian bits (the low dtypeSize(t) bytes of `bits`).
// Decimal where that reads back to the same bits ("1.5", "-0", "nan", "-inf", "true"), else "0x7fc00001".
std::string formatElement(DType t, uint64_t bits);
// Reads one element spelled as formatElement writes it; also any decimal the dtype can hold
// (floats round to nearest). Errors say what is wrong, without a position.
Result<uint64_t> parseElement(DType t, std::string_view text);

// "dense<f32[2]>[1.5, -2]", or "dense<f32[1000]>hex\"...\"" past kMaxListedElements elements.
std::string formatLiteral(const Literal& lit);

// A double-quoted string with \" \\ \n \t \r and \xHH escapes, so any bytes survive.
std::string quoteString(std::string_view s);

// Lower-case hex of raw bytes, and its inverse (false on an odd length or a non-hex digit).
std::string encodeHex(const uint8_t* bytes, size_t n);
bool decodeHex(std::string_view hex, std::vector<uint8_t>& out);

// Element count and byte size of an aval, or an error when a dim is negative or the size overflows int64.
Result<int64_t> checkedNumel(const Aval& aval);
Result<int64_t> checkedBytes(const Aval& aval);

// Names that print bare after '@' and '%'; anything else is quoted.
bool isBareName(std::string_view s);

}  // namespace tsr::ir
