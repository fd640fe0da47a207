// The one-copy WRITE and READ, requester side (docs/one_copy_design.md).
//
// A large RC WRITE to a uroce peer whose ring is in this host's shared
// memory goes as UROCE_COPY_WRITE requests (wire/copy.hpp), each standing
// for up to 512 KiB of packets: the responder pulls the bytes out of our
// memory with one process_vm_readv.  A large READ asks for each segment
// with a UROCE_COPY_READ naming where its bytes go (requester.cpp
// send_read_request).  PSNs, the window, ACKs, go-back-N and completions
// are those of the packets a request stands for.  A peer that cannot make
// the copy answers UROCE_COPY_NAK: the QP then sends its WRITEs and READs
// as packets, from that PSN on.
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

// Whether `w` may go in one-copy requests at all.
bool copy_allowed(Nic& nic, const QpEngine& qp, const SendWqe& w) noexcept {
  return nic.copy_requests() && !qp.req.copy_off && qp.type() == verbs::QpType::rc && !w.is_inline &&
         w.length >= kCopyMinBytes && w.num_sge <= wire::kCopyMaxRanges;
}

// The peer's packets go through its ring, and it takes requests there
// and honours our gate (an older uroce that takes them but not the gate
// is sent packets).
bool to_ring(Nic& nic, const QpEngine& qp) noexcept {
  net::RingOwner owner;
  constexpr uint64_t kNeeds = net::kRingTakesCopy | net::kRingHonoursGate;
  return nic.io().ring_owner(qp.peer, qp.attr.dest_qp_num, owner) && (owner.caps & kNeeds) == kNeeds;
}

// Bytes [off, off + len) of `w`'s scatter/gather list as ranges of our
// address space, each piece resolved through its lkey (key, PD, bounds,
// `need`) as gather() and scatter() do for a packet.  False if a check
// failed or the list is short.
bool local_ranges(QpEngine& qp, const SendWqe& w, uint32_t idx, uint64_t off, uint32_t len, uint32_t need,
                  std::vector<wire::CopyRange>& out) {
  std::span<const verbs::Sge> sges{qp.sq.sges(idx), w.num_sge};
  out.reserve(sges.size());
  for (const verbs::Sge& sge : sges) {
    if (len == 0) break;
    if (off >= sge.length) {
      off -= sge.length;
      continue;
    }
    const uint32_t n = uint32_t(std::min<uint64_t>(sge.length - off, len));
    const uint8_t* p = qp.mem().local(sge.lkey, sge.addr + off, n, need);
    if (!p) return false;
    out.push_back({uint64_t(uintptr_t(p)), n});
    len -= n;
    off = 0;
  }
  return len == 0;
}

}  // namespace

uint32_t copy_chunk_packets(Nic& nic, QpEngine& qp, const SendWqe& w) noexcept {
  const RequesterState& r = qp.req;
  if (!is_write(w.opcode) || r.force_ack || !copy_allowed(nic, qp, w)) return 0;
  // The window, as requester_produce checks it for one packet.
  const uint32_t flying = in_flight(r), ahead = uint32_t(psn_diff(r.send_psn, r.una_psn));
  const uint32_t room = std::min(window_pkts(qp) > flying ? window_pkts(qp) - flying : 0,
                                 max_window_pkts(qp) > ahead ? max_window_pkts(qp) - ahead : 0);
  const uint32_t left = w.npkts - r.send_pkt;
  // At least two chunks fit the window: one is copied while the ACK of the
  // one before comes back and the next goes out (at qperf's 2048-byte MTU
  // the window is 512 KiB, one whole chunk).  qperf rc_rdma_write_bw 1 MiB
  // did not gain from it: its client sleeps for each completion.
  const uint32_t chunk = std::max<uint32_t>(1, std::min(kCopyChunkBytes / qp.mtu, max_window_pkts(qp) / 2));
  const uint32_t k = std::min({left, room, chunk});
  // A sliver of the window goes as packets: it opens again by chunks.
  if (k < std::min<uint32_t>(left, 4)) return 0;
  return to_ring(nic, qp) ? k : 0;
}

size_t build_copy_request(Nic& nic, QpEngine& qp, const SendWqe& w, uint32_t idx, uint32_t k,
                          std::span<uint8_t> out) noexcept {
  const RequesterState& r = qp.req;
  const uint64_t off = uint64_t(r.send_pkt) * qp.mtu;
  wire::CopyRequest c;
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
  // Our memory, as the responder will read it.
  if (!local_ranges(qp, w, idx, off, c.bytes, 0, c.ranges)) return 0;
  c.gate = nic.copy_request_gate();
  qp.req.copy_used = true;
  return wire::write_copy_request(c, out);
}

size_t build_copy_read_request(Nic& nic, QpEngine& qp, const SendWqe& w, uint32_t idx, uint32_t i, uint32_t n,
                               std::span<uint8_t> out) noexcept {
  if (!copy_allowed(nic, qp, w) || !to_ring(nic, qp)) return 0;
  const uint64_t off = uint64_t(i) * qp.mtu;
  wire::CopyRequest c;
  c.packets = n;
  c.bytes = uint32_t(std::min<uint64_t>(uint64_t(n) * qp.mtu, w.length - off));
  c.va = w.remote_addr + off;
  c.rkey = w.rkey;
  c.length = c.bytes;
  if (c.bytes == 0 || c.bytes > wire::kCopyMaxBytes) return 0;
  // Where the responder will put the bytes: memory we may write (else the
  // responses come as packets, and fail there as they would).
  if (!local_ranges(qp, w, idx, off, c.bytes, verbs::access::kLocalWrite, c.ranges)) return 0;
  c.gate = nic.copy_request_gate();
  qp.req.copy_used = true;
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
  // Stale: we fenced since we asked (another QP's flush, a region
  // deregistered); later requests carry the new generation.
  if (*why != wire::CopyNakReason::stale) {
    if (!r.copy_off)
      UROCE_LOG(info, "QP 0x%06x: the peer could not copy (%s): WRITEs and READs go as packets", qp.qpn(),
                *why == wire::CopyNakReason::refused ? "refused by the kernel" : "our memory faulted");
    r.copy_off = true;
  }
  // The request at this PSN was not carried out: everything from it goes
  // again (one of ours lost meanwhile, or already acknowledged, asks for
  // nothing): as packets from now on, but after a stale NAK a WRITE's
  // chunks may go by copy again (a READ asked for again goes as packets).
  const uint32_t psn = pkt.hdr.bth.psn;
  if (psn_before(psn, r.una_psn) || !psn_before(psn, r.sent_hwm)) return;
  go_back(nic, qp, psn);
}

}  // namespace uroce::transport
