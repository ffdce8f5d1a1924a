#include "engine/ops/rule_helpers.h"

#include "engine/transform/trace.h"

namespace tsr::ops {

Array moveBatchDim(const Array& x, int from, int to, int64_t size) {
  if (from < 0) {
    auto dims = x.shape().dims();
    dims.insert(dims.begin() + to, size);
    Axes keep;
    for (int i = 0; i < x.rank(); ++i) keep.push_back(i < to ? i : i + 1);
    return broadcastInDim(x, Shape(dims), keep);
  }
  if (from == to) return x;
  Axes perm;
  for (int i = 0; i < x.rank(); ++i)
    if (i != from) perm.push_back(i);
  perm.insert(perm.begin() + to, from);
  return transpose(x, perm);
}

ir::BatchResult batchElementwise(ir::OpCode op, const ir::BatchArgs& args) {
  std::vector<Array> operands;
  for (size_t i = 0; i < args.operands.size(); ++i)
    operands.push_back(moveBatchDim(args.operands[i], args.batchDims[i], 0, args.batchSize));
  ir::BatchResult r;
  r.results = bind(op, operands, args.attrs, std::source_location::current());
  r.batchDims.assign(r.results.size(), 0);
  return r;
}

Array cotangentOrZeros(const ir::VjpArgs& args, size_t result) {
  const Array& ct = args.cotangents[result];
  return ct.valid() ? ct : zerosLike(args.results[result]);
}

Array unbroadcast(const Array& ct, const Aval& operand, const std::vector<int64_t>& broadcastDims) {
  // Sum over the result dims that are not operand dims, and over operand dims of size 1 that were expanded.
  Axes newDims;
  std::vector<bool> isOperandDim(static_cast<size_t>(ct.rank()), false);
  for (int64_t d : broadcastDims) isOperandDim[static_cast<size_t>(d)] = true;
  for (int i = 0; i < ct.rank(); ++i)
    if (!isOperandDim[static_cast<size_t>(i)]) newDims.push_back(i);
  Axes expanded;
  for (size_t i = 0; i < broadcastDims.size(); ++i)
    if (operand.shape[static_cast<int>(i)] == 1 && ct.shape()[static_cast<int>(broadcastDims[i])] != 1)
      expanded.push_back(broadcastDims[i]);
  Array r = ct;
  if (!expanded.empty()) r = sum(r, expanded, true);
  if (!newDims.empty()) r = sum(r, newDims, false);
  return reshape(r, operand.shape.dims());
}

}  // namespace tsr::ops
