// UdpIo: RoCEv2 over one non-blocking UDP socket.
//
// Sends with sendmmsg (head/body/tail gathered, a TOS cmsg only where
// tos != 0), receives with recvmmsg into preallocated buffers, with the local
// destination address, TOS and TTL of every datagram.  The socket is never
// connected and has DF set (IP_PMTUDISC_DO): Linux then sends IPv4 ID 0,
// which is what tx_ipv4_id() promises to the ICRC.
//
// The data path (send_batch / recv_batch) neither allocates nor makes any
// system call besides sendmmsg / recvmmsg; only a full socket buffer
// (EAGAIN / ENOBUFS) adds a few short polls for POLLOUT.
#pragma once

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "net/packet_io.hpp"
#include "net/port_group.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {

inline constexpr uint16_t kRoceV2Port = 4791;
// A 4096-byte MTU payload plus the largest header stack, pad and ICRC.
inline constexpr size_t kDefaultMaxPayload = 4096 + 64;
inline constexpr size_t kMaxUdpPayload = 9000;
inline constexpr size_t kMaxBatch = 64;

struct UdpConfig {
  IpAddr local;                 // IPv4 (v4-mapped) or IPv6; the socket family follows it
  uint16_t port = kRoceV2Port;  // 0: an ephemeral port
  // If `port` is taken (EADDRINUSE), bind an ephemeral port instead; local()
  // tells which.  Same-host peers find it through the HostRegistry.
  bool port_fallback = true;
  // If set (and port != 0): share the port with this user's other uroce
  // processes on the address through the registry's port group table
  // (port_group.hpp), so that each of them is reachable on it; where that
  // cannot be, a socket of our own as above.
  std::shared_ptr<HostRegistry> share_through;
  int rcvbuf = 4 << 20;  // bytes asked for; SO_RCVBUFFORCE is tried first
  int sndbuf = 4 << 20;
  size_t batch = 32;                        // datagrams per syscall, 1..kMaxBatch
  size_t max_payload = kDefaultMaxPayload;  // largest UDP payload, up to kMaxUdpPayload
  // UDP GSO trains out and GRO-coalesced datagrams in: one trip through the
  // kernel's UDP stack for up to kMaxGsoSegments packets.  Off if the kernel
  // lacks UDP_SEGMENT/UDP_GRO.  Captures taken on the sending host then show
  // a train as one frame (as with TCP segmentation offload).
  bool gso = true;
};

inline constexpr uint16_t kMaxGsoSegments = 64;

class UdpIo final : public PacketIo {
 public:
  static Result<std::unique_ptr<UdpIo>> open(const UdpConfig& cfg);
  ~UdpIo() override;

  Endpoint local() const noexcept override { return local_; }
  size_t send_batch(std::span<const TxPacket> pkts) noexcept override;
  size_t recv_batch(std::span<RxPacket> out) noexcept override;
  // The socket, or once a multicast group is joined an epoll set of the
  // socket and the groups' sockets.
  // (Read by threads that do not hold the NIC lock: an atomic copy.)
  int wait_fd() const noexcept override {
    const int ep = wait_ep_fd_.load(std::memory_order_acquire);
    return ep >= 0 ? ep : fd_.get();
  }
  // A socket bound to GROUP:4791 (SO_REUSEADDR: every process of the host
  // that joins gets each datagram), joined on our address's interface, only
  // that group's datagrams (IP_MULTICAST_ALL off).  Read when the unicast
  // socket has nothing.
  Status join_group(const IpAddr& group) override;
  Status leave_group(const IpAddr& group) override;
  size_t max_payload() const noexcept override { return max_payload_; }
  uint16_t gso_max_segments() const noexcept override { return gso_ ? kMaxGsoSegments : 0; }
  // Asks the interfaces (net/interface_index.hpp); the answer for the
  // latest few addresses is kept for a second.
  bool host_local(const IpAddr& dst) noexcept override;
  IoStats stats() const noexcept override { return stats_; }

  // Socket buffer sizes in effect (as getsockopt reports them: the kernel
  // doubles what was asked and caps it at rmem_max / wmem_max without FORCE).
  int rcvbuf() const noexcept { return rcvbuf_; }
  int sndbuf() const noexcept { return sndbuf_; }
  size_t batch() const noexcept { return batch_; }
  // The TTL / hop limit the kernel puts on our datagrams (what a receiver
  // sees on loopback).
  uint8_t tx_ttl() const noexcept { return ttl_; }
  // Datagrams of the last recvmmsg not handed out yet (recv_batch() returns
  // them without a system call).
  bool rx_buffered() const noexcept { return rx_cur_ < rx_msgs_; }
  // True (do not sleep) while datagrams already read wait to be handed out:
  // the socket no longer shows them.  (Any thread: an atomic copy.)
  bool prepare_wait() noexcept override { return rx_pending_.load(std::memory_order_acquire); }
  // Whether we share the port with other processes (a port group).
  bool port_shared() const noexcept { return group_ != nullptr; }

 private:
  struct Rings;  // the preallocated msghdr / iovec / cmsg / buffer arrays
  UdpIo() = default;
  // Sends msgs_[0..n) and returns how many packets the kernel took (a GSO
  // message counts as its segments); counts the rest as errors.
  size_t flush(size_t n) noexcept;
  // Reads the metadata of datagram i of the last recvmmsg into rx_meta.
  void parse_rx(size_t i) noexcept;
  size_t recv_some(std::span<RxPacket> out, int fd) noexcept;  // recv_batch's one recvmmsg
  bool wait_writable() noexcept;

  UniqueFd fd_;
  std::unique_ptr<PortGroup> group_;  // the shared port's group, if we are in one
  struct McastSocket {
    IpAddr group;
    UniqueFd fd;
  };
  std::vector<McastSocket> mcast_;   // joined multicast groups
  UniqueFd wait_ep_;                 // fd_ + mcast_ sockets, from the first join
  std::atomic<int> wait_ep_fd_{-1};  // wait_ep_'s descriptor, once made
  Endpoint local_;
  bool v6_ = false;
  size_t batch_ = 0;
  size_t max_payload_ = 0;
  size_t rx_buf_size_ = 0;
  int rcvbuf_ = 0, sndbuf_ = 0;
  uint8_t ttl_ = 64;
  bool congested_ = false;  // send_batch gave up on a full socket buffer
  bool gso_ = false;        // UDP_SEGMENT + UDP_GRO in use
  // Datagrams of the last recvmmsg not yet handed out (a GRO datagram may
  // hold more packets than the caller had room for).
  size_t rx_msgs_ = 0, rx_cur_ = 0, rx_off_ = 0;
  std::atomic<bool> rx_pending_{false};  // rx_buffered(), for prepare_wait()
  size_t rx_dirty_ = 0;                  // receive headers to reset before the next recvmmsg (open: all)
  uint16_t rx_seg_ = 0;
  std::unique_ptr<Rings> r_;
  IoStats stats_;
  struct LocalAnswer {
    IpAddr addr;
    bool local = false;
    std::chrono::steady_clock::time_point at;
  };
  std::array<LocalAnswer, 4> local_answers_{};  // host_local(), newest first
};

}  // namespace uroce::net
