// Who runs the protocol, and when (see nic.hpp for the model).
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "common/epoll_wait.hpp"
#include "common/log.hpp"
#include "common/quiet_thread.hpp"
#include "common/thread_tuning.hpp"
#include "transport/look_policy.hpp"
#include "transport/nic.hpp"
#include "transport/xrc_share.hpp"

namespace uroce::transport {
namespace {

// Packets the progress thread handles before it looks at timers again.
constexpr int kThreadRxRounds = 64;
// How long an application thread about to sleep for a completion keeps
// receiving after the last packet (Nic::wait_spin).  The ACKs of a window of
// sends come one at a time, so any packet counts.  In a ping-pong it costs
// the waiter CPU while it spins for the reply (most of the time it waits:
// see wait_spin) and saves it a wake-up when the reply comes in time.
constexpr int64_t kWaitSpinNs = 20'000;
// ... or after it last sent requests: their ACKs are on their way.  A
// sender whose window is full gets an ACK every half window (128 packets
// of 2 KiB: 75 us at 3.5 GB/s); asleep between them, it woke late and the
// receiver ran dry (qperf rc_bw 1 MiB, which waits for events: 2.2-2.6
// GB/s, 3.6 with this rule; the receiver slept 4,000 times a second).
constexpr int64_t kWaitSpinAckNs = 250'000;
// At most this long in all, before it sleeps (where packets waiting wake it
// at once): a waiter whose CQ stays quiet while other QPs' packets stream
// does not spin for good.
constexpr int64_t kWaitSpinMaxNs = 1'000'000;
// Timers of the progress thread fire this late at most (the kernel's
// default, 50 us, is the size of the ticks themselves).
constexpr uint64_t kTimerSlackNs = 1'000;
// The scheduler slice the progress thread asks for: short enough that, woken
// by a packet, it preempts an application thread spinning on memory on its
// CPU at once (Linux 6.12+; see thread_tuning.hpp).  It runs for a few
// microseconds at a time, far less than this.
constexpr uint64_t kSliceNs = 100'000;
// How long a lazy ACK may wait for the answer of an application that polls
// (Nic::schedule_ack): it answers within microseconds when it answers at
// all (a ping-pong), and a requester whose peer does not answer waits this
// much longer for its completion.
constexpr int64_t kLazyAckNs = 50'000;
// The same for ACKs held for what may be the peer's answer to a request of
// ours (ResponderState::ack_after_answer), which are held longer: on a
// 2-CPU host running both sides of a ping-pong and their progress threads,
// 1 answer in 50 over UDP came after 50 us.  When one does not come in
// time, the QP's next ACKs stop waiting for a while (hold_skip).
constexpr int64_t kHeldAckNs = 200'000;
// Ticks in a row that find an application thread inside the NIC and skip
// their look (progress_thread_main): the stats and the policy's view of the
// application still move at least every few ticks.
constexpr int kMaxSkippedLooks = 4;

}  // namespace

size_t Nic::drive(bool cq_poll) noexcept {
  app_activity_.fetch_add(1, std::memory_order_relaxed);
  if (!ready_.empty()) pump();  // posts waiting for a doorbell go first
  app_receives_ = true;
  app_polls_ = cq_poll;
  const size_t got = poll_rx();
  app_receives_ = app_polls_ = false;
  // Timers that are due run here too (after the packets waiting, which may
  // answer them): a paced QP's next packet should not wait for the progress
  // thread to get a CPU from the polling application.  (One clock read a
  // poll: the I/O reads the one before, PacketIo::use_clock.)
  refresh_now();
  if (!timers_.empty() && timers_.top().when <= now_) run_timers();
  const Clock::time_point end = now_;
  if (!lazy_.empty()) {
    // ACKs left to wait for the application's answer (responder_ack.cpp) go
    // with that answer, or with an idle poll.  Not with one while the ACK
    // of our request the peer answered is still to come, up to kHeldAckNs:
    // the peer sends its answer's WRITE before that ACK (Nic::pump), and a
    // poll that took the WRITE alone must not send this ACK ahead of our
    // own answer, which follows that ACK.  If neither comes, the progress
    // thread sends them (see its look): make sure it is ticking, not
    // asleep for good.
    const bool late = end - lazy_since_ >= std::chrono::nanoseconds(kHeldAckNs);
    if (got == 0 && (late || !lazy_acks_await_acks())) {
      flush_acks(late ? HeldAck::alone : HeldAck::early);
    } else {
      const int64_t tick = (now_ + std::chrono::nanoseconds(kAppTickNs)).time_since_epoch().count();
      if (thread_sleep_until_.load(std::memory_order_acquire) > tick) kick();
    }
  }
  // When it ended (the progress thread looks under the same lock, so a long
  // drive never looks like an idle application).
  app_last_poll_ns_.store(end.time_since_epoch().count(), std::memory_order_relaxed);
  return got;
}

// wait_on's spin (the one spinning waiter's): true if `fd` became readable.
// It keeps receiving until kWaitSpinNs pass after its own last packet, or,
// while it has taken none, after the last packet the NIC received or sent,
// whichever thread did: a waiter that comes between two ACKs of a stream,
// the next still on its way, or right after it sent a request whose answer
// is, waits for that too.  Counted from its own packets only, it slept at
// once when its first look found nothing and was rung awake by the peer:
// qperf rc_rdma_write_bw 64 KiB through shared memory moved 6.1-6.3 GB/s
// (8.9-9.8 this way), qperf rc_lat, which waits for each message, took
// 43-49 us one way through shared memory and 42-47 over UDP (6.8-7.5 and
// 15), `uroce perf --wait notify` 71-73 us a round trip (4.3 and 15, for
// 74% of a CPU a side rather than 40-43%: a waiting ping-pong spins most
// of the time it waits).  Such a spin that ends in a sleep all the same is
// a miss (the answer comes later than that, or its sender waits for a CPU
// on a loaded host, where the spin only takes one from it: beside four
// CPU-bound processes that round trip went 18-23 -> 50-83 us without this
// rule): after misses in a row the next 2, 4, ... 64 waits do not spin on
// the NIC's traffic (loaded: 24 and 5 us).  A waiter that sent requests
// itself (its looks drive a stream whose window ACKs open) keeps receiving
// until kWaitSpinAckNs after it last did.
bool Nic::wait_spin(int fd, const std::atomic<uint32_t>* queued, int64_t start, int64_t deadline,
                    int64_t& now) noexcept {
  const bool borrow = wait_spin_skip_ == 0;  // may spin on the NIC's traffic
  if (!borrow) --wait_spin_skip_;
  int64_t own_rx = 0;   // when this waiter last took packets
  int64_t own_req = 0;  // ... last sent requests (it drove a stream)
  bool spun = false, ready = false;
  int ack_spin = 0;  // 1: the spin went on past kWaitSpinNs for ACKs due (counted at the next look), 2: counted
  for (int looks = 0;; ++looks, spun = true) {
    size_t got;
    int64_t nic_rx;
    bool sent;
    {
      std::lock_guard g(mu_);
      const uint64_t reqs = counters_.req_packets;
      got = drive();
      sent = counters_.req_packets != reqs;
      if (!lazy_.empty()) flush_acks();
      nic_rx = std::max(last_rx_, last_tx_).time_since_epoch().count();
      if (looks == 1) ++counters_.app_wait_spins;
      if (ack_spin == 1) {
        ++counters_.app_wait_ack_spins;
        ack_spin = 2;
      }
    }
    now = Clock::now().time_since_epoch().count();
    // (last_rx_ is when a batch came, before its work: our own counts from now.)
    if (got > 0) own_rx = now;
    if (sent) own_req = now;
    const int64_t last = own_rx > 0 || !borrow ? own_rx : nic_rx;
    const bool acks_due = own_req > 0 && now - own_req <= kWaitSpinAckNs;
    if ((now - last > kWaitSpinNs && !acks_due) || now - start > kWaitSpinMaxNs || now >= deadline) break;
    if (now - last > kWaitSpinNs && ack_spin == 0) ack_spin = 1;  // (only for the ACKs of what it sent)
    pollfd self{fd, POLLIN, 0};
    if (queued ? queued->load(std::memory_order_acquire) > 0 : ::poll(&self, 1, 0) > 0) {
      ready = true;
      break;
    }
  }
  if (ready || own_rx > 0) {
    wait_spin_misses_ = 0;
  } else if (borrow && spun && now < deadline) {
    // Spun on the NIC's traffic for nothing: the answer comes later than
    // that, or its sender waits for a CPU (a loaded host).
    wait_spin_misses_ = uint8_t(std::min(wait_spin_misses_ + 1, 6));
    wait_spin_skip_ = uint16_t(1u << wait_spin_misses_);
  }
  return ready;
}

bool Nic::wait_on(int fd, int timeout_ms, const sigset_t* held, const std::atomic<uint32_t>* queued) noexcept {
  app_waiting_.fetch_add(1, std::memory_order_acq_rel);
  // While packets keep coming (a message of many packets, the ACKs of a
  // window of them), keep taking them rather than sleep: asleep, the thread
  // would wake once per packet or two.  Until `fd` is readable, kWaitSpinNs
  // pass without a packet, kWaitSpinMaxNs in all, or the timeout; one
  // waiter at a time (the others sleep, as the packets are not theirs).
  // The application's signals stay blocked meanwhile, and ppoll() unblocks
  // them as it sleeps: one that came during the spin interrupts the sleep
  // (EINTR), as it would have interrupted a sleep from the start.
  const int64_t start = Clock::now().time_since_epoch().count();
  const int64_t deadline = timeout_ms < 0 ? INT64_MAX : start + int64_t(timeout_ms) * 1'000'000;
  bool fd_ready = false;
  int64_t now = start;
  const bool spin = !wait_spinning_.exchange(true, std::memory_order_acquire);
  sigset_t app_mask;
  const bool own_mask = spin && !held;  // we block and restore (else the caller does, or nobody)
  if (held) {
    app_mask = *held;
  } else if (spin) {
    const sigset_t quiet = quiet_signal_mask();
    pthread_sigmask(SIG_BLOCK, &quiet, &app_mask);
  }
  if (spin) {
    fd_ready = wait_spin(fd, queued, start, deadline, now);
    wait_spinning_.store(false, std::memory_order_release);
  } else {  // one look, then sleep
    {
      std::lock_guard g(mu_);
      (void)drive();
      if (!lazy_.empty()) flush_acks();
    }
    now = Clock::now().time_since_epoch().count();
  }
  bool interrupted = false;
  if (!fd_ready && now < deadline) {
    pollfd pfd[2] = {{fd, POLLIN, 0}, {io_->wait_fd(), POLLIN, 0}};
    const bool pending = io_->prepare_wait();  // packets the socket does not show (ShmIo): no sleep
    // The I/O may want a look at least so often (ShmIo's safety net).
    int64_t until = deadline;
    bool capped = false;
    if (const int cap = io_->max_sleep_ms(); cap >= 0 && now + int64_t(cap) * 1'000'000 < until) {
      until = now + int64_t(cap) * 1'000'000;
      capped = true;
    }
    timespec left{};
    if (!pending && until != INT64_MAX)
      left = {time_t((until - now) / 1'000'000'000), long((until - now) % 1'000'000'000)};
    const int ready =
        ::ppoll(pfd, 2, pending || until != INT64_MAX ? &left : nullptr, spin || held ? &app_mask : nullptr);
    interrupted = ready < 0 && errno == EINTR;
    io_->done_wait();
    const bool rx =
        (pending || (ready > 0 && (pfd[1].revents & POLLIN)) || (ready == 0 && capped)) && !(pfd[0].revents & POLLIN);
    std::lock_guard g(mu_);
    if (!pending) ++counters_.app_wait_sleeps;
    if (rx) drive();
  }
  if (own_mask) {
    // A signal that came while blocked and was not taken by ppoll() (there
    // was none, or it returned with fds ready) runs its handler as the mask
    // goes back: report it as the interruption it is.
    sigset_t waiting;
    if (!interrupted && sigpending(&waiting) == 0)
      for (int sig = 1; sig < NSIG && !interrupted; ++sig)
        interrupted = sigismember(&waiting, sig) == 1 && sigismember(&app_mask, sig) == 0 && signal_has_handler(sig);
    pthread_sigmask(SIG_SETMASK, &app_mask, nullptr);
  }
  std::lock_guard g(mu_);
  (void)maybe_publish_stats();  // the progress thread may be asleep for good meanwhile
  // While we slept in the socket the progress thread left it to us and may
  // be asleep for long; the last waiter to leave hands the socket back.
  // (Under the lock: the thread decides and publishes under it too.)
  if (app_waiting_.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
      thread_sleep_until_.load(std::memory_order_acquire) >
          (Clock::now() + std::chrono::nanoseconds(kAppTickNs)).time_since_epoch().count())
    kick();
  return !interrupted;
}

bool Nic::arm_socket() noexcept {
  if (sock_armed_.load(std::memory_order_relaxed) || sock_armed_.exchange(true, std::memory_order_relaxed))
    return false;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u32 = 1;
  ::epoll_ctl(epfd_, EPOLL_CTL_MOD, io_->wait_fd(), &ev);
  return true;
}

void Nic::completions_taken() noexcept {
  if (!spinner_.load(std::memory_order_relaxed) || app_waiting_.load(std::memory_order_relaxed) > 0) return;
  // Polls after this one (other than to take more completions) show an
  // application that polls rather than spins.
  handed_activity_.store(app_activity_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  if (sock_armed_.load(std::memory_order_relaxed) || !arm_socket()) return;
  ++counters_.thread_spinner_watches;  // under the lock: the CQ's poll holds it
  // Packets the socket does not show (ShmIo's rings) wake only a thread that
  // announced its sleep (prepare_wait): have it go round and do so.
  if (io_->max_sleep_ms() >= 0) kick();
}

void Nic::kick() noexcept {
  if (kick_fd_ < 0) return;
  uint64_t one = 1;
  ssize_t r = ::write(kick_fd_, &one, sizeof one);
  (void)r;
}

void Nic::start_progress_thread() {
  std::lock_guard g(mu_);
  if (thread_.joinable()) return;
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  kick_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = 0;
  ::epoll_ctl(epfd_, EPOLL_CTL_ADD, kick_fd_, &ev);
  ev.events = 0;  // armed by the thread when it takes the socket
  ev.data.u32 = 1;
  ::epoll_ctl(epfd_, EPOLL_CTL_ADD, io_->wait_fd(), &ev);
  thread_ =
      start_quiet_thread("uroce-progress", [this] { progress_thread_main(); });  // none of the application's signals
}

void Nic::record_thread_cpu() noexcept {
  rusage ru;
  if (::getrusage(RUSAGE_THREAD, &ru) == 0) {
    thread_user_us_.store(uint64_t(ru.ru_utime.tv_sec) * 1'000'000 + ru.ru_utime.tv_usec, std::memory_order_relaxed);
    thread_sys_us_.store(uint64_t(ru.ru_stime.tv_sec) * 1'000'000 + ru.ru_stime.tv_usec, std::memory_order_relaxed);
  }
}

void Nic::progress_thread_main() noexcept {
  set_timer_slack(kTimerSlackNs);  // this thread only
  (void)request_short_slice(kSliceNs);
  uint64_t seen = app_activity_.load(std::memory_order_relaxed);
  LookPolicy policy;
  bool rx_event = false;       // the socket woke us: we held it, its packets are ours
  bool spinning = false;       // this look comes at once after the last (LookOutcome::spin_until)
  bool timed_out = false;      // the last sleep ended at its timeout, nothing woke us
  bool tick_only = false;      // ... a timeout the policy's tick set (no timer, ACK or stats deadline)
  int skipped = 0;             // looks skipped in a row (kMaxSkippedLooks)
  Clock::time_point cpu_at{};  // when record_thread_cpu() last ran
  int64_t woke = INT64_MAX;    // when this look's CPU time began (LookInput::woke_ns)
  while (!stop_.load(std::memory_order_acquire)) {
    LookOutcome look;
    int64_t sleep_until;
    Clock::time_point looked;  // the clock at this look (now_, read under the lock)
    std::unique_lock g(mu_, std::defer_lock);
    bool skip = false;
    if (timed_out && tick_only && skipped < kMaxSkippedLooks && app_activity_.load(std::memory_order_relaxed) != seen) {
      // A tick while an application thread polls.  If one holds the lock
      // right now it is driving the protocol (its drive() runs due timers
      // and sends lazy ACKs too): this look would leave it everything, and
      // waiting for the lock costs the poller a futex wake and both of
      // them two switches of its CPU.  Sleep another tick instead.  (A
      // timer armed between our wake and the publication below waits for
      // the poller's next drive, or for that tick.)
      looked = Clock::now();
      sleep_until = (looked + std::chrono::nanoseconds(policy.tick_ns())).time_since_epoch().count();
      thread_sleep_until_.store(sleep_until, std::memory_order_release);
      skip = !g.try_lock();
    }
    if (skip) {
      ++skipped;
    } else {
      if (!g.owns_lock()) g.lock();
      {
        counters_.thread_looks_skipped += uint64_t(skipped);
        skipped = 0;
        refresh_now();
        run_timers();
        if (!xrc_inboxes_.empty() && drain_xrc_inboxes() > 0) pump();  // what a bell woke us for
        const uint64_t cur = app_activity_.load(std::memory_order_relaxed);
        LookInput in;
        in.now_ns = now_.time_since_epoch().count();
        in.last_poll_ns = app_last_poll_ns_.load(std::memory_order_relaxed);
        in.woke_ns = woke;
        in.polled = cur != seen;
        in.waiting = app_waiting_.load(std::memory_order_acquire) > 0;
        in.rx_event = rx_event;
        // (app_activity_ moves only in drive(), under mu_, which we hold: `cur`
        // is still its value.)
        in.spinning_since_hand_over = cur == handed_activity_.load(std::memory_order_relaxed);
        seen = cur;
        const LookPlan plan = policy.plan(in);
        size_t got = 0;
        if (plan.serve) {
          for (int i = 0; i < kThreadRxRounds; ++i) {
            const size_t n = poll_rx();
            if (n == 0) break;
            got += n;
          }
          counters_.thread_rx_packets += got;
          if (rx_event) ++counters_.thread_socket_wakes;
          if (spinning) counters_.thread_spin_rx += got;
          refresh_now();
          run_timers();
        }
        look = policy.after(got, now_.time_since_epoch().count());
        if (look.spin_paused) ++counters_.thread_spin_pauses;
        sleep_until = look.sleep_until;
        // ACKs left to wait for the application's answer (responder_ack.cpp):
        // while it polls, or spins on memory between polls (it polled within
        // the last tick), it may be about to answer, so they wait up to
        // kLazyAckNs for that (kHeldAckNs if all are held for an answer),
        // whoever received the request: a WRITE this thread landed for an
        // application spinning on memory gets its ACK with the answer too.
        // One that waited in vain makes its QP's next ones leave at once for
        // a while (Nic::held_ack_leaves).  Otherwise (it waits for events, or
        // never polls: a passive server) nobody answers and they leave now.
        if (!lazy_.empty()) {
          const int64_t hold = lazy_acks_held() ? kHeldAckNs : lazy_acks_may_wait() ? kLazyAckNs : 0;
          const Clock::time_point due = lazy_since_ + std::chrono::nanoseconds(hold);
          const bool polls = in.polled || in.now_ns - in.last_poll_ns < kAppTickNs;
          if (!polls || in.waiting || hold == 0)
            flush_acks();
          else if (now_ >= due)
            flush_acks(HeldAck::alone);
          else
            sleep_until = std::min<int64_t>(sleep_until, due.time_since_epoch().count());
        }
        if (!timers_.empty())
          sleep_until = std::min<int64_t>(sleep_until, timers_.top().when.time_since_epoch().count());
        // Counters reach `uroce stat` at most kStatsInterval late.
        if (const Clock::time_point pub = maybe_publish_stats(); pub != Clock::time_point::max())
          sleep_until = std::min<int64_t>(sleep_until, pub.time_since_epoch().count());
        // A passive server between requests looks again at once, for a while
        // (LookPolicy::kPassiveSpinNs): its peer's next request finds it
        // awake.  Meanwhile nothing needs to kick it.
        looked = now_;
        spinning = look.spin_until > looked.time_since_epoch().count();
        // Published under the lock: arm_timer() (also under it) kicks us if it
        // needs us earlier than this.
        thread_sleep_until_.store(spinning ? 0 : sleep_until, std::memory_order_release);
        // A sleep cut short by a timer, a held ACK or the stats is always
        // followed by a look: the lock holder may be in post_send() or
        // modify_qp() rather than drive(), and those would wait a tick.
        tick_only = sleep_until == look.sleep_until;
      }
      g.unlock();
      // A new wait fd (a multicast join); a plain load first: no write per loop.
      if (rearm_.load(std::memory_order_relaxed) && rearm_.exchange(false, std::memory_order_acq_rel))
        sock_armed_.store(false, std::memory_order_relaxed);
      spinner_.store(look.spinner, std::memory_order_relaxed);
      if (look.arm) arm_socket();
      if (spinning) {
        // (What it costs shows in progress_cpu() within a millisecond.)
        if (looked - cpu_at >= std::chrono::milliseconds(1)) {
          record_thread_cpu();
          cpu_at = looked;
        }
        rx_event = false;
        timed_out = false;
        ::sched_yield();  // others runnable on this CPU get their turn
        woke = Clock::now().time_since_epoch().count();
        continue;
      }
    }
    const bool armed = sock_armed_.load(std::memory_order_relaxed);
    if (const int cap = io_->max_sleep_ms(); armed && cap >= 0) {
      const int64_t limit = Clock::now().time_since_epoch().count() + int64_t(cap) * 1'000'000;
      if (limit < sleep_until) tick_only = false;
      sleep_until = std::min(sleep_until, limit);
    }
    timespec timeout{};
    timespec* timeout_p = nullptr;  // forever
    if (sleep_until != INT64_MAX) {
      const int64_t ns = std::max<int64_t>(0, sleep_until - Clock::now().time_since_epoch().count());
      timeout = {time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
      timeout_p = &timeout;
    }
    // getrusage() is a system call: in a ping-pong the thread sleeps a few
    // times per round trip, so the figures are refreshed at most once a
    // millisecond there, and always before a sleep of a millisecond or more
    // (progress_cpu() is never further behind than that).
    if (skipped == 0 && (looked - cpu_at >= std::chrono::milliseconds(1) || !timeout_p || timeout.tv_sec > 0 ||
                         timeout.tv_nsec >= 1'000'000)) {
      record_thread_cpu();
      cpu_at = looked;
    }
    epoll_event evs[3];
    const bool in_socket = armed;  // sleeping in the socket: say so to the I/O
    bool pending = in_socket && io_->prepare_wait();
    bool handed = false;  // pieces for our XRC SRQs (xrc_share.hpp), whoever holds the socket
    xrc_sleep(handed);
    static constexpr timespec kNoWait{};
    const int n = epoll_wait_ns(epfd_, evs, 3, pending || handed ? &kNoWait : timeout_p);
    woke = Clock::now().time_since_epoch().count();
    if (in_socket) io_->done_wait();
    xrc_wake();
    rx_event = pending;
    timed_out = n == 0 && !pending && !handed;
    if (pending) sock_armed_.store(false, std::memory_order_relaxed);  // as a one-shot socket event
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u32 == 0) {
        uint64_t v;
        ssize_t r = ::read(kick_fd_, &v, sizeof v);
        (void)r;
      } else if (evs[i].data.u32 == 2) {
        xrc_share::quiet_bell(xrc_bell_fd_.load(std::memory_order_acquire));
      } else {
        sock_armed_.store(false, std::memory_order_relaxed);  // one-shot: disarmed until armed again
        rx_event = true;
      }
    }
  }
}

}  // namespace uroce::transport
