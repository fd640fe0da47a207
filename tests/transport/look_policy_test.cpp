// transport.LookPolicy: the progress thread's decision at each look, driven
// by hand (look_policy.hpp).  Times are nanoseconds; each test lays out
// what an application did between looks and checks what the thread does:
// take the packets or leave them, how long it sleeps, spinner mode.
#include "transport/look_policy.hpp"

#include <gtest/gtest.h>

#include <climits>

namespace uroce::transport {
namespace {

constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kT0 = 10'000 * kMs;  // any clock value

// What the application did before a look at `now`: `polled` since the
// last look, its last poll `since` ago.
LookInput seen(int64_t now, bool polled, int64_t since, bool rx_event = false, bool spinning = false) {
  LookInput in;
  in.now_ns = now;
  in.last_poll_ns = now - since;
  in.polled = polled;
  in.rx_event = rx_event;
  in.spinning_since_hand_over = spinning;
  return in;
}

// One whole look in which `got` packets wait for whoever takes them.
struct Look {
  LookPlan plan;
  LookOutcome out;
};
Look look(LookPolicy& p, const LookInput& in, size_t got) {
  Look l;
  l.plan = p.plan(in);
  l.out = p.after(l.plan.serve ? got : 0, in.now_ns);
  return l;
}

// A policy in spinner mode, as ib_write_lat puts it there: a look finds it
// polling, the next a millisecond later finds it silent with a packet
// waiting, and so does the one a (halved) tick after that, the application
// having polled for its WRITE's completion in between.  Returns the time of
// that third look.
int64_t make_spinner(LookPolicy& p) {
  look(p, seen(kT0, true, 2 * kUs), 0);
  Look l = look(p, seen(kT0 + kMs, false, kMs), 1);
  EXPECT_TRUE(l.plan.slow_poller);
  EXPECT_FALSE(p.spinner());  // once: perhaps a busy poller the host preempted
  const int64_t t = kT0 + kMs + p.tick_ns();
  l = look(p, seen(t, true, 200 * kUs), 1);
  EXPECT_TRUE(l.plan.slow_poller);
  EXPECT_TRUE(p.spinner());
  return t;
}

TEST(LookPolicy, IdleApplicationGetsItsPacketsServedAndNoTick) {
  LookPolicy p;
  const Look l = look(p, seen(kT0, false, 5 * kMs), 3);
  EXPECT_TRUE(l.plan.serve);
  EXPECT_FALSE(l.plan.slow_poller);
  EXPECT_TRUE(l.out.arm);                   // the thread sleeps in the socket
  EXPECT_EQ(l.out.sleep_until, INT64_MAX);  // and nothing else wakes it: 0% CPU idle
  EXPECT_FALSE(l.out.spinner);
}

TEST(LookPolicy, BusyPollerKeepsTheSocketAndTheThreadTicks) {
  LookPolicy p;
  for (int i = 0; i < 20; ++i) {
    const int64_t now = kT0 + i * kMs;
    const Look l = look(p, seen(now, true, 1 * kUs), 4);
    EXPECT_FALSE(l.plan.serve) << "look " << i;
    EXPECT_FALSE(l.out.arm);
    EXPECT_EQ(l.out.sleep_until, now + kAppTickNs);
    EXPECT_FALSE(p.spinner());
  }
}

TEST(LookPolicy, WaitingApplicationKeepsItsSocketAndEndsSpinnerMode) {
  LookPolicy p;
  const int64_t t = make_spinner(p);
  LookInput in = seen(t + kMs, true, 200 * kUs, /*rx_event=*/true, /*spinning=*/true);
  in.waiting = true;
  const Look l = look(p, in, 1);
  EXPECT_FALSE(l.plan.serve);
  EXPECT_FALSE(l.plan.slow_poller);
  EXPECT_FALSE(l.out.arm);
  EXPECT_FALSE(l.out.spinner);
}

TEST(LookPolicy, SpinnerBetweenBurstsHalvesTheTickDownToTheFloor) {
  LookPolicy p;
  const int64_t t = make_spinner(p);
  EXPECT_EQ(p.tick_ns(), kAppTickNs / 4);
  // Each tick finds it polled (for its send completion) and silent since,
  // with the peer's WRITE waiting: served, and the tick halves again.
  int64_t now = t;
  for (int i = 0; i < 10; ++i) {
    now += p.tick_ns();
    const Look l = look(p, seen(now, true, 60 * kUs), 1);
    EXPECT_TRUE(l.plan.serve);
    EXPECT_TRUE(l.plan.slow_poller);
  }
  EXPECT_EQ(p.tick_ns(), LookPolicy::kMinTickNs);
}

// A busy poller the host preempted for over kPollerIdleNs now and then
// looks like a spinner at one look; the thread serves what waited, but
// only a second such look within kSpinnerConfirmNs begins spinner mode.
TEST(LookPolicy, BusyPollerPreemptedNowAndThenIsNoSpinner) {
  LookPolicy p;
  int64_t now = kT0;
  look(p, seen(now, true, 2 * kUs), 0);
  for (int i = 0; i < 5; ++i) {
    // Busy ticks, then one finding it 80 us silent with a packet waiting.
    for (int j = 0; j < 4; ++j) look(p, seen(now += kMs, true, 1 * kUs), 0);
    const Look l = look(p, seen(now += kMs, true, 80 * kUs), 1);
    EXPECT_TRUE(l.plan.slow_poller) << "episode " << i;
    EXPECT_TRUE(l.plan.serve);
    EXPECT_FALSE(p.spinner()) << "episode " << i;
  }
  // Two within kSpinnerConfirmNs: a spinner.
  look(p, seen(now += LookPolicy::kSpinnerConfirmNs, true, 80 * kUs), 1);
  EXPECT_TRUE(p.spinner());
}

// The thread's own wake takes the CPU of a busy poller pinned beside it,
// and the look comes tens of microseconds later: silence that began only
// when the thread woke is no spinner's (measured at the wake, not the
// look).  In a shared-memory ping-pong the mistake held the mode for half
// the runs: the thread woke for every packet and took a third of the CPU.
TEST(LookPolicy, PollerSilentOnlySinceTheThreadWokeIsNoSlowPoller) {
  LookPolicy p;
  int64_t now = kT0;
  look(p, seen(now, true, 2 * kUs), 0);
  for (int i = 0; i < 10; ++i) {
    now += 300 * kUs;  // (ten within kSpinnerConfirmNs)
    LookInput in = seen(now, true, 80 * kUs);
    in.woke_ns = in.last_poll_ns + 3 * kUs;
    const Look l = look(p, in, 1);
    EXPECT_FALSE(l.plan.slow_poller) << "look " << i;
    EXPECT_FALSE(l.plan.serve) << "look " << i;
  }
  EXPECT_FALSE(p.spinner());
  // Silent since well before the wake: a spinner's bursts, as before.
  for (int i = 0; i < 2; ++i) {
    now += 300 * kUs;
    LookInput in = seen(now, true, 150 * kUs);
    in.woke_ns = now - 30 * kUs;
    const Look l = look(p, in, 1);
    EXPECT_TRUE(l.plan.slow_poller) << "look " << i;
    EXPECT_TRUE(l.plan.serve) << "look " << i;
  }
  EXPECT_TRUE(p.spinner());
}

// In spinner mode a wake that came while the application polled (it polled
// after the wake, or within kPollingNs before it) is left to it, however
// late the look.
TEST(LookPolicy, SpinnersWakeRightAfterAPollIsLeftToItHoweverLateTheLook) {
  LookPolicy p;
  int64_t now = make_spinner(p);
  now += 100 * kUs;
  LookInput in = seen(now, true, 40 * kUs, true, true);
  in.woke_ns = in.last_poll_ns + 2 * kUs;
  EXPECT_FALSE(look(p, in, 1).plan.rx_for_us);
  now += 100 * kUs;
  in = seen(now, true, 40 * kUs, true, true);
  in.woke_ns = in.last_poll_ns + 20 * kUs;
  EXPECT_TRUE(look(p, in, 1).plan.rx_for_us);
}

TEST(LookPolicy, SlowPollerWithNothingWaitingKeepsTheTick) {
  LookPolicy p;
  look(p, seen(kT0, true, 2 * kUs), 0);
  const Look l = look(p, seen(kT0 + kMs, false, kMs), 0);
  EXPECT_TRUE(l.plan.slow_poller);
  EXPECT_EQ(p.tick_ns(), kAppTickNs);
  EXPECT_FALSE(p.spinner());
}

// The look that found the spinner polling for its own completion left it
// the socket; the peer's WRITE waited for the next tick, which found it
// silent since.  That look must still see a spinner (it served the packet
// as an idle application's, and ib_write_lat over shared memory sat at
// 530 us one way for whole runs).
TEST(LookPolicy, TickAfterALookThatFoundItPollingSeesTheSpinner) {
  LookPolicy p;
  look(p, seen(kT0, true, 3 * kUs), 0);
  const Look l = look(p, seen(kT0 + kMs, false, kMs + 3 * kUs), 1);
  EXPECT_TRUE(l.plan.serve);
  EXPECT_TRUE(l.plan.slow_poller);
  EXPECT_EQ(p.tick_ns(), kAppTickNs / 2);
  EXPECT_FALSE(l.out.spinner);  // not yet: the next such look confirms it
  const Look m = look(p, seen(kT0 + kMs + p.tick_ns(), true, 100 * kUs), 1);
  EXPECT_TRUE(m.plan.slow_poller);
  EXPECT_TRUE(m.out.spinner);
}

// A look in between -- a kick, a timer, a stats publish -- that came too
// soon after the application's last poll to tell whether it went on (it
// takes the socket, the application having not polled since the last look)
// does not make the next look forget that the one before found it polling:
// the spinner's packet that wakes the thread begins spinner mode.
TEST(LookPolicy, LookTooSoonAfterThePollToTellChangesNothing) {
  LookPolicy p;
  look(p, seen(kT0, true, 3 * kUs), 0);
  const Look mid = look(p, seen(kT0 + 20 * kUs, false, 23 * kUs), 0);
  EXPECT_FALSE(mid.plan.slow_poller);
  EXPECT_TRUE(mid.out.arm);
  const Look l = look(p, seen(kT0 + 300 * kUs, false, 303 * kUs, /*rx_event=*/true), 1);
  EXPECT_TRUE(l.plan.serve);
  EXPECT_TRUE(l.plan.slow_poller);
  EXPECT_EQ(p.tick_ns(), kAppTickNs / 2);
  EXPECT_FALSE(l.out.spinner);  // once
}

// One in between that could tell (50 us after the last poll) serves the
// spinner itself; the tick after it, finding the application silent for
// two looks, treats it as idle.
TEST(LookPolicy, LookThatCanTellServesTheSpinnerOnce) {
  LookPolicy p;
  look(p, seen(kT0, true, 3 * kUs), 0);
  const Look mid = look(p, seen(kT0 + 100 * kUs, false, 103 * kUs), 1);
  EXPECT_TRUE(mid.plan.slow_poller);
  EXPECT_FALSE(mid.out.spinner);  // once
  const Look l = look(p, seen(kT0 + kMs, false, kMs + 3 * kUs), 1);
  EXPECT_FALSE(l.plan.slow_poller);
  EXPECT_TRUE(l.plan.serve);  // as an idle application's
  EXPECT_TRUE(l.out.arm);
}

TEST(LookPolicy, SpinnersWakeIsServedAtOnce) {
  LookPolicy p;
  const int64_t t = make_spinner(p);
  // It polled once since the last look (the poll that took its completion
  // and handed the socket over), 30 us ago, and spins since.
  const Look l = look(p, seen(t + 40 * kUs, true, 30 * kUs, true, true), 1);
  EXPECT_TRUE(l.plan.rx_for_us);
  EXPECT_TRUE(l.plan.serve);
  EXPECT_FALSE(l.out.arm);  // its next poll that takes completions hands it over again
  EXPECT_TRUE(l.out.spinner);
}

TEST(LookPolicy, SpinnerTookThePacketItselfTheThreadWatchesOn) {
  LookPolicy p;
  const int64_t t = make_spinner(p);
  const Look l = look(p, seen(t + 40 * kUs, true, 30 * kUs, true, true), 0);
  EXPECT_TRUE(l.plan.rx_for_us);
  EXPECT_TRUE(l.out.arm);
  EXPECT_TRUE(l.out.spinner);
}

// A busy poller one look found preempted became a "spinner"; wakes that
// come just after its polls are its own to take, and after
// kSpinnerMisses of them the mode ends (its progress thread used 20-35%
// of a CPU when such wakes were served and kept the mode going).
TEST(LookPolicy, BusyPollerTakenForASpinnerLeavesTheMode) {
  LookPolicy p;
  int64_t now = make_spinner(p);
  for (int i = 0; i < LookPolicy::kSpinnerMisses; ++i) {
    EXPECT_TRUE(p.spinner()) << "wake " << i;
    now += 10 * kUs;
    const Look l = look(p, seen(now, true, 2 * kUs, true, true), 1);
    EXPECT_FALSE(l.plan.rx_for_us) << "wake " << i;
    EXPECT_FALSE(l.plan.serve);
    EXPECT_EQ(l.out.sleep_until, now + LookPolicy::kMinTickNs);  // looks again soon, in case
  }
  EXPECT_FALSE(p.spinner());
}

// Outside spinner mode, a wake left to a polling application is looked at
// again within kMinTickNs: if that poll was its last, the packet waits no
// longer than that.
TEST(LookPolicy, WakeLeftToAPollingApplicationIsLookedAtAgainSoon) {
  LookPolicy p;
  const Look l = look(p, seen(kT0, true, 1 * kUs, true), 1);
  EXPECT_FALSE(l.plan.serve);
  EXPECT_EQ(l.out.sleep_until, kT0 + LookPolicy::kMinTickNs);
  // The application polled long enough ago: the wake is the thread's.
  LookPolicy q;
  const Look m = look(q, seen(kT0, true, 20 * kUs, true), 1);
  EXPECT_TRUE(m.plan.rx_for_us);
  EXPECT_TRUE(m.plan.serve);
}

TEST(LookPolicy, TickDoublesBackAfterBusyLooksWithNothingToDo) {
  LookPolicy p;
  int64_t now = make_spinner(p);
  ASSERT_EQ(p.tick_ns(), kAppTickNs / 4);
  // (Counted from the look that had work, which does not count, but found
  // the application had polled since the one before.)
  for (int i = 0; i < LookPolicy::kBusyLooks - 1; ++i) {
    now += p.tick_ns();
    look(p, seen(now, true, 1 * kUs), 0);
    EXPECT_EQ(p.tick_ns(), kAppTickNs / 4) << "look " << i;
  }
  now += p.tick_ns();
  look(p, seen(now, true, 1 * kUs), 0);
  EXPECT_EQ(p.tick_ns(), kAppTickNs / 2);
  for (int i = 0; i < LookPolicy::kBusyLooks; ++i) {
    now += p.tick_ns();
    look(p, seen(now, true, 1 * kUs), 0);
  }
  EXPECT_EQ(p.tick_ns(), kAppTickNs);
  for (int i = 0; i < 2 * LookPolicy::kBusyLooks; ++i) {
    now += p.tick_ns();
    look(p, seen(now, true, 1 * kUs), 0);
  }
  EXPECT_EQ(p.tick_ns(), kAppTickNs);  // never above
}

// A passive server (never polls): each look that served packets keeps the
// thread looking for kPassiveSpinNs more; one that found none leaves the
// end where it was, and past it the thread sleeps in the socket.
TEST(LookPolicy, PassiveServerSpinsForAWhileAfterEachPacketThenSleeps) {
  LookPolicy p;
  constexpr int64_t kSpin = LookPolicy::kPassiveSpinNs;
  Look l = look(p, seen(kT0, false, 5 * kMs), 1);
  EXPECT_TRUE(l.plan.serve);
  EXPECT_EQ(l.out.spin_until, kT0 + kSpin);
  EXPECT_TRUE(l.out.arm);
  EXPECT_EQ(l.out.sleep_until, INT64_MAX);  // when the spin ends
  l = look(p, seen(kT0 + kSpin / 2, false, 5 * kMs), 0);
  EXPECT_EQ(l.out.spin_until, kT0 + kSpin);  // not moved by an empty look
  l = look(p, seen(kT0 + kSpin / 2 + 1, false, 5 * kMs), 2);
  EXPECT_EQ(l.out.spin_until, kT0 + kSpin + kSpin / 2 + 1);
  // Idle, not served anything: never a spin.
  LookPolicy q;
  EXPECT_EQ(look(q, seen(kT0, false, 5 * kMs), 0).out.spin_until, 0);
}

// An application that polled in the last tick (a spinner between its
// polls, a busy poller) or waits for events drives progress itself: the
// thread never spins beside it, and one found polling ends a spin at once.
TEST(LookPolicy, NoSpinBesideAnApplicationThatPollsOrWaits) {
  LookPolicy p;
  EXPECT_EQ(look(p, seen(kT0, false, 200 * kUs), 3).out.spin_until, 0);  // polled 200 us ago
  LookPolicy q;
  LookInput in = seen(kT0, false, 5 * kMs, /*rx_event=*/true);
  in.waiting = true;
  EXPECT_EQ(look(q, in, 1).out.spin_until, 0);
  LookPolicy r;
  ASSERT_GT(look(r, seen(kT0, false, 5 * kMs), 1).out.spin_until, 0);
  EXPECT_EQ(look(r, seen(kT0 + 5 * kUs, true, 1 * kUs), 1).out.spin_until, 0);
  EXPECT_EQ(look(r, seen(kT0 + 10 * kUs, false, 9 * kUs), 0).out.spin_until, 0);
}

// A spin whose next look came long after the last (the yield lost the CPU
// to other threads for a scheduler slice: a loaded host) pauses spinning
// for kSpinPauseNs; the thread sleeps, so that a packet wakes it and
// preempts.  A shorter loss (another thread's turn) does not.
TEST(LookPolicy, SpinThatLostTheCpuPausesSpinning) {
  LookPolicy p;
  constexpr int64_t kSpin = LookPolicy::kPassiveSpinNs;
  Look l = look(p, seen(kT0, false, 5 * kMs), 1);
  ASSERT_EQ(l.out.spin_until, kT0 + kSpin);
  l = look(p, seen(kT0 + 2 * kUs, false, 5 * kMs), 1);  // back at once: spins on
  EXPECT_EQ(l.out.spin_until, kT0 + 2 * kUs + kSpin);
  EXPECT_FALSE(l.out.spin_paused);
  l = look(p, seen(kT0 + 2 * kUs + LookPolicy::kSpinLostNs, false, 5 * kMs), 1);  // a short loss
  EXPECT_FALSE(l.out.spin_paused);
  EXPECT_EQ(l.out.spin_until, kT0 + 2 * kUs + LookPolicy::kSpinLostNs + kSpin);
  int64_t t = kT0 + 2 * kUs + LookPolicy::kSpinLostNs + 3 * kMs;  // 3 ms later
  l = look(p, seen(t, false, 5 * kMs), 1);
  EXPECT_TRUE(l.out.spin_paused);
  EXPECT_EQ(l.out.spin_until, 0);
  EXPECT_TRUE(l.out.arm);
  EXPECT_EQ(l.out.sleep_until, INT64_MAX);  // asleep in the socket
  // Packets while paused: no spin, and a look after a sleep is no loss.
  t += 10 * kMs;
  l = look(p, seen(t, false, 5 * kMs), 4);
  EXPECT_EQ(l.out.spin_until, 0);
  EXPECT_FALSE(l.out.spin_paused);
  t += LookPolicy::kSpinPauseNs;
  l = look(p, seen(t, false, 5 * kMs), 1);
  EXPECT_EQ(l.out.spin_until, t + kSpin);
  EXPECT_FALSE(l.out.spin_paused);
  // A spin that ran out (its last look found nothing, past its end) and
  // slept is no loss either.
  l = look(p, seen(t + kSpin / 2, false, 5 * kMs), 0);
  l = look(p, seen(t + kSpin + 1, false, 5 * kMs), 0);
  EXPECT_FALSE(l.out.spin_paused);
  EXPECT_LE(l.out.spin_until, t + kSpin + 1);
  l = look(p, seen(t + 5 * kMs, false, 5 * kMs), 1);
  EXPECT_FALSE(l.out.spin_paused);
  EXPECT_EQ(l.out.spin_until, t + 5 * kMs + kSpin);
}

}  // namespace
}  // namespace uroce::transport
