#include "engine/ops/loop_lowering.h"

#include <cctype>

namespace tsr::ops {

extern const char* const kLoopDialectAvx2Text;  // vmath_avx2.inc + loop_dialect_avx2.inc, embedded at build time

namespace {

constexpr const char* kLoopDialectCuda =
#include "engine/ops/loop_dialect_cuda.inc"
    ;

bool identStart(char ch) { return std::isalpha(static_cast<unsigned char>(ch)) || ch == '_'; }
bool identChar(char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; }

}  // namespace

std::string instantiateLoopExpression(std::string_view expr, std::span<const std::string> operands) {
  std::string out;
  out.reserve(expr.size() + 16);
  size_t i = 0;
  while (i < expr.size()) {
    const char ch = expr[i];
    if (std::isdigit(static_cast<unsigned char>(ch)) || (ch == '.' && i + 1 < expr.size() &&
                                                         std::isdigit(static_cast<unsigned char>(expr[i + 1])))) {
      // A number (1.0f, 0x1p-3f, 1e-5f): its letters are never operands.
      size_t j = i + 1;
      while (j < expr.size() && (identChar(expr[j]) || expr[j] == '.' ||
                                 ((expr[j] == '+' || expr[j] == '-') && std::strchr("eEpP", expr[j - 1]))))
        ++j;
      out.append(expr.substr(i, j - i));
      i = j;
    } else if (identStart(ch)) {
      size_t j = i + 1;
      while (j < expr.size() && identChar(expr[j])) ++j;
      const std::string_view name = expr.substr(i, j - i);
      const size_t k = name.size() == 1 && name[0] >= 'a' && name[0] <= 'c' ? static_cast<size_t>(name[0] - 'a') : 3;
      if (k < operands.size()) out += operands[k];
      else out.append(name);
      i = j;
    } else {
      out += ch;
      ++i;
    }
  }
  return out;
}

const char* loopDialectAvx2Text() { return kLoopDialectAvx2Text; }
const char* loopDialectCudaText() { return kLoopDialectCuda; }

}  // namespace tsr::ops
