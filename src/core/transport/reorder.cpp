// The responder's reorder buffer (reorder.hpp).
#include "transport/reorder.hpp"

#include "transport/psn.hpp"

namespace uroce::transport {

ReorderBuffer::Keep ReorderBuffer::keep(const wire::Packet& pkt, uint32_t ahead) noexcept {
  if (ahead == 0 || ahead >= kSlots) return Keep::no_room;
  if (slots_.empty()) slots_.resize(kSlots);
  const uint32_t psn = pkt.hdr.bth.psn;
  Slot& s = slots_[psn % kSlots];
  if (s.used) {
    if (s.pkt.hdr.bth.psn == psn) return Keep::duplicate;
    // A stale packet of an earlier pass (the expected PSN moved past it
    // without taking it): superseded.
    bytes_ -= s.data.size();
    s.used = false;
    --held_;
  }
  if (bytes_ + pkt.payload.size() > kMaxBytes) return Keep::no_room;
  s.data.assign(pkt.payload.begin(), pkt.payload.end());
  s.pkt = pkt;
  s.pkt.payload = s.data;
  s.used = true;
  bytes_ += s.data.size();
  if (held_++ == 0 || psn_before(highest_, psn)) highest_ = psn;
  return Keep::kept;
}

bool ReorderBuffer::take(uint32_t psn, wire::Packet& out, std::vector<uint8_t>& payload) noexcept {
  if (held_ == 0) return false;
  Slot& s = slots_[psn % kSlots];
  if (!s.used) return false;
  if (s.pkt.hdr.bth.psn != psn) {
    // Kept for a PSN the expected one has passed without taking it (a READ's
    // range covered it): stale, released before the PSN space wraps to it.
    if (psn_before(s.pkt.hdr.bth.psn, psn)) {
      bytes_ -= s.data.size();
      s.used = false;
      --held_;
    }
    return false;
  }
  payload.swap(s.data);
  out = s.pkt;
  out.payload = payload;
  s.used = false;
  bytes_ -= payload.size();
  --held_;
  return true;
}

wire::SackBitmap ReorderBuffer::held_after(uint32_t epsn) const noexcept {
  wire::SackBitmap b{};
  if (held_ == 0) return b;
  for (const Slot& s : slots_) {
    const int32_t d = psn_diff(s.pkt.hdr.bth.psn, epsn);
    if (s.used && d >= 1 && uint32_t(d) <= wire::kSackBits) wire::set_sack_bit(b, uint32_t(d - 1));
  }
  return b;
}

void ReorderBuffer::clear() noexcept {
  slots_.clear();
  held_ = 0;
  bytes_ = 0;
}

}  // namespace uroce::transport
