// Completion queue: a fixed-depth ring of work completions.
//
// Entries are pushed by the transport under the NIC lock; poll() takes the
// same lock and, when the ring is empty, drives the NIC's progress in the
// calling thread (a busy-polling application does its own packet I/O, no
// thread hand-off).  Overflow is reported: the CQ enters an error state,
// an IBV_EVENT_CQ_ERR async event is raised, and poll() fails once drained.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/status.hpp"
#include "transport/ports.hpp"
#include "verbs/resources.hpp"
#include "verbs/types.hpp"

namespace uroce::transport {
class Nic;
}

namespace uroce::verbs {

class Context;
class CompChannel;

// The device clock: what completion timestamps and ibv_query_rt_values_ex
// read, in ticks of kDeviceClockKhz.
inline constexpr uint64_t kDeviceClockKhz = 1'000'000;
uint64_t device_clock_ns() noexcept;
uint64_t wall_clock_ns() noexcept;

// Which clocks a CQ stamps its completions with.
struct CqStamps {
  bool device = false;
  bool wallclock = false;
  bool any() const noexcept { return device || wallclock; }
};
struct CompletionStamp {
  uint64_t device_ns = 0;
  uint64_t wall_ns = 0;
};

class Cq final : public transport::CompletionSink {
 public:
  static constexpr uint32_t kMaxCqe = 1u << 22;

  static Result<std::unique_ptr<Cq>> create(Context& ctx, uint32_t cqe, CompChannel* channel,
                                            void* user_context = nullptr, CqStamps stamps = {});
  ~Cq();
  Cq(const Cq&) = delete;
  Cq& operator=(const Cq&) = delete;

  // Up to out.size() completions, oldest first.  Returns the count, or an
  // error (EOVERFLOW) once an overflowed CQ is drained.
  // `stamps`, if not empty, receives the stamp of each completion returned
  // (as many as out; zero on a CQ without timestamps).
  Result<int> poll(std::span<Wc> out, std::span<CompletionStamp> stamps = {});
  // Arms the CQ: the next completion (or, solicited_only, the next solicited
  // or unsuccessful one) produces one event on the completion channel; at
  // once if one is queued already that came after the last event.
  Status req_notify(bool solicited_only);
  // Completion-channel bookkeeping (ibv_get_cq_event / ibv_ack_cq_events).
  void event_delivered();
  void ack_events(unsigned n);
  // Blocks until every delivered event is acknowledged (before destruction).
  void wait_events_acked();
  // The same for at most `limit`: false if some are still unacknowledged.
  bool wait_events_acked_for(std::chrono::milliseconds limit);
  // The first step of destroying, once no QP uses the CQ: drops its queued
  // completion and async events, so that none is handed out from here on.
  // Closing again does nothing; the destructor closes too.
  void close() noexcept;
  // Resizes the ring (ibv_resize_cq); fails if more entries are queued.
  Status resize(uint32_t cqe);

  uint32_t capacity() const noexcept { return depth_; }
  CqStamps stamps() const noexcept { return stamps_; }
  Context& context() const noexcept { return *ctx_; }
  CompChannel* channel() const noexcept { return channel_; }
  void* user_context() const noexcept { return user_context_; }
  void set_user_context(void* p) noexcept { user_context_ = p; }
  std::atomic<int>& users() noexcept { return users_; }
  transport::Nic& nic() const noexcept;

  // --- transport side, NIC lock held ---
  // transport::CompletionSink: appends a completion (an armed CQ posts its
  // event to the channel); false, with a CQ_ERR event, on overflow.
  bool complete(const Wc& wc, bool solicited) noexcept override;
  // Removes the completions of QP `qpn` not yet polled, keeping the order of
  // the others (a QP moved to RESET: mlx4/mlx5 clean its CQEs so, and
  // rdma-core's tests reuse a QP after RESET without draining its CQ).
  void discard_qp_locked(uint32_t qpn) noexcept;
  uint32_t size_locked() const noexcept { return count_; }
  bool overflowed() const noexcept { return overflow_; }

 private:
  Cq(Context& ctx, uint32_t depth, CompChannel* channel, void* user_context, CqStamps stamps);
  int pop_locked(std::span<Wc> out, std::span<CompletionStamp> stamps) noexcept;

  Context* ctx_;
  CompChannel* channel_;
  void* user_context_;
  uint32_t depth_;
  std::vector<Wc> ring_;
  CqStamps stamps_;
  std::vector<CompletionStamp> stamp_ring_;  // beside ring_, when stamps_.any()
  uint32_t head_ = 0, count_ = 0;
  // Completions ever queued; the last of them an event was raised for; the
  // last solicited (or unsuccessful) one.  The count_ queued are taken as
  // the newest (a discard_qp_locked() of older ones keeps that true).
  uint64_t produced_ = 0, last_event_at_ = 0, last_solicited_at_ = 0;
  enum class Arm : uint8_t { none, next, solicited } arm_ = Arm::none;
  bool overflow_ = false;
  std::atomic<int> users_{0};
  ResourceHold hold_;  // one of the device's max_cq  // QPs/SRQs using this CQ
  // events handed out vs acknowledged
  std::mutex ev_mu_;
  std::condition_variable ev_cv_;
  uint64_t ev_delivered_ = 0, ev_acked_ = 0;
};

}  // namespace uroce::verbs
