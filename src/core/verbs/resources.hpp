// The device-wide object limits that query_device reports (max_pd, max_cq,
// max_srq, max_ah), enforced here for both skins (the C ABI and the C++
// API), and how many of each exist.  One count per device in the process,
// shared by every context opened on it (a NIC's objects are the process's:
// contexts share the NIC).  The other limits are checked where the object
// is made: QPs by QPN allocation, MRs by the key table, WRs, SGEs, CQEs and
// inline bytes by their create calls.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "common/status.hpp"
#include "verbs/types.hpp"

namespace uroce::verbs {

enum class Resource : uint8_t { pd, cq, srq, ah };
inline constexpr size_t kResourceKinds = 4;
const char* to_string(Resource r) noexcept;

class DeviceResources;

// One object counted against its device's limit, given back when the hold
// is destroyed (the object holds it as a member).
class ResourceHold {
 public:
  ResourceHold() noexcept = default;
  ResourceHold(ResourceHold&& o) noexcept : owner_(std::move(o.owner_)), kind_(o.kind_) {}
  ResourceHold& operator=(ResourceHold&& o) noexcept;
  ResourceHold(const ResourceHold&) = delete;
  ResourceHold& operator=(const ResourceHold&) = delete;
  ~ResourceHold() { release(); }

 private:
  friend class DeviceResources;
  ResourceHold(std::shared_ptr<DeviceResources> owner, Resource kind) noexcept
      : owner_(std::move(owner)), kind_(kind) {}
  void release() noexcept;
  std::shared_ptr<DeviceResources> owner_;
  Resource kind_ = Resource::pd;
};

class DeviceResources : public std::enable_shared_from_this<DeviceResources> {
 public:
  explicit DeviceResources(const DeviceAttr& limits) noexcept;
  // Counts one more `kind`: ENOMEM ("max_cq (65536) completion queues
  // exist on this device"), as a device out of resources fails, at the limit.
  Result<ResourceHold> take(Resource kind) noexcept;
  uint32_t in_use(Resource kind) const noexcept { return used_[size_t(kind)].load(std::memory_order_relaxed); }
  uint32_t limit(Resource kind) const noexcept { return max_[size_t(kind)]; }

 private:
  friend class ResourceHold;
  void give(Resource kind) noexcept { used_[size_t(kind)].fetch_sub(1, std::memory_order_relaxed); }
  std::array<uint32_t, kResourceKinds> max_{};
  std::array<std::atomic<uint32_t>, kResourceKinds> used_{};
};

}  // namespace uroce::verbs
