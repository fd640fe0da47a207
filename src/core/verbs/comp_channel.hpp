// Completion channel: a real pollable fd (an eventfd) plus the queue of CQs
// whose notifications fired.  get_event() waits for one; while it waits it
// drives the NIC's packet I/O itself, so the thread that sleeps is the one
// the packet wakes (one wake-up per message, not two).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>

#include "common/status.hpp"
#include "verbs/event_count.hpp"

namespace uroce::verbs {

class Context;
class Cq;

class CompChannel {
 public:
  static Result<std::unique_ptr<CompChannel>> create(Context& ctx);
  ~CompChannel();
  CompChannel(const CompChannel&) = delete;
  CompChannel& operator=(const CompChannel&) = delete;

  int fd() const noexcept { return count_.fd(); }
  Context& context() const noexcept { return *ctx_; }
  std::atomic<int>& users() noexcept { return users_; }

  // The CQ of the next event.  Blocks unless the application made fd()
  // non-blocking (then EAGAIN when none is queued).
  Result<Cq*> get_event();
  // Waits up to timeout_ms (-1: forever) for an event, driving progress.
  Result<Cq*> get_event(int timeout_ms);

  // Transport side: queue one event for `cq` and make fd() readable.
  void post(Cq& cq) noexcept;
  // Drops queued events of a CQ being destroyed.  An event being taken
  // meanwhile is counted (Cq::event_delivered) before this returns.
  void forget(Cq& cq) noexcept;

 private:
  CompChannel(Context& ctx, EventCount count) : ctx_(&ctx), count_(std::move(count)) {}
  bool try_take(Cq*& out) noexcept;

  Context* ctx_;
  EventCount count_;  // read and written only under mu_
  std::mutex mu_;
  std::deque<Cq*> events_;
  std::atomic<uint32_t> queued_{0};  // events_.size(), for a waiter's looks (Nic::wait_on)
  std::atomic<int> users_{0};
};

}  // namespace uroce::verbs
