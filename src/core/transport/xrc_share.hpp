// XRC across processes (IBA 9.9.4 with rdma-core's file-shared domains):
// the processes of a host that open one file as an XRC domain share it, so
// an XRC_RECV QP of process B may deliver a SEND into an XRC SRQ of process
// A (ibv_xsrq_pingpong's server sends to each client's SRQ through the
// XRC_RECV QP of another client).  uroce's NICs live in their processes, so
// B hands the message over through shared memory:
//
//  - A's XRC SRQ in a file-backed domain has an inbox (XrcInbox): a
//    shared-memory ring (net/shm_ring.hpp) named after the user, the network
//    namespace, the device (address and configured port) and the SRQ
//    number, whose header holds the SRQ's receive credits (WQEs posted and
//    not yet taken) and the domain's file (device and inode).
//  - B's responder, for a request naming an SRQ of another process
//    (XrcRemote), takes a credit at the message's first packet (none: RNR
//    NAK, as for an empty SRQ) and puts each packet's payload in the inbox;
//    an inbox that is full answers a first packet with an RNR NAK and drops
//    a later one unacknowledged (the requester sends it again).  Every consumer of the SRQ, A's own XRC_RECV QPs
//    included, takes credits the same way, so a credit B holds always has a
//    WQE behind it.
//  - A drains the inbox where it receives packets: it takes the WQE at a
//    message's first piece, scatters with its own keys (the checks are A's:
//    a bad SGE or a message longer than the WQE completes in error), and
//    completes into the SRQ's CQ at the last.  A's progress thread, asleep,
//    is woken by a datagram on A's bell: an abstract Unix socket named
//    after the user, the device and A's registry slot (off the wire, so
//    captures show RoCEv2 only).
//
// Not covered: a message whose sender stops midway (its QP reset or
// destroyed, its process killed) keeps the WQE it took; so does a credit
// taken by a process killed before it handed the first piece over.
//
// Only SENDs cross: a WRITE, READ or atomic through another process's SRQ
// (whose PD holds the keys) is refused as an invalid request, and so is a
// SEND with invalidate.  B acknowledges a message once it is in the inbox,
// so a length or protection error at A is reported at A only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "net/shm_ring.hpp"
#include "net/unique_fd.hpp"
#include "transport/ports.hpp"
#include "transport/work_queue.hpp"

namespace uroce::transport {

class Nic;

namespace xrc_share {
// One packet's payload on its way to the SRQ's owner, before the bytes.
struct Piece {
  uint32_t tgt_qpn;  // the XRC_RECV QP that received it (wc.qp_num)
  uint32_t msn;      // its responder's MSN at the message (with tgt_qpn: the message)
  uint32_t src_qp;   // the sending QP (wc.src_qp)
  uint32_t offset;   // of these bytes in the message
  uint32_t flags;    // kFirst | kLast | kImm | kSolicited
  uint32_t imm;      // with kImm (network order as the verbs give it)
  uint32_t len;      // bytes that follow
  uint32_t reserved;
};
inline constexpr uint32_t kFirst = 1, kLast = 2, kImm = 4, kSolicited = 8;

// The inbox ring's file for SRQ `srqn` of the device `dev` (its address
// and configured port: one NIC of a process per pair).
std::string inbox_path(const std::string& dir, const Endpoint& dev, uint32_t srqn);
// The bell of the process in registry slot `slot` on `dev`: a bound,
// non-blocking datagram socket; and ringing it (any datagram wakes; false
// if it could not be sent).
Result<net::UniqueFd> open_bell(const Endpoint& dev, uint32_t slot);
bool ring_bell(int fd, const Endpoint& dev, uint32_t slot) noexcept;
// Reads every datagram waiting on a bell.
void quiet_bell(int fd) noexcept;
}  // namespace xrc_share

// A's side: the inbox of one XRC SRQ of a file-backed domain.
class XrcInbox {
 public:
  // Creates the inbox of `srq` (number `srqn`, domain `key`) of the device
  // `dev`; EEXIST if a live one of that name exists.
  static Result<std::unique_ptr<XrcInbox>> create(const std::string& dir, const Endpoint& dev, uint32_t srqn,
                                                  XrcFileKey key, RecvSource& srq);
  ~XrcInbox();
  XrcInbox(const XrcInbox&) = delete;
  XrcInbox& operator=(const XrcInbox&) = delete;

  uint32_t srqn() const noexcept { return srqn_; }
  // The SRQ goes away: producers find the inbox closed and its file is
  // removed now, whoever still holds the object (a sleeper, until it wakes).
  void close() noexcept { ring_->close(); }
  // The SRQ's receive credits (Srq::post_recv adds, every consumer takes).
  std::atomic<uint64_t>& credits() noexcept;

  // NIC lock held: handles what other processes put in; returns the pieces.
  size_t drain(Nic& nic) noexcept;
  // Before and after a sleep in the socket (any thread): true if pieces wait.
  bool prepare_sleep() noexcept { return ring_->prepare_sleep(); }
  void end_sleep() noexcept { ring_->end_sleep(); }

 private:
  XrcInbox() = default;
  struct Message {
    RecvWqe wqe;
    std::vector<verbs::Sge> sges;
    bool have_wqe = false;
    verbs::WcStatus status = verbs::WcStatus::success;
    uint32_t bytes = 0;
  };
  void handle(Nic& nic, const xrc_share::Piece& p, std::span<const uint8_t> data) noexcept;
  std::unique_ptr<net::ShmRing> ring_;
  RecvSource* srq_ = nullptr;
  uint32_t srqn_ = 0;
  std::map<uint64_t, Message> messages_;  // tgt_qpn << 32 | msn -> message being received
  std::vector<net::RxPacket> rx_;
};

// B's side: an XRC SRQ of another process, as B's responder reaches it.
class XrcRemote {
 public:
  // Maps the inbox of SRQ `srqn` of the device `dev`; ENOENT if there is
  // none (no such SRQ, or not in a shared domain), ESTALE if its owner is
  // gone.
  static Result<std::unique_ptr<XrcRemote>> attach(const std::string& dir, const Endpoint& dev, uint32_t srqn);

  XrcFileKey domain() const noexcept { return key_; }
  // Open and its owner alive (looked at once per kLivenessPeriod).
  static constexpr std::chrono::milliseconds kLivenessPeriod{100};
  bool usable() noexcept;
  enum class Take { ok, empty, gone };
  // A credit for a new message; give_back() returns one not used.
  Take take_credit() noexcept;
  void give_back() noexcept;
  // Puts one packet's payload: ok, full (or closed), too_big.  Rings the
  // owner's bell if it sleeps.
  net::ShmRing::Put put(const xrc_share::Piece& p, std::span<const uint8_t> data) noexcept;

 private:
  XrcRemote() = default;
  std::unique_ptr<net::ShmRing> ring_;
  uint32_t srqn_ = 0;
  XrcFileKey key_;
  Endpoint dev_;
  std::chrono::steady_clock::time_point checked_;
  bool alive_ = true;
  net::UniqueFd bell_fd_;  // an unbound Unix datagram socket to ring with
};

}  // namespace uroce::transport
