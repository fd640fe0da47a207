// DCQCN reaction point (dcqcn.hpp).
#include "transport/dcqcn.hpp"

#include <algorithm>
#include <cmath>

namespace uroce::transport {

namespace {
// Beyond this many elapsed periods the outcome no longer changes (alpha is
// ~0, the rate is back at the line); bounds the work after an idle spell.
constexpr int64_t kMaxPeriods = 4096;
}  // namespace

void Dcqcn::on_cnp(const DcqcnParams& p, Clock::time_point now) noexcept {
  advance(p, now);
  if (!limited_) {
    limited_ = true;
    rc_ = rt_ = double(p.line_rate);
    alpha_ = 1.0;
    next_send_ = now;
  }
  rt_ = rc_;
  rc_ = std::max(double(p.min_rate), rc_ * (1.0 - alpha_ / 2));
  alpha_ = (1.0 - p.g) * alpha_ + p.g;
  alpha_at_ = increase_at_ = now;
  bytes_ = 0;
  timer_stage_ = byte_stage_ = 0;
}

void Dcqcn::advance(const DcqcnParams& p, Clock::time_point now) noexcept {
  if (!limited_) return;
  if (const int64_t k = (now - alpha_at_) / p.alpha_period; k > 0) {
    alpha_ *= std::pow(1.0 - p.g, double(std::min(k, kMaxPeriods)));
    alpha_at_ += k * p.alpha_period;
  }
  if (const int64_t k = (now - increase_at_) / p.increase_period; k > 0) {
    increase_at_ += k * p.increase_period;
    for (int64_t i = 0; i < std::min(k, kMaxPeriods) && limited_; ++i) {
      ++timer_stage_;
      increase(p);
    }
  }
}

void Dcqcn::on_sent(const DcqcnParams& p, uint32_t bytes, Clock::time_point now) noexcept {
  if (!limited_) return;
  bytes_ += bytes;
  while (bytes_ >= p.increase_bytes && limited_) {
    bytes_ -= p.increase_bytes;
    ++byte_stage_;
    increase(p);
  }
  if (!limited_) return;
  // Pacing: the packet takes bytes*8/rate of the QP's time; credit saved up
  // while idle is capped at `burst`.
  const auto floor = now - p.burst;
  if (next_send_ < floor) next_send_ = floor;
  next_send_ += std::chrono::nanoseconds(int64_t(double(bytes) * 8e3 / rc_));
}

void Dcqcn::increase(const DcqcnParams& p) noexcept {
  const uint32_t f = p.fast_recovery_stages;
  const uint32_t hi = std::max(timer_stage_, byte_stage_), lo = std::min(timer_stage_, byte_stage_);
  if (hi < f) {
    // fast recovery: the target stays
  } else if (lo > f) {
    rt_ += double(p.hai_rate * (lo - f));  // hyper increase
  } else {
    rt_ += double(p.ai_rate);  // additive increase
  }
  rt_ = std::min(rt_, double(p.line_rate));
  rc_ = (rt_ + rc_) / 2;
  if (rc_ >= double(p.line_rate) * 0.999) limited_ = false;  // back at the line rate: unpaced
}

}  // namespace uroce::transport
