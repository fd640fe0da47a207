// Memory regions: application memory the NIC may read and write.
//
// A peer's RDMA WRITE or atomic lands in a region without any completion
// here: the NIC writes it from whichever thread runs the protocol (often the
// progress thread).  A thread that learns of such a write out of band (a
// message on a socket, a flag it polls in the region) should call poll() on
// a CompletionQueue of the same Context before reading: that synchronises
// with the NIC, as the C++ memory model requires.  A WRITE with immediate or
// a SEND after the data gives a completion, which needs nothing more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "uroce/fwd.hpp"

namespace uroce {

class MemoryRegion {
 public:
  MemoryRegion(MemoryRegion&&) noexcept;
  MemoryRegion& operator=(MemoryRegion&&) noexcept;
  // Deregisters: from then on neither key works, locally or remotely.
  ~MemoryRegion();

  // Local key, for the Sge of a work request.
  uint32_t lkey() const noexcept;
  // Remote key: give it, with addr(), to a peer that will RDMA READ/WRITE
  // or run atomics on this memory.
  uint32_t rkey() const noexcept;
  // The region's address, as a peer names it in RDMA requests (the
  // process's virtual address).
  uint64_t addr() const noexcept;
  std::byte* data() const noexcept;
  size_t length() const noexcept;
  uint32_t access() const noexcept;
  std::span<std::byte> bytes() const noexcept { return {data(), length()}; }

  // A scatter/gather element for [offset, offset + len) of the region.  A
  // range outside the region is not refused here: the work request fails
  // with LOC_PROT_ERR.
  Sge sge(size_t offset, uint32_t len) const noexcept;
  // The whole region (at most 4 GiB - 1).
  Sge sge() const noexcept;

  explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  friend class ProtectionDomain;
  friend class MemoryWindow;
  explicit MemoryRegion(std::unique_ptr<detail::MrImpl> impl) noexcept;
  std::unique_ptr<detail::MrImpl> impl_;
};

// A memory window: remote access to part of a region, granted and revoked
// without registering anything (ProtectionDomain::alloc_mw).  A grant is an
// rkey whose upper 24 bits are the window's and whose low byte changes at
// each bind, so a revoked grant's rkey stays refused.  The region it is
// bound to needs access::kMwBind; a writable window needs a region with
// access::kLocalWrite.  Destroying the window (or its region) revokes it.
class MemoryWindow {
 public:
  MemoryWindow(MemoryWindow&&) noexcept;
  MemoryWindow& operator=(MemoryWindow&&) noexcept;
  ~MemoryWindow();

  MwType type() const noexcept;
  // The rkey of the grant in force (or of the last one, once revoked).
  uint32_t rkey() const noexcept;

  // A BIND_MW work request granting `access` (access::kRemote*) to
  // [addr, addr + length) of `mr`, as `wr.rkey`: the next grant's rkey.
  // Post it on a QP of the window's PD (type 2: the QP whose peer is to use
  // it; a type 1 window may be re-bound, or revoked with length 0).  It
  // completes WcOpcode::bind_mw, or WcStatus::mw_bind_err if a rule of the
  // IB spec is broken (the QP then goes to ERR).
  SendWr bind(const MemoryRegion& mr, uint64_t addr, uint64_t length, uint32_t access, uint64_t wr_id = 0) noexcept;
  // Revoking a type 1 window: a bind of length 0.
  SendWr unbind(uint64_t wr_id = 0) noexcept;
  // A LOCAL_INV work request revoking the type 2 grant `rkey` (its peer
  // can revoke it too, with a SEND_WITH_INV naming it in imm_data).
  static SendWr invalidate(uint32_t rkey, uint64_t wr_id = 0) noexcept;

  explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  friend class ProtectionDomain;
  explicit MemoryWindow(std::unique_ptr<detail::MwImpl> impl) noexcept;
  std::unique_ptr<detail::MwImpl> impl_;
};

}  // namespace uroce
