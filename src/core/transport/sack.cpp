// The requester's side of SACKs between uroce peers (docs/congestion.md,
// wire/sack.hpp).
//
// A sequence NAK names the first missing PSN only: with several packets
// of a window lost, each further hole is found one round trip after the one
// before it is filled, and a window that counts every PSN after una stops
// the sender meanwhile, although the peer holds most of them.  Once a peer
// is seen to keep packets after a loss, the requester asks it for SACKs
// (UROCE_SACK_HELLO); a uroce responder then answers packets it keeps out
// of order with a bitmap of what it holds.  The requester resends every
// hole below the highest PSN held (once each: a resend lost too is found by
// the watch on una, or by the NAK the hole draws when it becomes the first),
// and its window counts only the packets neither acknowledged nor held,
// as TCP's does with SACK.  Nothing changes towards any other peer: it
// never shows that it keeps packets, so it is never asked.
#include "wire/sack.hpp"

#include <algorithm>

#include "transport/congestion.hpp"
#include "transport/requester.hpp"

namespace uroce::transport {
namespace {

static_assert(wire::kSackBits == kTrainPsns, "a SACK covers the longest window");

void mark(RequesterState& r, uint32_t psn) noexcept {
  const uint32_t i = psn % kTrainPsns;
  if (r.sacked[i]) return;
  r.sacked[i] = true;
  if (r.sacked_count++ == 0 || psn_before(r.sack_hi, psn_add(psn, 1))) r.sack_hi = psn_add(psn, 1);
}

}  // namespace

void sack_reset(RequesterState& r) noexcept {
  r.sacked.reset();
  r.sack_resent.reset();
  r.sacked_count = 0;
  r.sack_scan_due = false;
  r.sack_scan = r.una_psn;
}

void sack_on_advance(RequesterState& r, uint32_t una) noexcept {
  if (r.sacked_count == 0 && r.sack_resent.none()) return;
  if (uint32_t(psn_diff(una, r.una_psn)) >= kTrainPsns) return sack_reset(r);
  for (uint32_t p = r.una_psn; p != una; p = psn_add(p, 1)) {
    const uint32_t i = p % kTrainPsns;
    if (r.sacked[i]) {
      r.sacked[i] = false;
      --r.sacked_count;
    }
    r.sack_resent[i] = false;
  }
}

bool sack_held(const RequesterState& r, uint32_t psn) noexcept {
  return r.sacked_count > 0 && uint32_t(psn_diff(psn, r.una_psn)) < kTrainPsns && r.sacked[psn % kTrainPsns];
}

// The bits of [una, sack_hi): the PSNs a hole can be in.
std::bitset<kTrainPsns> below_held(const RequesterState& r) noexcept {
  std::bitset<kTrainPsns> range;
  const int32_t n = psn_diff(r.sack_hi, r.una_psn);
  if (r.sacked_count == 0 || n <= 0) return range;
  range.set();
  if (uint32_t(n) < kTrainPsns) range >>= kTrainPsns - uint32_t(n);  // the low n bits
  const uint32_t start = r.una_psn % kTrainPsns;
  if (start != 0) range = (range << start) | (range >> (kTrainPsns - start));
  return range;
}

// Holes below the highest PSN held, not resent: lost, no longer in flight.
uint32_t lost_unresent(const RequesterState& r) noexcept {
  if (r.sacked_count == 0) return 0;
  return uint32_t((below_held(r) & ~r.sacked & ~r.sack_resent).count());
}

uint32_t in_flight(const RequesterState& r) noexcept {
  const int32_t d = psn_diff(r.send_psn, r.una_psn);
  const uint32_t span = d > 0 ? uint32_t(d) : 0;
  return span - std::min(span, r.sacked_count + lost_unresent(r));
}

void sack_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  RequesterState& r = qp.req;
  const std::optional<wire::SackBitmap> held = wire::parse_sack(pkt.payload);
  const uint32_t base = pkt.hdr.bth.psn;  // what the peer expects next
  // Not asked for, or not this version's; stale (an ACK overtook it) or
  // naming PSNs never sent.
  if (!held || !r.sack_asked || psn_before(base, r.una_psn) || psn_before(r.sent_hwm, base)) {
    ++nic.counters().req_sacks_ignored;
    return;
  }
  ++nic.counters().req_sacks_rcvd;
  if (r.sacked_count == 0) r.sack_scan = r.una_psn;  // a new recovery: holes from una on
  r.sack_on = true;
  r.sack_hello_due = false;                        // (one due for a NAK that came first)
  if (psn_before(r.send_psn, r.sent_hwm)) return;  // going back N: everything goes again
  // Everything before `base` arrived (its ACK is on the way), and what the
  // bitmap names after it.
  for (uint32_t p = r.una_psn; p != base; p = psn_add(p, 1)) mark(r, p);
  for (uint32_t i = 0; i < wire::kSackBits; ++i) {
    if (!wire::sack_bit(*held, i)) continue;
    const uint32_t p = psn_add(base, 1 + i);
    if (!psn_before(p, r.sent_hwm) || uint32_t(psn_diff(p, r.una_psn)) >= kTrainPsns) break;
    mark(r, p);
  }
  // A PSN held that was first sent after the latest resend: every resend
  // had its turn on the path (it keeps order), so a hole still open was
  // lost again and goes again (a NAK for it may have been taken for one
  // drawn before its resend arrived).
  if (r.sacked_count > 0 && psn_before(r.resend_hwm, r.sack_hi)) {
    const std::bitset<kTrainPsns> lost_again = below_held(r) & ~r.sacked & r.sack_resent;
    if (lost_again.any()) {
      r.sack_resent &= ~lost_again;
      r.sack_scan = r.una_psn;
    }
  }
  r.sack_scan_due = true;
  path_sync(nic, qp);  // (what the peer holds is no longer in flight)
  nic.schedule(qp);
}

bool sack_next_hole(Nic& nic, QpEngine& qp) noexcept {
  RequesterState& r = qp.req;
  if (!r.sack_scan_due || r.sacked_count == 0) return false;
  // A resend puts a lost packet back in flight: within the window.
  const uint32_t flying = in_flight(r), window = window_pkts(qp);
  if (flying >= window) return false;
  // (From una when the cursor lies outside the PSNs a SACK can name: behind
  // una, or never set since the QP's first PSN.)
  const int32_t ahead = psn_diff(r.sack_scan, r.una_psn);
  uint32_t p = ahead < 0 || uint32_t(ahead) > kTrainPsns ? r.una_psn : r.sack_scan;
  while (psn_before(p, r.sack_hi)) {
    const uint32_t i = p % kTrainPsns;
    if (r.sacked[i] || r.sack_resent[i]) {
      p = psn_add(p, 1);
      continue;
    }
    uint32_t idx;
    if (!find_wqe(qp, p, idx)) break;
    const SendWqe& w = qp.sq.at(idx);
    if (is_rd_atomic(w.opcode)) {  // asked for again by its own rules (read_keep.cpp, the watch)
      p = psn_add(w.first_psn, w.npkts);
      continue;
    }
    // The hole, up to the next PSN held or the end of its WQE.
    const uint32_t end = psn_add(w.first_psn, w.npkts);
    uint32_t n = 1;
    while (psn_add(p, n) != end && psn_before(psn_add(p, n), r.sack_hi) && !r.sacked[psn_add(p, n) % kTrainPsns] &&
           !r.sack_resent[psn_add(p, n) % kTrainPsns] && n < window - flying)
      ++n;
    r.resend_psn = p;
    r.resend_left = n;
    r.nak_resends = true;
    r.sack_scan = psn_add(p, n);
    nic.counters().req_sack_resends += n;
    return true;
  }
  r.sack_scan = p;
  r.sack_scan_due = false;
  return false;
}

void sack_note_resent(Nic& nic, RequesterState& r, uint32_t psn) noexcept {
  if (!r.sack_on) return;
  r.sack_resent[psn % kTrainPsns] = true;
  r.sack_resent_at = nic.now();
  r.resend_hwm = r.sent_hwm;
}

bool sack_resent_lately(const Nic& nic, const RequesterState& r, uint32_t psn) noexcept {
  return r.sack_on && r.sack_resent[psn % kTrainPsns] &&
         nic.now() - r.sack_resent_at < std::chrono::nanoseconds(std::max<int64_t>(r.srtt_ns, 1));
}

void sack_want(const Nic& nic, QpEngine& qp) noexcept {
  RequesterState& r = qp.req;
  if (r.peer_sr != PeerSr::keeps || r.sack_on || !nic.config().cc.sack || qp.type() != verbs::QpType::rc ||
      r.sack_hellos >= kSackHellos)
    return;
  r.sack_hello_due = true;
}

void sack_emit_hello(Nic& nic, QpEngine& qp) noexcept {
  RequesterState& r = qp.req;
  if (!r.sack_hello_due) return;
  r.sack_hello_due = false;
  r.sack_asked = true;
  ++r.sack_hellos;
  wire::Headers h;
  h.bth.opcode = uint8_t(wire::Opcode::uroce_sack_hello);
  h.bth.dest_qp = qp.attr.dest_qp_num;
  h.bth.psn = r.una_psn;
  const auto payload = wire::sack_hello_payload();
  if (nic.tx().full()) nic.flush_tx();
  uint8_t* body = nic.tx().scratch();  // (the batch does not copy bodies)
  std::copy(payload.begin(), payload.end(), body);
  (void)nic.tx().add(qp.peer, qp.icrc_ip, h, {body, payload.size()}, qp_tos(nic, qp));
  ++nic.counters().req_sack_hellos;
}

}  // namespace uroce::transport
