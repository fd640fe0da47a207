// DCQCN's reaction point (Zhu et al., "Congestion Control for Large-Scale
// RDMA Deployments", SIGCOMM 2015), the rate control RoCEv2 NICs run: a
// switch marks ECN-capable packets CE when its queue builds up, the receiver
// answers with CNPs (at most one per QP per `cnp_interval`), and the sender
// cuts its rate by alpha/2 per CNP, alpha being its running estimate of how
// often it is told so.  Without CNPs the rate recovers: the byte counter and
// the timer each count stages; the first `fast_recovery_stages` halve the
// distance to the target rate (fast recovery), then the target grows by
// `ai_rate` per stage (additive increase), and once both counters are past
// the threshold by `hai_rate` (hyper increase).  Back at the line rate the
// QP is unlimited again.
//
// Pure state and arithmetic: time comes in as an argument (the NIC's clock;
// tests drive it by hand), so the same code runs in the engine and in
// deterministic tests.  The timers are evaluated lazily when the QP next
// sends or is told about congestion, as elapsed periods.
#pragma once

#include <chrono>
#include <cstdint>

#include "transport/work_queue.hpp"  // Clock
#include "uroce/congestion.hpp"

namespace uroce::transport {

using uroce::DcqcnParams;

class Dcqcn {
 public:
  // Not limited: sending at the line rate (no pacing at all).
  bool limited() const noexcept { return limited_; }
  // The current rate (Rc) and target rate (Rt), Mbit/s.
  uint64_t rate(const DcqcnParams& p) const noexcept { return limited_ ? uint64_t(rc_) : p.line_rate; }
  uint64_t target(const DcqcnParams& p) const noexcept { return limited_ ? uint64_t(rt_) : p.line_rate; }
  double alpha() const noexcept { return alpha_; }

  // A CNP arrived for this QP: cut the rate.
  void on_cnp(const DcqcnParams& p, Clock::time_point now) noexcept;
  // Runs the timers up to `now` (alpha decay, timer-driven increases).
  void advance(const DcqcnParams& p, Clock::time_point now) noexcept;
  // A packet of `bytes` (on the wire) left: byte-counter increases and the
  // pacing clock.
  void on_sent(const DcqcnParams& p, uint32_t bytes, Clock::time_point now) noexcept;
  // Limited QPs: the earliest time the next packet may leave.
  Clock::time_point next_send() const noexcept { return next_send_; }
  bool may_send(Clock::time_point now) const noexcept { return !limited_ || now >= next_send_; }

 private:
  void increase(const DcqcnParams& p) noexcept;

  bool limited_ = false;
  double rc_ = 0, rt_ = 0;  // current and target rate, Mbit/s
  double alpha_ = 1.0;
  Clock::time_point alpha_at_{}, increase_at_{}, next_send_{};
  uint64_t bytes_ = 0;  // towards the next byte-counter stage
  uint32_t timer_stage_ = 0, byte_stage_ = 0;
};

}  // namespace uroce::transport
