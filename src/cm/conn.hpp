// A connection record of the Cm (internal to src/cm): what one IB CM
// exchange knows, from the first REQ (or SIDR_REQ) to the end of timewait.
// It may outlive its id (destroyed while the DREQ is retried or during
// timewait); then id is null.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "cm/cm.hpp"

namespace uroce::cm {

// The IB MTU enum (1 = 256 .. 5 = 4096) of an MTU in bytes.
inline uint8_t mtu_enum(uint32_t bytes) noexcept {
  uint8_t e = 1;
  for (uint32_t m = 256; m < bytes && e < 5; m <<= 1) ++e;
  return e;
}

struct Conn {
  uint32_t local_id = 0;
  uint32_t remote_id = 0;
  uint64_t tid = 0;
  Id* id = nullptr;
  GsiPort* port = nullptr;
  Endpoint peer;     // where the peer's CM receives
  IpAddr local_gid;  // our address on this connection
  IpAddr remote_gid;
  bool active = false;
  bool ud = false;  // a SIDR exchange
  bool disconnect_reported = false;
  bool in_remote_index = false;
  State state = State::idle;
  uint64_t service_id = 0;

  // negotiated QP parameters
  uint32_t local_qpn = 0;
  uint32_t remote_qpn = 0;
  // The Starting PSN of a REQ or REP is the first PSN its SENDER expects to
  // receive (Linux's CM: the active side's rq_psn is the REQ's, the passive
  // side's sq_psn too; the REP's is the passive side's rq_psn and the active
  // side's sq_psn -- tests/data/rxe_rping.pcap shows rxe doing it).  So:
  uint32_t local_psn = 0;   // in our REQ/REP: our receive queue's first PSN
  uint32_t remote_psn = 0;  // in the peer's REQ/REP: our send queue's first PSN
  uint8_t path_mtu = 3;
  uint8_t max_rd_atomic = 0;       // our initiator depth
  uint8_t max_dest_rd_atomic = 0;  // our responder resources
  uint8_t retry_count = 7;         // of our QP
  uint8_t rnr_retry = 7;           // of our QP
  uint8_t ack_timeout = 14;
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;
  uint32_t remote_qkey = 0;
  // what the peer's REQ offered (passive: reported in CONNECT_REQUEST)
  uint8_t req_responder_resources = 0;
  uint8_t req_initiator_depth = 0;
  uint8_t req_rnr_retry = 7;
  bool req_srq = false;
  uint8_t req_flow_control = 0;
  // the peer's CM: how long it may take to answer, how often we retry
  uint8_t peer_timeout = 16;
  uint8_t peer_retries = 15;
  // The peer is a uroce process of this host: the registry slot of its comm
  // ID publishes the port its MADs came from.  When that process dies
  // nobody sends the DREQ (or REJ) that a kernel's CM sends for a process
  // that exits, so the Cm checks that it is still alive (Liveness).
  // 0: not known to be one (another host, a foreign CM).
  uint32_t peer_slot = 0;
  Endpoint peer_src;  // where its MADs came from

  // retransmission of the last REQ/REP/DREQ/SIDR_REQ (and the last answer
  // to repeat on a duplicate: REJ, SIDR_REP)
  MadBuf out{};
  bool has_out = false;
  int retries_left = 0;
  Clock::duration timeout{};
  Clock::time_point deadline = Clock::time_point::max();
  // A REQ/SIDR_REQ to an address of this host whose listener the directory
  // does not show yet: not sent before the listener appears or this time
  // passes (then it goes to 4791).  Unset once sent.
  Clock::time_point seek_until{};
};

// Shared by cm_conn.cpp and cm_connect.cpp.
inline constexpr auto kSeekInterval = std::chrono::milliseconds(5);

inline uint32_t qkey_for(uint16_t ps) noexcept {
  (void)ps;  // RDMA_PS_UDP, RDMA_PS_IB and RDMA_PS_IPOIB (no multicast here) all use it
  return kRdmaUdpQkey;
}

template <size_t N>
void copy_private(std::array<uint8_t, N>& to, size_t offset, std::span<const uint8_t> from) {
  std::copy(from.begin(), from.end(), to.begin() + std::ptrdiff_t(offset));
}

}  // namespace uroce::cm
