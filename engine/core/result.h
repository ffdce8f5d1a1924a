#pragma once
// Result<T>: a value or an Error. Every error a user can cause travels as one of these.
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace tsr {

struct Error {
  std::string message;
};

template <class... Args>
Error makeError(fmt::format_string<Args...> f, Args&&... args) {
  return Error{fmt::format(f, std::forward<Args>(args)...)};
}

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : m_v(std::move(value)) {}
  Result(Error error) : m_v(std::move(error)) {}

  bool ok() const { return m_v.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(m_v); }
  const T& value() const& { return std::get<0>(m_v); }
  T&& value() && { return std::get<0>(std::move(m_v)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(m_v); }
  Error&& takeError() { return std::get<1>(std::move(m_v)); }

 private:
  std::variant<T, Error> m_v;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : m_error(std::move(error)), m_ok(false) {}
  bool ok() const { return m_ok; }
  explicit operator bool() const { return m_ok; }
  const Error& error() const { return m_error; }
  Error&& takeError() { return std::move(m_error); }

 private:
  Error m_error;
  bool m_ok = true;
};

using Status = Result<void>;

}  // namespace tsr

#define TSR_CONCAT_INNER(a, b) a##b
#define TSR_CONCAT(a, b) TSR_CONCAT_INNER(a, b)

// TSR_TRY(expr): return the error of a Result/Status expression, else continue.
#define TSR_TRY(expr)                                         \
  do {                                                        \
    auto&& tsr_try_r_ = (expr);                               \
    if (!tsr_try_r_.ok()) return tsr_try_r_.takeError();      \
  } while (0)

// TSR_ASSIGN(lhs, expr): lhs = value of expr, or return its error.
#define TSR_ASSIGN(lhs, expr) TSR_ASSIGN_IMPL(TSR_CONCAT(tsr_r_, __LINE__), lhs, expr)
#define TSR_ASSIGN_IMPL(tmp, lhs, expr)        \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.takeError();       \
  lhs = std::move(tmp).value()
