// What the progress thread does at each look (progress.cpp): whether it
// takes the socket's packets or leaves them to a polling application, how
// long it sleeps before the next look, and whether it watches the socket
// for a spinner.  Pure state and arithmetic like swift.hpp: the thread
// passes in what it saw (times as nanoseconds of the NIC's clock), so
// deterministic tests drive it by hand.
//
// The model (nic.hpp has the whole of it): an application thread that polls
// its CQ drives the protocol itself; the thread looks once per tick while
// it does, and takes over when it stops.  Three kinds of application meet
// it: a busy poller (polls all the time: leave it everything), one that
// waits for events (sleeps in the socket itself: never tick), and a
// spinner, which polls its CQ in bursts and spins on memory in between
// (perftest's ib_write_lat: only the thread can land the WRITE it spins
// on).
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::transport {

// The longest tick: how long the thread leaves the socket to an application
// thread that drove progress since its last look.  Passive-side requests
// wait at most about twice this when the application stops polling.  (A
// shorter look does not pay for a thread that keeps polling: the test "has
// it polled in the last few us" cannot be made here, where a wake-up alone
// takes about 20 us, and every look costs the polling thread its CPU on a
// small machine.)
inline constexpr int64_t kAppTickNs = 1'000'000;

// What a look saw.
struct LookInput {
  int64_t now_ns = 0;
  int64_t last_poll_ns = 0;  // when the application's last drive() or post ended
  // When the thread got its CPU for this look (its wake, or the end of its
  // yield); INT64_MAX: at now_ns.  How long the application had been silent
  // is told at that moment: the thread's wake may preempt an application
  // thread polling on the same CPU, and the look comes some 20-60 us later
  // on this kind of VM (the wake-up, the lock), by which time a busy poller
  // that the thread itself holds off the CPU looks as silent as a spinner.
  int64_t woke_ns = INT64_MAX;
  bool polled = false;    // it drove progress since the last look
  bool waiting = false;   // one of its threads sleeps in Nic::wait_on
  bool rx_event = false;  // the socket woke us: we held it, its packets may be ours
  // It has not polled since its poll that took completions handed us the
  // socket (Nic::completions_taken): it spins on memory.
  bool spinning_since_hand_over = false;
};

// What to do with the packets waiting.
struct LookPlan {
  bool serve = false;        // take them (else leave them to the application)
  bool slow_poller = false;  // a spinner found between its bursts of polls
  bool rx_for_us = false;    // what woke us is ours to serve
};

// After the packets (`got` of them) were taken or left.
struct LookOutcome {
  bool arm = false;      // sleep in the socket (else leave it to the application)
  bool spinner = false;  // watch for a spinner's packets (Nic::spinner_)
  // When to look again at the latest, as far as the application goes
  // (timers, stats and the I/O's cap come on top); INT64_MAX: never.
  int64_t sleep_until = 0;
  // Until then, look again at once rather than sleep (a passive server
  // between requests); 0: no spin.
  int64_t spin_until = 0;
  // This look found the CPU contended, and spins pause (kSpinPauseNs).
  bool spin_paused = false;
};

class LookPolicy {
 public:
  // An application found polling at this look or the last one that could
  // tell (see polled_before_), but not in the last kPollerIdleNs, is a
  // spinner between bursts: the
  // thread takes the socket, and if packets were waiting halves its tick,
  // down to kMinTickNs.  Every kBusyLooks looks in a row that found nothing
  // to do -- the application polling, or no packet waiting -- double it,
  // back to kAppTickNs (a spinner is found polling at some looks: it polls
  // for its send completions between spins; one that polls now and then
  // with no traffic costs no 50 us ticks for long).  A busy poller
  // preempted longer than kPollerIdleNs loses a batch of packets to the
  // thread once: harmless.
  static constexpr int64_t kPollerIdleNs = 50'000;
  // Spinner mode begins at the second such look that served packets within
  // kSpinnerConfirmNs of the first.  A spinner keeps being found so (its
  // peer's packets wait for the thread at every look until the mode
  // begins); a busy poller shows it once now and then, when the host
  // preempts it: in a UDP SEND ping-pong on 2 CPUs about 50 times a
  // second, each costing the poller a mode of wakes for packets it takes
  // itself.
  static constexpr int64_t kSpinnerConfirmNs = 3'000'000;
  static constexpr int64_t kMinTickNs = 50'000;
  static constexpr int kBusyLooks = 8;
  // In spinner mode each poll that takes completions (after which a spinner
  // spins again) hands the socket to the thread, which wakes for the next
  // packet and serves it at once instead of at its next look.  Only then: a
  // thread woken for packets the application takes itself (the ACK it polls
  // for) runs twice per round trip, and one woken again within microseconds
  // of its last run has used more than its share of the CPU the application
  // spins on, so the scheduler lets it wait up to a whole tick (4 ms)
  // instead of preempting.  A wake after which the application polled again
  // (not just to take completions) is not for the thread.  The mode ends
  // after kSpinnerMisses such wakes, or wakes that found nothing, in a row
  // (a busy poller preempted for longer than kPollerIdleNs looks like a
  // spinner for that long); an application found waiting ends it at once.
  static constexpr int kSpinnerMisses = 16;
  // An application that polled this recently polls right now and takes
  // what woke the thread itself, in spinner mode too: a busy poller
  // mistaken for a spinner kept the mode going when wakes just after its
  // poll that handed over the socket, before its next poll, were served
  // (its thread then used 20-35% of a CPU beside it).
  static constexpr int64_t kPollingNs = 5'000;
  // A passive application (none of its threads polled in the last
  // kAppTickNs or waits) whose packets the thread served: it looks again
  // at once, without sleeping, until kPassiveSpinNs pass without a packet.
  // Its peer's next request (a READ or WRITE latency test's) then finds it
  // awake: a wake-up across CPUs costs about 20 us here, more than the
  // round trip of a shared-memory READ.  So it costs up to one CPU while
  // requests keep coming and none when they stop; an application that
  // polls or waits drives progress itself and stops the spin at once.
  static constexpr int64_t kPassiveSpinNs = 20'000;
  // A look that should have come at once after the last (a spin) but came
  // more than kSpinLostNs later: the CPU went to another thread at the
  // yield for a whole scheduler slice (0.75-3 ms).  On a loaded host a
  // spinning thread is runnable, not asleep, so a packet cannot wake it
  // and preempt: it waits for the scheduler's turn (ib_write_bw 1 MiB
  // beside four CPU-bound processes moved 15-30% less).  Spins pause for
  // kSpinPauseNs then.  (Shorter losses are the other threads of a small
  // host taking their turn, such as the peer's progress thread at its
  // tick: 20 us lost the spin for good in an idle ib_read_lat.)
  static constexpr int64_t kSpinLostNs = 500'000;
  static constexpr int64_t kSpinPauseNs = 100'000'000;

  // The decision on the packets waiting at a look.
  LookPlan plan(const LookInput& in) noexcept;
  // The rest of the look, once `got` packets were taken (0 if the plan
  // left them); `now_ns` is the clock after taking them.
  LookOutcome after(size_t got, int64_t now_ns) noexcept;

  bool spinner() const noexcept { return spinner_misses_ < kSpinnerMisses; }
  int64_t tick_ns() const noexcept { return tick_ns_; }

 private:
  LookInput in_{};
  LookPlan plan_{};
  int64_t tick_ns_ = kAppTickNs;
  int idle_looks_ = 0;
  int spinner_misses_ = kSpinnerMisses;
  // A look found the application polling and none since could tell whether
  // it went on (each came within kPollerIdleNs of its last poll).
  bool polled_before_ = false;
  int64_t spin_until_ = 0;
  int64_t spin_paused_until_ = 0;
  int64_t last_after_ns_ = 0;  // the clock at the end of the last look
  bool slow_served_ = false;   // a slow poller's packets were served, at slow_served_ns_
  int64_t slow_served_ns_ = 0;
};

}  // namespace uroce::transport
