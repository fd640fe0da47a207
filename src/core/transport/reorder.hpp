// The responder's reorder buffer (selective repeat, docs/congestion.md).
//
// Go-back-N drops every packet behind a lost one, and the requester sends
// them all again.  A responder with a reorder buffer keeps copies of request
// packets that arrive ahead of the expected PSN (at most kSlots ahead, at
// most kMaxBytes in all) and executes them, in PSN order, once the missing
// packet arrives: a requester then needs to resend only what was lost.  The
// wire stays standard (the responder still NAKs the first missing PSN once,
// and ACKs are cumulative): a go-back-N requester sends the kept packets
// again and they are answered as duplicates.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "wire/packet.hpp"
#include "wire/sack.hpp"

namespace uroce::transport {

class ReorderBuffer {
 public:
  static constexpr uint32_t kSlots = 256;  // the longest send window (requester.hpp)
  static_assert(kSlots <= wire::kSackBits, "a SACK names every PSN held");
  static constexpr size_t kMaxBytes = 2u << 20;  // payload bytes held at most
  enum class Keep : uint8_t { kept, duplicate, no_room };

  // Keeps a copy of `pkt` (PSN `pkt.hdr.bth.psn`, `ahead` PSNs after the
  // expected one, 0 < ahead).
  Keep keep(const wire::Packet& pkt, uint32_t ahead) noexcept;
  // The packet kept for `psn` (the expected PSN), if any: copied into `out`
  // (its payload into `payload`, which `out.payload` then points to) and
  // released.  A stale packet in its slot (kept for a PSN before it) is
  // released too.
  bool take(uint32_t psn, wire::Packet& out, std::vector<uint8_t>& payload) noexcept;
  // Which PSNs after `epsn` are held: bit i for epsn + 1 + i.
  wire::SackBitmap held_after(uint32_t epsn) const noexcept;
  // The highest PSN held (valid while !empty()).
  uint32_t highest() const noexcept { return highest_; }
  bool empty() const noexcept { return held_ == 0; }
  size_t held() const noexcept { return held_; }
  void clear() noexcept;

 private:
  struct Slot {
    bool used = false;
    wire::Packet pkt;  // headers; payload points into `data`
    std::vector<uint8_t> data;
  };
  std::vector<Slot> slots_;  // by PSN modulo kSlots, allocated on first use
  size_t held_ = 0;
  size_t bytes_ = 0;
  uint32_t highest_ = 0;
};

}  // namespace uroce::transport
