// Swift's window (swift.hpp).
#include "transport/swift.hpp"

#include <algorithm>

namespace uroce::transport {

uint32_t Swift::window(uint32_t max) const noexcept {
  if (cwnd_ == 0) return max;
  return std::max<uint32_t>(1, std::min(max, uint32_t(cwnd_)));
}

Clock::duration Swift::base() const noexcept {
  const Clock::duration b = std::min(base_, epoch_min_);
  return b == Clock::duration::max() ? Clock::duration{} : b;
}

void Swift::start(uint32_t max) noexcept {
  if (cwnd_ == 0) cwnd_ = max;
}

bool Swift::cut(double floor, double factor, Clock::time_point now) noexcept {
  // Once per round trip: the ACKs of the round trip after a cut still show
  // the queue the packets before it built.
  if (last_cut_ != Clock::time_point{} && now - last_cut_ < last_rtt_) return false;
  reduce(floor, factor, now);
  return true;
}

Swift::Verdict Swift::on_rtt(const SwiftParams& p, Clock::duration rtt, Clock::time_point now, uint32_t max) noexcept {
  start(max);
  // The base RTT: the least of this period and the one before, so that a
  // path that got longer is learnt within two periods.
  if (epoch_at_ == Clock::time_point{}) epoch_at_ = now;
  if (now - epoch_at_ >= p.base_period) {
    base_ = epoch_min_;
    epoch_min_ = Clock::duration::max();
    epoch_at_ = now;
  }
  epoch_min_ = std::min(epoch_min_, rtt);
  last_rtt_ = rtt;
  const Clock::duration t = target(p);
  if (rtt <= t) {
    cuts_in_a_row_ = 0;
    if (competing_ && ++calm_ >= p.calm_to_leave) competing_ = false;  // the queue is gone
  } else {
    calm_ = 0;
  }
  if (rtt <= t || competing_) return Verdict::fine;
  const double excess = std::chrono::duration<double>(rtt - t) / std::chrono::duration<double>(rtt);
  if (!cut(p.min_window, std::max(1.0 - p.beta * excess, 1.0 - p.max_mdf), now)) return Verdict::held;
  if (++cuts_in_a_row_ >= p.compete_after) competing_ = true;
  return Verdict::cut;
}

void Swift::on_ack(const SwiftParams& p, uint32_t acked, uint32_t max) noexcept {
  if (cwnd_ == 0 || (last_rtt_ > target(p) && !competing_)) return;
  cwnd_ = std::min(double(max), cwnd_ + (competing_ ? p.compete_ai : p.ai) * double(acked) / cwnd_);
}

bool Swift::on_loss(const SwiftParams& p, Clock::time_point now, uint32_t max, bool random_possible) noexcept {
  start(max);
  const bool queue = last_rtt_ > target(p);
  if (random_possible && !competing_ && !queue) return false;
  if (queue && cwnd_ <= 2.0 * p.min_window) {  // it overflowed although we yielded: not ours alone
    competing_ = true;
    calm_ = 0;
  }
  // Behind a queue (or competing for one) a loss is the queue's limit: down
  // to min_window, or N flows' floors alone would overflow it.  Otherwise
  // (a go-back-N peer, a READ gap) not below loss_window.
  const double factor = competing_ ? p.compete_beta : 0.5;
  reduce(queue || competing_ ? double(p.min_window) : double(p.loss_window), factor, now);
  return true;
}

void Swift::on_timeout(const SwiftParams& p, Clock::time_point now, uint32_t max) noexcept {
  start(max);
  reduce(double(p.loss_window), 0.5, now);
}

void Swift::reduce(double floor, double factor, Clock::time_point now) noexcept {
  last_cut_ = now;
  cwnd_ = std::max({1.0, std::min(floor, cwnd_), cwnd_ * factor});
}

void Swift::on_sent(const SwiftParams& p, uint32_t bytes, Clock::time_point now, Clock::duration srtt, uint32_t mtu,
                    uint32_t max) noexcept {
  if (!paced(p, max) || srtt <= Clock::duration::zero() || !(p.pace_gain > 0)) return;
  const double bytes_per_ns =
      p.pace_gain * cwnd_ * double(mtu) / double(std::chrono::duration_cast<std::chrono::nanoseconds>(srtt).count());
  const Clock::time_point floor = now - p.pace_burst;
  if (next_send_ < floor) next_send_ = floor;
  next_send_ += std::chrono::nanoseconds(int64_t(double(bytes) / bytes_per_ns));
}

}  // namespace uroce::transport
