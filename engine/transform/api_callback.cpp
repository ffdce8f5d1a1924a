#include "engine/ir/host_callback.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"

namespace tsr {

std::vector<Array> hostCallback(const ir::HostCallbackPtr& callback, const std::vector<Array>& operands,
                                std::source_location loc) {
  if (!callback) raise(Error{"host_callback: no callback"});
  return bind(ir::OpCode::HostCallback, operands, ir::HostCallbackAttrs{callback->id, callback}, loc);
}

}  // namespace tsr
