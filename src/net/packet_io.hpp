// The packet I/O interface the transport sits on: send a batch, receive a
// batch, wait.  Implementations: UdpIo (RoCEv2 over UDP sockets), FakeIo (an
// in-memory wire for protocol tests), ShmIo (same-host peers through
// shared-memory rings, the rest through a UdpIo).  A fault-injecting
// decorator wraps any of them.
//
// Threading: an instance is used by one thread at a time (the NIC's engine
// lock serialises callers); wait_fd() may be polled by any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "wire/icrc.hpp"

namespace uroce::net {

// An ICRC not computed yet: the I/O that puts the packet on a wire writes
// it (finish_icrc) over these IP/UDP fields to `out`, the packet's last 4
// bytes; one that hands it to a peer who does not check it (a uroce process
// whose ring says kRingTakesNoIcrc) leaves it out.
struct PendingIcrc {
  wire::IpUdpFields ip;
  uint8_t* out = nullptr;
};

// One datagram to send: the UDP payload is head | body | tail, gathered
// without copying.  head holds the BTH and extension headers, body points at
// application memory (may be empty), tail holds pad + ICRC.
struct TxPacket {
  Endpoint dst;
  std::span<const uint8_t> head;
  std::span<const uint8_t> body;
  std::span<const uint8_t> tail;
  uint8_t tos = 0;  // IP TOS / traffic class (DSCP + ECN)
  // On the first packet of a GSO train: this packet and the next
  // gso_segments - 1 leave as one UDP GSO send (same destination and TOS,
  // all the size of the first but the last, which may be shorter).  The
  // kernel cuts the train into datagrams whose IPv4 IDs count up from 0,
  // so packet i of a train carries the ICRC for IPv4 ID i.  0 or 1: alone.
  uint16_t gso_segments = 0;
  // Non-null: the ICRC is still to be written (see PendingIcrc).
  const PendingIcrc* icrc = nullptr;

  size_t size() const noexcept { return head.size() + body.size() + tail.size(); }
};

// Writes a pending ICRC (no-op without one).  Reading the body may fault
// (application memory unmapped since the packet was built): the ICRC is
// then left wrong, and the packet is lost as a NIC's DMA read error loses
// it.
void finish_icrc(const TxPacket& pkt) noexcept;
// finish_icrc() for each packet that needs it.
inline void finish_icrcs(std::span<const TxPacket> pkts) noexcept {
  for (const TxPacket& p : pkts)
    if (p.icrc) finish_icrc(p);
}

// One received datagram.  `data` points into a buffer owned by the PacketIo
// and stays valid until the next recv_batch() call.
struct RxPacket {
  std::span<uint8_t> data;  // the UDP payload
  Endpoint src;             // sender's address and UDP port
  IpAddr dst;               // the local address it was sent to
  uint8_t tos = 0;          // IP TOS / traffic class as received (ECN bits)
  uint8_t ttl = 0;          // IPv4 TTL / IPv6 hop limit as received
  bool truncated = false;   // larger than the receive buffer (to be dropped)
  // Index of this packet in a GRO-coalesced datagram: the IPv4 ID its sender
  // most likely used (see TxPacket::gso_segments).  0 for a lone datagram.
  uint16_t ipv4_id_hint = 0;
  // Taken from this process's shared-memory ring (ShmIo), not a socket:
  // sent by a uroce process of this host and user.  Only such a packet may
  // ask for a one-copy WRITE (wire/copy.hpp).
  bool via_ring = false;
  // A ring packet whose sender left the ICRC out (its last 4 bytes are not
  // one): nothing between its sender and us could have corrupted it.
  bool icrc_omitted = false;
};

// A uroce process of this host (net/peer_process.hpp names one so), and
// what its ring says it takes.
struct RingOwner {
  int32_t pid = 0;
  uint64_t start = 0;  // clock ticks after boot, /proc/<pid>/stat field 22
  uint64_t caps = 0;   // kRing* bits
};
// The ring's owner carries out one-copy requests (wire/copy.hpp).  An
// older uroce leaves the word 0: it is sent packets.
inline constexpr uint64_t kRingTakesCopy = 1;
// The ring's owner takes packets whose ICRC was left out (RxPacket::
// icrc_omitted): it checks no ICRC on what its ring brings.  An older uroce
// leaves the bit 0: its packets carry ICRCs.
inline constexpr uint64_t kRingTakesNoIcrc = 2;
// The ring's owner honours the copy gate of the requesters it copies for
// (transport/copy_gate.hpp): only such an owner is sent one-copy requests,
// so that a flush or a deregistration keeps every request from being
// carried out after it.
inline constexpr uint64_t kRingHonoursGate = 4;
// The ring's owner takes several packets in one slot (shm::kSlotPacked):
// a train of small packets to it (an answer and the ACK held for it, a
// window of small SENDs) costs one slot, not one a packet.  ShmIo sets it
// for its own ring: it is the ring's format, not the engine's.
inline constexpr uint64_t kRingTakesPacked = 8;

// Faults injected in one direction by a FaultIo (net/fault_io.hpp).
struct FaultCounts {
  uint64_t dropped = 0, duplicated = 0, reordered = 0, delayed = 0, corrupted = 0;
  uint64_t ce_marked = 0;  // ECN-capable packets marked CE
};

struct IoStats {
  uint64_t tx_packets = 0, tx_bytes = 0, tx_errors = 0;
  uint64_t rx_packets = 0, rx_bytes = 0, rx_truncated = 0;
  // Datagrams lost before we could receive them because the receive queue
  // was full (UdpIo: the kernel's SO_RXQ_OVFL count, as of the last packet
  // received); 0 where unknown.
  uint64_t rx_dropped = 0;
  // Faults injected on the way out and in (0 without a FaultIo).
  FaultCounts tx_faults, rx_faults;
  // Shared-memory rings (ShmIo; included in tx_packets / rx_packets above):
  // packets through them, packets dropped because the peer's ring stayed
  // full, slots skipped because their producer never published them, and
  // the doorbell datagrams that woke sleeping consumers (not packets).
  uint64_t shm_tx_packets = 0, shm_rx_packets = 0, shm_tx_full = 0, shm_rx_skipped = 0;
  uint64_t doorbells_tx = 0, doorbells_rx = 0;
};

class PacketIo {
 public:
  virtual ~PacketIo() = default;

  // The local endpoint packets are sent from and received on.
  virtual Endpoint local() const noexcept = 0;

  // What the ICRC of a packet sent by this PacketIo covers besides the
  // payload: the IPv4 Identification the kernel will put in the header
  // (0 for UdpIo: unconnected socket with DF set) and the DF flag.
  virtual uint16_t tx_ipv4_id() const noexcept { return 0; }
  virtual uint16_t tx_ipv4_frag() const noexcept { return 0x4000; }

  // Sends the packets in order.  Returns how many were handed to the network;
  // a packet the network refused is counted in stats().tx_errors and skipped
  // (the transport's reliability treats it as lost).
  virtual size_t send_batch(std::span<const TxPacket> pkts) noexcept = 0;

  // Receives up to out.size() packets without blocking; returns the count.
  virtual size_t recv_batch(std::span<RxPacket> out) noexcept = 0;

  // A file descriptor that polls readable while packets wait to be received.
  virtual int wait_fd() const noexcept = 0;

  // A thread about to sleep in wait_fd() calls prepare_wait() first and
  // done_wait() when it wakes (any thread, without the engine lock).  An I/O
  // that receives packets wait_fd() does not see (ShmIo's rings) learns
  // that it must wake the sleeper; true means packets are already waiting:
  // do not sleep (poll with timeout 0), receive.
  virtual bool prepare_wait() noexcept { return false; }
  virtual void done_wait() noexcept {}
  // The longest a thread should sleep in wait_fd() without looking again
  // (negative: as long as it likes).  ShmIo caps it: see shm_io.hpp.
  virtual int max_sleep_ms() const noexcept { return -1; }
  // The engine's clock: the time of its last receive batch or poll, read
  // under the engine's lock, as every call into this I/O is.  It can be
  // late by the time since then (long after an idle spell), so only coarse
  // timing reads it (ShmIo's socket schedule and peer rechecks), instead of
  // the system clock, whose read costs 20-30 ns here.  Null: the system
  // clock.
  virtual void use_clock(const std::chrono::steady_clock::time_point* now) noexcept { (void)now; }

  // Largest UDP payload this I/O can carry.
  virtual size_t max_payload() const noexcept = 0;

  // Receives the datagrams sent to IP multicast group `group` on the RoCEv2
  // port (UD multicast), through the interface of local(); leave_group()
  // stops.  wait_fd() may change on the first join (the caller polling it
  // must look again).  EOPNOTSUPP where the I/O has no multicast.
  virtual Status join_group(const IpAddr& group) {
    return err::from_errno(EOPNOTSUPP, "multicast " + group.to_string() + ": not on this packet I/O");
  }
  virtual Status leave_group(const IpAddr& group) {
    return err::from_errno(EOPNOTSUPP, "multicast " + group.to_string() + ": not on this packet I/O");
  }

  // Whether packets may come with their ICRC pending (TxPacket::icrc):
  // true where some are sent without one (ShmIo); elsewhere the transport
  // computes it as it builds the packet, reading the payload once.
  virtual bool defers_icrc() const noexcept { return false; }

  // Longest GSO train send_batch() takes (see TxPacket::gso_segments); 0
  // when this I/O cannot send trains.
  virtual uint16_t gso_max_segments() const noexcept { return 0; }

  // Whether packets to `dst` stay inside this host (an address of one of
  // its interfaces, or of the loopback subnet): the path then has no
  // network queue, and its delay is the two ends' scheduling alone.  False
  // where unknown, and for I/O that stands for a network (FakeIo, FaultIo
  // with faults configured).
  virtual bool host_local(const IpAddr& dst) noexcept {
    (void)dst;
    return false;
  }

  // The process owning the shared-memory ring that packets to the QP
  // `dest_qpn` at `dst` go through (ShmIo): false when they go by UDP, or
  // this I/O has no rings.  The one-copy path (docs/one_copy_design.md)
  // asks it on both sides: the requester whether its packets stay in shared
  // memory, the responder who its requester is.
  virtual bool ring_owner(const Endpoint& dst, uint32_t dest_qpn, RingOwner& out) noexcept {
    (void)dst;
    (void)dest_qpn;
    (void)out;
    return false;
  }
  // What our own ring tells the processes that find it (kRing* bits).
  virtual void advertise(uint64_t caps) noexcept { (void)caps; }

  // The copy gate of a ring (transport/copy_gate.hpp): two words of its
  // header, [0] the generation its owner's fences advance, [1] the copies
  // in progress into or out of the owner's memory.  Our own ring's (null
  // without one), and that of the ring packets to the QP `dest_qpn` at
  // `dst` go through, held as long as the pointer is (null when they go
  // by UDP).
  virtual std::atomic<uint64_t>* copy_gate() noexcept { return nullptr; }
  virtual std::shared_ptr<std::atomic<uint64_t>> peer_copy_gate(const Endpoint& dst, uint32_t dest_qpn) noexcept {
    (void)dst;
    (void)dest_qpn;
    return nullptr;
  }

  virtual IoStats stats() const noexcept = 0;
};

}  // namespace uroce::net
