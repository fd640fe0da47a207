// The one-copy WRITE and READ, responder side (docs/one_copy_design.md).
//
// A UROCE_COPY_WRITE (wire/copy.hpp) stands for packets p .. p+k-1 of an
// RC WRITE: it runs through the very state those packets would
// (responder_write: the rkey, PD, rights and bounds checks, the length
// rules, a WRITE with immediate's receive, ePSN, the ACK), and its bytes
// come from the requester's memory in one process_vm_readv rather than
// from payloads.  A UROCE_COPY_READ is a READ request (responder_read: the
// checks, a resource, ePSN) whose responses, when their turn comes among
// the others, are one process_vm_writev into the requester's memory and
// one UROCE_COPY_READ_DONE standing for the response packets.
//
// Whom we trust: only a request that came through our shared-memory ring,
// which only a process of this host and user can write to (one of UDP
// could make us copy any process's memory, unregistered, into a region);
// and the requester's process is the one the host's ring files name for
// its endpoint and QP, never one the packet names.
//
// A copy that cannot be made is answered UROCE_COPY_NAK and counts for
// nothing: the kernel refused us the peer (EPERM: ptrace rules, Yama,
// seccomp; ESRCH: it is gone), or the requester's memory faulted under
// the copy.  The requester then sends the same bytes as packets, which
// fail or succeed as any would.  A fault in our own region is the
// REMOTE_ACCESS_ERR of a packet that finds it gone.
#include <sys/uio.h>

#include <cerrno>
#include <optional>
#include <vector>

#include "common/fault_guard.hpp"
#include "common/log.hpp"
#include "net/peer_process.hpp"
#include "transport/congestion.hpp"
#include "transport/copy_gate.hpp"
#include "transport/protocol.hpp"
#include "transport/psn.hpp"
#include "transport/qp_engine.hpp"
#include "transport/responder.hpp"
#include "wire/copy.hpp"

namespace uroce::transport {
namespace {

using wire::CopyNakReason;
using wire::NakCode;

// A UROCE_COPY_NAK or UROCE_COPY_READ_DONE to the requester.
void send_answer(Nic& nic, QpEngine& qp, wire::Opcode op, uint32_t psn, std::span<const uint8_t> payload) noexcept {
  wire::Headers h;
  h.bth.opcode = uint8_t(op);
  h.bth.dest_qp = qp.attr.dest_qp_num;
  h.bth.psn = psn;
  if (nic.tx().full()) nic.flush_tx();
  uint8_t* body = nic.tx().scratch();  // (the batch does not copy bodies)
  std::copy(payload.begin(), payload.end(), body);
  (void)nic.tx().add(qp.peer, qp.icrc_ip, h, {body, payload.size()}, qp_tos(nic, qp));
}

void send_copy_nak(Nic& nic, QpEngine& qp, uint32_t psn, CopyNakReason why) noexcept {
  send_answer(nic, qp, wire::Opcode::uroce_copy_nak, psn, wire::copy_nak_payload(why));
}

// A request at the expected PSN refused: the requester goes back to it, so
// the requests it sent after this one draw no sequence NAK of their own.
void refuse_request(Nic& nic, QpEngine& qp, uint32_t psn, CopyNakReason why) noexcept {
  send_copy_nak(nic, qp, psn, why);
  transition(qp.qpn(), qp.resp.seq, SeqNak::sent);
  qp.resp.nak_hi = psn;
}

struct Pull {
  const net::PeerProcess* peer;
  std::span<const iovec> remote;
  uint32_t psn;
  uint32_t gate;  // the request's generation of the requester's copy gate
};

// The requester's copy gate held for one copy of a request built under
// generation `gate` (copy_gate.hpp); not open if the requester fenced
// since (or its ring is gone).
CopyGateHold hold_gate(Nic& nic, const QpEngine& qp, uint32_t gate) noexcept {
  return CopyGateHold(nic.io().peer_copy_gate(qp.peer, qp.attr.dest_qp_num), gate);
}

// Places a chunk by pulling it from the requester (responder_write).
WritePlaced place_from_peer(Nic& nic, QpEngine& qp, uint8_t* dst, uint32_t len, const void* ctx) noexcept {
  const Pull& pull = *static_cast<const Pull*>(ctx);
  Counters& c = nic.counters();
  const CopyGateHold gate = hold_gate(nic, qp, pull.gate);
  if (!gate.open()) {
    // The requester let its memory go since it asked (a flush, a region
    // deregistered): not from there; it asks again with packets if it
    // still wants to.
    ++c.resp_copy_stale;
    refuse_request(nic, qp, pull.psn, CopyNakReason::stale);
    return WritePlaced::declined;
  }
  const iovec local{dst, len};
  const Result<size_t> got = pull.peer->read({&local, 1}, pull.remote);
  if (got.ok() && *got == len) return WritePlaced::done;
  if (!got.ok() && got.status().code() != EFAULT) {
    // Not allowed (EPERM), the requester gone (ESRCH), no such call
    // (ENOSYS): packets from now on.
    ++c.resp_copy_refused;
    UROCE_LOG(info, "QP 0x%06x: cannot copy from the requester: %s; asking for packets", qp.qpn(),
              got.status().to_string().c_str());
    qp.resp.copy_refused = true;
    refuse_request(nic, qp, pull.psn, CopyNakReason::refused);
    return WritePlaced::declined;
  }
  // A fault stopped it at byte n: ours, if our own byte n cannot be
  // written (the region unmapped or re-protected since registration).
  const size_t n = got.ok() ? *got : 0;
  uint8_t* at = dst + n;
  if (!fault_guard::copy(at, at, 1, at)) {
    ++c.resp_memory_faults;
    return WritePlaced::own_fault;
  }
  ++c.resp_copy_requester_faults;
  refuse_request(nic, qp, pull.psn, CopyNakReason::requester_fault);
  return WritePlaced::declined;
}

// The requester's process, held from the first request on; null (and
// answered so from then on) if it cannot be, or we were not asked to
// carry out requests (a NIC that was not makes no such call).  It is the
// owner of the ring our packets to the QP's peer go through: the one its
// path resolution named, not one a packet names.
const net::PeerProcess* requester_process(Nic& nic, QpEngine& qp) noexcept {
  if (!nic.copy_serves() || qp.resp.copy_refused) return nullptr;  // (also once a copy was refused)
  if (qp.copy_peer) return qp.copy_peer.get();
  net::RingOwner owner;
  if (!nic.io().ring_owner(qp.peer, qp.attr.dest_qp_num, owner)) {
    UROCE_LOG(info, "QP 0x%06x: no ring names the requester %s", qp.qpn(), qp.peer.to_string().c_str());
    return nullptr;
  }
  auto peer = net::PeerProcess::open(owner.pid, owner.start);
  if (!peer.ok()) {
    UROCE_LOG(info, "QP 0x%06x: requester process %d: %s", qp.qpn(), int(owner.pid), peer.status().to_string().c_str());
    return nullptr;
  }
  qp.copy_peer = std::make_unique<net::PeerProcess>(std::move(*peer));
  return qp.copy_peer.get();
}

// The request in a UROCE_COPY_WRITE/READ if it may be acted on: it came
// through our ring, parses, and is not ahead of the expected PSN (then the
// packet before it was lost: asked for, the request not kept).
std::optional<wire::CopyRequest> trusted_request(Nic& nic, QpEngine& qp, const wire::Packet& pkt,
                                                 const net::RxPacket& raw) {
  Counters& c = nic.counters();
  if (!raw.via_ring || raw.src != qp.peer) {
    ++c.copy_untrusted;
    UROCE_LOG(debug, "drop a one-copy request from %s that did not come through shared memory from the peer",
              raw.src.to_string().c_str());
    return std::nullopt;
  }
  std::optional<wire::CopyRequest> req = wire::parse_copy_request(pkt.payload);
  if (!req) {
    ++c.rx_malformed;
    return std::nullopt;
  }
  ResponderState& s = qp.resp;
  const uint32_t psn = pkt.hdr.bth.psn;
  if (psn_diff(psn, s.epsn) > 0) {
    ++c.resp_future_psn;
    if (s.seq == SeqNak::clear) {
      responder_nak(nic, qp, s.epsn, NakCode::psn_sequence_error);
      s.nak_hi = psn;
    }
    return std::nullopt;
  }
  // k packets: k MTUs, or fewer bytes on the last; never more than one
  // request may move.
  const uint64_t pkts_for_bytes = (uint64_t(req->bytes) + qp.mtu - 1) / qp.mtu;
  if (req->bytes > wire::kCopyMaxBytes || req->packets != pkts_for_bytes) {
    ++c.resp_len_errors;
    if (psn == s.epsn) responder_fail(nic, qp, psn, NakCode::invalid_request);
    return std::nullopt;
  }
  return req;
}

}  // namespace

void responder_copy_write(Nic& nic, QpEngine& qp, const wire::Packet& pkt, const net::RxPacket& raw) noexcept {
  Counters& c = nic.counters();
  const std::optional<wire::CopyRequest> req = trusted_request(nic, qp, pkt, raw);
  if (!req) return;
  ResponderState& s = qp.resp;
  const uint32_t psn = pkt.hdr.bth.psn;
  const int32_t d = psn_diff(psn, s.epsn);
  if (d < 0) {  // carried out before: its ACK was lost
    ++c.resp_duplicates;
    if (pkt.hdr.bth.ack_req) responder_ack(nic, qp, psn_add(s.epsn, kPsnMask), Answerable::no);
    return;
  }
  transition(qp.qpn(), s.seq, SeqNak::clear);
  const bool first = req->flags & wire::kCopyFirst;
  if (first ? s.msg != RespMsg::idle : s.msg != RespMsg::write) {
    ++c.resp_opcode_seq_errors;
    responder_fail(nic, qp, psn, NakCode::invalid_request);
    return;
  }
  const net::PeerProcess* peer = requester_process(nic, qp);
  if (!peer) {
    ++c.resp_copy_refused;
    s.copy_refused = true;
    refuse_request(nic, qp, psn, CopyNakReason::refused);
    return;
  }
  std::vector<iovec> remote;
  remote.reserve(req->ranges.size());
  for (const wire::CopyRange& r : req->ranges)
    remote.push_back({reinterpret_cast<void*>(uintptr_t(r.addr)), size_t(r.len)});
  WriteChunk ch;
  ch.psn = psn;
  ch.npkts = req->packets;
  ch.first = first;
  ch.last = req->flags & wire::kCopyLast;
  ch.imm = req->flags & wire::kCopyImm;
  ch.solicited = pkt.hdr.bth.solicited;
  ch.ack_req = pkt.hdr.bth.ack_req;
  ch.imm_data = req->imm;
  ch.va = req->va;
  ch.rkey = req->rkey;
  ch.length = req->length;
  ch.len = req->bytes;
  const Pull pull{peer, remote, psn, req->gate};
  responder_write(nic, qp, ch, place_from_peer, &pull);
  if (s.epsn == psn_add(psn, req->packets)) {
    ++c.resp_copy_writes;
    c.resp_copy_bytes += req->bytes;
  }
  // A copy takes microseconds (about 6 for 64 KiB here): its ACK leaves
  // now, not after the copies of the rest of this receive batch, nor held
  // for an answer (the requester's window waits for it).  Coalesced with
  // the batch's, one ACK came per window of requests: the window drained
  // before it opened again, and a requester that sleeps between
  // completions (qperf's blocking waits) slept, to be woken by a doorbell,
  // once per window (rc_rdma_write_bw 64 KiB: 3.2 GB/s, 10.4 polling).
  if (ch.ack_req && s.ack == AckOwed::ack) {
    nic.flush_acks(Nic::HeldAck::early);  // (if it was held: with any other held ones)
    nic.pump();
  }
}

void responder_copy_read(Nic& nic, QpEngine& qp, const wire::Packet& pkt, const net::RxPacket& raw) noexcept {
  Counters& c = nic.counters();
  std::optional<wire::CopyRequest> req = trusted_request(nic, qp, pkt, raw);
  if (!req) return;
  ResponderState& s = qp.resp;
  const uint32_t psn = pkt.hdr.bth.psn;
  const int32_t d = psn_diff(psn, s.epsn);
  if (req->flags != 0 || req->length != req->bytes) {
    ++c.rx_malformed;
    return;
  }
  if (d == 0 && s.msg != RespMsg::idle) {  // in the middle of a SEND or WRITE
    transition(qp.qpn(), s.seq, SeqNak::clear);
    ++c.resp_opcode_seq_errors;
    responder_fail(nic, qp, psn, NakCode::invalid_request);
    return;
  }
  wire::Reth reth;
  reth.va = req->va;
  reth.rkey = req->rkey;
  reth.length = req->bytes;
  if (d < 0) {
    // Asked again (the responses were lost, or it was duplicated): read
    // again as packets, which the requester drops once it has them.  A
    // second push could land after the READ completed and its memory went
    // back to the application.  (Our requester asks again with packets.)
    ++c.resp_duplicates;
    if (!responder_reread(nic, qp, psn, reth, {})) ++c.resp_dup_unmatched;
    return;
  }
  if (!requester_process(nic, qp)) {
    ++c.resp_copy_refused;
    s.copy_refused = true;
    refuse_request(nic, qp, psn, CopyNakReason::refused);
    return;
  }
  transition(qp.qpn(), s.seq, SeqNak::clear);
  responder_read(nic, qp, psn, reth, std::move(req->ranges), req->gate);
}

void responder_push_read(Nic& nic, QpEngine& qp, RdAtomicResource& r) noexcept {
  Counters& c = nic.counters();
  const std::vector<wire::CopyRange> sink = std::move(r.sink);
  r.sink.clear();
  const uint32_t gate_gen = r.sink_gate;
  const uint32_t first = r.resp_psn;
  const uint32_t bytes = r.resp_left;
  const uint32_t n = bytes == 0 ? 1 : uint32_t((uint64_t(bytes) + qp.mtu - 1) / qp.mtu);
  const net::PeerProcess* peer = qp.resp.copy_refused ? nullptr : qp.copy_peer.get();
  if (!peer) {  // (refused since it was asked for)
    ++c.resp_copy_refused;
    send_copy_nak(nic, qp, first, CopyNakReason::refused);
    return;
  }
  if (bytes) {
    const uint8_t* src = responder_remote_ptr(nic, qp, r.rkey, r.resp_va, bytes, verbs::access::kRemoteRead);
    if (!src) {  // deregistered since it was asked for
      responder_fail(nic, qp, first, NakCode::remote_access_error);
      return;
    }
    std::vector<iovec> remote;
    remote.reserve(sink.size());
    for (const wire::CopyRange& x : sink) remote.push_back({reinterpret_cast<void*>(uintptr_t(x.addr)), size_t(x.len)});
    CopyGateHold gate = hold_gate(nic, qp, gate_gen);
    if (!gate.open()) {  // (as in place_from_peer)
      ++c.resp_copy_stale;
      send_copy_nak(nic, qp, first, CopyNakReason::stale);
      return;
    }
    const iovec local{const_cast<uint8_t*>(src), bytes};
    const Result<size_t> put = peer->write({&local, 1}, remote);
    gate.release();  // (before anything below may fence: responder_fail with our own peer)
    if (!put.ok() || *put != bytes) {
      if (!put.ok() && put.status().code() != EFAULT) {
        ++c.resp_copy_refused;
        UROCE_LOG(info, "QP 0x%06x: cannot copy to the requester: %s; asking for packets", qp.qpn(),
                  put.status().to_string().c_str());
        qp.resp.copy_refused = true;
        send_copy_nak(nic, qp, first, CopyNakReason::refused);
        return;
      }
      // Stopped at byte k: ours if our own byte k cannot be read.
      const uint8_t* at = src + (put.ok() ? *put : 0);
      uint8_t probe;
      if (!fault_guard::copy(&probe, at, 1, at)) {
        ++c.resp_memory_faults;
        responder_fail(nic, qp, first, NakCode::remote_access_error);
        return;
      }
      ++c.resp_copy_requester_faults;
      send_copy_nak(nic, qp, first, CopyNakReason::requester_fault);
      return;
    }
  }
  send_answer(nic, qp, wire::Opcode::uroce_copy_read_done, first, wire::copy_done_payload(n));
  // The READ is done: that leaves now, not after the pushes of the other
  // READs this turn answers (as a copied WRITE's ACK, responder_copy_write).
  nic.flush_tx();
  ++c.resp_copy_reads;
  c.resp_copy_read_bytes += bytes;
  r.resp_psn = psn_add(first, n);
  r.resp_va += bytes;
  r.resp_left = 0;
}

}  // namespace uroce::transport
