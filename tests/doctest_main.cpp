// The one main of the engine's tests: the backends are registered as tessera does (engine/backends/backends.h),
// then doctest runs the test cases (its options: --help). A program whose every test case skipped (TSR_SKIP)
// exits with 77, which CTest reports as skipped; one where anything failed exits with doctest's non-zero result.
#define DOCTEST_CONFIG_IMPLEMENT
#include "tests/check.h"

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>

#include "engine/backends/backends.h"

namespace tsr::test {
namespace {

// Counts the test cases that ran and those of them that skipped.
struct SkipCount {
  int ran = 0;
  int skipped = 0;
  bool currentSkipped = false;
};
SkipCount g_skips;

struct SkipListener : doctest::IReporter {
  explicit SkipListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {
    ++g_skips.ran;
    g_skips.currentSkipped = false;
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {
    if (g_skips.currentSkipped) ++g_skips.skipped;
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

// Qt's qFuzzyIsNull and qFuzzyCompare, in the precision of the operands.
template <class T>
bool fuzzyNull(T x) {
  return std::fabs(x) <= (std::is_same_v<T, float> ? T(0.00001f) : T(0.000000000001));
}

template <class T>
bool fuzzySameAs(T actual, T expected) {
  if (std::isinf(expected)) return std::isinf(actual) && (expected < 0) == (actual < 0);
  if (std::isnan(expected)) return std::isnan(actual);
  if (fuzzyNull(expected)) return fuzzyNull(actual);
  const T scale = std::is_same_v<T, float> ? T(100000.f) : T(1000000000000.);
  return std::fabs(actual - expected) * scale <= std::min(std::fabs(actual), std::fabs(expected));
}

}  // namespace

void markSkipped() { g_skips.currentSkipped = true; }

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

namespace detail {

bool fuzzySame(float actual, float expected) { return fuzzySameAs(actual, expected); }
bool fuzzySame(double actual, double expected) { return fuzzySameAs(actual, expected); }

bool sameCString(const char* actual, const char* expected) {
  if (!actual || !expected) return actual == expected;
  return std::strcmp(actual, expected) == 0;
}

void printValue(std::ostream& os, float v) { os << std::setprecision(std::numeric_limits<float>::max_digits10) << v; }
void printValue(std::ostream& os, double v) { os << std::setprecision(std::numeric_limits<double>::max_digits10) << v; }
void printValue(std::ostream& os, std::string_view v) { os << '"' << v << '"'; }
void printValue(std::ostream& os, const char* v) {
  if (v) printValue(os, std::string_view(v));
  else os << "(null)";
}
void printValue(std::ostream& os, bool v) { os << (v ? "true" : "false"); }
void printValue(std::ostream& os, long long v) { os << v; }
void printValue(std::ostream& os, unsigned long long v) { os << v; }
void printValue(std::ostream& os, const void* v) { os << v; }
void printUnprintable(std::ostream& os) { os << "(a value that cannot be printed)"; }

}  // namespace detail
}  // namespace tsr::test

DOCTEST_REGISTER_LISTENER("tsr_skips", 1, tsr::test::SkipListener);

int main(int argc, char** argv) {
  tsr::registerBackends();
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit()) return result;
  const auto& s = tsr::test::g_skips;
  if (s.skipped > 0) std::printf("[doctest] %d of %d test cases skipped (TSR_SKIP)\n", s.skipped, s.ran);
  if (result == 0 && s.ran > 0 && s.skipped == s.ran) return 77;
  return result;
}
