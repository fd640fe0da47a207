#include "verbs/comp_channel.hpp"

#include <signal.h>

#include <algorithm>
#include <chrono>

#include "common/quiet_thread.hpp"
#include "transport/nic.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"

namespace uroce::verbs {

Result<std::unique_ptr<CompChannel>> CompChannel::create(Context& ctx) {
  auto count = EventCount::create("a completion channel");
  if (!count.ok()) return count.status();
  ctx.users()++;
  return std::unique_ptr<CompChannel>(new CompChannel(ctx, std::move(*count)));
}

CompChannel::~CompChannel() { ctx_->users()--; }

void CompChannel::post(Cq& cq) noexcept {
  std::lock_guard g(mu_);
  events_.push_back(&cq);
  queued_.store(uint32_t(events_.size()), std::memory_order_release);
  count_.add();
}

void CompChannel::forget(Cq& cq) noexcept {
  std::lock_guard g(mu_);
  for (auto it = events_.begin(); it != events_.end();) {
    if (*it != &cq) {
      ++it;
      continue;
    }
    it = events_.erase(it);
    queued_.store(uint32_t(events_.size()), std::memory_order_release);
    count_.take();
  }
}

bool CompChannel::try_take(Cq*& out) noexcept {
  std::lock_guard g(mu_);
  if (events_.empty()) return false;
  out = events_.front();
  events_.pop_front();
  queued_.store(uint32_t(events_.size()), std::memory_order_release);
  count_.take();
  // Counted before the lock goes: a destroy that forgets the CQ's events
  // then waits for this one's ack rather than freeing the CQ under us.
  out->event_delivered();
  return true;
}

Result<Cq*> CompChannel::get_event() { return get_event(-1); }

Result<Cq*> CompChannel::get_event(int timeout_ms) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  // The application's signals stay blocked all through the wait and are
  // unblocked only while it sleeps (Nic::wait_on): one that comes while
  // this thread takes packets between sleeps then interrupts the next
  // sleep, as it would interrupt rdma-core's read() of the channel fd,
  // rather than run its handler unnoticed.  Restored on the way out (a
  // signal still pending then runs its handler).
  const sigset_t quiet = quiet_signal_mask();
  sigset_t app;
  pthread_sigmask(SIG_BLOCK, &quiet, &app);
  struct Restore {
    const sigset_t& mask;
    ~Restore() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{app};
  for (;;) {
    Cq* cq;
    if (try_take(cq)) return cq;
    if (count_.non_blocking()) return err::again("no completion event queued");
    int wait = -1;
    if (timeout_ms >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
      if (left.count() <= 0 && timeout_ms > 0) return err::from_errno(ETIMEDOUT, "no completion event");
      wait = int(std::max<int64_t>(0, left.count()));
      if (timeout_ms == 0) {
        ctx_->nic().wait_on(count_.fd(), 0, &app, &queued_);
        if (try_take(cq)) return cq;
        return err::from_errno(ETIMEDOUT, "no completion event");
      }
    }
    // Sleep in the NIC's socket and our eventfd: a packet that completes
    // the work is processed by this very thread.
    if (!ctx_->nic().wait_on(count_.fd(), wait, &app, &queued_) && !restart_after_signal())
      return err::from_errno(EINTR, "interrupted by a signal");
  }
}

}  // namespace uroce::verbs
