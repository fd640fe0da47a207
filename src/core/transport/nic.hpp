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
#include <deque>
#include <map>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "net/packet_io.hpp"
#include "transport/counters.hpp"
#include "transport/queues.hpp"
#include "transport/tx_batch.hpp"

namespace uroce::verbs {
class Qp;
class Cq;
}  // namespace uroce::verbs

namespace uroce::net {
class HostRegistry;
}

namespace uroce::transport {

struct NicConfig {
  std::string name = "uroce0";
  IpAddr addr;
  uint16_t port = 4791;
  bool port_fallback = true;
  uint32_t mtu = 4096;        // active MTU, bytes
};

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
  std::mutex& mu() noexcept { return mu_; }
  Counters& counters() noexcept { return counters_; }

  // QPN allocation (unique on the host: registry slot << 14 | index).
  Status attach(verbs::Qp& qp, uint32_t& qpn_out);
  void detach(verbs::Qp& qp) noexcept;  // NIC lock held
  void detach_lists(verbs::Qp& qp) noexcept;  // off the transmit/ACK lists
  verbs::Qp* find_qp(uint32_t qpn) const noexcept;

  // UDP endpoint of (gid, qpn): a same-host peer's published port, else
  // 4791.  Answers are cached for a second (the registry lookup costs
  // syscalls).  NIC lock held.
  Endpoint resolve(const IpAddr& gid, uint32_t qpn) noexcept;

  // ---- NIC lock held ----
  void schedule(verbs::Qp& qp) noexcept;      // qp has packets to send
  void schedule_ack(verbs::Qp& qp) noexcept;  // qp has only a coalescable ACK
  void pump() noexcept;                       // send what is scheduled
  void flush_acks() noexcept;                 // send lazy ACKs now
  // Receives one batch and processes it; returns the packets handled.
  size_t poll_rx() noexcept;
  void arm_timer(verbs::Qp& qp, Clock::time_point when) noexcept;
  void cq_notify(verbs::Cq& cq) noexcept;     // an armed CQ got its completion
  TxBatch& tx() noexcept { return tx_; }
  void flush_tx() noexcept { tx_.flush(*io_, counters_); }
  Clock::time_point now() const noexcept { return now_; }
  void refresh_now() noexcept { now_ = Clock::now(); }

  // ---- application threads (take the lock themselves) ----
  // Progress from a thread that found its CQ empty.
  void drive() noexcept;
  // Sleep until `fd` is readable or a packet arrives (processing packets
  // meanwhile), at most timeout_ms (-1: forever).  Returns when fd readable
  // or timed out.
  void wait_on(int fd, int timeout_ms) noexcept;

  void start_progress_thread();

  // CPU time the progress thread has used, as of its last sleep (it only
  // uses CPU while awake, and records getrusage before every sleep).
  struct ThreadCpu {
    uint64_t user_us = 0;
    uint64_t system_us = 0;
  };
  ThreadCpu progress_cpu() const noexcept {
    return {thread_user_us_.load(std::memory_order_relaxed),
            thread_sys_us_.load(std::memory_order_relaxed)};
  }

 private:
  explicit Nic(const NicConfig& cfg);
  Status open_io(const IoFactory* factory);
  void dispatch(net::RxPacket& pkt) noexcept;
  void run_timers() noexcept;
  void progress_thread_main() noexcept;
  void kick() noexcept;

  NicConfig cfg_;
  Endpoint local_;
  std::shared_ptr<net::HostRegistry> registry_;
  uint32_t slot_ = 0;
  std::unique_ptr<net::PacketIo> io_;
  mutable std::mutex mu_;
  Counters counters_;
  TxBatch tx_;
  std::vector<net::RxPacket> rx_;
  Clock::time_point now_;

  struct Resolved {
    uint16_t port;
    Clock::time_point expires;
  };
  std::map<std::pair<uint32_t, IpAddr>, Resolved> resolved_;

  // QPs of this NIC by index (qpn & 0x3fff).
  std::vector<verbs::Qp*> qps_;
  std::vector<uint32_t> free_qp_;
  uint32_t next_qp_ = 2;  // indexes 0 and 1 are never used (QP0, QP1)

  std::deque<verbs::Qp*> ready_;   // QPs with packets to send
  std::vector<verbs::Qp*> lazy_;   // QPs with only an ACK to send
  struct Timer {
    Clock::time_point when;
    uint32_t qpn;
    bool operator>(const Timer& o) const noexcept { return when > o.when; }
  };
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;

  // progress thread
  std::thread thread_;
  std::atomic<bool> stop_{false};
  int epfd_ = -1;
  int kick_fd_ = -1;
  std::atomic<uint64_t> app_activity_{0};  // bumped by every application-driven poll
  std::atomic<int> app_waiting_{0};        // application threads sleeping in the socket
  std::atomic<int64_t> thread_sleep_until_{0};  // ns since epoch of the clock; INT64_MAX = forever
  std::atomic<uint64_t> thread_user_us_{0}, thread_sys_us_{0};
};

}  // namespace uroce::transport
