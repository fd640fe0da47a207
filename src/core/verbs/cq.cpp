#include "verbs/cq.hpp"

#include <time.h>

#include <algorithm>

#include "transport/nic.hpp"
#include "verbs/comp_channel.hpp"
#include "verbs/context.hpp"

namespace uroce::verbs {

namespace {
uint64_t clock_ns(clockid_t id) noexcept {
  timespec t{};
  ::clock_gettime(id, &t);
  return uint64_t(t.tv_sec) * 1'000'000'000u + uint64_t(t.tv_nsec);
}
}  // namespace

uint64_t device_clock_ns() noexcept { return clock_ns(CLOCK_MONOTONIC); }
uint64_t wall_clock_ns() noexcept { return clock_ns(CLOCK_REALTIME); }

Cq::Cq(Context& ctx, uint32_t depth, CompChannel* channel, void* user_context, CqStamps stamps)
    : ctx_(&ctx),
      channel_(channel),
      user_context_(user_context),
      depth_(depth),
      ring_(depth),
      stamps_(stamps),
      stamp_ring_(stamps.any() ? depth : 0) {}

Result<std::unique_ptr<Cq>> Cq::create(Context& ctx, uint32_t cqe, CompChannel* channel, void* user_context,
                                       CqStamps stamps) {
  if (cqe < 1 || cqe > kMaxCqe)
    return err::inval("cqe " + std::to_string(cqe) + " not in 1.." + std::to_string(kMaxCqe));
  if (channel && &channel->context() != &ctx) return err::inval("completion channel belongs to another device context");
  auto hold = ctx.resources().take(Resource::cq);
  if (!hold.ok()) return hold.status();
  std::unique_ptr<Cq> cq(new Cq(ctx, cqe, channel, user_context, stamps));
  cq->hold_ = std::move(*hold);
  if (channel) channel->users()++;
  ctx.users()++;
  return cq;
}

void Cq::close() noexcept {
  ctx_->forget_async_events(this);
  if (channel_) channel_->forget(*this);
}

Cq::~Cq() {
  close();
  ctx_->users()--;
  if (channel_) channel_->users()--;
}

transport::Nic& Cq::nic() const noexcept { return ctx_->nic(); }

int Cq::pop_locked(std::span<Wc> out, std::span<CompletionStamp> stamps) noexcept {
  int n = 0;
  while (count_ > 0 && size_t(n) < out.size()) {
    if (size_t(n) < stamps.size()) stamps[size_t(n)] = stamps_.any() ? stamp_ring_[head_] : CompletionStamp{};
    out[n++] = ring_[head_];
    head_ = head_ + 1 == depth_ ? 0 : head_ + 1;
    --count_;
  }
  return n;
}

Result<int> Cq::poll(std::span<Wc> out, std::span<CompletionStamp> stamps) {
  transport::Nic& n = nic();
  std::lock_guard g(n.mu());
  if (count_ == 0)
    n.drive(/*cq_poll=*/true);
  else
    n.pump();  // posts waiting for a doorbell (Qp::post_send) leave now
  const int got = pop_locked(out, stamps);
  if (got > 0) n.completions_taken();
  if (got == 0 && overflow_) return err::from_errno(EOVERFLOW, "completion queue overflowed");
  return got;
}

Status Cq::req_notify(bool solicited_only) {
  std::lock_guard g(nic().mu());
  if (!channel_) return err::inval("CQ has no completion channel");
  if (!solicited_only)
    arm_ = Arm::next;
  else if (arm_ == Arm::none)
    arm_ = Arm::solicited;
  // A completion that came while the CQ was not armed, and is still queued,
  // raises the event at once: arming after the last poll and then sleeping
  // on the channel must not miss it (UCX's ucp_worker_wait does that; the
  // kernel's CQ polling counts on mlx5 hardware for it).  The completions
  // an event was raised for do not count: perftest -e arms before it polls
  // the one its event announced, and waits for one event per completion.
  const uint64_t seen = std::max(last_event_at_, produced_ - count_);
  if (arm_ == Arm::next ? produced_ > seen : last_solicited_at_ > seen) {
    arm_ = Arm::none;
    last_event_at_ = produced_;
    channel_->post(*this);
  }
  return {};
}

bool Cq::complete(const Wc& wc, bool solicited) noexcept {
  if (count_ == depth_) {
    if (!overflow_) {
      overflow_ = true;
      ctx_->post_async_event({AsyncEventType::cq_err, this});
    }
    return false;
  }
  uint32_t tail = head_ + count_;
  if (tail >= depth_) tail -= depth_;
  ring_[tail] = wc;
  if (stamps_.any()) [[unlikely]]
    stamp_ring_[tail] = {stamps_.device ? device_clock_ns() : 0, stamps_.wallclock ? wall_clock_ns() : 0};
  ++count_;
  ++produced_;
  if (solicited) last_solicited_at_ = produced_;
  if (arm_ == Arm::next || (arm_ == Arm::solicited && solicited)) {
    arm_ = Arm::none;
    last_event_at_ = produced_;
    if (channel_) channel_->post(*this);
  }
  return true;
}

void Cq::discard_qp_locked(uint32_t qpn) noexcept {
  uint32_t kept = 0;
  for (uint32_t i = 0; i < count_; ++i) {
    const uint32_t from = (head_ + i) % depth_, to = (head_ + kept) % depth_;
    if (ring_[from].qp_num == qpn) continue;
    ring_[to] = ring_[from];
    if (stamps_.any()) stamp_ring_[to] = stamp_ring_[from];
    ++kept;
  }
  count_ = kept;
}

Status Cq::resize(uint32_t cqe) {
  if (cqe < 1 || cqe > kMaxCqe) return err::inval("cqe out of range");
  std::lock_guard g(nic().mu());
  if (cqe < count_) return err::inval("more completions queued than the new size");
  std::vector<Wc> ring(cqe);
  std::vector<CompletionStamp> stamp_ring(stamps_.any() ? cqe : 0);
  const uint32_t n = count_;
  for (uint32_t i = 0; i < n; ++i) {
    ring[i] = ring_[(head_ + i) % depth_];
    if (stamps_.any()) stamp_ring[i] = stamp_ring_[(head_ + i) % depth_];
  }
  ring_ = std::move(ring);
  stamp_ring_ = std::move(stamp_ring);
  depth_ = cqe;
  head_ = 0;
  return {};
}

void Cq::event_delivered() {
  std::lock_guard g(ev_mu_);
  ++ev_delivered_;
}

void Cq::ack_events(unsigned n) {
  std::lock_guard g(ev_mu_);
  ev_acked_ += n;
  ev_cv_.notify_all();
}

void Cq::wait_events_acked() {
  std::unique_lock lk(ev_mu_);
  ev_cv_.wait(lk, [this] { return ev_acked_ >= ev_delivered_; });
}

bool Cq::wait_events_acked_for(std::chrono::milliseconds limit) {
  std::unique_lock lk(ev_mu_);
  return ev_cv_.wait_for(lk, limit, [this] { return ev_acked_ >= ev_delivered_; });
}

}  // namespace uroce::verbs
