// Swift's delay-based window (transport/swift.hpp) driven by hand: exact
// windows after each round trip, loss and timeout, the base RTT's memory,
// the switch to reacting to losses only when the queue is someone else's,
// and a deterministic simulation of flows sharing a drop-tail bottleneck.
#include "transport/swift.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace uroce::transport {
namespace {

using namespace std::chrono_literals;

const Clock::time_point t0 = Clock::time_point{} + 1h;
constexpr uint32_t kMax = 256;

TEST(Swift, StartsAtTheMaximumAndGrowsNoFurther) {
  SwiftParams p;
  Swift s;
  EXPECT_FALSE(s.started());
  EXPECT_EQ(s.window(kMax), kMax);
  EXPECT_EQ(s.on_rtt(p, 50us, t0, kMax), Swift::Verdict::fine);
  s.on_ack(p, 300, kMax);
  EXPECT_TRUE(s.started());
  EXPECT_EQ(s.window(kMax), kMax);
  EXPECT_EQ(s.base(), 50us);
  EXPECT_EQ(s.target(p), 450us);
}

TEST(Swift, AboveTheTargetCutsInProportionOncePerRoundTrip) {
  SwiftParams p;
  Swift s;
  s.on_rtt(p, 100us, t0, kMax);  // base 100, target 500
  // 600 us: excess 100/600, factor 1 - 0.8/6 = 0.8667: 256 -> 221.87
  EXPECT_EQ(s.on_rtt(p, 600us, t0 + 1ms, kMax), Swift::Verdict::cut);
  EXPECT_EQ(s.window(kMax), 221u);
  // Within a round trip of that cut: held.
  EXPECT_EQ(s.on_rtt(p, 600us, t0 + 1ms + 500us, kMax), Swift::Verdict::held);
  EXPECT_EQ(s.window(kMax), 221u);
  // Far above: at most max_mdf (half) at once; "once per round trip" is
  // this sample's round trip (20 ms).
  EXPECT_EQ(s.on_rtt(p, 20ms, t0 + 2ms, kMax), Swift::Verdict::held);
  EXPECT_EQ(s.on_rtt(p, 20ms, t0 + 21ms, kMax), Swift::Verdict::cut);
  EXPECT_EQ(s.window(kMax), 110u);
  // Above the target the ACKs do not grow it.
  s.on_ack(p, 110, kMax);
  EXPECT_EQ(s.window(kMax), 110u);
  // Below the target again: + ai per window's worth of ACKs.
  EXPECT_EQ(s.on_rtt(p, 300us, t0 + 30ms, kMax), Swift::Verdict::fine);
  s.on_ack(p, 110, kMax);
  EXPECT_EQ(s.window(kMax), 111u);
}

TEST(Swift, DelayTakesTheWindowDownToTheMinimum) {
  SwiftParams p;
  p.compete_after = 100;
  Swift s;
  s.on_rtt(p, 100us, t0, kMax);
  Clock::time_point t = t0;
  for (int i = 0; i < 20; ++i) s.on_rtt(p, 10ms, t += 20ms, kMax);
  EXPECT_EQ(s.window(kMax), p.min_window);
}

TEST(Swift, ALossWithoutAQueueIsRandomAndCostsNothing) {
  SwiftParams p;
  Swift s;
  s.on_rtt(p, 100us, t0, kMax);
  EXPECT_FALSE(s.on_loss(p, t0 + 1ms, kMax, true));
  EXPECT_EQ(s.window(kMax), kMax);
  // From a go-back-N peer the same loss halves the window.
  EXPECT_TRUE(s.on_loss(p, t0 + 2ms, kMax, false));
  EXPECT_EQ(s.window(kMax), 128u);
}

TEST(Swift, ALossBehindAQueueIsCongestionAndHalves) {
  SwiftParams p;
  Swift s;
  s.on_rtt(p, 100us, t0, kMax);
  s.on_rtt(p, 700us, t0 + 1ms, kMax);  // queue: cut to 256 * (1 - 0.8 * 200/700) = 197.49
  EXPECT_EQ(s.window(kMax), 197u);
  EXPECT_TRUE(s.on_loss(p, t0 + 2ms, kMax, true));
  EXPECT_EQ(s.window(kMax), 98u);
  // Behind a queue losses go down to min_window.
  Clock::time_point t = t0 + 2ms;
  for (int i = 0; i < 10; ++i) s.on_loss(p, t += 1ms, kMax, true);
  EXPECT_EQ(s.window(kMax), p.min_window);
}

TEST(Swift, LossesWithoutAQueueStopAtLossWindowATimeoutToo) {
  SwiftParams p;
  Swift s;
  s.on_rtt(p, 100us, t0, kMax);
  Clock::time_point t = t0;
  for (int i = 0; i < 10; ++i) s.on_loss(p, t += 1ms, kMax, false);  // a go-back-N peer
  EXPECT_EQ(s.window(kMax), p.loss_window);
  s.on_timeout(p, t += 1ms, kMax);
  EXPECT_EQ(s.window(kMax), p.loss_window);
}

TEST(Swift, ATimeoutHalvesTheWindow) {
  SwiftParams p;
  Swift s;
  s.on_timeout(p, t0, kMax);
  EXPECT_EQ(s.window(kMax), 128u);
}

// At the maximum window nothing is paced, nor at 128 packets; cut to
// pace_below (32) or less, packets leave at pace_gain x window / srtt, with
// at most pace_burst of credit.
TEST(Swift, ACutWindowIsSpreadOverTheRoundTrip) {
  SwiftParams p;
  Swift s;
  s.on_rtt(p, 100us, t0, kMax);
  EXPECT_FALSE(s.paced(p, kMax));
  s.on_sent(p, 1024, t0, 1ms, 1024, kMax);
  EXPECT_EQ(s.next_send(), Clock::time_point{});
  s.on_timeout(p, t0, kMax);  // 128 packets
  EXPECT_FALSE(s.paced(p, kMax));
  s.on_timeout(p, t0, kMax);
  s.on_timeout(p, t0, kMax);  // 32 packets
  ASSERT_TRUE(s.paced(p, kMax));
  // 1.5 x 32 x 1024 B per ms: 1,024 B every 20,833 ns; 20 us of credit first.
  for (int i = 0; i < 10; ++i) s.on_sent(p, 1024, t0, 1ms, 1024, kMax);
  EXPECT_EQ(s.next_send(), t0 - 20us + 10 * 20833ns);
  // Idle for a while: the credit saved is capped at pace_burst again.
  s.on_sent(p, 1024, t0 + 1s, 1ms, 1024, kMax);
  EXPECT_EQ(s.next_send(), t0 + 1s - 20us + 20833ns);
}

TEST(Swift, TheBaseRttForgetsAfterTwoPeriods) {
  SwiftParams p;
  p.base_period = 1s;
  Swift s;
  s.on_rtt(p, 50us, t0, kMax);
  s.on_rtt(p, 200us, t0 + 1500ms, kMax);  // a new period: 50 still remembered
  EXPECT_EQ(s.base(), 50us);
  s.on_rtt(p, 200us, t0 + 2600ms, kMax);  // and another: only 200 is left
  EXPECT_EQ(s.base(), 200us);
}

TEST(Swift, AQueueThatDoesNotDrainIsSomeoneElsesThenOnlyLossesCount) {
  SwiftParams p;
  Swift s;
  s.on_rtt(p, 100us, t0, kMax);
  Clock::time_point t = t0;
  for (uint32_t i = 0; i < p.compete_after; ++i) EXPECT_EQ(s.on_rtt(p, 2ms, t += 3ms, kMax), Swift::Verdict::cut);
  EXPECT_TRUE(s.competing());
  const uint32_t w = s.window(kMax);
  EXPECT_EQ(s.on_rtt(p, 2ms, t += 3ms, kMax), Swift::Verdict::fine);  // delay no longer cuts
  s.on_ack(p, w, kMax);                                               // and ACKs grow it
  EXPECT_EQ(s.window(kMax), w + uint32_t(p.compete_ai));
  EXPECT_TRUE(s.on_loss(p, t += 3ms, kMax, true));  // but any loss does
  // calm_to_leave round trips in a row under the target: back to yielding.
  for (uint32_t i = 0; i + 1 < p.calm_to_leave; ++i) s.on_rtt(p, 150us, t += 3ms, kMax);
  EXPECT_TRUE(s.competing());
  s.on_rtt(p, 2ms, t += 3ms, kMax);  // a queue again: the count starts over
  for (uint32_t i = 0; i + 1 < p.calm_to_leave; ++i) s.on_rtt(p, 150us, t += 3ms, kMax);
  EXPECT_TRUE(s.competing());
  s.on_rtt(p, 150us, t += 3ms, kMax);
  EXPECT_FALSE(s.competing());
}

// Competing, the window answers as a loss-based flow does: compete_ai
// packets per window of ACKs, a loss takes it to compete_beta of itself, and
// it leaves unpaced (a window as small, yielding, is paced).
TEST(Swift, CompetingGrowsByCompeteAiCutsToCompeteBetaUnpaced) {
  SwiftParams p;
  p.compete_ai = 4;  // (the figures below; the default is larger)
  Swift s;
  s.on_rtt(p, 100us, t0, kMax);
  Clock::time_point t = t0;
  // 2 ms against a 500 us target: excess 1.5/2 x 0.8 > max_mdf, so each
  // cut halves; 256 is at min_window (2) after 7, the 8th held there.
  for (uint32_t i = 0; i < p.compete_after; ++i) s.on_rtt(p, 2ms, t += 3ms, kMax);
  ASSERT_TRUE(s.competing());
  ASSERT_EQ(s.window(kMax), 2u);
  EXPECT_FALSE(s.paced(p, kMax));
  for (int i = 0; i < 5; ++i) s.on_ack(p, s.window(kMax), kMax);  // + 4 a window: 2, 6, .. 22
  EXPECT_EQ(s.window(kMax), 22u);
  EXPECT_FALSE(s.paced(p, kMax));
  EXPECT_TRUE(s.on_loss(p, t += 3ms, kMax, true));
  EXPECT_EQ(s.window(kMax), 15u);  // 22 x 0.7 = 15.4
  p.compete_beta = 0.5;
  EXPECT_TRUE(s.on_loss(p, t += 3ms, kMax, true));
  EXPECT_EQ(s.window(kMax), 7u);  // 15.4 / 2
  // A timeout halves, competing or not, down to loss_window no further.
  for (int i = 0; i < 8; ++i) s.on_ack(p, s.window(kMax), kMax);  // 7.7 + ~4 x 8: ~38
  const uint32_t before = s.window(kMax);
  ASSERT_GT(before, 2 * p.loss_window);
  s.on_timeout(p, t += 3ms, kMax);
  EXPECT_EQ(s.window(kMax), before / 2);
  // Calm for calm_to_leave round trips: yielding again, and this small
  // window is paced.
  for (uint32_t i = 0; i < p.calm_to_leave; ++i) s.on_rtt(p, 150us, t += 3ms, kMax);
  ASSERT_FALSE(s.competing());
  EXPECT_TRUE(s.paced(p, kMax));
}

// A loss behind a queue while the window is already down to 2 x min_window:
// the queue overflowed although we yielded to it, so it is not ours alone.
// (With a larger window the loss is ours to answer: it halves.)
TEST(Swift, AQueueThatOverflowsAWindowThatYieldedIsNotOursAlone) {
  SwiftParams p;
  Swift s;
  s.on_rtt(p, 100us, t0, kMax);
  s.on_rtt(p, 900us, t0 + 1ms, kMax);  // one cut: 256 * (1 - 0.8 * 400/900) = 164.98
  EXPECT_TRUE(s.on_loss(p, t0 + 2ms, kMax, true));
  EXPECT_FALSE(s.competing());
  EXPECT_EQ(s.window(kMax), 82u);
  Clock::time_point t = t0 + 2ms;
  for (int i = 0; i < 3; ++i) s.on_rtt(p, 20ms, t += 30ms, kMax);  // 82 -> 41 -> 20 -> 10
  EXPECT_TRUE(s.on_loss(p, t += 30ms, kMax, true));
  EXPECT_FALSE(s.competing());
  EXPECT_EQ(s.window(kMax), 5u);
  for (int i = 0; i < 2; ++i) s.on_rtt(p, 20ms, t += 30ms, kMax);  // 5 -> 2.5 -> 2 (min_window)
  EXPECT_EQ(s.window(kMax), 2u);
  EXPECT_TRUE(s.on_loss(p, t += 30ms, kMax, true));
  EXPECT_TRUE(s.competing());
  EXPECT_EQ(s.window(kMax), 2u);
}

// N window-limited flows through one drop-tail port (a simulated switch,
// a fluid model in steps of the base RTT): a flow sends its window per round
// trip, the port serves `rate` packets per step, the queue adds delay,
// what overflows `buffer` is lost (each flow sees a loss).  Each flow takes
// one RTT sample per round trip.  The flows start together with unequal
// windows (256, 128, 64, 32 packets; all of them more than the port):
// delay brings the queue below the buffer (no loss once settled), and the
// flows share the port evenly (AIMD: equal steps up, proportional cuts) and
// keep it busy.  (A flow that starts behind a standing queue takes it for
// its base RTT: docs/congestion.md.)
struct Share {
  double util, jain;
  uint64_t late_losses;
};

Share simulate(uint32_t flows) {
  SwiftParams p;
  const double rate = 100;     // packets per step (100 us): 1 KiB packets at 8 Gbit/s
  const double buffer = 1000;  // packets: 1 ms
  const auto step = 100us;
  std::vector<Swift> s(flows);
  std::vector<double> got(flows, 0), phase(flows, 0), acked(flows, 0);
  double queue = 0;
  uint64_t late_losses = 0;
  Clock::time_point t = t0;
  for (uint32_t f = 0; f < flows; ++f)
    for (uint32_t k = 0; k < f % 4; ++k) s[f].on_timeout(p, t, kMax);
  const int steps = 40000, settle = 20000;
  for (int i = 0; i < steps; ++i) {
    t += step;
    const double rtt_steps = 1 + queue / rate;
    const uint32_t active = flows;
    double in = 0;
    for (uint32_t f = 0; f < active; ++f) in += s[f].window(kMax) / rtt_steps;
    const double served = std::min(rate, queue + in);
    const double lost = std::max(0.0, queue + in - served - buffer);
    queue = queue + in - served - lost;
    const auto rtt = std::chrono::duration_cast<Clock::duration>(step * rtt_steps);
    for (uint32_t f = 0; f < active; ++f) {
      const double mine = served * (s[f].window(kMax) / rtt_steps) / in;
      if (i >= settle) got[f] += mine;
      acked[f] += mine;
      if (acked[f] >= 1) {
        s[f].on_ack(p, uint32_t(acked[f]), kMax);
        acked[f] -= uint32_t(acked[f]);
      }
      if (lost > 0) {
        s[f].on_loss(p, t, kMax, true);
        if (i >= settle) ++late_losses;
      }
      phase[f] += 1 / rtt_steps;
      if (phase[f] >= 1) {
        phase[f] -= 1;
        s[f].on_rtt(p, rtt, t, kMax);
      }
    }
  }
  double sum = 0, sq = 0;
  for (double g : got) sum += g, sq += g * g;
  return {sum / (rate * (steps - settle)), sum * sum / (flows * sq), late_losses};
}

TEST(Swift, FlowsThroughADropTailPortShareItEvenlyWithoutLoss) {
  for (uint32_t n : {1u, 2u, 8u, 32u}) {
    const Share sh = simulate(n);
    RecordProperty("flows" + std::to_string(n), std::to_string(sh.util) + " " + std::to_string(sh.jain));
    EXPECT_GE(sh.util, 0.99) << n << " flows";
    EXPECT_GE(sh.jain, 0.99) << n << " flows";
    EXPECT_EQ(sh.late_losses, 0u) << n << " flows";
  }
}

}  // namespace
}  // namespace uroce::transport
