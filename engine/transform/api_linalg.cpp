// Linear algebra of the Array API (jax.lax.linalg): cholesky, triangular_solve, lu, eigh, svd and qr, each one op of
// engine/ops/linalg.cpp. The compositions users call (solve, inv, det, slogdet, ...) are written with these in
// the Python front end (tessera.numpy.linalg, tessera.scipy.linalg).
#include "engine/transform/api.h"
#include "engine/transform/trace.h"

namespace tsr {

using ir::OpCode;

namespace {
// Symmetrizing needs a square a; any other goes to the op as it is, whose shape rule says what is wrong.
bool squareMatrix(const Array& a) { return a.rank() >= 2 && a.shape()[a.rank() - 1] == a.shape()[a.rank() - 2]; }
}  // namespace

Array cholesky(const Array& a, bool symmetrizeInput, std::source_location loc) {
  if (!symmetrizeInput || !squareMatrix(a)) return bind1(OpCode::Cholesky, {a}, ir::NoAttrs{}, loc);
  // (a + a^T) / 2, as JAX: the factor of the symmetric part, and a gradient that is symmetric.
  const Array at = swapAxes(a, a.rank() - 2, a.rank() - 1, loc);
  return bind1(OpCode::Cholesky, {mul(add(a, at, loc), fullLike(a, 0.5, loc), loc)}, ir::NoAttrs{}, loc);
}

Array triangularSolve(const Array& a, const Array& b, bool leftSide, bool lower, bool transposeA, bool unitDiagonal,
                      std::source_location loc) {
  return bind1(OpCode::TriangularSolve, {a, b}, ir::TriangularSolveAttrs{leftSide, lower, transposeA, unitDiagonal}, loc);
}

std::vector<Array> lu(const Array& a, std::source_location loc) { return bind(OpCode::Lu, {a}, ir::NoAttrs{}, loc); }

std::vector<Array> eigh(const Array& a, bool symmetrizeInput, std::source_location loc) {
  if (!symmetrizeInput || !squareMatrix(a)) return bind(OpCode::Eigh, {a}, ir::NoAttrs{}, loc);
  const Array at = swapAxes(a, a.rank() - 2, a.rank() - 1, loc);
  return bind(OpCode::Eigh, {mul(add(a, at, loc), fullLike(a, 0.5, loc), loc)}, ir::NoAttrs{}, loc);
}

std::vector<Array> svd(const Array& a, bool fullMatrices, bool computeUv, std::source_location loc) {
  return bind(OpCode::Svd, {a}, ir::DecompositionAttrs{fullMatrices, computeUv}, loc);
}

std::vector<Array> qr(const Array& a, bool fullMatrices, std::source_location loc) {
  return bind(OpCode::Qr, {a}, ir::DecompositionAttrs{fullMatrices, true}, loc);
}

}  // namespace tsr
