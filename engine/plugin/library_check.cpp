#include "engine/plugin/library_check.h"

#include <elf.h>

#include <cstring>

#include <fmt/format.h>
#include <openssl/evp.h>

namespace tsr::plugin {

namespace {

#if defined(__x86_64__)
constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kMachine = EM_AARCH64;
#else
#error "plugins: unknown machine"
#endif

// [offset, offset + length) lies inside a file of `size` bytes (without overflow).
bool inside(uint64_t offset, uint64_t length, uint64_t size) { return offset <= size && length <= size - offset; }

// A struct read from the image at `offset`; the caller has checked the range. memcpy: the image has no alignment.
template <typename T>
T readAt(std::span<const uint8_t> bytes, uint64_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

}  // namespace

std::string sha256Hex(std::span<const uint8_t> bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr) != 1) return "";
  std::string hex;
  hex.reserve(2 * n);
  for (unsigned int i = 0; i < n; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

Status checkLibraryImage(std::span<const uint8_t> bytes, std::string_view entry) {
  const uint64_t size = bytes.size();
  if (size < EI_NIDENT || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0)
    return makeError("not an ELF shared library ({} bytes, no ELF header)", size);
  if (bytes[EI_CLASS] != ELFCLASS64 || bytes[EI_DATA] != ELFDATA2LSB)
    return makeError("not a 64-bit little-endian ELF library");
  if (size < sizeof(Elf64_Ehdr)) return makeError("truncated: {} bytes, shorter than an ELF header", size);
  auto eh = readAt<Elf64_Ehdr>(bytes, 0);
  if (eh.e_type != ET_DYN) return makeError("not a shared library (ELF type {})", eh.e_type);
  if (eh.e_machine != kMachine) return makeError("built for another machine (ELF machine {})", eh.e_machine);

  // Program headers: every loaded segment and the dynamic section inside the file.
  if (eh.e_phnum == 0 || eh.e_phentsize != sizeof(Elf64_Phdr)) return makeError("damaged: no program headers");
  if (!inside(eh.e_phoff, uint64_t(eh.e_phnum) * sizeof(Elf64_Phdr), size))
    return makeError("truncated: the program headers end past the end of the file ({} bytes)", size);
  bool dynamic = false;
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    auto ph = readAt<Elf64_Phdr>(bytes, eh.e_phoff + uint64_t(i) * sizeof(Elf64_Phdr));
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
    dynamic |= ph.p_type == PT_DYNAMIC;
    if (!inside(ph.p_offset, ph.p_filesz, size))
      return makeError("truncated: {} {} ends at byte {}, the file has {}", ph.p_type == PT_LOAD ? "load segment" : "the dynamic segment",
                       i, ph.p_offset + ph.p_filesz, size);
    if (ph.p_type == PT_LOAD && ph.p_filesz > ph.p_memsz) return makeError("damaged: load segment {} is larger in the file than in memory", i);
  }
  if (!dynamic) return makeError("not a shared library (no dynamic segment)");

  // Section headers (at the end of the file: the first thing a cut loses), then the dynamic symbols.
  if (eh.e_shnum == 0 || eh.e_shentsize != sizeof(Elf64_Shdr))
    return makeError("damaged: no section headers");
  if (!inside(eh.e_shoff, uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr), size))
    return makeError("truncated: the section headers end past the end of the file ({} bytes)", size);
  auto section = [&](uint32_t i) { return readAt<Elf64_Shdr>(bytes, eh.e_shoff + uint64_t(i) * sizeof(Elf64_Shdr)); };
  bool found = false;
  for (uint16_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = section(i);
    if (sh.sh_type != SHT_NOBITS && sh.sh_type != SHT_NULL && !inside(sh.sh_offset, sh.sh_size, size))
      return makeError("truncated: section {} ends at byte {}, the file has {}", i, sh.sh_offset + sh.sh_size, size);
    if (sh.sh_type != SHT_DYNSYM || found) continue;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= eh.e_shnum)
      return makeError("damaged: the dynamic symbol table (section {}) is malformed", i);
    Elf64_Shdr strtab = section(sh.sh_link);
    if (strtab.sh_type != SHT_STRTAB || !inside(strtab.sh_offset, strtab.sh_size, size))
      return makeError("damaged: the dynamic symbols' names (section {}) are malformed", sh.sh_link);
    const char* names = reinterpret_cast<const char*>(bytes.data() + strtab.sh_offset);
    for (uint64_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym) && !found; ++k) {
      auto sym = readAt<Elf64_Sym>(bytes, sh.sh_offset + k * sizeof(Elf64_Sym));
      if (sym.st_name >= strtab.sh_size || sym.st_shndx == SHN_UNDEF) continue;
      // The name ends inside the table.
      const char* name = names + sym.st_name;
      size_t room = strtab.sh_size - sym.st_name;
      size_t len = strnlen(name, room);
      found = len < room && std::string_view(name, len) == entry && ELF64_ST_TYPE(sym.st_info) == STT_FUNC;
    }
  }
  if (!found) return makeError("no entry point {}() among its exported symbols (not a Tessera plugin, or one for another plugin API)", entry);
  return {};
}

}  // namespace tsr::plugin
