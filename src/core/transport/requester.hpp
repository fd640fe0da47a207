// Requester-side helpers shared by requester.cpp, completer.cpp and
// retransmit.cpp (NIC lock held for all of them).
#pragma once

#include <chrono>

#include "transport/engine_state.hpp"
#include "transport/nic.hpp"
#include "transport/psn.hpp"
#include "transport/qp_engine.hpp"
#include "transport/work_queue.hpp"
#include "wire/packet.hpp"

namespace uroce::transport {

inline bool is_read(verbs::WrOpcode op) noexcept { return op == verbs::WrOpcode::rdma_read; }
inline bool is_atomic(verbs::WrOpcode op) noexcept {
  return op == verbs::WrOpcode::atomic_cmp_and_swp || op == verbs::WrOpcode::atomic_fetch_and_add;
}
inline bool is_rd_atomic(verbs::WrOpcode op) noexcept { return is_read(op) || is_atomic(op); }

// The send window (window.cpp): packets an RC QP may have unacknowledged.
// At most 1 MiB of payload and kMaxWindowPkts packets (at least
// kMinWindowPkts).  A smaller window left the sender waiting for ACKs from a
// receiver busy copying (WRITE 1 MiB on loopback, MTU 4096: 4.1 GB/s with
// 256 KiB, 4.7 with 1 MiB, no better beyond); more packets than 256 in
// flight overflowed a slow software peer's queues (rdma_rxe in a VM behind a
// tap device: sequence NAKs at MTU 1024 with 1024 packets in flight).  A
// loss halves the window, once per window; a retransmission timeout takes it
// to the minimum; each acknowledged window grows it by kWindowGrowPkts
// again.  Go-back-N resends everything after a lost packet, so the window is
// also the price of one loss.
inline constexpr uint32_t kMinWindowPkts = 16;
inline constexpr uint32_t kMaxWindowPkts = 256;
// Hellos a QP sends at most (one per sequence NAK) before it takes its peer
// for one that sends no SACKs.
inline constexpr uint8_t kSackHellos = 8;
inline constexpr uint32_t kWindowGrowPkts = 8;
inline uint32_t max_window_pkts(const QpEngine& qp) noexcept {
  const uint32_t w = (1024u * 1024) / qp.mtu;
  return w < kMinWindowPkts ? kMinWindowPkts : w > kMaxWindowPkts ? kMaxWindowPkts : w;
}
inline uint32_t window_pkts(const QpEngine& qp) noexcept {
  const uint32_t m = max_window_pkts(qp);
  const uint32_t c = qp.req.cwnd;  // 0: never cut
  return c == 0 || c > m ? m : c;
}
// A packet was lost: a sequence NAK, a gap in READ responses, or nothing
// came back in time.
enum class Loss : uint8_t { seq_nak, read_gap, timeout };
void window_on_loss(Nic& nic, QpEngine& qp, Loss loss) noexcept;
// Whether `qp`'s window is delay-based (CcMode::swift, selective repeat,
// a peer that keeps packets after a loss or may, not on this host).
bool delay_based(const Nic& nic, const QpEngine& qp) noexcept;
// A round trip was measured (selective.cpp): the delay-based window moves.
void window_on_rtt(Nic& nic, QpEngine& qp, Clock::duration rtt) noexcept;
// The peer acknowledged `acked` more packets.
void window_on_ack(Nic& nic, QpEngine& qp, uint32_t acked) noexcept;

// Selective repeat (selective.cpp).  A sequence NAK for `psn`: true if it
// is answered by resending that packet (with the rest of its GSO train, or
// nothing if its resend is on the way; the peer keeps what follows, or this
// recovery finds out whether it does), false for go-back-N.
bool sr_on_seq_nak(Nic& nic, QpEngine& qp, uint32_t psn) noexcept;
// After a response moved una: settles a probe, moves the watch on una.
// `nak`: a sequence NAK moved it (one for the PSN after a probe extends
// the probe).
void sr_on_progress(Nic& nic, QpEngine& qp, bool nak) noexcept;
// Watches `psn` (unless it is watched already): resent if still
// unacknowledged after about two round trips.
void sr_watch(Nic& nic, QpEngine& qp, uint32_t psn) noexcept;
// After packets went out: a peer that keeps (or READ responses kept) has
// una watched.
void sr_on_sent(Nic& nic, QpEngine& qp) noexcept;
// The timer: una unacknowledged for about two round trips goes again.
void sr_on_timer(Nic& nic, QpEngine& qp) noexcept;
// Takes an RTT sample when una passed the timed packet.
void rtt_on_ack(Nic& nic, QpEngine& qp) noexcept;

// SACKs between uroce peers (sack.cpp, wire/sack.hpp; sack_receive in
// protocol.hpp).
// una moves to `una`: what lay before it is forgotten.
void sack_on_advance(RequesterState& r, uint32_t una) noexcept;
// Going back N: everything is sent again, what the peer holds included.
void sack_reset(RequesterState& r) noexcept;
// A hole below the highest PSN the peer holds, not resent yet: queued as
// the next run to resend (resend_psn, resend_left); false if none.
bool sack_next_hole(Nic& nic, QpEngine& qp) noexcept;
// Whether a SACK said the peer holds `psn` (at or after una).
bool sack_held(const RequesterState& r, uint32_t psn) noexcept;
// Packets in flight: sent and neither acknowledged nor held by the peer.
uint32_t in_flight(const RequesterState& r) noexcept;
// `psn` was resent; whether a NAK for it was drawn before that resend
// arrived.
void sack_note_resent(Nic& nic, RequesterState& r, uint32_t psn) noexcept;
bool sack_resent_lately(const Nic& nic, const RequesterState& r, uint32_t psn) noexcept;
// The peer keeps packets: a hello is due, unless SACKs come already, the
// QP is not RC (an XRC target takes none) or kSackHellos went unanswered.
void sack_want(const Nic& nic, QpEngine& qp) noexcept;
// A UROCE_SACK_HELLO, if one is due.
void sack_emit_hello(Nic& nic, QpEngine& qp) noexcept;

// READ responses out of order (read_keep.cpp).  Whether response `psn` is
// kept already.
bool read_kept(const RequesterState& r, uint32_t psn) noexcept;
// Whether response `psn` can be kept (selective repeat on, not too far
// ahead of una), and remembering it once placed, ahead of one missing.
bool read_keepable(const Nic& nic, const RequesterState& r, uint32_t psn) noexcept;
void read_keep(Nic& nic, QpEngine& qp, const SendWqe& w, uint32_t psn) noexcept;
// Moves `w.read_done` over the responses kept after it; true if it moved.
bool read_absorb(RequesterState& r, SendWqe& w) noexcept;
// Asks for the responses of `w` missing from `missing` up to the first one
// kept, leaving everything else as it is: `no` (go back N instead) if
// nothing is kept or they are not asked for yet.  A hole asked for already
// is asked for `again` only by the watch (`already`: nothing sent).
enum class HoleAsk : uint8_t { no, asked, already };
HoleAsk read_request_hole(Nic& nic, QpEngine& qp, const SendWqe& w, uint32_t missing, bool again = false) noexcept;

// Local ACK timeout of the QP attribute: 4.096 us * 2^timeout, at least 1 ms
// (a user-space stack's scheduling jitter is larger than a NIC's).  Timeout 0
// means "infinite" (IBA 9.7.6.1.3): we still retransmit, never give up.
std::chrono::nanoseconds retransmit_interval(uint8_t timeout) noexcept;
// RNR NAK timer field (IBA table 45) in nanoseconds.
std::chrono::nanoseconds rnr_delay(uint8_t timer) noexcept;

// Rewinds transmission to PSN `psn` (go-back-N): the WQE holding it resends
// from that packet on, and everything after it follows.
void go_back(Nic& nic, QpEngine& qp, uint32_t psn) noexcept;

// The one-copy WRITE (requester_copy.cpp, wire/copy.hpp).  How many packets
// of `w`, from the one to send next, one UROCE_COPY_WRITE stands for now:
// 0 when they go as packets (not asked for, not to a ring, too small, the
// window nearly full, or the peer refused before).
uint32_t copy_chunk_packets(Nic& nic, QpEngine& qp, const SendWqe& w) noexcept;
// Writes the request for `k` packets of `w` (at `idx`) from the next into
// `out`: its length, 0 if a local key, PD or bound check failed.
size_t build_copy_request(Nic& nic, QpEngine& qp, const SendWqe& w, uint32_t idx, uint32_t k,
                          std::span<uint8_t> out) noexcept;
// Writes a UROCE_COPY_READ for response packets [i, i + n) of READ `w` (at
// `idx`) into `out`: its length, 0 if they are to come as packets (not
// asked for, not to a ring, too small, the sink not writable).
size_t build_copy_read_request(Nic& nic, QpEngine& qp, const SendWqe& w, uint32_t idx, uint32_t i, uint32_t n,
                               std::span<uint8_t> out) noexcept;
// A UROCE_COPY_NAK: WRITEs and READs go as packets, again from its PSN.
void copy_nak_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept;
// Retires completed WQEs from the SQ head in order, with their completions.
void retire(Nic& nic, QpEngine& qp) noexcept;
// Completes the WQE at `idx` with an error and moves the QP to ERR.
void fail_wqe(Nic& nic, QpEngine& qp, uint32_t idx, verbs::WcStatus status) noexcept;
// Finds the SQ counter of the assigned WQE whose PSN range holds `psn`.
bool find_wqe(QpEngine& qp, uint32_t psn, uint32_t& idx) noexcept;

}  // namespace uroce::transport
