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
  explicit MemoryRegion(std::unique_ptr<detail::MrImpl> impl) noexcept;
  std::unique_ptr<detail::MrImpl> impl_;
};

}  // namespace uroce
