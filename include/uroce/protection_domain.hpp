// Protection domains: the QPs, memory regions, SRQs and address handles
// that may work together.  A peer's RDMA request is only served by memory
// registered in the PD of the QP it arrives on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "uroce/address_handle.hpp"
#include "uroce/fwd.hpp"
#include "uroce/memory.hpp"
#include "uroce/queue_pair.hpp"
#include "uroce/shared_receive_queue.hpp"

namespace uroce {

class ProtectionDomain {
 public:
  ProtectionDomain(ProtectionDomain&&) noexcept;
  ProtectionDomain& operator=(ProtectionDomain&&) noexcept;
  ~ProtectionDomain();  // everything created from it must be destroyed first

  // Registers [addr, addr + length) with `access` (access::k*): EINVAL for
  // unknown flags or REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE, EFAULT
  // if the range is not mapped, ENOMEM when the MR table is full.
  Result<MemoryRegion> reg_mr(void* addr, size_t length, uint32_t access);
  Result<MemoryRegion> reg_mr(std::span<std::byte> memory, uint32_t access);
  // A memory window of this PD, unbound (ENOMEM when the window table is full).
  Result<MemoryWindow> alloc_mw(MwType type);

  // EINVAL without both CQs, with CQs/SRQ of another context, or caps above
  // the device limits; EOPNOTSUPP for XRC (the C ABI has it).
  Result<QueuePair> create_qp(const QpConfig& config);
  Result<SharedReceiveQueue> create_srq(const SrqConfig& config = {});
  // EINVAL unless attr.is_global, sgid_index names a GID and dgid is of
  // that GID's IP version.
  Result<AddressHandle> create_ah(const AhAttr& attr);

  explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  friend class Context;
  explicit ProtectionDomain(std::unique_ptr<detail::PdImpl> impl) noexcept;
  std::unique_ptr<detail::PdImpl> impl_;
};

}  // namespace uroce
