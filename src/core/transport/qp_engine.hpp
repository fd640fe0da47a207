// The transport state of one QP: its work queues and the protocol state of
// its requester, completer and responder.  verbs::Qp holds one and never
// exposes it; the engine reaches the verbs objects around it only through
// transport/ports.hpp (its CQs, its PD's memory, its SRQ, its owner).
// Everything here is guarded by the NIC lock.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "net/peer_process.hpp"
#include "transport/dcqcn.hpp"
#include "transport/engine_state.hpp"
#include "transport/ports.hpp"
#include "transport/reorder.hpp"
#include "transport/swift.hpp"
#include "transport/work_queue.hpp"
#include "uroce/types.hpp"
#include "wire/icrc.hpp"

namespace uroce::transport {

class Nic;
class PathShare;
class XrcRemote;

// What the verbs QP settled at creation.
struct EngineInit {
  verbs::QpType type = verbs::QpType::rc;
  verbs::QpCap cap;  // as Qp::create settled it (what query reports)
  bool sq_sig_all = false;
  CompletionSink* send_cq = nullptr;
  CompletionSink* recv_cq = nullptr;
  RecvSource* srq = nullptr;  // nullptr: the engine's own receive queue
  uint32_t xrcd = 0;          // XRC_RECV: its XRC domain (the SRQs it may deliver to)
  XrcFileKey xrcd_file;       // ... and the file it was opened on, if any (xrc_share.hpp)
  const MemoryDomain* memory = nullptr;
  QpOwner* owner = nullptr;
};

// A consistent look at an engine, for tests and traces.
struct EngineSnapshot {
  verbs::QpState state = verbs::QpState::reset;
  uint32_t sq_size = 0, rq_size = 0;   // WQEs queued
  uint32_t una_psn = 0, next_psn = 0;  // requester
  RetryTimer retry = RetryTimer::off;
  RnrGate rnr = RnrGate::open;
  ReadGap gap = ReadGap::none;
  SqDrain drain = SqDrain::none;
  Recovery recovery = Recovery::none;
  uint32_t epsn = 0;  // responder: the PSN it expects
  RespMsg msg = RespMsg::idle;
  RecvSlot slot = RecvSlot::empty;
  AckOwed ack = AckOwed::none;
  SeqNak seq = SeqNak::clear;
};
// "RTS sq=2 rq=4 una=10 next=12 [retry=armed rnr=open ...] epsn=7 [msg=send ...]"
std::string to_string(const EngineSnapshot& s);

class QpEngine {
 public:
  QpEngine(Nic& nic, const EngineInit& init) noexcept;
  QpEngine(const QpEngine&) = delete;
  QpEngine& operator=(const QpEngine&) = delete;

  uint32_t qpn() const noexcept { return qpn_; }  // set by Nic::attach
  verbs::QpType type() const noexcept { return init_.type; }
  // RC and the two halves of XRC: acknowledged, retransmitted.
  bool reliable() const noexcept {
    return init_.type == verbs::QpType::rc || init_.type == verbs::QpType::xrc_send ||
           init_.type == verbs::QpType::xrc_recv;
  }
  bool xrc_recv() const noexcept { return init_.type == verbs::QpType::xrc_recv; }
  verbs::QpState state() const noexcept { return attr.qp_state; }
  CompletionSink& send_cq() const noexcept { return *init_.send_cq; }
  // An XRC_RECV QP has no CQ, PD or SRQ of its own: each request names the
  // XRC SRQ it is for (its XRCETH), whose CQ takes the receive completions
  // and whose PD holds the memory the request may touch (IBA 9.9.4.2).  The
  // responder sets it (xrc_target) before it handles a request.
  CompletionSink& recv_cq() const noexcept { return xrc_recv() ? *xrc_target->completions() : *init_.recv_cq; }
  RecvSource* srq() const noexcept { return xrc_recv() ? xrc_target : init_.srq; }
  const MemoryDomain& mem() const noexcept { return xrc_recv() ? xrc_target->memory() : *init_.memory; }
  // Where receive buffers are looked up: for a QP with an SRQ the SRQ's PD,
  // in which its WQEs were posted (as a NIC checks them), else the QP's.
  const MemoryDomain& recv_mem() const noexcept { return srq() ? srq()->memory() : *init_.memory; }
  uint32_t xrcd() const noexcept { return init_.xrcd; }
  XrcFileKey xrcd_file() const noexcept { return init_.xrcd_file; }
  QpOwner& owner() const noexcept { return *init_.owner; }

  // ---- what verbs::Qp calls ----
  // Applies attributes verbs has checked and makes the transition to `next`
  // (which the IB state table allowed); `port_mtu` is a UD QP's path MTU.
  void modify(const verbs::QpAttr& a, uint32_t mask, verbs::QpState next, uint32_t port_mtu) noexcept;
  verbs::QpAttr query() const noexcept;
  // Queues one send WR verbs has checked (UD: to `ud_ah`), to be carried
  // out as `plan` says; false when the send queue is full.  A QP in ERR
  // completes it with WR_FLUSH_ERR.
  bool post_send(const verbs::SendWr& wr, const verbs::AhAttr* ud_ah, SendPlan plan = {}) noexcept;
  // After post_send: sends (or, in ERR, completes) what was queued.
  void ring_doorbell(size_t posted) noexcept;
  Status post_recv(std::span<const verbs::RecvWr> wrs, size_t* bad);
  uint32_t sq_max_wr() const noexcept { return sq.max_wr(); }
  bool sq_full() const noexcept { return sq.full(); }
  // The QP is being destroyed: the ACK it owes goes out, it leaves the NIC.
  void close() noexcept;

  // Sends the coalesced ACK the responder still owes, if any, then
  // kFinalAckRepeats more copies of the final ACK: the peer whose last
  // message this QP received must get its ACK even when the application
  // destroys the QP (or moves it to RESET or ERR) right after seeing the
  // receive completion, and even if one ACK is lost on the way.
  static constexpr int kFinalAckRepeats = 2;
  void send_owed_ack() noexcept;
  // Moves to ERR from inside the transport (errors) and flushes.  Drops
  // any ACK owed: the responder's own failure NAKs after it.
  void set_error_state() noexcept;
  // Moves to ERR for a failure that is not the responder's (the
  // requester's WQE failed, or the application asked): the peer's requests
  // executed here still get the ACK owed (send_owed_ack), then the flush.
  void fail_keeping_acks() noexcept;
  // Completes every outstanding WQE with WR_FLUSH_ERR (QP in ERR).
  void flush_locked() noexcept;
  void complete_send(SendWqe& wqe, verbs::WcStatus status) noexcept;
  EngineSnapshot snapshot() const noexcept;
  // RC/UC: looks the peer's UDP endpoint up again (peer_ports.hpp); the
  // requester does so when the peer stopped answering, as its process may
  // now receive on another port than the one found when connecting.
  void refresh_peer() noexcept;

  verbs::QpAttr attr;  // the one copy of the attributes; attr.qp_state is the QP's state
  WorkQueue<SendWqe> sq;
  WorkQueue<RecvWqe> rq;  // unused with an SRQ
  RequesterState req;     // requester + completer
  ResponderState resp;
  Endpoint peer;                     // RC/UC: the peer's UDP endpoint
  bool host_local = false;           // RC/UC: the peer is on this host (Nic::host_local)
  wire::IpUdpFields icrc_ip;         // RC/UC: ICRC fields of packets to the peer
  uint32_t mtu = 1024;               // path MTU in bytes
  RecvSource* xrc_target = nullptr;  // XRC_RECV: the SRQ of the request at hand (or last handled)
  XrcRemote* xrc_remote = nullptr;   // ... when that SRQ is another process's (xrc_share.hpp)
  uint32_t xrc_msg_srqn = 0;         // the SRQ the message in progress began with
  Dcqcn dcqcn;                       // the requester's rate (congestion.hpp)
  Swift swift;                       // the requester's delay-based window (CcMode::swift)
  Clock::time_point cnp_sent_at{};   // the last CNP this QP sent its peer
  // Responder: the requester's process, held for one-copy WRITEs once the
  // first came (responder_copy.cpp); dropped with the connection.
  std::unique_ptr<net::PeerProcess> copy_peer;
  std::unique_ptr<ReorderBuffer> reorder;  // responder: packets kept ahead of a gap (reorder.hpp)
  // The path to the peer, shared with the NIC's other QPs sending there
  // (path_share.hpp; RC/XRC senders): packets charged to it, whether the
  // QP waits for its turn, and whether it was given one (for its next send
  // pass).
  PathShare* path = nullptr;
  uint32_t path_charge = 0;
  bool path_waiting = false, path_pass = false;

 private:
  friend class Nic;  // the QP table, the transmit and ACK lists, the timers
  void modify_to(const verbs::QpAttr& a, uint32_t mask, verbs::QpState next, uint32_t port_mtu) noexcept;
  void reset() noexcept;
  Nic* nic_;
  EngineInit init_;
  uint32_t qpn_ = 0;
  bool in_ready_ = false;         // on the NIC's transmit list
  bool in_lazy_ = false;          // on the NIC's lazy-ACK list
  bool timer_queued_ = false;     // has an entry in the NIC's timer heap
  Clock::time_point timer_when_;  // ... due then
};

}  // namespace uroce::transport
