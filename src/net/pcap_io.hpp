// A packet trace: a decorator that writes every datagram sent and received
// through the PacketIo it wraps to a pcap file (UROCE_PCAP), each as the
// Ethernet frame it was, or would have been, on the wire -- IPv4 or IPv6,
// UDP, and the RoCEv2 packet with its ICRC -- so that tshark decodes it and
// its ICRC checks whatever the path: UDP (where a GSO train is one frame to
// a capture on the host, here one frame per packet), shared memory (no wire
// at all), a fake wire.
//
// The IP header carries what the ICRC covers: a sent packet the IPv4 ID the
// kernel gives it (packet i of a GSO train: i), a received one the ID its
// ICRC was computed with (solved as the NIC's check does).  MAC addresses
// are zero.  Several NICs, and several processes, may write one file: each
// record is one append, the file header is written once.  As tcpdump's -c,
// a trace may stop after a number of frames (UROCE_PCAP_COUNT, counted by
// each NIC): a second of a bandwidth test is hundreds of thousands.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/packet_io.hpp"
#include "net/unique_fd.hpp"
#include "wire/ip_header.hpp"

namespace uroce::net {

// Appends the Ethernet frame of a UDP datagram whose payload is the
// concatenation of `parts` to `out` (zero MAC addresses; the IP and UDP
// headers wire::write_ip_udp_header writes, with the UDP checksum over IPv6).
void append_ethernet_frame(std::vector<uint8_t>& out, const wire::IpUdpFields& ip, const wire::IpVariantFields& v,
                           std::span<const std::span<const uint8_t>> parts);

// UROCE_PCAP_COUNT: frames per NIC (0, or unset: all); digits only, else
// EINVAL naming the variable.
Result<uint64_t> pcap_count_from_env();

class PcapIo final : public PacketIo {
 public:
  // Appends to `path` (created, mode 0600, with the pcap header if empty)
  // the first `max_frames` packets (0: all) sent and received.
  static Result<std::unique_ptr<PcapIo>> wrap(std::unique_ptr<PacketIo> inner, const std::string& path,
                                              uint64_t max_frames = 0);
  uint64_t frames() const noexcept { return frames_; }

  Endpoint local() const noexcept override { return inner_->local(); }
  uint16_t tx_ipv4_id() const noexcept override { return inner_->tx_ipv4_id(); }
  uint16_t tx_ipv4_frag() const noexcept override { return inner_->tx_ipv4_frag(); }
  size_t send_batch(std::span<const TxPacket> pkts) noexcept override;
  size_t recv_batch(std::span<RxPacket> out) noexcept override;
  int wait_fd() const noexcept override { return inner_->wait_fd(); }
  bool prepare_wait() noexcept override { return inner_->prepare_wait(); }
  void done_wait() noexcept override { inner_->done_wait(); }
  int max_sleep_ms() const noexcept override { return inner_->max_sleep_ms(); }
  void use_clock(const std::chrono::steady_clock::time_point* now) noexcept override { inner_->use_clock(now); }
  size_t max_payload() const noexcept override { return inner_->max_payload(); }
  Status join_group(const IpAddr& group) override { return inner_->join_group(group); }
  Status leave_group(const IpAddr& group) override { return inner_->leave_group(group); }
  uint16_t gso_max_segments() const noexcept override { return inner_->gso_max_segments(); }
  bool host_local(const IpAddr& dst) noexcept override { return inner_->host_local(dst); }
  bool ring_owner(const Endpoint& dst, uint32_t dest_qpn, RingOwner& out) noexcept override {
    return inner_->ring_owner(dst, dest_qpn, out);
  }
  void advertise(uint64_t caps) noexcept override { inner_->advertise(caps); }
  std::atomic<uint64_t>* copy_gate() noexcept override { return inner_->copy_gate(); }
  std::shared_ptr<std::atomic<uint64_t>> peer_copy_gate(const Endpoint& dst, uint32_t dest_qpn) noexcept override {
    return inner_->peer_copy_gate(dst, dest_qpn);
  }
  bool defers_icrc() const noexcept override { return inner_->defers_icrc(); }
  IoStats stats() const noexcept override { return inner_->stats(); }

 private:
  PcapIo(std::unique_ptr<PacketIo> inner, UniqueFd fd, uint64_t max_frames)
      : inner_(std::move(inner)), fd_(std::move(fd)), max_frames_(max_frames) {}
  bool full() const noexcept { return max_frames_ != 0 && frames_ >= max_frames_; }
  void record(const wire::IpUdpFields& ip, const wire::IpVariantFields& v,
              std::span<const std::span<const uint8_t>> parts) noexcept;

  std::unique_ptr<PacketIo> inner_;
  UniqueFd fd_;
  uint64_t max_frames_ = 0, frames_ = 0;
  std::vector<uint8_t> rec_;  // one record (header and frame), reused
};

}  // namespace uroce::net
