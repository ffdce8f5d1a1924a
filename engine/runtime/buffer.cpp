#include "engine/runtime/buffer.h"

#include <cstdlib>
#include <cstring>
#include <exception>

#include <fmt/format.h>

namespace tsr::runtime {

Buffer::~Buffer() { std::free(m_data); }

Result<std::shared_ptr<Buffer>> Buffer::allocate(int64_t bytes) {
  if (bytes < 0) return makeError("cannot allocate a buffer of {} bytes", bytes);
  size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) return makeError("out of memory allocating {} bytes ({:.1f} MiB)", bytes, bytes / 1048576.0);
  std::memset(p, 0, rounded);
  return std::shared_ptr<Buffer>(new Buffer(p, bytes));
}

Result<std::vector<BufferPtr>> runCpuOp(const ir::OpDef& def, std::span<const BufferPtr> inputs,
                                        std::span<const Aval> inputAvals, const ir::Attrs& attrs,
                                        std::vector<Aval>* resultAvals) {
  TSR_TRY(ir::checkSignature(def, inputAvals.size(), attrs));
  TSR_ASSIGN(std::vector<Aval> outAvals, def.infer(inputAvals, attrs));
  std::vector<ir::TensorView> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(ir::TensorView{inputs[i]->data(), inputAvals[i]});
  std::vector<BufferPtr> outs;
  std::vector<ir::MutableTensorView> outViews;
  for (const auto& a : outAvals) {
    TSR_ASSIGN(BufferPtr b, Buffer::allocate(a.bytes()));
    outViews.push_back(ir::MutableTensorView{b->data(), a});
    outs.push_back(std::move(b));
  }
  // Kernels of ops with bodies (scan, cond) run graphs and may fail; the failure becomes this op's error.
  try {
    def.cpu(ir::CpuKernelArgs{in, outViews, attrs});
  } catch (const std::exception& e) {
    return makeError("{}: {}", def.name, e.what());
  }
  if (resultAvals) *resultAvals = std::move(outAvals);
  return outs;
}

}  // namespace tsr::runtime
