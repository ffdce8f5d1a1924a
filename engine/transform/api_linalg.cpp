// Linear algebra of the Array API (jax.lax.linalg): cholesky, triangular_solve and lu, each one op of
// engine/ops/linalg.cpp. The compositions users call (solve, inv, det, slogdet, ...) are written with these in
// the Python front end (tessera.numpy.linalg, tessera.scipy.linalg).
#include "engine/transform/api.h"
#include "engine/transform/trace.h"

namespace tsr {

using ir::OpCode;

Array cholesky(const Array& a, bool symmetrizeInput, std::source_location loc) {
  if (!symmetrizeInput || a.rank() < 2) return bind1(OpCode::Cholesky, {a}, ir::NoAttrs{}, loc);
  // (a + a^T) / 2, as JAX: the factor of the symmetric part, and a gradient that is symmetric.
  const Array at = swapAxes(a, a.rank() - 2, a.rank() - 1, loc);
  return bind1(OpCode::Cholesky, {mul(add(a, at, loc), fullLike(a, 0.5, loc), loc)}, ir::NoAttrs{}, loc);
}

Array triangularSolve(const Array& a, const Array& b, bool leftSide, bool lower, bool transposeA, bool unitDiagonal,
                      std::source_location loc) {
  return bind1(OpCode::TriangularSolve, {a, b}, ir::TriangularSolveAttrs{leftSide, lower, transposeA, unitDiagonal}, loc);
}

std::vector<Array> lu(const Array& a, std::source_location loc) { return bind(OpCode::Lu, {a}, ir::NoAttrs{}, loc); }

}  // namespace tsr
