// ShmIo: RoCEv2 between the uroce NICs of one host through shared memory,
// and to everybody else through the UdpIo it wraps.
//
// The packets are the very same UDP payloads (headers, payload, pad, ICRC)
// that UdpIo would send, so the receive path, its counters and fault
// injection (FaultIo wraps a ShmIo like any PacketIo) do not change.
//
// Each ShmIo with a specific local address owns an inbound ShmRing (see
// shm_ring.hpp) named after (user, network namespace, address, port, and
// the registry slot where processes share the port).  To send, it looks for
// the ring of the destination (addr, port, the slot in the destination QP
// number): if there is one whose owner lives, the packet is copied into a
// slot of it; otherwise it goes out through the UDP socket.  Packets to QP1
// (connection management, steered by service ID) always take the socket.  The answer is cached per destination
// and checked again every second (a replaced file, e.g. a restarted peer,
// is noticed by its inode; a ring closed by its owner at once).  A ring that
// stays full for kFullWait drops the packet (tx_errors, shm_tx_full), as a
// full socket buffer would: RC retransmits.  A GSO train to a ring becomes
// one slot per packet, packet i with ipv4_id_hint i (the ICRC its sender
// computed for IPv4 ID i).
//
// recv_batch() takes packets from the ring first (no system call), then
// from the socket -- but while the ring delivered packets in the last
// millisecond and no datagram came, a busy poller reads the socket only
// every udp_poll_interval (and at once after a sleep), so polling a ring
// costs no system call.  A NIC whose ring is quiet reads its socket at
// every poll, as UdpIo alone: traffic with other hosts waits for nothing.
//
// Sleeping: wait_fd() is an epoll set of the UDP socket and the ring's bell
// (net/shm_bell.hpp).  prepare_wait() marks the ring's consumer asleep; a
// producer that publishes into a ring whose consumer sleeps rings the bell
// once (a latch in the ring header, re-armed at the next sleep), which
// wakes the poll/epoll on wait_fd().  done_wait() reads the bell.  The bell
// is not the RoCEv2 socket: a capture of the UDP port sees no trace of it.
//
// On in the NIC unless UROCE_SHM=0 (or NicConfig::shm says otherwise):
// same-host traffic between uroce NICs then does not cross the kernel, and
// a capture on lo does not see it (UROCE_PCAP traces it), as traffic
// between two ports of one RoCE NIC never reaches the wire.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/packet_io.hpp"
#include "net/shm_bell.hpp"
#include "net/shm_ring.hpp"
#include "net/udp_io.hpp"

namespace uroce::net {

struct ShmConfig {
  std::string dir;  // where ring files live; "" = shm_dir()
  ShmRing::CreateOptions ring;
  // How often a busy poller reads the socket while no datagram came lately.
  std::chrono::microseconds udp_poll_interval{50};
  // How long a full ring is waited for before a packet is dropped.
  std::chrono::microseconds full_wait{200};
  // Remove ring files of dead processes when opening.
  bool clean_stale = true;
  // Our registry slot, the top bits of our QP numbers (net/registry.hpp):
  // when the UDP port is shared with other processes, our ring is named
  // after it, and a packet goes to the ring of its destination QP's slot.
  int slot = -1;
};

class ShmIo final : public PacketIo {
 public:
  using Clock = std::chrono::steady_clock;

  // Takes `udp` only on success.
  static Result<std::unique_ptr<ShmIo>> wrap(std::unique_ptr<UdpIo>&& udp, const ShmConfig& cfg = {});
  // On unless UROCE_SHM is 0 (also "off", "false", "no").
  static bool enabled_by_env() noexcept;
  // UROCE_SHM_SLOTS: the slots of the ring this process creates, 2 to
  // 65536 in decimal digits (rounded up to a power of two as the ring
  // does); 0 when unset.  Anything else is EINVAL naming the variable.
  static Result<uint32_t> slots_from_env();
  // UROCE_SHM_COPY: 1 (also on, true, yes) moves large RC WRITEs and READs
  // with same-host peers in one copy (docs/one_copy_design.md); 0 (also
  // off, false, no): never; unset or empty: nullopt (the NIC's default).
  // Anything else is EINVAL naming the variable.
  static Result<std::optional<bool>> copy_from_env();
  // What the NIC uses: `udp` wrapped in a ShmIo if `enable` (and it can be
  // made: else a warning and `udp` as it is), with rings of `slots` slots
  // (0: the default).
  static std::unique_ptr<PacketIo> wrap_if_enabled(std::unique_ptr<UdpIo> udp, int slot, bool enable,
                                                   uint32_t slots = 0);
  ~ShmIo() override;

  Endpoint local() const noexcept override { return udp_->local(); }
  uint16_t tx_ipv4_id() const noexcept override { return udp_->tx_ipv4_id(); }
  uint16_t tx_ipv4_frag() const noexcept override { return udp_->tx_ipv4_frag(); }
  size_t send_batch(std::span<const TxPacket> pkts) noexcept override;
  size_t recv_batch(std::span<RxPacket> out) noexcept override;
  int wait_fd() const noexcept override { return ep_.valid() ? ep_.get() : udp_->wait_fd(); }
  Status join_group(const IpAddr& group) override;
  Status leave_group(const IpAddr& group) override;
  bool prepare_wait() noexcept override;
  void done_wait() noexcept override;
  // A sleeper (the progress thread, and an application thread waiting for
  // a completion event) looks at the ring at least this often: a safety
  // net for a bell that could not be rung (its producer died between
  // publishing and ringing).  It used to be 50 ms, and bounded a lost
  // wake-up (a bell read by another thread of ours before the sleeper
  // entered poll(): transport.Over/UdPath.QkeyCheck/Shm, about 6 runs in 10
  // with the machine busy) that done_wait() now prevents by re-arming the
  // latch.  Long, so that an idle NIC does not tick: one look a second.
  int max_sleep_ms() const noexcept override { return 1000; }
  void use_clock(const Clock::time_point* now) noexcept override { clock_ = now; }
  size_t max_payload() const noexcept override { return udp_->max_payload(); }
  uint16_t gso_max_segments() const noexcept override { return udp_->gso_max_segments(); }
  bool host_local(const IpAddr& dst) noexcept override { return udp_->host_local(dst); }
  bool ring_owner(const Endpoint& dst, uint32_t dest_qpn, RingOwner& out) noexcept override;
  void advertise(uint64_t caps) noexcept override;
  std::atomic<uint64_t>* copy_gate() noexcept override;
  std::shared_ptr<std::atomic<uint64_t>> peer_copy_gate(const Endpoint& dst, uint32_t dest_qpn) noexcept override;
  bool defers_icrc() const noexcept override { return use_shm_; }
  IoStats stats() const noexcept override;

  UdpIo& udp() noexcept { return *udp_; }
  const UdpIo& udp() const noexcept { return *udp_; }
  // Our inbound ring (null when the local address is unspecified).
  const ShmRing* ring() const noexcept { return ring_.get(); }
  const std::string& dir() const noexcept { return dir_; }

 private:
  struct Peer {
    Endpoint ep;
    int slot = -1;                  // of the destination QP, where its port is shared
    std::string path;               // the ring of (ep, slot)
    std::string alt_path;           // where slot >= 0: the ring of ep without a slot
    std::shared_ptr<ShmRing> ring;  // null: this destination is reached by UDP
    Clock::time_point recheck;
    bool full = false;  // full for good in this batch
  };
  ShmIo() = default;
  size_t peer(const Endpoint& ep, int slot, Clock::time_point now) noexcept;  // index in peers_
  const Peer* peer_ring(const Endpoint& dst, uint32_t dest_qpn) noexcept;     // null: none on this host
  Peer* ring_peer(const TxPacket& pkt, Clock::time_point now) noexcept;       // null: by UDP
  void refresh(Peer& p, Clock::time_point now) noexcept;
  bool put(Peer& p, const TxPacket& pkt, uint16_t id_hint) noexcept;
  // The n packets packed_[0..n) of a train to p as one slot (its owner
  // advertised kRingTakesPacked), parts_[i].ipv4_id_hint set for each.
  bool put_packed(Peer& p, size_t n) noexcept;
  // One slot's put (`attempt`) with the wait and give-up of a full ring.
  template <class Attempt>
  bool put_slot(Peer& p, size_t npkts, size_t bytes, Attempt&& attempt) noexcept;
  static uint64_t caps(const Peer& p) noexcept;
  void ring_bell(Peer& p) noexcept;
  bool ring_bell(ShmRing& ring) noexcept;  // false (latch cleared) if it could not ring
  void watch_udp() noexcept;               // (re)puts the UDP side's wait_fd() in ep_

  std::unique_ptr<UdpIo> udp_;
  std::shared_ptr<ShmRing> ring_;
  std::optional<ShmBell> bell_;  // with ring_
  UniqueFd ringer_;              // rings the peers' bells
  UniqueFd ep_;                  // wait_fd(): the UDP side and bell_
  int ep_udp_fd_ = -1;           // the UDP side's wait_fd() in ep_
  std::string dir_;
  ShmConfig cfg_;
  bool use_shm_ = false;  // our address is specific: peers can tell it is us
  int slot_ = -1;         // our ring's slot (port shared), else -1
  std::vector<Peer> peers_;
  size_t last_peer_ = 0;
  std::vector<TxPacket> udp_out_;  // the packets of a batch that go by UDP
  std::vector<size_t> touched_;    // peers_ whose rings were written in this batch
  // A packed slot in the making (send_batch, put_packed): kept here, not
  // built on the stack at every send.
  std::array<const TxPacket*, shm::kMaxPacked> packed_{};
  std::array<ShmRing::Part, shm::kMaxPacked> parts_{};
  // Socket polling of recv_batch.
  std::atomic<bool> udp_due_{true};
  Clock::time_point udp_next_{}, udp_hot_until_{}, ring_hot_until_{};
  const Clock::time_point* clock_ = nullptr;  // the engine's (use_clock)
  Clock::time_point now() const noexcept { return clock_ ? *clock_ : Clock::now(); }
  uint64_t shm_tx_ = 0, shm_tx_bytes_ = 0, shm_full_ = 0, shm_lost_ = 0, bells_tx_ = 0;
  std::atomic<uint64_t> bells_rx_{0};  // done_wait() runs on any thread
};

}  // namespace uroce::net
