// Address handles: where a UD send goes (the destination GID, that is the
// peer's IP address, plus traffic class and hop limit).
#pragma once

#include <memory>

#include "uroce/fwd.hpp"

namespace uroce {

class AddressHandle {
 public:
  AddressHandle(AddressHandle&&) noexcept;
  AddressHandle& operator=(AddressHandle&&) noexcept;
  ~AddressHandle();

  // The opaque handle to put in SendWr::ah.
  const verbs::Ah* get() const noexcept;
  const AhAttr& attr() const noexcept;

  explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  friend class ProtectionDomain;
  explicit AddressHandle(std::unique_ptr<detail::AhImpl> impl) noexcept;
  std::unique_ptr<detail::AhImpl> impl_;
};

}  // namespace uroce
