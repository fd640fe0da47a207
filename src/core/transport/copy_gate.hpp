// The copy gate: how a requester makes sure that no one-copy request it
// sent is carried out once the memory it named may be the application's
// again (docs/one_copy_design.md, "The gate").
//
// Two words in the header of the requester's ring (net::PacketIo::
// copy_gate()): a generation, and the copies in progress into or out of
// the requester's memory.  Each request carries the generation it was
// built under (wire::CopyRequest::gate).  A responder, before it copies,
// counts itself in and then reads the generation: if the request's is
// older, it does not copy (UROCE_COPY_NAK stale); after the copy it counts
// itself out.  The requester, before it completes a work request in error
// (a flush, a QP destroyed) or lets memory go (deregistration), advances
// the generation and then waits until no copy is in progress.  Both sides
// write, then read, sequentially consistent: a copy counted in before the
// advance is waited for (tens of microseconds), and one counted in after it
// sees the new generation.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

namespace uroce::transport {

// The generation a request built now carries (0 without a gate).
uint32_t copy_gate_generation(const std::atomic<uint64_t>* gate) noexcept;

// Responder: the requester's gate held for one copy, if the request's
// generation is still the current one (open()).
class CopyGateHold {
 public:
  CopyGateHold(std::shared_ptr<std::atomic<uint64_t>> gate, uint32_t generation) noexcept;
  ~CopyGateHold();
  CopyGateHold(const CopyGateHold&) = delete;
  CopyGateHold& operator=(const CopyGateHold&) = delete;
  bool open() const noexcept { return open_; }
  // Ends the hold before the scope does (the copy is over).
  void release() noexcept;

 private:
  std::shared_ptr<std::atomic<uint64_t>> gate_;
  bool open_ = false;
};

// Requester: advances the generation, then waits until at most `stuck`
// copies are in progress (the count copiers that died in the middle of one
// left behind), at most `bound`.  Returns the count seen last: above
// `stuck` if a copy outlasted the bound (its copier stopped, or died).
uint64_t copy_gate_fence(std::atomic<uint64_t>* gate, uint64_t stuck, std::chrono::nanoseconds bound) noexcept;

}  // namespace uroce::transport
