#pragma once
// What the plugin loader reads of a library before it lets the dynamic loader near it: the file's SHA-256, and
// whether it is a whole ELF shared library for this machine that exports the entry point.
//
// dlopen trusts its file: a library cut short dies with SIGBUS when its missing pages are touched, and a
// library without the entry point has already run its static initialisers by the time dlsym says so. So a
// damaged file is turned away here, with the reason, and the next plugin of the search order gets its turn.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/core/result.h"

namespace tsr::plugin {

// SHA-256 as 64 lowercase hex digits (OpenSSL's libcrypto).
std::string sha256Hex(std::span<const uint8_t> bytes);

// Checks an ELF image held in memory: 64-bit little-endian, a shared object for this machine, its program and
// section headers and every loaded segment and section inside the file, and a defined dynamic symbol named
// `entry`. The error says what is wrong ("truncated: load segment 3 ends at byte 123456, the file has 61234").
Status checkLibraryImage(std::span<const uint8_t> bytes, std::string_view entry);

}  // namespace tsr::plugin
