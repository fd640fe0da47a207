// Address handle: where a UD send goes.  For RoCEv2 the destination GID is
// the peer's IP address; the UDP port is resolved per destination QP.
#pragma once

#include <memory>

#include "common/status.hpp"
#include "verbs/resources.hpp"
#include "verbs/types.hpp"

namespace uroce::verbs {

class Pd;

class Ah {
 public:
  static Result<std::unique_ptr<Ah>> create(Pd& pd, const AhAttr& attr);
  ~Ah();
  Ah(const Ah&) = delete;
  Ah& operator=(const Ah&) = delete;

  Pd& pd() const noexcept { return *pd_; }
  const AhAttr& attr() const noexcept { return attr_; }

 private:
  Ah(Pd& pd, const AhAttr& attr) : pd_(&pd), attr_(attr) {}
  Pd* pd_;
  AhAttr attr_;
  ResourceHold hold_;  // one of the device's max_ah
};

}  // namespace uroce::verbs
