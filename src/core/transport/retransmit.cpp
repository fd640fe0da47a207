// Requester bookkeeping: retiring WQEs in order, going back N, the
// retransmission and RNR timers (IBA 9.7.5.2.8, 9.7.6).
#include <algorithm>

#include "common/log.hpp"
#include "transport/protocol.hpp"
#include "transport/requester.hpp"

namespace uroce::transport {

using namespace std::chrono_literals;

namespace {
constexpr std::chrono::nanoseconds kFloorResendMax = 250ms;  // between resends past retry_cnt
}  // namespace

std::chrono::nanoseconds retransmit_interval(uint8_t timeout) noexcept {
  if (timeout == 0) return 500ms;
  const auto t = std::chrono::nanoseconds(4096ll << std::min<uint8_t>(timeout, 31));
  return std::max<std::chrono::nanoseconds>(t, 1ms);
}

std::chrono::nanoseconds rnr_delay(uint8_t timer) noexcept {
  // IBA table 45, in units of 10 us; entry 0 is 655.36 ms.
  static constexpr uint32_t k10us[32] = {65536, 1,    2,    3,    4,    6,     8,     12,    16,    24,   32,
                                         48,    64,   96,   128,  192,  256,   384,   512,   768,   1024, 1536,
                                         2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return std::chrono::microseconds(10ll * k10us[timer & 31]);
}

bool find_wqe(QpEngine& qp, uint32_t psn, uint32_t& idx) noexcept {
  for (uint32_t i = qp.sq.head(); i != qp.sq.tail(); ++i) {
    SendWqe& w = qp.sq.at(i);
    if (!w.assigned) return false;
    const int32_t d = psn_diff(psn, w.first_psn);
    if (d >= 0 && uint32_t(d) < w.npkts) {
      idx = i;
      return true;
    }
  }
  return false;
}

void go_back(Nic& nic, QpEngine& qp, uint32_t psn) noexcept {
  RequesterState& r = qp.req;
  uint32_t idx;
  if (!find_wqe(qp, psn, idx)) return;
  SendWqe& w = qp.sq.at(idx);
  // Everything from here goes again: a selective resend or probe in
  // progress is moot, and the packet being timed goes again too (Karn).
  r.probing = r.sr_check = r.timing = false;
  r.resend_left = r.run_len = 0;
  sack_reset(r);
  // A READ hole before the rewind point is not asked for again by it.
  if (!psn_before(r.asked_psn, psn)) {
    r.hole_pkts = 0;
    r.hole_asked = false;
  }
  r.send_idx = idx;
  r.send_pkt = uint32_t(psn_diff(psn, w.first_psn));
  r.send_psn = psn;
  if (is_read(w.opcode)) {
    w.read_req = w.read_done;  // ask again for what has not arrived
    r.send_psn = psn_add(w.first_psn, w.read_done);
    r.send_pkt = 0;
  }
  // Every started READ/atomic still unanswered counts against max_rd_atomic,
  // before and after the rewind point alike (those after it stay assigned:
  // they are resent, not started again).  A READ after the rewind point is
  // requested again from scratch: the responder may have discarded its
  // request with everything else behind the lost packet.
  r.rd_atomic = 0;
  for (uint32_t i = qp.sq.head(); i != qp.sq.tail(); ++i) {
    SendWqe& x = qp.sq.at(i);
    if (!x.assigned) break;
    if (!is_rd_atomic(x.opcode) || x.done) continue;
    ++r.rd_atomic;
    if (is_read(x.opcode) && psn_diff(x.first_psn, w.first_psn) > 0) x.read_req = x.read_done;
  }
  // A READ hole before the rewind point stays watched (nothing may be sent
  // that would watch it again).
  if (r.read_watch) sr_watch(nic, qp, r.una_psn);
  // What was in flight after the rewind point is taken for lost: it no
  // longer fills the path the QP shares (path_share.hpp), and the resends
  // take their turns there.
  path_sync(nic, qp);
  nic.schedule(qp);
}

void retire(Nic& nic, QpEngine& qp) noexcept {
  auto& sq = qp.sq;
  while (!sq.empty() && sq.at(sq.head()).done) {
    SendWqe& w = sq.at(sq.head());
    if (w.signaled || w.status != verbs::WcStatus::success) qp.complete_send(w, w.status);
    sq.pop();
  }
  if (qp.state() == verbs::QpState::sqd && qp.req.drain == SqDrain::draining &&
      (sq.empty() || !sq.at(sq.head()).assigned)) {
    transition(qp.qpn(), qp.req.drain, SqDrain::drained);
    if (qp.attr.en_sqd_async_notify) qp.owner().async_event(verbs::AsyncEventType::sq_drained);
  }
  (void)nic;
}

void fail_wqe(Nic& nic, QpEngine& qp, uint32_t idx, verbs::WcStatus status) noexcept {
  // Everything before the failed WQE has succeeded (in-order completion)
  // but one a one-copy request still stands for: the fence below (the QP
  // enters ERR) keeps the peer from carrying that out, so its data may
  // never land (copy_gate.hpp).
  for (uint32_t i = qp.sq.head(); i != idx; ++i) {
    SendWqe& before = qp.sq.at(i);
    if (!before.done && before.copied) before.status = verbs::WcStatus::wr_flush_err;
    before.done = true;
  }
  SendWqe& w = qp.sq.at(idx);
  w.done = true;
  w.status = status;
  retire(nic, qp);
  // The peer's requests executed here still get their ACK (one held for
  // the application's answer would otherwise go with the flush).
  qp.fail_keeping_acks();
}

void requester_arm_retransmit(Nic& nic, QpEngine& qp) noexcept {
  RequesterState& r = qp.req;
  if (r.una_psn == r.send_psn && r.una_psn == r.next_psn) return;
  if (r.retry == RetryTimer::off) {
    transition(qp.qpn(), r.retry, RetryTimer::armed);
    // The NIC's clock is only refreshed when packets arrive or the progress
    // thread wakes; after an idle spell it is old, and a deadline from it
    // would already have passed.  Posting is the one path that arms
    // without a fresh clock: refresh it.
    nic.refresh_now();
    r.progress_at = nic.now();
    r.deadline = nic.now() + retransmit_interval(qp.attr.timeout);
    nic.arm_timer(qp, r.deadline);
  }
}

void requester_on_timer(Nic& nic, QpEngine& qp) noexcept {
  RequesterState& r = qp.req;
  const verbs::QpState st = qp.state();
  if (st != verbs::QpState::rts && st != verbs::QpState::sqd) {
    transition(qp.qpn(), r.retry, RetryTimer::off);
    transition(qp.qpn(), r.rnr, RnrGate::open);
    return;
  }
  const Clock::time_point now = nic.now();
  if (Clock::time_point at;
      pace_next(nic, qp, at) && (r.send_idx != qp.sq.tail() || r.resend_left > 0 || r.hole_pkts > 0)) {
    // Paced, with packets to send: its turn came, or an earlier timer fired
    // first (arm_timer keeps only the earliest): ask to be woken again.
    if (now >= at)
      nic.schedule(qp);
    else
      nic.arm_timer(qp, at);
  }
  if (r.rnr == RnrGate::waiting) {
    if (now >= r.rnr_until) {
      transition(qp.qpn(), r.rnr, RnrGate::open);
      nic.schedule(qp);
    } else {
      nic.arm_timer(qp, r.rnr_until);
      return;
    }
  }
  if (r.sr_check) sr_on_timer(nic, qp);
  if (r.retry == RetryTimer::off) return;
  if (r.una_psn == r.next_psn) {  // nothing outstanding
    transition(qp.qpn(), r.retry, RetryTimer::off);
    return;
  }
  if (!psn_before(r.una_psn, r.sent_hwm)) {
    // Everything sent is acknowledged; what is assigned waits for its turn
    // (pacing): nothing can have been lost.
    r.progress_at = now;
    r.deadline = now + retransmit_interval(qp.attr.timeout);
    nic.arm_timer(qp, r.deadline);
    return;
  }
  if (now < r.deadline) {
    nic.arm_timer(qp, r.deadline);
    return;
  }
  ++nic.counters().req_timeouts;
  std::chrono::nanoseconds wait = retransmit_interval(qp.attr.timeout);
  if (qp.attr.timeout != 0) {
    if (r.retry_left == 0 && qp.attr.retry_cnt != 0 && now - r.progress_at < nic.config().cc.retry_floor) {
      // Out of retries, but the peer may only be held back by its host's
      // scheduler (CongestionConfig::retry_floor): resend, do not give up,
      // waiting as long as it has been silent (at most kFloorResendMax), so
      // that a dead peer draws a few resends rather than one per timeout.
      ++nic.counters().req_retry_floor_timeouts;
      wait = std::max(wait, std::min<std::chrono::nanoseconds>(now - r.progress_at, kFloorResendMax));
    } else if (r.retry_left == 0) {
      ++nic.counters().req_retry_exc;
      nic.log_counters("a QP exceeded its retry count");
      uint32_t idx;
      if (find_wqe(qp, r.una_psn, idx))
        fail_wqe(nic, qp, idx, verbs::WcStatus::retry_exc_err);
      else
        qp.fail_keeping_acks();
      transition(qp.qpn(), r.retry, RetryTimer::off);
      return;
    } else {
      --r.retry_left;
    }
  }
  UROCE_LOG(debug, "qp 0x%x: timeout, resend from psn %u (%u retries left)", qp.qpn(), r.una_psn, r.retry_left);
  qp.refresh_peer();
  window_on_loss(nic, qp, Loss::timeout);
  go_back(nic, qp, r.una_psn);
  r.deadline = now + wait;
  nic.arm_timer(qp, r.deadline);
}

}  // namespace uroce::transport
