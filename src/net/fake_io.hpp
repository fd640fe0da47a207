// FakeNetwork / FakeIo: an in-memory wire for deterministic protocol tests.
//
// A FakeNetwork is a hub; FakeIo endpoints attach to it by Endpoint.
// send_batch copies each datagram (head | body | tail) into the queue of the
// endpoint it is addressed to, or drops it when nobody is attached there (as
// UDP would: the sender still counts it as sent).  recv_batch pops from the
// endpoint's own queue.  wait_fd() is an eventfd that polls readable exactly
// while the queue holds deliverable packets.
//
// Tests can see and steer the traffic by hand: record every packet sent,
// hold an endpoint's queue (nothing is delivered from it, so packets pile
// up), then drop / duplicate / reorder / inject queued packets and release.
// A filter sees every packet before it is queued and may drop or alter it.
//
// One mutex in the hub serialises everything, so two threads may use two
// different endpoints; each FakeIo itself is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "net/packet_io.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {

// One datagram in flight (or as recorded).
struct FakePacket {
  Endpoint src, dst;
  uint8_t tos = 0;
  std::vector<uint8_t> data;  // the UDP payload
  bool joined = false;        // it left in the GSO train of the one before it (set_gso_max)
  uint64_t batch = 0;         // the send_batch call it came in, counted network-wide
};

struct FakeNetStats {
  uint64_t sent = 0;         // accepted from senders
  uint64_t delivered = 0;    // queued at an attached endpoint
  uint64_t no_endpoint = 0;  // dropped: nobody attached at dst
  uint64_t filtered = 0;     // dropped by the filter
  uint64_t overflow = 0;     // dropped: destination queue at its limit
  uint64_t ce_marked = 0;    // ECN-capable packets marked CE (set_ecn_threshold)
};

class FakeIo;

class FakeNetwork : public std::enable_shared_from_this<FakeNetwork> {
 public:
  static std::shared_ptr<FakeNetwork> create();
  ~FakeNetwork();

  // Attaches an endpoint.  Port 0 picks a free port from 49152 up.
  // EEXIST if the endpoint is taken.
  Result<std::unique_ptr<FakeIo>> attach(const Endpoint& ep, size_t max_payload = 4096 + 64);

  // Recording of every packet accepted by send_batch, in send order.
  void set_recording(bool on);
  std::vector<FakePacket> recorded() const;
  void clear_recorded();

  // Called (under the hub's lock: it must not call back into the network)
  // for every packet before it is queued; return false to drop it.  It may
  // modify the packet.  An empty function removes the filter.
  using Filter = std::function<bool(FakePacket&)>;
  void set_filter(Filter f);

  // Packets wait in each endpoint's queue until received.  Held: none are
  // delivered from it (wait_fd is not readable) until released.
  // Queue operations on an endpoint that is not attached return false.
  bool hold(const Endpoint& ep, bool on);
  size_t queued(const Endpoint& ep) const;
  std::vector<FakePacket> peek(const Endpoint& ep) const;  // copies, in queue order
  bool drop(const Endpoint& ep, size_t index);
  bool duplicate(const Endpoint& ep, size_t index);  // the copy goes right after it
  // New order: order[i] is the old index of the packet that goes to place i;
  // it must be a permutation of 0..queued-1.
  bool reorder(const Endpoint& ep, const std::vector<size_t>& order);
  bool reverse(const Endpoint& ep);
  // Appends a packet to ep's queue as if it came over the wire.
  bool inject(const Endpoint& ep, FakePacket pkt);
  void set_queue_limit(size_t packets);  // per endpoint; default 4096
  // A congested switch: an ECN-capable packet (ECT(0) or ECT(1)) that finds
  // `packets` or more queued at its destination is marked CE.  0: never.
  void set_ecn_threshold(size_t packets);
  // Senders may send GSO trains of up to `segments` packets (0: none, the
  // default; a NIC reads it when it opens its port); each packet still
  // arrives on its own, marked `joined` if it followed another in a train.
  void set_gso_max(uint16_t segments);
  uint16_t gso_max() const;

  FakeNetStats stats() const;

 private:
  friend class FakeIo;
  struct Port;
  FakeNetwork() = default;
  Port* find(const Endpoint& ep) const;  // lock held
  void signal(Port& p);                  // lock held: sync the eventfd with the queue
  void detach(const Endpoint& ep);
  void send(const Endpoint& src, std::span<const TxPacket> pkts);
  size_t recv(const Endpoint& ep, std::vector<FakePacket>& into, size_t max);

  mutable std::mutex mu_;
  std::map<Endpoint, std::unique_ptr<Port>> ports_;
  bool recording_ = false;
  std::vector<FakePacket> recorded_;
  Filter filter_;
  size_t queue_limit_ = 4096;
  size_t ecn_threshold_ = 0;
  uint64_t batches_ = 0;  // send_batch calls so far (FakePacket::batch)
  uint16_t gso_max_ = 0;
  uint16_t next_port_ = 49152;
  FakeNetStats stats_;
};

class FakeIo final : public PacketIo {
 public:
  ~FakeIo() override;

  Endpoint local() const noexcept override { return local_; }
  size_t send_batch(std::span<const TxPacket> pkts) noexcept override;
  size_t recv_batch(std::span<RxPacket> out) noexcept override;
  int wait_fd() const noexcept override { return wait_fd_; }
  size_t max_payload() const noexcept override { return max_payload_; }
  IoStats stats() const noexcept override { return stats_; }
  uint16_t gso_max_segments() const noexcept override { return net_->gso_max(); }

  FakeNetwork& network() const noexcept { return *net_; }

 private:
  friend class FakeNetwork;
  FakeIo(std::shared_ptr<FakeNetwork> net, Endpoint local, size_t max_payload, int wait_fd)
      : net_(std::move(net)), local_(local), max_payload_(max_payload), wait_fd_(wait_fd) {}

  std::shared_ptr<FakeNetwork> net_;
  Endpoint local_;
  size_t max_payload_;
  int wait_fd_;                   // owned by the hub's Port
  std::vector<FakePacket> last_;  // the buffers behind the last recv_batch
  uint16_t train_index_ = 0;      // of the packet received last in its GSO train
  IoStats stats_;
};

}  // namespace uroce::net
