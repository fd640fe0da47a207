// Who runs the protocol, and when (see nic.hpp for the model).
#include <poll.h>
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
#include "transport/nic.hpp"
#include "transport/xrc_share.hpp"

namespace uroce::transport {
namespace {

// How long the progress thread leaves the socket to an application thread
// that drove progress since its last look.  Passive-side requests wait at
// most about twice this when the application stops polling.  (A shorter
// look does not pay for a thread that keeps polling: the test "has it polled
// in the last few us" cannot be made here, where a wake-up alone takes about
// 20 us, and every look costs the polling thread its CPU on a small machine.)
constexpr int64_t kAppTickNs = 1'000'000;
// An application that polled since the look before the last but not in the
// last kPollerIdleNs polls its CQ in bursts and spins on memory in between
// (perftest's ib_write_lat does: only a progress thread can land the peer's
// WRITE it spins on).  The thread then takes the socket at the look, and if
// packets were waiting there halves its tick, down to kMinTickNs.  Every
// kBusyLooks looks in a row that found nothing to do -- the application
// polling, or no packet waiting -- double it, back to kAppTickNs (such a
// program is found polling at some looks: it polls for its send completions
// between spins; one that polls now and then with no traffic costs no
// 50 us ticks for long).  A polling thread preempted longer than
// kPollerIdleNs loses a batch of packets to the progress thread once:
// harmless.
constexpr int64_t kPollerIdleNs = 50'000;
constexpr int64_t kMinTickNs = 50'000;
constexpr int kBusyLooks = 8;
// Packets the progress thread handles before it looks at timers again.
constexpr int kThreadRxRounds = 64;
// Such a program (see kPollerIdleNs) is a spinner: each poll of it that
// takes completions (after which it goes back to spinning) hands the socket
// to the thread (Nic::completions_taken), which wakes for the next packet and
// serves it at once instead of at its next look.  Only then: a thread woken
// for packets the application takes itself (the ACK it polls for) runs
// twice per round trip, and one woken again within microseconds of its last
// run has used more than its share of the CPU the application spins on, so
// the scheduler lets it wait up to a whole tick (4 ms) instead of preempting.
// A thread of an application that waits, not spins, never watches.  A wake
// after which the application polled again (not just to take completions)
// is not for the thread: the application takes the packet itself.  Spinner
// mode ends after kSpinnerMisses such wakes, or wakes that found nothing, in
// a row (a busy poller preempted for longer than kPollerIdleNs looks like a
// spinner for that long).
constexpr int kSpinnerMisses = 16;
// An application that polled this recently polls right now and takes what
// woke the thread itself.  In spinner mode too: a busy poller mistaken for a
// spinner (one look found it preempted) kept the mode going when wakes just
// after its poll that handed over the socket, before its next poll, were
// served; its progress thread then used 20-35% of a CPU beside it, and
// the round trip rose by a third (`uroce perf --op send --test lat`).
constexpr int64_t kPollingNs = 5'000;
// How long an application thread about to sleep for a completion keeps
// receiving after its last packet (Nic::wait_on).  The ACKs of a window of
// sends come one at a time, so any packet counts.  In a ping-pong it costs
// the waiter CPU while it spins for the reply (about 5% of one in `uroce
// pingpong send-notify`) and saves it a wake-up when the reply comes in time.
constexpr int64_t kWaitSpinNs = 20'000;
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

}  // namespace

size_t Nic::drive() noexcept {
  app_activity_.fetch_add(1, std::memory_order_relaxed);
  if (!ready_.empty()) pump();  // posts waiting for a doorbell go first
  const size_t got = poll_rx();
  // Timers that are due run here too (after the packets waiting, which may
  // answer them): a paced QP's next packet should not wait for the progress
  // thread to get a CPU from the polling application.
  if (!timers_.empty()) {
    refresh_now();
    if (timers_.top().when <= now_) run_timers();
  }
  if (got == 0) {
    if (!lazy_.empty()) flush_acks();
  } else if (!lazy_.empty()) {
    // The ACKs left behind go with our next send or our next idle poll; if
    // neither comes, the progress thread's next tick sends them.  Make sure
    // it is ticking rather than asleep for good.
    const int64_t tick = (now_ + std::chrono::nanoseconds(kAppTickNs)).time_since_epoch().count();
    if (thread_sleep_until_.load(std::memory_order_acquire) > tick) kick();
  }
  // When it ended (the progress thread looks under the same lock, so a long
  // drive never looks like an idle application).
  app_last_poll_ns_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  return got;
}

bool Nic::wait_on(int fd, int timeout_ms, const sigset_t* held) noexcept {
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
  for (int64_t last_rx = 0;;) {
    size_t got;
    {
      std::lock_guard g(mu_);
      got = drive();
      if (!lazy_.empty()) flush_acks();
    }
    now = Clock::now().time_since_epoch().count();
    if (got > 0) last_rx = now;
    if (!spin || now - last_rx > kWaitSpinNs || now - start > kWaitSpinMaxNs || now >= deadline) break;
    pollfd self{fd, POLLIN, 0};
    if (::poll(&self, 1, 0) > 0) {
      fd_ready = true;
      break;
    }
  }
  if (spin) wait_spinning_.store(false, std::memory_order_release);
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

void Nic::progress_thread_main() noexcept {
  set_timer_slack(kTimerSlackNs);  // this thread only
  (void)request_short_slice(kSliceNs);
  uint64_t seen = app_activity_.load(std::memory_order_relaxed);
  int64_t tick_ns = kAppTickNs;
  int idle_looks = 0;
  int spinner_misses = kSpinnerMisses;  // < kSpinnerMisses: a spinner (see there)
  bool rx_event = false;                // the socket woke us: we held it, its packets are ours
  bool rewatch = false, unserved = false;
  bool polled_before = false;  // the application polled between the last two looks
  while (!stop_.load(std::memory_order_acquire)) {
    bool app_active;
    int64_t sleep_until;
    {
      std::lock_guard g(mu_);
      refresh_now();
      run_timers();
      if (!xrc_inboxes_.empty() && drain_xrc_inboxes() > 0) pump();  // what a bell woke us for
      const uint64_t cur = app_activity_.load(std::memory_order_relaxed);
      const bool polled = cur != seen;
      seen = cur;
      const bool waiting = app_waiting_.load(std::memory_order_acquire) > 0;
      app_active = polled || waiting;
      const int64_t since_poll = now_.time_since_epoch().count() - app_last_poll_ns_.load(std::memory_order_relaxed);
      // One that polled before the last look and not since is one too: that
      // look, finding it polling, left the socket to it and set a tick, and
      // the packet it spins for waited for this one.
      const bool slow_poller = (polled || polled_before) && !waiting && since_poll > kPollerIdleNs;
      polled_before = polled;
      // What woke us: a spinner's packet if the application has not polled
      // since it took its completions and handed us the socket (it spins on
      // memory), nor just now; otherwise one an application polling right
      // now takes itself (leave it the lock; a bandwidth client is no
      // spinner).
      const bool spinner = spinner_misses < kSpinnerMisses;
      const bool just_polled = since_poll < kPollingNs;
      const bool spinning_since_hand_over =
          app_activity_.load(std::memory_order_relaxed) == handed_activity_.load(std::memory_order_relaxed);
      const bool rx_for_us =
          rx_event && !waiting && (spinner ? spinning_since_hand_over && !just_polled : !(app_active && just_polled));
      // A packet that woke us is served even if the application polled a
      // while ago (it would otherwise wait a tick); one sleeping in the
      // socket itself takes it instead.
      size_t got = 0;
      if (!app_active || rx_for_us || slow_poller) {
        for (int i = 0; i < kThreadRxRounds; ++i) {
          const size_t n = poll_rx();
          if (n == 0) break;
          got += n;
        }
        counters_.thread_rx_packets += got;
        if (rx_event) ++counters_.thread_socket_wakes;
        refresh_now();
        run_timers();
        if (slow_poller && got > 0) {
          tick_ns = std::max(kMinTickNs, tick_ns / 2);
          idle_looks = -1;     // this look had work
          spinner_misses = 0;  // (a busy poller preempted for a while leaves at its next polls)
        }
      }
      // A spinner's wake that found nothing for us is a miss.
      if (rx_event && app_active && spinner && !slow_poller) {
        spinner_misses = rx_for_us && got > 0 ? 0 : spinner_misses + 1;
        if (rx_for_us && got > 0) idle_looks = -1;  // work done: no longer ticks
      }
      // The application took what woke us while the hand-over stands (its
      // poll found the socket still armed, so it did not arm it): watch on.
      rewatch = spinner && rx_for_us && got == 0;
      // What woke us and was left to a polling application: look again soon
      // in case that poll was its last.
      unserved = rx_event && !waiting && app_active && !rx_for_us && !slow_poller;
      if (waiting) spinner_misses = kSpinnerMisses;  // it waits for events: no spinner
      if (polled && ++idle_looks >= kBusyLooks) {
        idle_looks = 0;
        tick_ns = std::min(kAppTickNs, tick_ns * 2);
      }
      // ACKs an application thread left behind wait at most one tick.
      if (!lazy_.empty()) flush_acks();
      // Tick only while an application thread polls (to take the socket
      // over when it stops).  One asleep in the socket serves it itself and
      // kicks us when it leaves (wait_on): no ticking meanwhile, 0% CPU.
      sleep_until = polled ? (now_ + std::chrono::nanoseconds(tick_ns)).time_since_epoch().count() : INT64_MAX;
      if (unserved)
        sleep_until =
            std::min<int64_t>(sleep_until, (now_ + std::chrono::nanoseconds(kMinTickNs)).time_since_epoch().count());
      if (!timers_.empty()) sleep_until = std::min<int64_t>(sleep_until, timers_.top().when.time_since_epoch().count());
      // Counters reach `uroce stat` at most kStatsInterval late.
      if (const Clock::time_point pub = maybe_publish_stats(); pub != Clock::time_point::max())
        sleep_until = std::min<int64_t>(sleep_until, pub.time_since_epoch().count());
      // Published under the lock: arm_timer() (also under it) kicks us if it
      // needs us earlier than this.
      thread_sleep_until_.store(sleep_until, std::memory_order_release);
    }
    // A new wait fd (a multicast join); a plain load first: no write per loop.
    if (rearm_.load(std::memory_order_relaxed) && rearm_.exchange(false, std::memory_order_acq_rel))
      sock_armed_.store(false, std::memory_order_relaxed);
    spinner_.store(spinner_misses < kSpinnerMisses, std::memory_order_relaxed);
    if (!app_active || rewatch) arm_socket();
    const bool armed = sock_armed_.load(std::memory_order_relaxed);
    if (const int cap = io_->max_sleep_ms(); armed && cap >= 0) {
      const int64_t limit = Clock::now().time_since_epoch().count() + int64_t(cap) * 1'000'000;
      sleep_until = std::min(sleep_until, limit);
    }
    timespec timeout{};
    timespec* timeout_p = nullptr;  // forever
    if (sleep_until != INT64_MAX) {
      const int64_t ns = std::max<int64_t>(0, sleep_until - Clock::now().time_since_epoch().count());
      timeout = {time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
      timeout_p = &timeout;
    }
    rusage ru;
    if (::getrusage(RUSAGE_THREAD, &ru) == 0) {
      thread_user_us_.store(uint64_t(ru.ru_utime.tv_sec) * 1'000'000 + ru.ru_utime.tv_usec, std::memory_order_relaxed);
      thread_sys_us_.store(uint64_t(ru.ru_stime.tv_sec) * 1'000'000 + ru.ru_stime.tv_usec, std::memory_order_relaxed);
    }
    epoll_event evs[3];
    const bool in_socket = armed;  // sleeping in the socket: say so to the I/O
    bool pending = in_socket && io_->prepare_wait();
    bool handed = false;  // pieces for our XRC SRQs (xrc_share.hpp), whoever holds the socket
    xrc_sleep(handed);
    static constexpr timespec kNoWait{};
    const int n = epoll_wait_ns(epfd_, evs, 3, pending || handed ? &kNoWait : timeout_p);
    if (in_socket) io_->done_wait();
    xrc_wake();
    rx_event = pending;
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
