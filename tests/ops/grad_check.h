#pragma once
// Gradients checked op by op against finite differences (tests/transform/test_grad_ops.cpp runs every core
// op; plugin ops run through the same check). Every differentiable op runs over its conformance
// cases (tests/ops/cases_*.cpp): the f64 cases where the op accepts f64, and its f32 cases (with looser
// tolerances) where it has none or only a few (control-flow bodies are mostly built in f32).
// For each case, L(inputs) = sum_r sum(op(inputs)_r * W_r) with a fixed random W_r per float result; the
// analytic gradient is the pullback of tsr::vjp with cotangents W, the numeric one central differences of the
// op's CPU kernel (independent of every rule), on up to kElementsPerInput random elements of every float operand.
// Integer operands (indices, starts) are not perturbed; elements within reach of a kink or a singularity of the
// op (abs at 0, max ties, log at 0, ...) are skipped. Every case also runs once as jit(vjp) against eager vjp.
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/ops/harness.h"

namespace tsr::test {

struct GradReport {
  std::vector<Failure> failures;
  std::map<std::string, int> checkedCases, skippedCases, checkedElements, skippedElements;
  std::map<std::string, std::set<std::string>> skipReasons;
  std::map<std::string, std::set<std::string>> dtypes;  // the operand dtypes of the op's checked cases
};

// Checks one case (its float operands against central differences of the op's kernel, and jit(vjp) against
// eager vjp), adding to the report.
void checkGradCase(const OpCase& c, GradReport& report, std::mt19937& rng);
// Per differentiable core op: its f64 cases, plus its f32 cases where it has only a few f64 ones; the ops with
// neither go to noCases.
std::vector<const OpCase*> gradCases(const std::vector<OpCase>& cases, std::vector<std::string>& noCases);
// The float dtype of a case's float operands, or nullopt when it has none or they differ.
std::optional<DType> caseFloatType(const OpCase& c);
// Weights in {-2, ..., 2} \ {0} in steps of 1/8, exact in every float dtype.
HostTensor randomWeights(const Aval& aval, std::mt19937& rng);
std::string joined(const std::set<std::string>& items, const std::string& sep = " ");
std::string indexString(int64_t flat, const Shape& s);

}  // namespace tsr::test
