// The per-QP protocol state of the requester, completer and responder.
// Guarded by the lock of the QP's NIC; the transport's own (verbs never reads it).
#pragma once

#include <bitset>
#include <cstdint>
#include <vector>

#include "transport/state_enum.hpp"
#include "transport/work_queue.hpp"
#include "uroce/types.hpp"
#include "wire/copy.hpp"

namespace uroce::transport {

// Requester and completer machines.
#define UROCE_RETRY_TIMER(X) X(off) X(armed)              // the retransmission timer (deadline)
#define UROCE_RNR_GATE(X) X(open) X(waiting)              // sending waits out an RNR NAK (rnr_until)
#define UROCE_READ_GAP(X) X(none) X(asked)                // a missing READ response asked for (gap_psn)
#define UROCE_SQ_DRAIN(X) X(none) X(draining) X(drained)  // SQD: the send queue drains (none outside SQD)
#define UROCE_RECOVERY(X) X(none) X(after_cut)  // the window was cut; losses before recover_psn are the same event
UROCE_STATE_ENUM(RetryTimer, UROCE_RETRY_TIMER)
UROCE_STATE_ENUM(RnrGate, UROCE_RNR_GATE)
UROCE_STATE_ENUM(ReadGap, UROCE_READ_GAP)
UROCE_STATE_ENUM(SqDrain, UROCE_SQ_DRAIN)
// Selective repeat (selective.cpp): whether the peer keeps the packets that
// follow a lost one (unknown until a recovery shows it).
#define UROCE_PEER_SR(X) X(unknown) X(keeps) X(drops)
UROCE_STATE_ENUM(Recovery, UROCE_RECOVERY)
UROCE_STATE_ENUM(PeerSr, UROCE_PEER_SR)

// Responder machines.
// The message in progress: a SEND filling `recv`, a WRITE placing data, or
// (UC) dropping packets until the next FIRST/ONLY.
#define UROCE_RESP_MSG(X) X(idle) X(send) X(write) X(uc_drop)
// Where the receive WQE the responder owns came from.  Owned while not
// filling a SEND (msg != send): held for the next message (UC: a dropped
// message's WQE is not completed, IBA 9.8.3; RC: a WRITE with immediate
// whose data could not land).
#define UROCE_RECV_SLOT(X) X(empty) X(rq) X(srq)
// The coalesced response slot: an ACK, a PSN-sequence NAK, or a final NAK
// (RNR or error: never replaced).  ack_syndrome holds the exact value.
#define UROCE_ACK_OWED(X) X(none) X(ack) X(seq_nak) X(nak)
// RC: a NAK covers the current gap (nak_hi: the highest PSN seen since).
#define UROCE_SEQ_NAK(X) X(clear) X(sent)
UROCE_STATE_ENUM(RespMsg, UROCE_RESP_MSG)
UROCE_STATE_ENUM(RecvSlot, UROCE_RECV_SLOT)
UROCE_STATE_ENUM(AckOwed, UROCE_ACK_OWED)
UROCE_STATE_ENUM(SeqNak, UROCE_SEQ_NAK)

inline constexpr uint32_t kTrainPsns = 256;  // the longest send window
// READ responses kept out of order, ahead of una: more than can be in
// flight (a window, then one more READ request of up to a window's packets).
inline constexpr uint32_t kKeepPsns = 4 * kTrainPsns;
static_assert((0x1000000 % kKeepPsns) == 0, "kept bits stay put across the PSN wrap");

// Requester + completer state (IBA 9.7: requester side of RC/UC/UD).
struct RequesterState {
  uint32_t next_psn = 0;   // PSN of the next packet sent for the first time
  uint32_t una_psn = 0;    // oldest PSN not yet acknowledged
  uint32_t send_idx = 0;   // SQ counter of the WQE being transmitted
  uint32_t send_pkt = 0;   // packets of that WQE already transmitted in this pass
  uint32_t send_psn = 0;   // PSN of the next packet transmitted (may be < next_psn when resending)
  uint32_t rd_atomic = 0;  // READ/atomic WQEs sent and not complete
  uint32_t sent_hwm = 0;   // one past the highest PSN ever sent; below it = resend
  uint8_t retry_left = 7;
  uint8_t rnr_left = 7;
  RetryTimer retry = RetryTimer::off;
  Clock::time_point deadline;     // retransmission deadline, while armed
  Clock::time_point progress_at;  // una last moved, or the timer armed from idle (retry_floor)
  RnrGate rnr = RnrGate::open;
  Clock::time_point rnr_until;  // while waiting
  ReadGap gap = ReadGap::none;
  uint32_t gap_psn = 0;  // READ response gap asked for (avoid storms)
  uint32_t gap_hi = 0;   // highest response PSN seen since (a lower one: a new pass)
  SqDrain drain = SqDrain::none;
  // The send window (window.cpp): packets; 0 = the maximum (never cut).
  uint32_t cwnd = 0;
  uint32_t cwnd_acked = 0;  // packets acknowledged towards the next growth
  Recovery recovery = Recovery::none;
  uint32_t recover_psn = 0;  // after_cut: losses before this PSN acknowledged belong to the cut
  // Selective repeat (selective.cpp).
  PeerSr peer_sr = PeerSr::unknown;
  uint8_t sr_failed = 0;  // recoveries that showed nothing kept
  bool probing = false;   // probe_psn was resent alone to learn what the peer keeps
  uint32_t probe_psn = 0;
  uint8_t probe_ext = 0;     // the probe moved on to the next PSN, also missing
  uint32_t resend_left = 0;  // packets from resend_psn to resend before anything else
  uint32_t resend_psn = 0;
  uint32_t run_end = 0;  // one past the last run resent, and its length (a NAK for a PSN
  uint32_t run_len = 0;  // inside it was drawn before the resend arrived)
  // Which PSNs (modulo kTrainPsns) were the first of this QP's packets in a
  // GSO train (a drop takes the whole train: a run resent is the rest of
  // it), and the train of the last packet sent for the first time.
  std::bitset<kTrainPsns> train_first;
  uint64_t last_train = ~uint64_t(0);
  uint8_t split_score = 0;    // NAKs that showed parts of trains lost (selective.cpp)...
  bool split_trains = false;  // ...enough of them: resend only what NAKs name
  bool force_ack = false;     // the packet being built asks for an ACK
  bool tail_unasked = false;  // the last request packet sent asked for no ACK
  bool sr_check = false;      // una (sr_check_psn) is resent alone if still unacknowledged at sr_check_at
  uint32_t sr_check_psn = 0;
  uint32_t sr_backoff = 1;
  Clock::time_point sr_check_at;
  // READ responses that came after a missing one (read_keep.cpp): placed
  // and remembered, by PSN modulo kKeepPsns, for PSNs in
  // [una_psn, una_psn + kKeepPsns); the missing ones alone are asked for
  // again (from asked_psn, hole_pkts of them: a request still to send).
  std::bitset<kKeepPsns> read_kept;
  uint32_t kept_count = 0;
  uint32_t kept_implied = 0;  // first PSN of the latest READ with a response kept
  uint32_t kept_hi = 0;       // the highest PSN kept
  uint32_t hole_pkts = 0;
  bool hole_asked = false;  // [asked_psn, asked_end) was asked for: again only by the watch
  uint32_t asked_psn = 0;
  uint32_t asked_end = 0;
  // A hole was asked for: una is watched (selective.cpp) until everything
  // sent is acknowledged, for a later READ request may have been lost too
  // and no response will say so.
  bool read_watch = false;
  // SACKs from a uroce responder (sack.cpp): asked for with a hello once
  // the peer is seen to keep packets; which PSNs in [una_psn, una_psn +
  // kTrainPsns) the peer holds, by PSN modulo kTrainPsns, and which were
  // resent since a SACK or NAK showed them missing.
  bool sack_hello_due = false;
  bool sack_asked = false;  // a hello went out (sack_hellos of them)
  uint8_t sack_hellos = 0;
  bool sack_on = false;        // a SACK came: the peer sends them
  bool sack_scan_due = false;  // a SACK came since the last look for holes
  uint32_t sacked_count = 0;
  uint32_t sack_hi = 0;              // one past the highest PSN held, while sacked_count
  uint32_t sack_scan = 0;            // holes before it were resent already
  Clock::time_point sack_resent_at;  // the latest of those resends...
  uint32_t resend_hwm = 0;           // ...and sent_hwm then
  std::bitset<kTrainPsns> sacked;
  std::bitset<kTrainPsns> sack_resent;
  // Round-trip time from ACK timing (one packet timed at a time; none that
  // was resent).  A hole before it resent for a NAK makes the ACK that
  // covers it wait for the resend: the time is taken from that resend then
  // (`reanchored`; requester.cpp).  `min_rtt_ns`: the least sample not
  // re-timed, below which a re-timed one is not believed.
  bool timing = false;
  bool reanchored = false;
  bool nak_resends = false;  // the run being resent answers a sequence NAK
  int64_t min_rtt_ns = 0;
  uint32_t timed_psn = 0;
  Clock::time_point timed_at;
  int64_t srtt_ns = 0, rttvar_ns = 0;
  // The one-copy WRITE (requester_copy.cpp): the responder could not make
  // a copy (UROCE_COPY_NAK), so this QP's WRITEs go as packets from now on.
  bool copy_off = false;
  // It sent one-copy requests: the peer may still carry out one it has
  // not answered (see copy_gate.hpp).
  bool copy_used = false;
};

// A READ or atomic the responder accepted: kept to send its response and,
// afterwards, to answer a duplicate request (IBA 9.7.5.1.x).
struct RdAtomicResource {
  bool is_read = false;
  uint32_t psn = 0;    // first PSN
  uint32_t npkts = 1;  // PSNs used
  uint32_t rkey = 0;
  uint64_t va = 0;
  uint32_t length = 0;
  uint64_t orig = 0;     // atomic: the value before the operation
  uint32_t sent = 0;     // response packets sent (READ) / 0 or 1 (atomic)
  bool pending = false;  // responses still to send
  // READ being answered: PSN and address of the next response packet
  uint32_t resp_psn = 0;
  uint64_t resp_va = 0;
  uint32_t resp_left = 0;   // bytes still to send
  uint32_t resp_first = 0;  // PSN of the first packet of this (re)send
  // A one-copy READ (responder_copy.cpp): where in the requester's memory
  // the bytes of this (re)send go, pushed in one copy; empty: as packets.
  std::vector<wire::CopyRange> sink;
  uint32_t sink_gate = 0;  // the request's generation of the requester's copy gate
};

struct ResponderState {
  uint32_t epsn = 0;  // expected PSN
  uint32_t msn = 0;   // message sequence number (24 bits)
  RespMsg msg = RespMsg::idle;
  RecvSlot slot = RecvSlot::empty;
  RecvWqe recv;  // the receive WQE owned (copied out of the RQ or SRQ)
  std::vector<verbs::Sge> recv_sges;
  uint32_t recv_off = 0;
  uint32_t write_rkey = 0;
  uint64_t write_va = 0;
  uint32_t write_left = 0;
  uint32_t write_total = 0;
  SeqNak seq = SeqNak::clear;  // one PSN-sequence NAK per gap...
  uint32_t nak_hi = 0;         // ...and pass: highest PSN seen since it (a lower one: a new pass)
  AckOwed ack = AckOwed::none;
  uint32_t ack_psn = 0;
  uint8_t ack_syndrome = 0;
  uint32_t acks_owed = 0;  // packets asking for an ACK since the last one sent
  // The lazy ACK owed came for what may be the peer's answer to a request
  // of ours still unacknowledged: the peer's ACK of it follows that answer
  // (Nic::pump), so an idle poll waits for it (progress.cpp).
  bool ack_after_answer = false;
  // The lazy ACK owed may wait for the application's answer (the progress
  // thread holds it a while, progress.cpp); ack_after_answer implies it.
  bool ack_may_wait = false;
  // ... and what it acknowledges came through a poll of the application's
  // CQ (Cq::poll), which busy-polls and answers within microseconds: the
  // ACK stays held even when the QP is scheduled meanwhile (Nic::pump).
  bool ack_for_poller = false;
  // Whether lazy ACKs are worth holding, learnt from how the last ones
  // left: with the application's answer (a ping-pong), or alone at a
  // deadline (both sides wrote at once, say, and each waits for its
  // completion).  After a miss the next hold_skip lazy ACKs do not wait,
  // a number that doubles with each miss in a row (Nic::held_ack_leaves).
  uint8_t hold_misses = 0;
  uint16_t hold_skip = 0;
  // READ/atomic resources in PSN order; the oldest are overwritten
  std::vector<RdAtomicResource> res;
  uint32_t res_head = 0;     // next slot to overwrite
  uint32_t res_pending = 0;  // resources with responses still to send
  // The requester asked for SACKs (wire/sack.hpp): packets kept out of
  // order are answered with one (sack_due) after the receive batch.
  bool sack_peer = false;
  bool sack_due = false;
  // The one-copy WRITE (responder_copy.cpp): the kernel refused us the
  // requester's memory; every further request is answered UROCE_COPY_NAK.
  bool copy_refused = false;
};

}  // namespace uroce::transport
