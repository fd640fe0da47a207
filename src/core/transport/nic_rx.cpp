// Nic, the receiving side: packets taken from the I/O in batches, each
// decoded, checked (ICRC, P_Key, service, state, source) and handed to its
// QP's requester, responder or completer, to the connection manager on QP1,
// or to a multicast group's QPs.
#include "common/log.hpp"
#include "net/packet_io.hpp"
#include "transport/nic.hpp"
#include "transport/protocol.hpp"
#include "transport/qp_engine.hpp"
#include "transport/requester.hpp"
#include "transport/responder.hpp"
#include "wire/icrc.hpp"
#include "wire/packet.hpp"

namespace uroce::transport {

size_t Nic::poll_rx() noexcept {
  size_t n = io_->recv_batch(rx_);
  // What other processes' XRC_RECV QPs received for our SRQs (xrc_share.hpp).
  const size_t handed = xrc_inboxes_.empty() ? 0 : drain_xrc_inboxes();
  if (n == 0) return handed;
  refresh_now();
  last_rx_ = now_;
  // The packets of one GSO train (GRO's indices 0, 1, 2...) in order, but
  // for an ACK that ends a train: that one first.  A peer's answer and the
  // ACK it held for it leave in one datagram, the ACK last (Nic::pump), and
  // it is taken as if sent first: our request completes before its answer
  // shows, as when ACKs went first on the wire (ib_send_lat -e, which polls
  // one completion per event, hung in 13 of 16 runs the other way round).
  for (size_t i = 0; i < n;) {
    size_t end = i + 1;
    while (end < n && rx_[end].ipv4_id_hint == rx_[end - 1].ipv4_id_hint + 1) ++end;
    const size_t last = end - 1;
    const bool ack_first = last > i && !rx_[last].data.empty() && wire::is_acknowledge(rx_[last].data[0]);
    if (ack_first) dispatch(rx_[last]);
    for (size_t k = i; k < (ack_first ? last : end); ++k) dispatch(rx_[k]);
    i = end;
  }
  pump();
  return n + handed;
}

// The ICRC guards a packet on a wire.  One taken from our own shared-memory
// ring crossed none: only processes of our user can write there (and they
// could compute any ICRC they liked), so its sender may leave the ICRC out
// (we advertise net::kRingTakesNoIcrc), saving each side about 250
// instructions a packet, and dispatch() does not call this for it.  A
// fault-injecting I/O that corrupts such a packet clears icrc_omitted, so
// the check catches it.
inline bool Nic::icrc_ok(const net::RxPacket& raw) noexcept {
  wire::IpUdpFields ip;
  ip.src = raw.src.addr;
  ip.dst = raw.dst;
  ip.src_port = raw.src.port;
  ip.dst_port = raw.dst.is_multicast() ? net::kRoceV2Port : local_.port;
  ip.ipv4_id = raw.ipv4_id_hint;  // a GRO train's packet i: ID i (verify_icrc solves others)
  ip.ipv4_frag = 0x4000;
  switch (wire::verify_icrc(ip, raw.data)) {
    case wire::IcrcCheck::ok: return true;
    case wire::IcrcCheck::ok_id_solved: ++counters_.rx_icrc_id_solved; return true;
    case wire::IcrcCheck::bad: break;
  }
  ++counters_.rx_icrc_bad;
  UROCE_LOG(debug, "drop from %s: bad ICRC", raw.src.to_string().c_str());
  return false;
}

void Nic::dispatch(net::RxPacket& raw) noexcept {
  ++counters_.rx_packets;
  counters_.rx_bytes += raw.data.size();
  if (raw.truncated) {
    ++counters_.rx_truncated;
    return;
  }
  wire::Packet pkt;
  wire::DecodeError derr;
  if (!wire::decode(raw.data, pkt, derr)) {
    ++counters_.rx_malformed;
    UROCE_LOG(debug, "drop from %s: %s", raw.src.to_string().c_str(), wire::to_string(derr));
    return;
  }
  if (!(raw.via_ring && raw.icrc_omitted) && !icrc_ok(raw)) return;
  // The port's P_Key table holds the default key only (ibv_query_pkey):
  // a packet of another partition is dropped, as rxe and NICs drop it.
  if (!wire::pkey_matches(pkt.hdr.bth.pkey, wire::kDefaultPkey)) {
    ++counters_.rx_pkey_violations;
    UROCE_LOG(debug, "drop from %s: P_Key 0x%04x", raw.src.to_string().c_str(), pkt.hdr.bth.pkey);
    return;
  }
  const wire::OpcodeInfo& info = *pkt.info;
  if (info.service == wire::Service::cnp) {
    ++counters_.rx_cnp;
    receive_cnp(pkt, raw);
    return;
  }
  if (pkt.hdr.bth.dest_qp == kGsiQpn) {  // QP1: the connection manager's (gsi.cpp)
    gsi_receive(pkt, raw);
    return;
  }
  if (pkt.hdr.bth.dest_qp == kMulticastQpn) {
    deliver_multicast(pkt, raw);
    return;
  }
  QpEngine* qp = find_qp(pkt.hdr.bth.dest_qp);
  if (!qp) {
    ++counters_.rx_unknown_qp;
    return;
  }
  const verbs::QpType t = qp->type();
  // XRC: requests to an XRC_RECV QP, responses to an XRC_SEND QP.
  const bool request = info.flags & wire::op::kRequest;
  const bool service_ok = (info.service == wire::Service::rc && t == verbs::QpType::rc) ||
                          (info.service == wire::Service::uc && t == verbs::QpType::uc) ||
                          (info.service == wire::Service::ud && t == verbs::QpType::ud) ||
                          (info.service == wire::Service::xrc && t == verbs::QpType::xrc_recv && request) ||
                          (info.service == wire::Service::xrc && t == verbs::QpType::xrc_send && !request) ||
                          (info.service == wire::Service::uroce && t == verbs::QpType::rc);
  if (!service_ok) {
    ++counters_.rx_wrong_service;
    return;
  }
  const verbs::QpState st = qp->state();
  if (st == verbs::QpState::reset || st == verbs::QpState::init || st == verbs::QpState::err) {
    ++counters_.rx_bad_state;
    return;
  }
  if (t == verbs::QpType::ud) {
    ud_receive(*this, *qp, pkt, raw);
    return;
  }
  // A connected QP listens to its peer only.
  if (raw.src.addr != qp->peer.addr) {
    ++counters_.rx_foreign_source;
    return;
  }
  if ((raw.tos & kEcnMask) == kEcnCe) congestion_marked(*this, *qp);
  if (info.service == wire::Service::uroce) {  // between uroce peers: SACKs (wire/sack.hpp), one copy (wire/copy.hpp)
    const auto op = wire::Opcode(pkt.hdr.bth.opcode);
    if (op == wire::Opcode::uroce_sack_hello) {
      responder_sack_hello(*this, *qp, pkt);
    } else if (op == wire::Opcode::uroce_copy_write || op == wire::Opcode::uroce_copy_read) {
      if (op == wire::Opcode::uroce_copy_write)
        responder_copy_write(*this, *qp, pkt, raw);
      else
        responder_copy_read(*this, *qp, pkt, raw);
      if (qp->reorder) responder_drain(*this, *qp);  // packets kept for after it
    } else if (st == verbs::QpState::rtr) {
      ++counters_.rx_bad_state;
    } else if ((op == wire::Opcode::uroce_copy_nak || op == wire::Opcode::uroce_copy_read_done) &&
               (!raw.via_ring || raw.src != qp->peer)) {
      ++counters_.copy_untrusted;  // only a peer's ring carries them
    } else if (op == wire::Opcode::uroce_copy_nak) {
      copy_nak_receive(*this, *qp, pkt);
    } else if (op == wire::Opcode::uroce_copy_read_done) {
      copy_read_done_receive(*this, *qp, pkt);
    } else {
      sack_receive(*this, *qp, pkt);
    }
    return;
  }
  if (info.flags & wire::op::kResponse) {
    if (qp->reliable() && st != verbs::QpState::rtr)
      completer_receive(*this, *qp, pkt);
    else
      ++counters_.rx_bad_state;
  } else {
    responder_receive(*this, *qp, pkt);
    if (qp->reorder) responder_drain(*this, *qp);  // packets kept for after this one
  }
}

// A CNP from the peer of one of our connected QPs cuts that QP's rate
// (congestion.hpp); any other is counted in rx_cnp only.
void Nic::receive_cnp(const wire::Packet& pkt, const net::RxPacket& raw) noexcept {
  QpEngine* qp = find_qp(pkt.hdr.bth.dest_qp);
  if (!qp || qp->type() == verbs::QpType::ud || qp->xrc_recv() || raw.src.addr != qp->peer.addr) return;
  const verbs::QpState st = qp->state();
  if (st != verbs::QpState::rts && st != verbs::QpState::sqd) return;
  congestion_notified(*this, *qp);
}

// A UD datagram to a multicast group: a copy to each QP attached to the
// group it was sent to (each checks its own Q_Key and takes a receive), but
// not to the QP that sent it when it comes back to us (IP_MULTICAST_LOOP
// gives the host's other subscribers their copy).
void Nic::deliver_multicast(const wire::Packet& pkt, const net::RxPacket& raw) noexcept {
  auto it = raw.dst.is_multicast() ? mcast_.find(raw.dst) : mcast_.end();
  if (it == mcast_.end() || pkt.info->service != wire::Service::ud) {
    ++counters_.rx_unknown_qp;
    return;
  }
  ++counters_.mcast_rx_packets;
  const bool from_us = raw.src.addr == local_.addr;
  for (const uint32_t qpn : it->second) {
    QpEngine* qp = find_qp(qpn);
    if (!qp || (from_us && pkt.hdr.deth.src_qp == qpn)) continue;
    const verbs::QpState st = qp->state();
    if (st == verbs::QpState::reset || st == verbs::QpState::init || st == verbs::QpState::err) continue;
    ud_receive(*this, *qp, pkt, raw);
  }
}

}  // namespace uroce::transport
