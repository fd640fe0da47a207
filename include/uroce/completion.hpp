// Completion queues and completion channels.
//
// Busy polling: CompletionQueue::poll() returns what is there; when the CQ
// is empty the calling thread receives and processes packets itself (no
// hand-off to another thread).  Sleeping: arm the CQ with req_notify(), wait
// in CompletionChannel::get_event() (or poll its fd()), then poll the CQ and
// acknowledge the event with ack_events().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "uroce/fwd.hpp"

namespace uroce {

class CompletionChannel {
 public:
  CompletionChannel(CompletionChannel&&) noexcept;
  CompletionChannel& operator=(CompletionChannel&&) noexcept;
  ~CompletionChannel();  // every CQ using it must be destroyed first

  // A file descriptor that polls readable while an event is queued.
  // Blocking unless made O_NONBLOCK; then get_event() fails with EAGAIN
  // instead of waiting.
  int fd() const noexcept;

  // The CQ whose notification fired next: waits up to timeout_ms (< 0:
  // forever) and fails with ETIMEDOUT.  The waiting thread processes the
  // packets that arrive meanwhile.  Acknowledge every event with
  // CompletionQueue::ack_events().
  Result<CompletionQueue*> get_event(int timeout_ms = -1);

  explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  friend class Context;
  friend class CompletionQueue;
  explicit CompletionChannel(std::unique_ptr<detail::ChannelImpl> impl) noexcept;
  std::unique_ptr<detail::ChannelImpl> impl_;
};

class CompletionQueue {
 public:
  CompletionQueue(CompletionQueue&&) noexcept;
  CompletionQueue& operator=(CompletionQueue&&) noexcept;
  // Every QP using it must be destroyed first.  Waits until every event
  // CompletionChannel::get_event() returned for it is acknowledged
  // (ack_events), as ibv_destroy_cq does: a thread that took an event may
  // use the CQ until it acknowledges.  Events not taken yet are dropped.
  ~CompletionQueue();

  // Up to out.size() completions, oldest first; 0 if none.  EOVERFLOW once
  // an overflowed CQ has been drained (the CQ is then unusable).
  Result<int> poll(std::span<Wc> out);
  // Polls until at least one completion arrived or `timeout` passed;
  // returns the count (0: timed out).  Busy-polls: for a latency-critical
  // thread; sleep on a CompletionChannel otherwise.
  Result<int> poll_for(std::span<Wc> out, std::chrono::milliseconds timeout);

  // Arms the CQ: its next completion (solicited_only: the next solicited or
  // unsuccessful one) raises one event on its channel.  EINVAL without a
  // channel.
  Status req_notify(bool solicited_only = false);
  // Acknowledges n events returned by CompletionChannel::get_event().
  void ack_events(unsigned n);

  uint32_t capacity() const noexcept;
  // Changes the number of entries; EINVAL if more completions are queued.
  Status resize(uint32_t cqe);

  explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  friend class Context;
  friend class ProtectionDomain;
  friend struct detail::CqImpl;
  explicit CompletionQueue(std::unique_ptr<detail::CqImpl> impl) noexcept;
  std::unique_ptr<detail::CqImpl> impl_;
};

}  // namespace uroce
