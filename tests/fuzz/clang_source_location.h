// Force-included (-include) by scripts/fuzz.sh's clang-14 build: libstdc++ 12 declares std::source_location
// only for compilers with __builtin_source_location, which clang has from version 15. This gives clang 14 the
// same type from the builtins it has. Never part of the g++ build.
#pragma once
#if defined(__clang__) && !__has_builtin(__builtin_source_location)
#include <cstdint>
namespace std {
struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(), const char* function = __builtin_FUNCTION(),
                                           uint_least32_t line = __builtin_LINE(), uint_least32_t column = __builtin_COLUMN()) noexcept {
    source_location s;
    s.m_file = file;
    s.m_function = function;
    s.m_line = line;
    s.m_column = column;
    return s;
  }
  constexpr source_location() noexcept = default;
  constexpr uint_least32_t line() const noexcept { return m_line; }
  constexpr uint_least32_t column() const noexcept { return m_column; }
  constexpr const char* file_name() const noexcept { return m_file; }
  constexpr const char* function_name() const noexcept { return m_function; }

 private:
  const char* m_file = "";
  const char* m_function = "";
  uint_least32_t m_line = 0, m_column = 0;
};
}  // namespace std
#endif
