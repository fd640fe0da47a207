// FaultIo: a PacketIo decorator that injects network faults (drop,
// duplicate, reorder, delay, corrupt) into the packets of any other PacketIo
// (UdpIo, FakeIo), per direction and per opcode class, deterministically
// from a seed.  Configuration: uroce::FaultConfig (include/uroce/faults.hpp),
// from the C++ API or the UROCE_FAULTS environment variable.
//
// Determinism: each direction has its own generator (xoshiro256**, seeded
// from the seed and the direction); every packet of a selected class draws
// the same number of values whatever happens to it, so the n-th packet of a
// direction meets the same fate for the same seed.  What happens around it
// (timing, the peer's retransmissions) may of course differ from run to run.
//
// Held packets (reordered, delayed) are copied and released later:
//  - a reordered packet after 1..reorder_max later packets of its direction
//    have passed, or after kReorderHoldMax, whichever comes first;
//  - a delayed packet at its due time.
// Time-based releases need somebody to call in: wait_fd() is an epoll set
// of the inner I/O's fd and a timerfd armed for the earliest due packet, so
// it polls readable when a held packet (either direction) is due, and
// recv_batch() sends the due outgoing ones and returns the due incoming
// ones.  The NIC already polls wait_fd() whenever it waits for packets.
//
// Corruption flips one byte of a copy, never of the memory a TxPacket body
// points to (application memory).  GSO trains are sent packet by packet
// while transmit faults are configured (gso_max_segments() then says 0, so
// the NIC does not build trains; a train handed in anyway is split).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.hpp"
#include "net/packet_io.hpp"
#include "net/unique_fd.hpp"
#include "uroce/faults.hpp"

namespace uroce::net {

using uroce::FaultConfig;
using uroce::FaultRates;

// Packet class of a RoCEv2 UDP payload (a uroce::fault_ops bit) by its opcode.
uint32_t fault_class(uint8_t first_byte, size_t size) noexcept;

class FaultIo final : public PacketIo {
 public:
  using Clock = std::chrono::steady_clock;
  // A reordered packet waits at most this long for the packets that are to
  // overtake it.
  static constexpr std::chrono::milliseconds kReorderHoldMax{1};

  static Result<std::unique_ptr<FaultIo>> wrap(std::unique_ptr<PacketIo> inner, const FaultConfig& cfg);
  // UROCE_FAULTS: nullopt when unset, empty or "off"; EINVAL when malformed.
  static Result<std::optional<FaultConfig>> from_env();

  ~FaultIo() override;

  Endpoint local() const noexcept override { return inner_->local(); }
  uint16_t tx_ipv4_id() const noexcept override { return inner_->tx_ipv4_id(); }
  uint16_t tx_ipv4_frag() const noexcept override { return inner_->tx_ipv4_frag(); }
  size_t send_batch(std::span<const TxPacket> pkts) noexcept override;
  size_t recv_batch(std::span<RxPacket> out) noexcept override;
  int wait_fd() const noexcept override { return epfd_.get(); }
  bool prepare_wait() noexcept override { return inner_->prepare_wait(); }
  void done_wait() noexcept override { inner_->done_wait(); }
  int max_sleep_ms() const noexcept override { return inner_->max_sleep_ms(); }
  void use_clock(const Clock::time_point* now) noexcept override { inner_->use_clock(now); }
  size_t max_payload() const noexcept override { return inner_->max_payload(); }
  Status join_group(const IpAddr& group) override;
  Status leave_group(const IpAddr& group) override { return inner_->leave_group(group); }
  uint16_t gso_max_segments() const noexcept override { return cfg_.tx.any() ? 0 : inner_->gso_max_segments(); }
  // With faults configured, this I/O stands for a network between the hosts.
  bool host_local(const IpAddr& dst) noexcept override {
    return !cfg_.tx.any() && !cfg_.rx.any() && inner_->host_local(dst);
  }
  bool ring_owner(const Endpoint& dst, uint32_t dest_qpn, RingOwner& out) noexcept override {
    return inner_->ring_owner(dst, dest_qpn, out);
  }
  void advertise(uint64_t caps) noexcept override { inner_->advertise(caps); }
  std::atomic<uint64_t>* copy_gate() noexcept override { return inner_->copy_gate(); }
  std::shared_ptr<std::atomic<uint64_t>> peer_copy_gate(const Endpoint& dst, uint32_t dest_qpn) noexcept override {
    return inner_->peer_copy_gate(dst, dest_qpn);
  }
  bool defers_icrc() const noexcept override { return inner_->defers_icrc(); }
  IoStats stats() const noexcept override;

  const FaultConfig& config() const noexcept { return cfg_; }
  PacketIo& inner() noexcept { return *inner_; }
  // Packets held back right now (both directions).
  size_t held() const noexcept { return held_tx_.size() + held_rx_.size(); }
  // The earliest time a held packet is due (Clock::time_point::max() if none).
  Clock::time_point next_due() const noexcept;

 private:
  struct Rng {
    uint64_t s[4];
    void seed(uint64_t seed) noexcept;
    uint64_t next() noexcept;
  };
  // What happens to one packet.
  struct Fate {
    bool drop = false, corrupt = false, dup = false, reorder = false, delay = false, ce = false;
    size_t corrupt_pos = 0;
    uint8_t corrupt_xor = 0;
    uint32_t reorder_by = 0;
    std::chrono::microseconds delay_for{0};
  };
  struct HeldTx {
    std::vector<uint8_t> data;
    Endpoint dst;
    uint8_t tos = 0;
    Clock::time_point due;
    uint32_t countdown = 0;  // packets still to overtake it; 0: by time only
  };
  struct HeldRx {
    std::vector<uint8_t> data;
    RxPacket meta;  // data span unused
    Clock::time_point due;
    uint32_t countdown = 0;
  };

  FaultIo(std::unique_ptr<PacketIo> inner, const FaultConfig& cfg);
  Fate decide(Rng& rng, const FaultRates& r, size_t size, FaultCounts& c) noexcept;
  std::vector<uint8_t>& tx_buf() noexcept;   // a transient buffer for this send
  std::vector<uint8_t>& rx_buf() noexcept;   // a buffer valid until the next recv_batch
  std::vector<uint8_t> take_buf() noexcept;  // a recycled buffer to keep
  void recycle(std::vector<uint8_t>&& b) noexcept;
  // Sends the outgoing packets that are due (their time has come).
  void release_due_tx(Clock::time_point now) noexcept;
  void tx_one(const TxPacket& p, Clock::time_point now) noexcept;
  void tx_passed() noexcept;  // a packet went out: overtaken held packets follow
  void rx_emit(const RxPacket& p, std::span<RxPacket> out, size_t& n) noexcept;
  void rx_emit_copy(std::vector<uint8_t>&& data, const RxPacket& meta, std::span<RxPacket> out, size_t& n) noexcept;
  void rx_passed(std::span<RxPacket> out, size_t& n) noexcept;
  void arm_timer() noexcept;

  std::unique_ptr<PacketIo> inner_;
  FaultConfig cfg_;
  Rng tx_rng_, rx_rng_;
  FaultCounts tx_counts_, rx_counts_;
  UniqueFd epfd_, timerfd_;
  Clock::time_point armed_for_ = Clock::time_point::max();

  std::vector<TxPacket> tx_out_;  // what this send_batch hands to the inner I/O
  std::vector<std::vector<uint8_t>> tx_bufs_;
  size_t tx_bufs_used_ = 0;
  std::vector<HeldTx> held_tx_;

  std::vector<RxPacket> rx_in_;  // what the inner I/O received
  std::vector<std::vector<uint8_t>> rx_bufs_;
  size_t rx_bufs_used_ = 0;
  std::vector<HeldRx> held_rx_;
  std::vector<std::vector<uint8_t>> spare_;  // recycled buffers
};

}  // namespace uroce::net
