#pragma once
// Comparisons for the transformation tests: arrays and trees within a relative tolerance, with the first
// difference as the failure message, the message of the error a call raises, and op counts of traced graphs.
#include <algorithm>
#include <cmath>
#include <string>

#include "engine/ir/graph.h"
#include "engine/transform/array.h"
#include "tests/check.h"

namespace tsr::test {

// "" when equal within tol (relative to 1 + |want|), else the first difference.
inline std::string diff(const Array& got, const Array& want, double tol) {
  if (!(got.aval() == want.aval())) return "aval " + got.aval().toString() + " vs " + want.aval().toString();
  auto g = got.toDoubles(), w = want.toDoubles();
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - w[i]) <= tol * (1 + std::fabs(w[i]))))
      return "element " + std::to_string(i) + ": " + std::to_string(g[i]) + " vs " + std::to_string(w[i]);
  return "";
}

inline std::string treeDiff(const Tree& got, const Tree& want, double tol) {
  if (!(got.def() == want.def())) return "structure " + got.def().toString() + " vs " + want.def().toString();
  auto g = got.leaves(), w = want.leaves();
  auto paths = want.paths();
  for (size_t i = 0; i < g.size(); ++i) {
    std::string d = diff(g[i], w[i], tol);
    if (!d.empty()) return paths[i] + ": " + d;
  }
  return "";
}

// The largest |got - want| / (1 + |want|) over all leaves, for the log.
inline double maxRelDiff(const Tree& got, const Tree& want) {
  double m = 0;
  auto g = got.leaves(), w = want.leaves();
  for (size_t i = 0; i < g.size(); ++i) {
    auto a = g[i].toDoubles(), b = w[i].toDoubles();
    for (size_t j = 0; j < a.size(); ++j) m = std::max(m, std::fabs(a[j] - b[j]) / (1 + std::fabs(b[j])));
  }
  return m;
}

#define EXPECT_CLOSE(got, want, tol)             \
  do {                                           \
    std::string d_ = diff((got), (want), (tol)); \
    REQUIRE_MESSAGE(d_.empty(), d_);             \
  } while (0)
#define EXPECT_TREE_CLOSE(got, want, tol)            \
  do {                                               \
    std::string d_ = treeDiff((got), (want), (tol)); \
    REQUIRE_MESSAGE(d_.empty(), d_);                 \
  } while (0)

// The message of the tsr::Exception f raises, or "(no error)".
template <class F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const Exception& e) {
    return e.error().message;
  }
  return "(no error)";
}

// The nodes of `op` in g and in the graphs its nodes hold (a loop's body), at any depth.
inline int countOf(const ir::Graph& g, ir::OpCode op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) {
    n += node.op == op;
    for (const ir::GraphPtr& body : ir::nestedGraphs(node.attrs)) n += countOf(*body, op);
  }
  return n;
}

}  // namespace tsr::test
