// The per-QP protocol state of the requester, completer and responder.
// Guarded by the lock of the QP's NIC; the transport's own (verbs never reads it).
#pragma once

#include <cstdint>
#include <vector>

#include "transport/work_queue.hpp"
#include "uroce/types.hpp"

namespace uroce::transport {

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
  bool timer_armed = false;    // retransmission timer running
  Clock::time_point deadline;  // retransmission deadline
  bool rnr_wait = false;       // waiting out an RNR NAK
  Clock::time_point rnr_until;
  uint32_t gap_psn = 0;  // READ response gap already asked for (avoid storms)
  uint32_t gap_hi = 0;   // highest response PSN seen since (a lower one: a new pass)
  bool gap_requested = false;
  bool drained_notified = false;
  // The send window (window.cpp): packets; 0 = the maximum (never cut).
  uint32_t cwnd = 0;
  uint32_t cwnd_acked = 0;   // packets acknowledged towards the next growth
  uint32_t recover_psn = 0;  // losses before this PSN acknowledged belong to the last cut
  bool recovering = false;
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
};

struct ResponderState {
  uint32_t epsn = 0;  // expected PSN
  uint32_t msn = 0;   // message sequence number (24 bits)
  // message in progress
  bool in_send = false;
  bool in_write = false;
  RecvWqe recv;  // receive WQE being filled (copied out of the RQ)
  std::vector<verbs::Sge> recv_sges;
  uint32_t recv_off = 0;
  bool recv_from_srq = false;
  bool recv_held = false;  // UC: `recv` survived a dropped message, reused next
  uint32_t write_rkey = 0;
  uint64_t write_va = 0;
  uint32_t write_left = 0;
  uint32_t write_total = 0;
  bool nak_seq_sent = false;  // one PSN-sequence NAK per gap...
  uint32_t nak_hi = 0;        // ...and pass: highest PSN seen since it (a lower one: a new pass)
  bool uc_drop = false;       // UC: dropping until the next FIRST/ONLY
  // coalesced ACK/NAK waiting to go out
  bool ack_pending = false;
  uint32_t ack_psn = 0;
  uint8_t ack_syndrome = 0;
  uint32_t acks_owed = 0;  // packets asking for an ACK since the last one sent
  // READ/atomic resources in PSN order; the oldest are overwritten
  std::vector<RdAtomicResource> res;
  uint32_t res_head = 0;     // next slot to overwrite
  uint32_t res_pending = 0;  // resources with responses still to send
};

}  // namespace uroce::transport
