// The NIC: one per (address, UDP port) in a process, shared by every context
// opened on that device.  It owns the packet I/O, the engine lock that
// guards all data-path state of its QPs, CQs and SRQs, the transmit
// scheduler, the timers and the progress thread.
//
// Progress model (see docs/architecture.md):
//  - An application thread that posts transmits inline; one that polls an
//    empty CQ receives and processes packets inline (no thread hand-off).
//  - One that waits on a completion channel sleeps in the socket itself.
//  - The progress thread serves the passive side (nobody polls): it sleeps
//    in epoll, takes the socket only while no application thread has driven
//    progress for a tick, and runs the retransmission/RNR timers.  Idle, it
//    sleeps without a timeout: 0% CPU.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "common/fast_mutex.hpp"
#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "net/packet_io.hpp"
#include "net/udp_io.hpp"
#include "transport/congestion.hpp"
#include "transport/counters.hpp"
#include "transport/path_share.hpp"
#include "transport/peer_ports.hpp"
#include "transport/ports.hpp"
#include "transport/qp_table.hpp"
#include "transport/tx_batch.hpp"
#include "transport/work_queue.hpp"
#include "uroce/faults.hpp"

namespace uroce::wire {
struct Packet;
}

namespace uroce::net {
class HostRegistry;
class StatsPublisher;
}  // namespace uroce::net

namespace uroce::transport {

class QpEngine;
class XrcInbox;
class XrcRemote;

struct NicConfig {
  std::string name = "uroce0";
  IpAddr addr;
  uint16_t port = 4791;
  bool port_fallback = true;
  uint32_t mtu = 4096;  // active MTU, bytes
  // Fault injection on this NIC's packets (net/fault_io.hpp); without it,
  // UROCE_FAULTS decides.
  std::optional<FaultConfig> faults;
  // Congestion control (congestion.hpp); without it, UROCE_CC decides.
  std::optional<CongestionConfig> congestion;
  // Shared-memory rings for same-host peers; without it, UROCE_SHM decides.
  // Set by the first open of (addr, port) in a process.
  std::optional<bool> shm;
  // Large RC WRITEs and READs with a same-host uroce peer in one copy
  // (process_vm_readv/writev: docs/one_copy_design.md); without it,
  // UROCE_SHM_COPY decides, and unset, the path is on where
  // net::cross_memory_attach_by_default() says it is safe.
  std::optional<bool> shm_copy;
  CongestionConfig cc;  // in effect (set when the NIC opens)
};

// How often at most the counters are written to the stats file.
inline constexpr std::chrono::milliseconds kStatsInterval{100};

using IoFactory = std::function<Result<std::unique_ptr<net::PacketIo>>()>;

class Nic {
 public:
  // The NIC for (addr, port), opened on first use and shared afterwards.
  static Result<std::shared_ptr<Nic>> get(const NicConfig& cfg);
  // A NIC of its own over the given packet I/O (tests: FakeIo).
  static Result<std::shared_ptr<Nic>> create(const NicConfig& cfg, const IoFactory& io);
  ~Nic();
  Nic(const Nic&) = delete;
  Nic& operator=(const Nic&) = delete;

  const NicConfig& config() const noexcept { return cfg_; }
  Endpoint local() const noexcept { return local_; }
  uint32_t mtu() const noexcept { return cfg_.mtu; }
  FastMutex& mu() noexcept { return mu_; }
  Counters& counters() noexcept { return counters_; }
  // A copy of the counters with those the packet I/O keeps filled in
  // (rx_kernel_drops, fault_*).  NIC lock held.
  Counters snapshot() const noexcept;
  // The fault injection in effect (from NicConfig::faults or UROCE_FAULTS).
  const std::optional<FaultConfig>& faults() const noexcept { return faults_; }
  // Whether same-host peers were to be reached through shared memory (the
  // rings may still be missing: no room for them).
  bool shared_memory() const noexcept { return shm_; }
  // One-copy WRITEs and READs (docs/one_copy_design.md): whether we carry
  // out a peer's requests (NicConfig::shm_copy, else UROCE_SHM_COPY, else
  // on where net::cross_memory_attach_by_default(); and the kernel lets
  // us: cross_memory_attach_works), and whether we send our own (the same,
  // unless UROCE_PCAP traces our packets).  A NIC that did not ask never
  // makes the calls: its peers are answered UROCE_COPY_NAK.
  bool copy_serves() const noexcept { return copy_serve_; }
  bool copy_requests() const noexcept { return copy_send_; }
  // Our copy gate's generation for a request built now, and the note that
  // one was sent (transport/copy_gate.hpp).
  uint32_t copy_request_gate() noexcept;
  // Before memory a request of ours may name goes back to the application
  // (a work request completed in error, a QP destroyed, a region
  // deregistered): requests sent before are not carried out from now on,
  // and none is in progress.  A no-op for a NIC that never sent one.  NIC
  // lock held.
  void copy_fence() noexcept;
  // The packet I/O (NIC lock held).
  net::PacketIo& io() noexcept { return *io_; }
  // Path of the shared-memory file `uroce stat` reads ("" if not published).
  std::string stats_path() const;
  // Writes the counters to that file now.  NIC lock held.
  void publish_stats() noexcept;
  // At UROCE_LOG=debug, logs the non-zero counters and why (a QP failed,
  // the NIC closes): what a failed run leaves for whoever debugs it.
  void log_counters(const char* why) const noexcept;

  // Gives the engine its QP number and a place in the QP table
  // (qp_table.hpp).
  Status attach(QpEngine& qp);
  void detach(QpEngine& qp) noexcept;        // NIC lock held
  void detach_lists(QpEngine& qp) noexcept;  // off the transmit/ACK lists
  QpEngine* find_qp(uint32_t qpn) const noexcept { return qps_ ? qps_->find(qpn) : nullptr; }
  PathTable& paths() noexcept { return paths_; }  // (path_share.hpp)

  // UDP endpoint of (gid, qpn) (peer_ports.hpp; a multicast GID is its IP
  // group on the RoCEv2 port).  NIC lock held.
  Endpoint resolve(const IpAddr& gid, uint32_t qpn, bool fresh = false) noexcept {
    if (gid.is_multicast()) return {gid, net::kRoceV2Port};
    return ports_.resolve(gid, qpn, fresh);
  }
  // Whether packets to `addr` stay inside this host (net::PacketIo::host_local).
  // NIC lock held.
  bool host_local(const IpAddr& addr) noexcept { return io_ && io_->host_local(addr); }

  // UD multicast (ibv_attach_mcast): QP `qpn` receives what is sent to
  // multicast GID `group` (QPN 0xFFFFFF); the first QP of a group joins it
  // on the packet I/O.  EINVAL if already attached; detach: EINVAL if not.
  // Take the lock themselves.
  Status attach_mcast(const IpAddr& group, uint32_t qpn);
  // Limits (ibv_device_attr's max_mcast_grp, max_mcast_qp_attach and
  // max_total_mcast_qp_attach): ENOMEM beyond them.
  static constexpr uint32_t kMaxMcastGroups = 1024;
  static constexpr uint32_t kMaxMcastQpAttach = 64;
  static constexpr uint32_t kMaxTotalMcastQpAttach = kMaxMcastGroups * kMaxMcastQpAttach;
  Status detach_mcast(const IpAddr& group, uint32_t qpn);
  void detach_mcast_all(uint32_t qpn) noexcept;  // a QP going away; NIC lock held

  // XRC SRQs (xrc.cpp), which requests to an XRC_RECV QP name by number in
  // their XRCETH.  Numbers are slot << 14 | index, as QP numbers are.
  // Take the lock themselves; ENOMEM when every index is taken.
  Result<uint32_t> add_xrc_srq(RecvSource& srq);
  // The SRQ leaves: QPs that last delivered to it forget it.
  void remove_xrc_srq(uint32_t srqn) noexcept;
  RecvSource* find_xrc_srq(uint32_t srqn) const noexcept;  // NIC lock held
  // An XRC SRQ of a domain opened on a file, which other processes of the
  // host may open too: gives it an inbox (xrc_share.hpp) and returns its
  // receive credits, or nullptr if it cannot have one (then only this
  // process's XRC_RECV QPs reach it).  Takes the lock.
  std::atomic<uint64_t>* share_xrc_srq(uint32_t srqn, RecvSource& srq, XrcFileKey key) noexcept;
  // NIC lock held: SRQ `srqn` of another process of the host, in a domain
  // opened on the file `key` names; nullptr if there is none.
  XrcRemote* find_remote_xrc_srq(uint32_t srqn, XrcFileKey key) noexcept;

  // ---- NIC lock held ----
  void schedule(QpEngine& qp) noexcept;      // qp has packets to send
  void schedule_ack(QpEngine& qp) noexcept;  // qp has only a coalescable ACK
  void pump() noexcept;                      // send what is scheduled
  // After an application's call that may have scheduled QPs besides its
  // own (a QP that left a shared path woke others, path_share.cpp): they
  // send now, not at a later packet or timer that may never come.
  void pump_pending() noexcept {
    if (!ready_.empty()) pump();
  }
  // How an ACK held for the application's answer leaves: with it, with
  // other packets before it came, or alone at a deadline.
  enum class HeldAck : uint8_t { answered, early, alone };
  void flush_acks(HeldAck how = HeldAck::early) noexcept;  // send lazy ACKs now
  // Every QP with a lazy ACK waits for the peer's ACK of a request of ours
  // that should follow the answer it came with (ResponderState).
  bool lazy_acks_await_acks() const noexcept;
  // Every QP with a lazy ACK holds it for the application's answer
  // (ack_after_answer), or lets it wait for one (ack_may_wait).
  bool lazy_acks_held() const noexcept;
  bool lazy_acks_may_wait() const noexcept;
  // The packets being handled were received by an application's poll
  // (drive), not by the progress thread.
  bool app_receives() const noexcept { return app_receives_; }
  // ... by a poll of a CQ (drive(true)), not a waiter's look.
  bool app_polls() const noexcept { return app_polls_; }
  // The ACK qp held for the application's answer leaves (what
  // ResponderState::hold_skip learns from).
  void held_ack_leaves(QpEngine& qp, HeldAck how) noexcept;
  // Receives one batch and processes it; returns the packets handled.
  size_t poll_rx() noexcept;
  void arm_timer(QpEngine& qp, Clock::time_point when) noexcept;
  // Completes `wc` into `cq`, counted (completions, cq_overflows).
  bool deliver(CompletionSink& cq, const verbs::Wc& wc, bool solicited) noexcept {
    const bool ok = cq.complete(wc, solicited);
    ++(ok ? counters_.completions : counters_.cq_overflows);
    return ok;
  }
  TxBatch& tx() noexcept { return tx_; }
  void flush_tx() noexcept { tx_.flush(*io_, counters_); }
  Clock::time_point now() const noexcept { return now_; }
  Clock::time_point last_tx() const noexcept { return last_tx_; }  // (under the lock)
  void refresh_now() noexcept { now_ = Clock::now(); }

  // ---- application threads (take the lock themselves) ----
  // Progress from a thread that found its CQ empty; returns the packets
  // received.
  size_t drive(bool cq_poll = false) noexcept;
  // Waits until `fd` is readable, at most timeout_ms (-1: forever),
  // processing packets meanwhile: first it keeps receiving while packets
  // keep coming (one waiter at a time, with the application's signals
  // blocked), then it sleeps until `fd` or a packet.  Returns true when fd
  // is readable, a packet was taken or the time is up; false when a signal
  // handler interrupted the wait (EINTR).  `held`: the caller keeps the
  // application's signals blocked around its whole wait (quiet_signal_mask)
  // and this is the mask it blocked them from; the sleep unblocks it, so a
  // signal that came while the thread was busy between sleeps interrupts
  // the next one rather than run its handler unnoticed.  `queued`: a count
  // the caller keeps of what makes `fd` readable, read between looks
  // instead of polling the fd (the sleep still polls it).
  bool wait_on(int fd, int timeout_ms, const sigset_t* held = nullptr,
               const std::atomic<uint32_t>* queued = nullptr) noexcept;

  void start_progress_thread();
  // An application thread took completions from a CQ (under the lock): if it
  // spins on memory between polls, it is about to, and the progress thread
  // watches the socket meanwhile (look_policy.hpp, kSpinnerMisses).
  void completions_taken() noexcept;
  // An application thread posted work requests (under the lock) and pump()
  // sent them: it is as much alive as one that polls
  // (LookInput::last_poll_ns), though its post, a system call on UDP, may
  // have taken longer than kPollerIdleNs.  (The clock pump() read when it
  // sent: no clock read of its own on the way of every post.)
  void app_posted() noexcept {
    const int64_t sent = last_tx_.time_since_epoch().count();
    if (sent > app_last_poll_ns_.load(std::memory_order_relaxed))
      app_last_poll_ns_.store(sent, std::memory_order_relaxed);
  }

  // ---- QP1, the general services interface (gsi.cpp) ----
  // The connection manager's MADs are UD SEND_ONLY packets to and from QP1
  // with Q_Key 0x80010000.  A handler, when set, receives every such packet
  // (under the NIC lock, in whatever thread drives the NIC: it must copy
  // what it needs and must not call back into the NIC); without one, QP1
  // packets are dropped like those of any unknown QP.  Setting a handler
  // starts the progress thread, so that MADs are received while nobody polls.
  struct GsiPacket {
    std::span<const uint8_t> payload;  // the MAD
    Endpoint src;                      // sender's address and UDP port
    IpAddr dst;                        // local address it came to
    uint32_t src_qp;                   // DETH source QP
    uint16_t pkey;
  };
  static constexpr uint32_t kGsiQpn = 1;
  static constexpr uint32_t kMulticastQpn = 0xffffff;  // a UD datagram to a multicast group
  static constexpr uint32_t kGsiQkey = 0x80010000;
  using GsiHandler = std::function<void(const GsiPacket&)>;
  void set_gsi_handler(GsiHandler h);  // takes the NIC lock; empty: none
  // Sends `mad` from QP1 to QP1 at dst (takes the NIC lock).
  void send_gsi(const Endpoint& dst, std::span<const uint8_t> mad) noexcept;

  // CPU time the progress thread has used, as of its last sleep of a
  // millisecond or more (it only uses CPU while awake; it records getrusage
  // before such sleeps, and at most every millisecond while it wakes and
  // sleeps often or spins for a passive server).
  struct ThreadCpu {
    uint64_t user_us = 0;
    uint64_t system_us = 0;
  };
  ThreadCpu progress_cpu() const noexcept {
    return {thread_user_us_.load(std::memory_order_relaxed), thread_sys_us_.load(std::memory_order_relaxed)};
  }

 private:
  explicit Nic(const NicConfig& cfg);
  Status open_io(const IoFactory* factory);
  void dispatch(net::RxPacket& pkt) noexcept;
  bool icrc_ok(const net::RxPacket& raw) noexcept;                                     // counts a bad one
  void gsi_receive(const wire::Packet& pkt, const net::RxPacket& raw) noexcept;        // NIC lock held
  void deliver_multicast(const wire::Packet& pkt, const net::RxPacket& raw) noexcept;  // NIC lock held
  void run_timers() noexcept;
  void receive_cnp(const wire::Packet& pkt, const net::RxPacket& raw) noexcept;
  void progress_thread_main() noexcept;
  void record_thread_cpu() noexcept;  // progress_cpu()'s figures, from getrusage
  void kick() noexcept;
  // Publishes the counters if they changed and the last snapshot is at least
  // kStatsInterval old; returns when the next one may be due (max: none).
  Clock::time_point maybe_publish_stats() noexcept;

  NicConfig cfg_;
  Endpoint local_;
  std::shared_ptr<net::HostRegistry> registry_;
  std::unique_ptr<net::PacketIo> io_;
  std::optional<FaultConfig> faults_;
  bool shm_ = false;  // shared-memory rings asked for (NicConfig::shm, else UROCE_SHM)
  bool copy_serve_ = false, copy_send_ = false;
  bool copy_sent_ = false;        // a one-copy request of ours was sent
  uint64_t copy_gate_stuck_ = 0;  // copies in progress our fences no longer wait for (copy_gate.cpp)
  std::unique_ptr<net::StatsPublisher> stats_;
  Clock::time_point stats_at_{};  // last publication
  uint64_t stats_mark_ = ~0ull;   // activity as of then (see maybe_publish_stats)
  mutable FastMutex mu_;
  Counters counters_;
  TxBatch tx_;
  std::vector<net::RxPacket> rx_;
  Clock::time_point now_;
  Clock::time_point last_rx_{};  // when poll_rx last received a packet (wait_on's spin)
  Clock::time_point last_tx_{};  // when pump() last sent one (the same)

  PeerPorts ports_{nullptr};
  PathTable paths_;               // per peer endpoint, shared by the QPs sending there
  std::unique_ptr<QpTable> qps_;  // made once the registry gave the slot

  std::deque<QpEngine*> ready_;     // QPs with packets to send
  std::vector<QpEngine*> lazy_;     // QPs with only an ACK to send
  Clock::time_point lazy_since_{};  // when the first of them was queued
  struct Timer {
    Clock::time_point when;
    uint32_t qpn;
    bool operator>(const Timer& o) const noexcept { return when > o.when; }
  };
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;

  // QP1 (gsi.cpp)
  GsiHandler gsi_handler_;
  uint32_t gsi_psn_ = 0;

  // progress thread
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // The packet I/O's wait fd changed (its first multicast join): the
  // progress thread arms the new one.
  std::atomic<bool> rearm_{false};
  std::map<IpAddr, std::vector<uint32_t>> mcast_;  // group -> attached QPs
  std::map<uint32_t, RecvSource*> xrc_srqs_;       // XRC SRQ number -> SRQ
  // Inboxes of our shared XRC SRQs (shared: a sleeper holds them until it
  // wakes), and the SRQs of other processes our XRC_RECV QPs deliver to.
  std::map<uint32_t, std::shared_ptr<XrcInbox>> xrc_inboxes_;
  std::atomic<bool> have_inboxes_{false};
  std::map<uint32_t, std::unique_ptr<XrcRemote>> xrc_remotes_;
  std::atomic<int> xrc_bell_fd_{-1};  // wakes the progress thread for the inboxes (closed by ~Nic)
  // The device as XRC inboxes and bells name it: our address and the
  // configured port (one NIC of a process per pair).
  Endpoint share_dev() const { return {local_.addr, cfg_.port}; }
  size_t drain_xrc_inboxes() noexcept;
  // Around the progress thread's sleep: announces it to every inbox (sets
  // `pending` if one has pieces waiting: do not sleep), keeping them in
  // xrc_sleeping_ for xrc_wake().  Their producers ring xrc_bell_fd_, which
  // it polls.  The list is the thread's own and keeps its capacity: a sleep
  // allocates nothing (an allocation outside the NIC lock can be under way
  // when the application forks, and a child of an allocator that does not
  // guard fork, such as the sanitizers', would wait for it forever).
  void xrc_sleep(bool& pending) noexcept;
  void xrc_wake() noexcept;
  std::vector<std::shared_ptr<XrcInbox>> xrc_sleeping_;
  uint32_t next_xrc_srq_ = 1;  // index where the next search starts
  void leave_if_empty(const IpAddr& group) noexcept;
  int epfd_ = -1;
  int kick_fd_ = -1;
  std::atomic<uint64_t> app_activity_{0};       // bumped by every application-driven poll
  std::atomic<int64_t> app_last_poll_ns_{0};    // Clock time of the last one, or of a post (app_posted)
  std::atomic<int> app_waiting_{0};             // application threads sleeping in the socket
  std::atomic<int64_t> thread_sleep_until_{0};  // ns since epoch of the clock; INT64_MAX = forever
  bool app_receives_ = false;                   // (under mu_) see app_receives()
  bool app_polls_ = false;                      // (under mu_) see app_polls()
  std::atomic<bool> spinner_{false};            // the application spins on memory between polls
  std::atomic<bool> sock_armed_{false};         // the socket is armed in epfd_ (one-shot)
  bool arm_socket() noexcept;                   // arms it unless it is (true: it did)
  bool wait_spin(int fd, const std::atomic<uint32_t>* queued, int64_t start, int64_t deadline,
                 int64_t& now) noexcept;      // wait_on's spin
  std::atomic<uint64_t> handed_activity_{0};  // app_activity_ when a poll last handed over the socket
  std::atomic<bool> wait_spinning_{false};    // an application waiter keeps receiving (wait_on)
  // (The spinning waiter's, see wait_spin.)  Spins on the NIC's traffic that
  // ended in a sleep, in a row; waits left that do not spin on it.
  uint8_t wait_spin_misses_ = 0;
  uint16_t wait_spin_skip_ = 0;
  std::atomic<uint64_t> thread_user_us_{0}, thread_sys_us_{0};
};

}  // namespace uroce::transport
