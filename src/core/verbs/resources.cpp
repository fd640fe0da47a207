#include "verbs/resources.hpp"

#include <string>

namespace uroce::verbs {

const char* to_string(Resource r) noexcept {
  switch (r) {
    case Resource::pd: return "max_pd";
    case Resource::cq: return "max_cq";
    case Resource::srq: return "max_srq";
    case Resource::ah: return "max_ah";
  }
  return "?";
}

namespace {
const char* noun(Resource r) noexcept {
  switch (r) {
    case Resource::pd: return "protection domains";
    case Resource::cq: return "completion queues";
    case Resource::srq: return "shared receive queues";
    case Resource::ah: return "address handles";
  }
  return "objects";
}
}  // namespace

ResourceHold& ResourceHold::operator=(ResourceHold&& o) noexcept {
  if (this != &o) {
    release();
    owner_ = std::move(o.owner_);
    kind_ = o.kind_;
  }
  return *this;
}

void ResourceHold::release() noexcept {
  if (owner_) owner_->give(kind_);
  owner_.reset();
}

DeviceResources::DeviceResources(const DeviceAttr& limits) noexcept {
  max_[size_t(Resource::pd)] = limits.max_pd;
  max_[size_t(Resource::cq)] = limits.max_cq;
  max_[size_t(Resource::srq)] = limits.max_srq;
  max_[size_t(Resource::ah)] = limits.max_ah;
}

Result<ResourceHold> DeviceResources::take(Resource kind) noexcept {
  auto& used = used_[size_t(kind)];
  const uint32_t max = max_[size_t(kind)];
  uint32_t n = used.load(std::memory_order_relaxed);
  do {
    if (n >= max)
      return Status::error(ENOMEM, std::string(to_string(kind)) + " (" + std::to_string(max) + ") " + noun(kind) +
                                       " exist on this device");
  } while (!used.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
  return ResourceHold(shared_from_this(), kind);
}

}  // namespace uroce::verbs
