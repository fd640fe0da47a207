// DCQCN's reaction point (transport/dcqcn.hpp) driven by hand: exact rates
// after each CNP, timer and byte-counter stage, the pacing clock, and a
// deterministic simulation of one sender through a switch that marks CE
// above a queue threshold.
#include "transport/dcqcn.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <deque>

namespace uroce::transport {
namespace {

using namespace std::chrono_literals;

const Clock::time_point t0 = Clock::time_point{} + 1h;

TEST(Dcqcn, UnlimitedUntilTheFirstCnpWhichHalvesTheLineRate) {
  DcqcnParams p;
  Dcqcn d;
  EXPECT_FALSE(d.limited());
  EXPECT_EQ(d.rate(p), p.line_rate);
  EXPECT_TRUE(d.may_send(t0));
  d.on_cnp(p, t0);
  EXPECT_TRUE(d.limited());
  EXPECT_EQ(d.rate(p), 12500u);  // alpha starts at 1: Rc * (1 - 1/2)
  EXPECT_EQ(d.target(p), 25000u);
  EXPECT_DOUBLE_EQ(d.alpha(), 1.0);
  d.on_cnp(p, t0 + 10us);  // within one alpha period: alpha still 1
  EXPECT_EQ(d.rate(p), 6250u);
  EXPECT_EQ(d.target(p), 12500u);
}

TEST(Dcqcn, AlphaDecaysOncePerPeriodWithoutCnps) {
  DcqcnParams p;
  Dcqcn d;
  d.on_cnp(p, t0);
  d.advance(p, t0 + 3 * p.alpha_period + 1us);
  EXPECT_DOUBLE_EQ(d.alpha(), std::pow(1.0 - p.g, 3));
  const double a = d.alpha();
  d.on_cnp(p, t0 + 3 * p.alpha_period + 2us);
  EXPECT_DOUBLE_EQ(d.alpha(), (1.0 - p.g) * a + p.g);
}

TEST(Dcqcn, TimerStagesRecoverFastThenAdditively) {
  DcqcnParams p;
  Dcqcn d;
  d.on_cnp(p, t0);
  d.on_cnp(p, t0);                                             // Rc 6250, Rt 12500
  const double want[] = {9375, 10937.5, 11718.75, 12109.375};  // fast recovery: halfway to Rt
  for (int i = 0; i < 4; ++i) {
    d.advance(p, t0 + (i + 1) * p.increase_period);
    EXPECT_EQ(d.rate(p), uint64_t(want[i])) << "stage " << i + 1;
    EXPECT_EQ(d.target(p), 12500u);
  }
  d.advance(p, t0 + 5 * p.increase_period);  // stage 5: additive increase
  EXPECT_EQ(d.target(p), 12540u);
  EXPECT_EQ(d.rate(p), uint64_t((12540 + 12109.375) / 2));
}

TEST(Dcqcn, ByteAndTimerStagesPastTheThresholdIncreaseHyper) {
  DcqcnParams p;
  p.increase_bytes = 1000;
  Dcqcn d;
  d.on_cnp(p, t0);
  d.on_cnp(p, t0);
  d.advance(p, t0 + 6 * p.increase_period);  // timer stage 6: two additive steps after fast recovery
  EXPECT_EQ(d.target(p), 12580u);
  uint64_t before = d.target(p);
  for (int b = 1; b <= 7; ++b) {
    d.on_sent(p, 1000, t0 + 6 * p.increase_period);
    const uint64_t step = d.target(p) - before;
    before = d.target(p);
    // byte stages 1-5: additive (the timer is past F, the bytes are not);
    // then both are: hyper, by hai_rate times how far the smaller count
    // (the timer's 6) is past F
    EXPECT_EQ(step, b <= 5 ? p.ai_rate : p.hai_rate) << "byte stage " << b;
  }
}

TEST(Dcqcn, BackAtTheLineRateIsUnlimitedAgain) {
  DcqcnParams p;
  Dcqcn d;
  d.on_cnp(p, t0);
  d.advance(p, t0 + 10h);  // bounded work however long the idle spell
  EXPECT_FALSE(d.limited());
  EXPECT_EQ(d.rate(p), p.line_rate);
  EXPECT_TRUE(d.may_send(t0 + 10h));
}

TEST(Dcqcn, PacingSpacesPacketsAtTheRateWithBoundedCredit) {
  DcqcnParams p;
  p.line_rate = 1000;
  Dcqcn d;
  d.on_cnp(p, t0);  // 500 Mbit/s: 1000 bytes take 16 us
  ASSERT_EQ(d.rate(p), 500u);
  // Right after the cut there is no credit: one packet, then one per 16 us.
  EXPECT_TRUE(d.may_send(t0));
  d.on_sent(p, 1000, t0);
  EXPECT_EQ(d.next_send(), t0 + 16us);
  EXPECT_FALSE(d.may_send(t0 + 16us - 1ns));
  d.on_sent(p, 1000, t0 + 16us);
  EXPECT_EQ(d.next_send(), t0 + 32us);
  // After an idle spell the QP has saved up `burst` of credit, no more.
  const Clock::time_point t1 = t0 + 1s;
  int sent = 0;
  while (d.may_send(t1)) {
    d.on_sent(p, 1000, t1);
    ++sent;
  }
  EXPECT_EQ(sent, int(p.burst / 16us) + 1);
  EXPECT_EQ(d.next_send(), t1 - p.burst + sent * 16us);
  EXPECT_FALSE(d.may_send(d.next_send() - 1ns));
  EXPECT_TRUE(d.may_send(d.next_send()));
}

// One sender, one switch port: the port serves `capacity` Mbit/s and marks
// packets CE that find `threshold` or more queued; the receiver sends a CNP
// for a marked packet at most every cnp_interval, which reaches the sender
// `delay` later.  Everything runs on simulated time, 100 ns steps.
struct SwitchRun {
  double mean_rate = 0;  // sent in the second half, Mbit/s
  size_t max_queue = 0;  // packets, second half
  uint64_t cnps = 0;
};

SwitchRun run_switch(bool react, std::chrono::milliseconds length) {
  DcqcnParams p;
  p.line_rate = 10000;
  const uint64_t capacity = 1000;  // Mbit/s
  const uint32_t pkt = 1000;       // bytes
  const size_t threshold = 20;
  const auto delay = 5us;
  const auto serve = std::chrono::nanoseconds(pkt * 8 * 1000 / capacity);
  const auto line_gap = std::chrono::nanoseconds(pkt * 8 * 1000 / p.line_rate);
  Dcqcn d;
  std::deque<bool> queue;  // marked?
  std::deque<Clock::time_point> cnps;
  Clock::time_point next_line = t0, next_serve = t0, last_cnp{};
  SwitchRun out;
  uint64_t bytes_late = 0;
  const Clock::time_point end = t0 + length, half = t0 + length / 2;
  for (Clock::time_point t = t0; t < end; t += 100ns) {
    while (!cnps.empty() && cnps.front() <= t) {
      if (react) d.on_cnp(p, cnps.front());
      cnps.pop_front();
      ++out.cnps;
    }
    d.advance(p, t);
    if (t >= next_line && d.may_send(t)) {  // never faster than the line
      queue.push_back(queue.size() >= threshold);
      d.on_sent(p, pkt, t);
      next_line = t + line_gap;
      if (t >= half) bytes_late += pkt;
    }
    if (!queue.empty() && t >= next_serve) {
      if (queue.front() && (last_cnp == Clock::time_point{} || t - last_cnp >= p.cnp_interval)) {
        last_cnp = t;
        cnps.push_back(t + delay);
      }
      queue.pop_front();
      next_serve = t + serve;
    }
    if (t >= half) out.max_queue = std::max(out.max_queue, queue.size());
  }
  out.mean_rate = double(bytes_late) * 8 / std::chrono::duration<double, std::micro>(length / 2).count();
  return out;
}

TEST(Dcqcn, SenderFollowsASwitchThatMarksAboveAQueueThreshold) {
  const SwitchRun r = run_switch(true, 100ms);
  EXPECT_GT(r.cnps, 0u);
  // Converged: it sends close to what the port serves (with the paper's
  // parameters and a hard marking threshold a cut overshoots: 84% here),
  // never more, and the queue stays near the threshold.
  EXPECT_GT(r.mean_rate, 800.0);
  EXPECT_LT(r.mean_rate, 1000.0);
  EXPECT_LT(r.max_queue, 64u);
  // Without reacting the queue only grows, at the line rate's excess.
  const SwitchRun deaf = run_switch(false, 100ms);
  EXPECT_GT(deaf.mean_rate, 9000.0);
  EXPECT_GT(deaf.max_queue, 100000u);
}

}  // namespace
}  // namespace uroce::transport
