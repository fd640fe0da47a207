// Work queue entries and the per-QP state of the requester, completer and
// responder.  All of it is guarded by the lock of the QP's NIC.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "verbs/types.hpp"
#include "wire/headers.hpp"

namespace uroce::transport {

using Clock = std::chrono::steady_clock;

// One posted send work request, as the requester tracks it.
struct SendWqe {
  uint64_t wr_id = 0;
  verbs::WrOpcode opcode = verbs::WrOpcode::send;
  uint32_t flags = 0;  // verbs::send_flags
  uint32_t imm = 0;    // immediate data / rkey to invalidate
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0, swap = 0;
  uint32_t length = 0;     // total message bytes
  uint16_t num_sge = 0;    // SGEs in the QP's sge array at this slot
  bool is_inline = false;  // payload copied into the QP's inline array
  bool signaled = false;
  // UD destination, resolved at post time
  Endpoint ud_dst;
  uint32_t ud_qpn = 0, ud_qkey = 0;
  uint8_t ud_tclass = 0, ud_hop_limit = 64;
  // requester progress
  uint32_t first_psn = 0;  // PSN of the first packet (READ: first response)
  uint32_t npkts = 0;      // PSNs the message uses
  uint32_t read_req = 0;   // READ: response packets requested so far
  uint32_t read_done = 0;  // READ: response packets received so far
  bool assigned = false;   // first_psn/npkts assigned
  bool done = false;       // acknowledged / response received
  verbs::WcStatus status = verbs::WcStatus::success;
};

// One posted receive work request (RQ or SRQ).
struct RecvWqe {
  uint64_t wr_id = 0;
  uint16_t num_sge = 0;
  uint32_t length = 0;  // sum of SGE lengths
};

// A bounded FIFO of WQEs with the SGEs of each entry stored beside it.
template <class Wqe>
class WorkQueue {
 public:
  void init(uint32_t max_wr, uint32_t max_sge, uint32_t inline_bytes = 0) {
    cap_ = 1;
    while (cap_ < max_wr) cap_ <<= 1;
    max_wr_ = max_wr;
    max_sge_ = max_sge == 0 ? 1 : max_sge;
    inline_bytes_ = inline_bytes;
    wqes_.assign(cap_, Wqe{});
    sges_.assign(size_t(cap_) * max_sge_, verbs::Sge{});
    inline_.assign(size_t(cap_) * inline_bytes, 0);
    head_ = tail_ = 0;
  }
  uint32_t max_wr() const noexcept { return max_wr_; }
  uint32_t max_sge() const noexcept { return max_sge_; }
  uint32_t inline_bytes() const noexcept { return inline_bytes_; }
  uint32_t size() const noexcept { return tail_ - head_; }
  bool empty() const noexcept { return head_ == tail_; }
  bool full() const noexcept { return size() >= max_wr_; }
  // Counters run freely; entries are addressed by counter value.
  uint32_t head() const noexcept { return head_; }
  uint32_t tail() const noexcept { return tail_; }
  Wqe& at(uint32_t n) noexcept { return wqes_[n & (cap_ - 1)]; }
  verbs::Sge* sges(uint32_t n) noexcept { return &sges_[size_t(n & (cap_ - 1)) * max_sge_]; }
  uint8_t* inline_data(uint32_t n) noexcept { return inline_.data() + size_t(n & (cap_ - 1)) * inline_bytes_; }
  Wqe& push() noexcept { return at(tail_++); }  // caller checked !full()
  void pop() noexcept { ++head_; }
  void clear() noexcept { head_ = tail_; }

 private:
  std::vector<Wqe> wqes_;
  std::vector<verbs::Sge> sges_;
  std::vector<uint8_t> inline_;
  uint32_t cap_ = 0, max_wr_ = 0, max_sge_ = 1, inline_bytes_ = 0;
  uint32_t head_ = 0, tail_ = 0;
};

// Appends receive WRs to an RQ or SRQ, stopping at the first that does not
// fit (EINVAL: too many SGEs, ENOMEM: queue full); *bad = its index.
Status post_recv_wrs(WorkQueue<RecvWqe>& q, std::span<const verbs::RecvWr> wrs, size_t* bad, const char* queue_name,
                     const char* sge_limit);

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
