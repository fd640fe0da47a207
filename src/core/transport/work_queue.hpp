// Work queue entries and the bounded queues that hold them (a QP's send and
// receive queues, an SRQ).  Guarded by the lock of the QP's NIC.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "uroce/types.hpp"

namespace uroce::transport {

using Clock = std::chrono::steady_clock;

// One posted send work request, as the requester tracks it.
// How the requester treats a WR verbs accepted (verbs::Qp::send_plan): a WR
// the QP cannot execute fails with `fail` when the requester reaches it; a
// `silent` one (UD above the MTU) completes without a packet.
struct SendPlan {
  verbs::WcStatus fail = verbs::WcStatus::success;
  bool silent = false;
};

struct SendWqe {
  uint64_t wr_id = 0;
  verbs::WrOpcode opcode = verbs::WrOpcode::send;
  uint32_t flags = 0;        // verbs::send_flags
  uint32_t imm = 0;          // immediate data / rkey to invalidate / BIND_MW: the window's rkey
  uint64_t remote_addr = 0;  // BIND_MW: the window's address
  uint32_t rkey = 0;         // BIND_MW: the grant's new rkey
  uint64_t compare_add = 0;  // BIND_MW: the window's length
  uint64_t swap = 0;         // BIND_MW: the region's lkey << 32 | the window's rights
  uint32_t length = 0;       // total message bytes
  uint16_t num_sge = 0;      // SGEs in the QP's sge array at this slot
  bool is_inline = false;    // payload copied into the QP's inline array
  bool signaled = false;
  SendPlan plan;
  // UD destination, resolved at post time
  Endpoint ud_dst;
  uint32_t ud_qpn = 0, ud_qkey = 0;
  uint32_t xrc_srqn = 0;  // XRC_SEND: the SRQ the message is for (XRCETH)
  uint8_t ud_tclass = 0, ud_hop_limit = 64;
  // requester progress
  uint32_t first_psn = 0;  // PSN of the first packet (READ: first response)
  uint32_t npkts = 0;      // PSNs the message uses
  uint32_t read_req = 0;   // READ: response packets requested so far
  uint32_t read_done = 0;  // READ: response packets received so far
  bool assigned = false;   // first_psn/npkts assigned
  bool done = false;       // acknowledged / response received
  bool copied = false;     // one-copy requests stand for some of its packets (copy_gate.hpp)
  verbs::WcStatus status = verbs::WcStatus::success;
};

// One posted receive work request (RQ or SRQ).
struct RecvWqe {
  uint64_t wr_id = 0;
  uint16_t num_sge = 0;
  uint32_t length = 0;  // sum of SGE lengths
};

// A bounded FIFO of WQEs with the SGEs (and inline bytes) of each entry
// stored beside it.  Entries are addressed by free-running counter values.
// The storage grows (doubling) as the queue first holds more entries than
// it has room for, up to max_wr: a QP created with deep queues but used
// with few WRs outstanding costs what a shallow one does (seed 004's QP
// scaling).  A reference to an entry is good until the next push().
template <class Wqe>
class WorkQueue {
 public:
  static constexpr uint32_t kFirstRoom = 16;

  void init(uint32_t max_wr, uint32_t max_sge, uint32_t inline_bytes = 0) {
    max_wr_ = max_wr;
    max_sge_ = max_sge == 0 ? 1 : max_sge;
    inline_bytes_ = inline_bytes;
    room_ = 1;
    while (room_ < std::min(max_wr, kFirstRoom)) room_ <<= 1;
    wqes_.assign(room_, Wqe{});
    sges_.assign(size_t(room_) * max_sge_, verbs::Sge{});
    inline_.assign(size_t(room_) * inline_bytes, 0);
    head_ = tail_ = 0;
  }
  uint32_t max_wr() const noexcept { return max_wr_; }
  // A new bound, at least size() (an SRQ's modify).
  void set_max_wr(uint32_t max_wr) noexcept { max_wr_ = max_wr; }
  uint32_t max_sge() const noexcept { return max_sge_; }
  uint32_t inline_bytes() const noexcept { return inline_bytes_; }
  uint32_t size() const noexcept { return tail_ - head_; }
  bool empty() const noexcept { return head_ == tail_; }
  bool full() const noexcept { return size() >= max_wr_; }
  // Entries the storage holds now (a power of two; it grows to at most the
  // largest max_wr the queue had, rounded up).
  uint32_t room() const noexcept { return room_; }
  uint32_t head() const noexcept { return head_; }
  uint32_t tail() const noexcept { return tail_; }
  Wqe& at(uint32_t n) noexcept { return wqes_[n & (room_ - 1)]; }
  const Wqe& at(uint32_t n) const noexcept { return wqes_[n & (room_ - 1)]; }
  verbs::Sge* sges(uint32_t n) noexcept { return &sges_[size_t(n & (room_ - 1)) * max_sge_]; }
  uint8_t* inline_data(uint32_t n) noexcept { return inline_.data() + size_t(n & (room_ - 1)) * inline_bytes_; }
  // Adds an entry at tail(); nullptr when the queue is full or its storage
  // cannot grow (out of memory).
  Wqe* push() noexcept {
    if (full() || (size() == room_ && !grow())) return nullptr;
    return &at(tail_++);
  }
  void pop() noexcept { ++head_; }
  void clear() noexcept { head_ = tail_; }

 private:
  bool grow() noexcept {
    const uint32_t room = room_ * 2;
    try {
      std::vector<Wqe> wqes(room);
      std::vector<verbs::Sge> sges(size_t(room) * max_sge_);
      std::vector<uint8_t> inl(size_t(room) * inline_bytes_);
      for (uint32_t n = head_; n != tail_; ++n) {
        const size_t from = n & (room_ - 1), to = n & (room - 1);
        wqes[to] = wqes_[from];
        std::copy_n(&sges_[from * max_sge_], max_sge_, &sges[to * max_sge_]);
        std::copy_n(inline_.data() + from * inline_bytes_, inline_bytes_, inl.data() + to * inline_bytes_);
      }
      wqes_.swap(wqes);
      sges_.swap(sges);
      inline_.swap(inl);
    } catch (const std::bad_alloc&) {
      return false;
    }
    room_ = room;
    return true;
  }

  std::vector<Wqe> wqes_;
  std::vector<verbs::Sge> sges_;
  std::vector<uint8_t> inline_;
  uint32_t room_ = 1, max_wr_ = 0, max_sge_ = 1, inline_bytes_ = 0;
  uint32_t head_ = 0, tail_ = 0;
};

// Appends receive WRs to an RQ or SRQ, stopping at the first that does not
// fit (EINVAL: too many SGEs, ENOMEM: queue full); *bad = its index.
Status post_recv_wrs(WorkQueue<RecvWqe>& q, std::span<const verbs::RecvWr> wrs, size_t* bad, const char* queue_name,
                     const char* sge_limit);

}  // namespace uroce::transport
