// The progress thread's decisions at a look (see look_policy.hpp).
#include "transport/look_policy.hpp"

#include <algorithm>
#include <climits>

namespace uroce::transport {

LookPlan LookPolicy::plan(const LookInput& in) noexcept {
  in_ = in;
  const bool app_active = in.polled || in.waiting;
  // (Silence before the thread took the CPU: see LookInput::woke_ns.)
  const int64_t since_poll = std::max<int64_t>(0, std::min(in.now_ns, in.woke_ns) - in.last_poll_ns);
  LookPlan p;
  // One that polled before the look that found it polling and not since
  // is one too: that look left the socket to it and set a tick, and the
  // packet it spins for waited for this one.
  p.slow_poller = (in.polled || polled_before_) && !in.waiting && since_poll > kPollerIdleNs;
  // A look too soon after its last poll to tell (a kick, a timer, stats)
  // keeps what the one before it saw.
  polled_before_ = in.polled || (polled_before_ && since_poll <= kPollerIdleNs);
  // What woke us: a spinner's packet if the application has not polled
  // since it took its completions and handed us the socket (it spins on
  // memory), nor just now; otherwise one an application polling right now
  // takes itself (leave it the lock; a bandwidth client is no spinner).
  const bool just_polled = since_poll < kPollingNs;
  p.rx_for_us = in.rx_event && !in.waiting &&
                (spinner() ? in.spinning_since_hand_over && !just_polled : !(app_active && just_polled));
  // A packet that woke us is served even if the application polled a
  // while ago (it would otherwise wait a tick); one sleeping in the socket
  // itself takes it instead.
  p.serve = !app_active || p.rx_for_us || p.slow_poller;
  plan_ = p;
  return p;
}

LookOutcome LookPolicy::after(size_t got, int64_t now_ns) noexcept {
  const LookInput& in = in_;
  const LookPlan& p = plan_;
  const bool app_active = in.polled || in.waiting;
  const bool was_spinner = spinner();
  if (p.serve && p.slow_poller && got > 0) {
    tick_ns_ = std::max(kMinTickNs, tick_ns_ / 2);
    idle_looks_ = -1;  // this look had work
    // The second within kSpinnerConfirmNs begins (or keeps up) spinner mode
    // (a busy poller mistaken all the same leaves at its next polls).
    if (slow_served_ && in.now_ns - slow_served_ns_ <= kSpinnerConfirmNs) spinner_misses_ = 0;
    slow_served_ = true;
    slow_served_ns_ = in.now_ns;
  }
  // A spinner's wake that found nothing for us is a miss.
  if (in.rx_event && app_active && was_spinner && !p.slow_poller) {
    const bool hit = p.rx_for_us && got > 0;
    spinner_misses_ = hit ? 0 : spinner_misses_ + 1;
    if (hit) idle_looks_ = -1;  // work done: no longer ticks
  }
  // The application took what woke us while the hand-over stands (its poll
  // found the socket still armed, so it did not arm it): watch on.
  const bool rewatch = was_spinner && p.rx_for_us && got == 0;
  // What woke us and was left to a polling application: look again soon in
  // case that poll was its last.
  const bool unserved = in.rx_event && !in.waiting && app_active && !p.rx_for_us && !p.slow_poller;
  if (in.waiting) spinner_misses_ = kSpinnerMisses;  // it waits for events: no spinner
  if (in.polled && ++idle_looks_ >= kBusyLooks) {
    idle_looks_ = 0;
    tick_ns_ = std::min(kAppTickNs, tick_ns_ * 2);
  }
  LookOutcome out;
  // Tick only while an application thread polls (to take the socket over
  // when it stops).  One asleep in the socket serves it itself and kicks us
  // when it leaves (Nic::wait_on): no ticking meanwhile, 0% CPU.
  out.sleep_until = in.polled ? now_ns + tick_ns_ : INT64_MAX;
  if (unserved) out.sleep_until = std::min(out.sleep_until, now_ns + kMinTickNs);
  const bool passive = !app_active && in.now_ns - in.last_poll_ns >= kAppTickNs;
  if (spin_until_ > last_after_ns_ && in.now_ns - last_after_ns_ > kSpinLostNs) {
    spin_paused_until_ = now_ns + kSpinPauseNs;  // spun, and lost the CPU meanwhile
    out.spin_paused = true;
  }
  if (!passive || now_ns < spin_paused_until_)
    spin_until_ = 0;
  else if (p.serve && got > 0)
    spin_until_ = now_ns + kPassiveSpinNs;
  last_after_ns_ = now_ns;
  out.spin_until = spin_until_;
  out.arm = !app_active || rewatch;
  out.spinner = spinner();
  return out;
}

}  // namespace uroce::transport
