#include "engine/ir/host_callback.h"

#include <mutex>
#include <unordered_map>

namespace tsr::ir {

namespace {

// Weak: a callback dies with the last graph or program holding it, and its id is not reused.
struct Registry {
  std::mutex mutex;
  int64_t next = 1;
  std::unordered_map<int64_t, std::weak_ptr<const HostCallback>> live;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: callbacks may die during static destruction
  return *r;
}

}  // namespace

HostCallbackPtr makeHostCallback(HostCallback callback) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  callback.id = r.next++;
  auto ptr = std::make_shared<const HostCallback>(std::move(callback));
  // Drop the entries of dead callbacks now and then, so that a long session that traces many keeps few.
  if (r.live.size() > 64 && (ptr->id & 63) == 0)
    std::erase_if(r.live, [](const auto& e) { return e.second.expired(); });
  r.live[ptr->id] = ptr;
  return ptr;
}

HostCallbackPtr hostCallbackOf(const HostCallbackAttrs& attrs) {
  if (attrs.fn) return attrs.fn;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(attrs.callback);
  return it == r.live.end() ? nullptr : it->second.lock();
}

}  // namespace tsr::ir
