#pragma once
// What every engine test includes: doctest (REQUIRE, CHECK, SUBCASE, MESSAGE, ...) and the checks below. The
// tests are linked with tests/doctest_main.cpp, which registers the backends as tessera does, then runs them.
//
//   TSR_COMPARE(actual, expected)  stops the test case unless the two are the same, and prints both. Two float
//       or double values are the same when they agree to a relative 1e-5 (both float) or 1e-12 (otherwise); an
//       expected value within 1e-5 (1e-12) of zero wants one as close to zero; NaN matches NaN and an infinity
//       the infinity of its sign. Two C strings compare by their characters, integers by value (std::cmp_equal),
//       everything else with ==. (These are Qt Test's QCOMPARE rules, which the tests were first written for.)
//   TSR_FATAL(message << ...)  FAIL for a helper that returns a value: the test case stops there.
//   TSR_SKIP(reason << ...)  ends the test case as skipped and says why. A test program whose every test case
//       skipped exits with 77, which CTest reports as skipped (SKIP_RETURN_CODE).
#include <doctest/doctest.h>

#include <concepts>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tsr::test {

// Marks the running test case as skipped (TSR_SKIP); defined in tests/doctest_main.cpp.
void markSkipped();

// The parts with sep between them, for failure messages that list several things.
std::string join(const std::vector<std::string>& parts, std::string_view sep);

namespace detail {

template <class T>
concept Floating = std::same_as<T, float> || std::same_as<T, double>;

template <class T>
concept CString = std::same_as<std::decay_t<T>, const char*> || std::same_as<std::decay_t<T>, char*>;

template <class T>
concept Integer = std::integral<T> && !std::same_as<T, bool> && !std::same_as<T, char> &&
                  !std::same_as<T, char8_t> && !std::same_as<T, char16_t> && !std::same_as<T, char32_t> &&
                  !std::same_as<T, wchar_t>;

bool fuzzySame(float actual, float expected);
bool fuzzySame(double actual, double expected);
bool sameCString(const char* actual, const char* expected);

// Writes v for a failure message: numbers in full precision, strings quoted, ranges element by element.
void printValue(std::ostream& os, float v);
void printValue(std::ostream& os, double v);
void printValue(std::ostream& os, std::string_view v);
void printValue(std::ostream& os, const char* v);
void printValue(std::ostream& os, bool v);
void printValue(std::ostream& os, long long v);
void printValue(std::ostream& os, unsigned long long v);
void printValue(std::ostream& os, const void* v);
void printUnprintable(std::ostream& os);

template <class T>
void print(std::ostream& os, const T& v) {
  if constexpr (Floating<T> || std::same_as<T, bool> || CString<T>) {
    printValue(os, v);
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    printValue(os, std::string_view(v));
  } else if constexpr (std::is_enum_v<T>) {
    print(os, static_cast<std::underlying_type_t<T>>(v));
  } else if constexpr (std::integral<T> && std::is_signed_v<T>) {
    printValue(os, static_cast<long long>(v));
  } else if constexpr (std::integral<T>) {
    printValue(os, static_cast<unsigned long long>(v));
  } else if constexpr (std::is_pointer_v<T>) {
    printValue(os, static_cast<const void*>(v));
  } else if constexpr (requires { os << v; }) {
    os << v;
  } else if constexpr (requires { v.begin(); v.end(); }) {
    os << "{";
    int n = 0;
    for (const auto& e : v) {
      if (n) os << ", ";
      if (++n > 32) {
        os << "...";
        break;
      }
      print(os, e);
    }
    os << "}";
  } else {
    printUnprintable(os);
  }
}

template <class A, class E>
bool same(const A& actual, const E& expected) {
  if constexpr (std::same_as<A, float> && std::same_as<E, float>) {
    return fuzzySame(actual, expected);
  } else if constexpr (Floating<A> && Floating<E>) {
    return fuzzySame(double(actual), double(expected));
  } else if constexpr (CString<A> && CString<E>) {
    return sameCString(actual, expected);
  } else if constexpr (Integer<A> && Integer<E>) {
    return std::cmp_equal(actual, expected);
  } else {
    return actual == expected;
  }
}

// The outcome of TSR_COMPARE; doctest prints it (operator<<) when the check fails.
template <class A, class E>
struct Comparison {
  const A& actual;
  const E& expected;
  bool ok;
  explicit operator bool() const { return ok; }
  friend std::ostream& operator<<(std::ostream& os, const Comparison& c) {
    os << "actual ";
    print(os, c.actual);
    os << ", expected ";
    print(os, c.expected);
    return os;
  }
};

template <class A, class E>
Comparison<A, E> compare(const A& actual, const E& expected) {
  return {actual, expected, same(actual, expected)};
}

}  // namespace detail
}  // namespace tsr::test

#define TSR_COMPARE(actual, expected) DOCTEST_REQUIRE_UNARY(::tsr::test::detail::compare((actual), (expected)))

#define TSR_SKIP(...)                              \
  do {                                             \
    ::tsr::test::markSkipped();                    \
    DOCTEST_MESSAGE("SKIP: " << __VA_ARGS__);      \
    return;                                        \
  } while (0)

#define TSR_FATAL(...)          \
  do {                          \
    DOCTEST_FAIL(__VA_ARGS__);  \
    std::abort();               \
  } while (0)
