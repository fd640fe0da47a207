// QP1 of the NIC: the general services interface (IBA 13.5) on which the
// connection manager (src/cm) sends and receives its MADs.  The NIC itself
// knows nothing of MADs: it hands UD SEND_ONLY packets to QP1 that carry the
// GSI Q_Key to a handler, and sends the handler's MADs as UD SEND_ONLY
// packets from QP1 (P_Key 0xffff, AckReq set and a PSN counting per NIC, as
// Linux sends them), through the same transmit batch as everything else.
#include "transport/nic.hpp"
#include "wire/packet.hpp"

namespace uroce::transport {

void Nic::set_gsi_handler(GsiHandler h) {
  const bool on = static_cast<bool>(h);
  {
    std::lock_guard g(mu_);
    gsi_handler_ = std::move(h);
  }
  // MADs must be received while no application thread polls (a listener
  // waiting for connection requests has no QP yet).
  if (on) start_progress_thread();
}

void Nic::gsi_receive(const wire::Packet& pkt, const net::RxPacket& raw) noexcept {
  if (!gsi_handler_) {
    ++counters_.rx_unknown_qp;
    return;
  }
  if (pkt.hdr.bth.opcode != uint8_t(wire::Opcode::ud_send_only)) {
    ++counters_.rx_wrong_service;
    return;
  }
  if (pkt.hdr.deth.qkey != kGsiQkey) {
    ++counters_.ud_qkey_drops;
    return;
  }
  GsiPacket p{pkt.payload, raw.src, raw.dst, pkt.hdr.deth.src_qp, pkt.hdr.bth.pkey};
  gsi_handler_(p);
}

void Nic::send_gsi(const Endpoint& dst, std::span<const uint8_t> mad) noexcept {
  std::lock_guard g(mu_);
  wire::Headers h;
  h.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
  h.bth.pkey = wire::kDefaultPkey;
  h.bth.dest_qp = kGsiQpn;
  h.bth.ack_req = true;
  h.bth.psn = gsi_psn_;
  gsi_psn_ = (gsi_psn_ + 1) & wire::kPsnMask;
  h.deth.qkey = kGsiQkey;
  h.deth.src_qp = kGsiQpn;
  wire::IpUdpFields ip;
  ip.src = local_.addr;
  ip.src_port = local_.port;
  ip.dst = dst.addr;
  ip.dst_port = dst.port;
  ip.ipv4_id = io_->tx_ipv4_id();
  ip.ipv4_frag = io_->tx_ipv4_frag();
  if (tx_.full()) flush_tx();
  (void)tx_.add(dst, ip, h, mad);  // our own memory
  flush_tx();                      // `mad` is the caller's: it must have left before we return
}

}  // namespace uroce::transport
