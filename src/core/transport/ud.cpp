// UD receive (IBA 9.8): Q_Key check, one packet = one message, and the
// 40-byte GRH area in front of the data holding the packet's IP header, the
// way RoCEv2 NICs place it (ibv_ud_pingpong and ibv_create_ah_from_wc read it).
#include "transport/nic.hpp"
#include "transport/protocol.hpp"
#include "transport/qp_engine.hpp"
#include "transport/sge.hpp"
#include "wire/ip_header.hpp"

namespace uroce::transport {

namespace {
constexpr uint8_t kRoceL3Ipv6 = 1;
constexpr uint8_t kRoceL3Ipv4 = 2;
}  // namespace

void ud_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt, const net::RxPacket& raw) noexcept {
  const wire::Deth& deth = pkt.hdr.deth;
  if (deth.qkey != qp.attr.qkey) {
    ++nic.counters().ud_qkey_drops;
    return;
  }
  ResponderState& s = qp.resp;
  const uint32_t total = uint32_t(wire::kGrhLen + pkt.payload.size());
  // A message longer than the receive buffer (GRH included): as rxe does
  // (IBA class D), dropped with the WQE left in place for the next one;
  // from an SRQ the WQE was already taken and completes in error.
  bool too_long = false;
  if (RecvSource* srq = qp.srq()) {
    if (!srq->take(s.recv, s.recv_sges)) {
      ++nic.counters().ud_no_recv_drops;
      return;
    }
    too_long = total > s.recv.length;
  } else {
    if (qp.rq.empty()) {
      ++nic.counters().ud_no_recv_drops;
      return;
    }
    const uint32_t h = qp.rq.head();
    if (total > qp.rq.at(h).length) {
      ++nic.counters().ud_len_errors;
      return;
    }
    s.recv = qp.rq.at(h);
    s.recv_sges.assign(qp.rq.sges(h), qp.rq.sges(h) + s.recv.num_sge);
    qp.rq.pop();
  }
  verbs::Wc wc;
  wc.wr_id = s.recv.wr_id;
  wc.opcode = verbs::WcOpcode::recv;
  wc.qp_num = qp.qpn();
  wc.src_qp = deth.src_qp;
  wc.wc_flags = verbs::wc_flags::kGrh;
  // The network header type of the GRH area, in sl as mlx5 NICs report it
  // for RoCE (UCX's ud_verbs reads it there to find the destination address):
  // 1 IPv6, 2 IPv4.  RoCE has no IB service level to report.
  wc.sl = raw.src.addr.is_v4() ? kRoceL3Ipv4 : kRoceL3Ipv6;
  wc.byte_len = total;
  if (pkt.info->flags & wire::op::kImm) {
    wc.wc_flags |= verbs::wc_flags::kWithImm;
    wc.imm_data = pkt.hdr.imm;
  }
  if (too_long) {
    ++nic.counters().ud_len_errors;
    wc.status = verbs::WcStatus::rem_inv_req_err;
  } else {
    wire::IpUdpFields f;
    f.src = raw.src.addr;
    f.dst = raw.dst;
    f.src_port = raw.src.port;
    f.dst_port = raw.dst.is_multicast() ? net::kRoceV2Port : nic.local().port;
    wire::IpVariantFields v;
    v.tos = raw.tos;
    v.ttl = raw.ttl;
    uint8_t grh[wire::kGrhLen];
    wire::write_grh(f, v, raw.data.size(), std::span<uint8_t, wire::kGrhLen>(grh));
    const MemoryDomain& mem = qp.recv_mem();
    if (!scatter(mem, s.recv_sges, 0, grh) || !scatter(mem, s.recv_sges, wire::kGrhLen, pkt.payload))
      wc.status = verbs::WcStatus::loc_prot_err;
  }
  nic.deliver(qp.recv_cq(), wc, pkt.hdr.bth.solicited || wc.status != verbs::WcStatus::success);
}

}  // namespace uroce::transport
