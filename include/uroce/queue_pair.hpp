// Queue pairs: the endpoints of RDMA communication.
//
// RC (reliable connection) and UC (unreliable connection) QPs talk to one
// peer QP: exchange local_info() with the peer by any means (a socket, a
// file, rdma_cm one day), then connect().  UD (unreliable datagram) QPs
// send to any UD QP through an AddressHandle; connect() just makes them
// ready.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "uroce/fwd.hpp"

namespace uroce {

struct QpConfig {
  QpType type = QpType::rc;
  CompletionQueue* send_cq = nullptr;  // required
  CompletionQueue* recv_cq = nullptr;  // required (may be send_cq)
  SharedReceiveQueue* srq = nullptr;   // receive from an SRQ instead of an own RQ
  QpCap cap{128, 128, 4, 4, 256};      // send/recv WRs, SGEs, inline bytes
  bool sq_sig_all = false;             // every send WR completes (else only kSignaled ones)
};

// What a peer needs to know to connect to a QP (and what we need of it).
struct PeerInfo {
  IpAddr gid{};      // the peer's GID: its IP address
  uint32_t qpn = 0;  // the peer's QP number
  uint32_t psn = 0;  // the first PSN the peer sends with
  uint32_t mtu = 0;  // the peer's port MTU in bytes (0: unknown)
};

struct ConnectOptions {
  // Path MTU; default: the smaller of our port's and the peer's MTU.  Both
  // ends of a connection must use the same one.
  std::optional<Mtu> mtu{};
  // Our first PSN; default local_info().psn (what the peer was told).
  std::optional<uint32_t> sq_psn{};
  // What the peer may do to memory through this QP.
  uint32_t access = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
  uint8_t timeout = 14;             // local ACK timeout 4.096 us * 2^14 = 67 ms (RC)
  uint8_t retry_cnt = 7;            // retransmissions before RETRY_EXC_ERR (RC), and no
                                    // earlier than CongestionConfig::retry_floor without an ACK
  uint8_t rnr_retry = 7;            // RNR NAK retries; 7 = forever (RC)
  uint8_t min_rnr_timer = 12;       // RNR wait we ask of the peer: 0.64 ms (RC)
  uint8_t max_rd_atomic = 16;       // our READs/atomics in flight (RC)
  uint8_t max_dest_rd_atomic = 16;  // the peer's READs/atomics we accept in flight (RC)
  uint32_t qkey = 0x11111111;       // UD: the Q_Key this QP accepts
  uint8_t sgid_index = 0;           // our GID to send from
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
};

class QueuePair {
 public:
  QueuePair(QueuePair&&) noexcept;
  QueuePair& operator=(QueuePair&&) noexcept;
  ~QueuePair();

  uint32_t qpn() const noexcept;
  QpType type() const noexcept;
  QpState state() const;
  // The capabilities granted (at least those asked for).
  QpCap cap() const;

  // What a peer needs to connect to this QP: our GID (of sgid_index), QPN,
  // initial PSN (random, chosen at creation) and port MTU.
  PeerInfo local_info(uint8_t sgid_index = 0) const;

  // RC/UC: RESET -> INIT -> RTR -> RTS, connected to `peer`.  UD: RESET ->
  // INIT -> RTR -> RTS with options.qkey (peer is not used).  EINVAL unless
  // the QP is in RESET; on failure the QP is back in RESET and the message
  // names the step that failed.
  Status connect(const PeerInfo& peer, const ConnectOptions& options = {});

  // The verbs state machine, for full control (ibv_modify_qp semantics).
  Status modify(const QpAttr& attr, uint32_t mask);
  QpAttr query() const;

  // Posts work requests in order, stopping at the first that cannot be
  // posted (*bad, if given, is its index): EINVAL for an invalid one or a
  // QP not yet in RTS, ENOMEM when the queue is full.
  Status post_send(std::span<const SendWr> wrs, size_t* bad = nullptr);
  Status post_send(const SendWr& wr);
  Status post_recv(std::span<const RecvWr> wrs, size_t* bad = nullptr);
  Status post_recv(const RecvWr& wr);

  // UD multicast: receive what is sent to multicast GID `group` (an
  // IPv4-mapped 224.0.0.0/4 address or an IPv6 ff00::/8 one) with QPN
  // 0xFFFFFF; the device joins the IP group.  EINVAL unless UD and a
  // multicast GID, or when already attached (detach: when not attached).
  Status attach_mcast(const IpAddr& group);
  Status detach_mcast(const IpAddr& group);

  explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  friend class ProtectionDomain;
  friend struct detail::QpImpl;
  explicit QueuePair(std::unique_ptr<detail::QpImpl> impl) noexcept;
  std::unique_ptr<detail::QpImpl> impl_;
};

}  // namespace uroce
