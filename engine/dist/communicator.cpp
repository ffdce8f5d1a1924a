// What every communicator has: the state backends attach to it per local position.
#include "engine/dist/communicator.h"

namespace tsr::dist {

Result<Communicator::Attachment> Communicator::attachment(const std::string& key, int position,
                                                           const std::function<Result<Attachment>()>& make) {
  {
    std::lock_guard lock(m_attachmentMutex);
    auto it = m_attachments.find({key, position});
    if (it != m_attachments.end()) return it->second;
  }
  TSR_ASSIGN(Attachment made, make());
  std::lock_guard lock(m_attachmentMutex);
  return m_attachments.emplace(std::pair{key, position}, std::move(made)).first->second;
}

}  // namespace tsr::dist
