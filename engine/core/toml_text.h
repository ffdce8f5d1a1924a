#pragma once
// A scan of TOML text before toml++ parses it. toml++ 3.3 (Debian 12) mishandles some invalid input instead of
// reporting it: its whitespace test reaches __builtin_unreachable (undefined behaviour in every build) for many
// non-ASCII characters (U+00A1 to U+0499 among them) wherever it looks for whitespace, and it trips assertions on
// control characters and on a table header that does not begin with a key. TOML allows non-ASCII characters only
// in strings and comments and no control character but tab and line ends, so refusing these first loses nothing
// valid, and the message names the line and column.
#include <string>
#include <string_view>

#include "engine/core/result.h"

namespace tsr {

// `text` as a TOML basic string, quoted, with quotes, backslashes and control characters escaped. asciiOnly:
// every other character as \uXXXX or \UXXXXXXXX too (a byte that is not UTF-8 becomes U+FFFD, which TOML can
// hold where the byte cannot).
std::string tomlString(std::string_view text, bool asciiOnly = false);

// asciiOnly: refuse non-ASCII bytes inside strings and comments too (files Tessera writes itself).
Status checkTomlText(std::string_view text, const std::string& source, bool asciiOnly = false);

}  // namespace tsr
