// The one-copy WRITE, requester side (docs/one_copy_design.md).
//
// A large RC WRITE to a uroce peer whose ring is in this host's shared
// memory goes as UROCE_COPY_WRITE requests (wire/copy.hpp), each standing
// for up to a window's packets: the responder pulls the bytes out of our
// memory with one process_vm_readv.  PSNs, the window, ACKs, go-back-N and
// completions are those of the packets it stands for (requester.cpp
// emit_data).  A peer that cannot make the copy answers UROCE_COPY_NAK: the
// QP then sends its WRITEs as packets, from that PSN on.
#include "common/log.hpp"
#include "transport/protocol.hpp"
#include "transport/requester.hpp"
#include "wire/copy.hpp"
#include "wire/packet.hpp"

namespace uroce::transport {
namespace {

// Below this a WRITE goes as packets: a few ring slots cost less than a
// system call and a page walk.
constexpr uint32_t kCopyMinBytes = 32u << 10;
// A request moves at most this much: the responder holds its NIC lock
// while it copies (about 40 us for 512 KiB here).  Against 256 KiB, 1 MiB
// WRITEs went 12.1 -> 11.2-14.1 GB/s and 4 MiB ones 8.4 -> 9.0 GB/s
// (`uroce perf --op write --test bw`, UROCE_SHM=1 UROCE_SHM_COPY=1).
constexpr uint32_t kCopyChunkBytes = 512u << 10;
static_assert(kCopyChunkBytes <= wire::kCopyMaxBytes);

bool is_write(verbs::WrOpcode op) noexcept {
  return op == verbs::WrOpcode::rdma_write || op == verbs::WrOpcode::rdma_write_with_imm;
}

}  // namespace

uint32_t copy_chunk_packets(Nic& nic, QpEngine& qp, const SendWqe& w) noexcept {
  const RequesterState& r = qp.req;
  if (!nic.shm_copy() || r.copy_off || qp.type() != verbs::QpType::rc || !is_write(w.opcode) || w.is_inline ||
      w.length < kCopyMinBytes || w.num_sge > wire::kCopyMaxRanges || r.force_ack)
    return 0;
  // The window, as requester_produce checks it for one packet.
  const uint32_t flying = in_flight(r), ahead = uint32_t(psn_diff(r.send_psn, r.una_psn));
  const uint32_t room = std::min(window_pkts(qp) > flying ? window_pkts(qp) - flying : 0,
                                 max_window_pkts(qp) > ahead ? max_window_pkts(qp) - ahead : 0);
  const uint32_t left = w.npkts - r.send_pkt;
  // At least two chunks fit the window: one is copied while the ACK of the
  // one before comes back and the next goes out.  (One chunk per window --
  // 512 KiB at qperf's 2048-byte MTU -- left the responder idle between
  // chunks: qperf rc_rdma_write_bw 1 MiB moved 4.2 GB/s.)
  const uint32_t chunk = std::max<uint32_t>(1, std::min(kCopyChunkBytes / qp.mtu, max_window_pkts(qp) / 2));
  const uint32_t k = std::min({left, room, chunk});
  // A sliver of the window goes as packets: it opens again by chunks.
  if (k < std::min<uint32_t>(left, 4)) return 0;
  net::RingOwner owner;
  if (!nic.io().ring_owner(qp.peer, qp.attr.dest_qp_num, owner)) return 0;  // not through shared memory
  return k;
}

size_t build_copy_request(QpEngine& qp, const SendWqe& w, uint32_t idx, uint32_t k, std::span<uint8_t> out) noexcept {
  const RequesterState& r = qp.req;
  const uint64_t off = uint64_t(r.send_pkt) * qp.mtu;
  wire::CopyWrite c;
  c.bytes = uint32_t(std::min<uint64_t>(uint64_t(k) * qp.mtu, w.length - off));
  c.packets = k;
  const bool first = r.send_pkt == 0;
  const bool last = r.send_pkt + k == w.npkts;
  c.flags = uint8_t((first ? wire::kCopyFirst : 0) | (last ? wire::kCopyLast : 0));
  if (first) {
    c.va = w.remote_addr;
    c.rkey = w.rkey;
    c.length = w.length;
  }
  if (last && w.opcode == verbs::WrOpcode::rdma_write_with_imm) {
    c.flags |= wire::kCopyImm;
    c.imm = w.imm;
  }
  // Our memory, as the responder will read it: each piece resolved through
  // its lkey (key, PD, bounds) as gather() does for a packet.
  std::span<const verbs::Sge> sges{qp.sq.sges(idx), w.num_sge};
  uint64_t skip = off;
  uint32_t want = c.bytes;
  c.ranges.reserve(sges.size());
  for (const verbs::Sge& sge : sges) {
    if (want == 0) break;
    if (skip >= sge.length) {
      skip -= sge.length;
      continue;
    }
    const uint32_t n = uint32_t(std::min<uint64_t>(sge.length - skip, want));
    const uint8_t* p = qp.mem().local(sge.lkey, sge.addr + skip, n, 0);
    if (!p) return 0;
    c.ranges.push_back({uint64_t(uintptr_t(p)), n});
    want -= n;
    skip = 0;
  }
  if (want != 0) return 0;
  return wire::write_copy_request(c, out);
}

void copy_nak_receive(Nic& nic, QpEngine& qp, const wire::Packet& pkt) noexcept {
  const auto why = wire::parse_copy_nak(pkt.payload);
  if (!why) {
    ++nic.counters().rx_malformed;
    return;
  }
  RequesterState& r = qp.req;
  ++nic.counters().req_copy_naks_rcvd;
  if (!r.copy_off)
    UROCE_LOG(info, "QP 0x%06x: the peer could not copy a WRITE (%s): WRITEs go as packets", qp.qpn(),
              *why == wire::CopyNakReason::refused ? "refused by the kernel" : "our memory faulted");
  r.copy_off = true;
  // The request at this PSN was not carried out: everything from it goes
  // again as packets (one of ours lost meanwhile, or already acknowledged,
  // asks for nothing).
  const uint32_t psn = pkt.hdr.bth.psn;
  if (psn_before(psn, r.una_psn) || !psn_before(psn, r.sent_hwm)) return;
  go_back(nic, qp, psn);
}

}  // namespace uroce::transport
