// The copy gate (copy_gate.hpp).
#include "transport/copy_gate.hpp"

#include <sched.h>

#include "common/log.hpp"
#include "transport/nic.hpp"

namespace uroce::transport {

uint32_t copy_gate_generation(const std::atomic<uint64_t>* gate) noexcept {
  return gate ? uint32_t(gate[0].load(std::memory_order_seq_cst)) : 0;
}

CopyGateHold::CopyGateHold(std::shared_ptr<std::atomic<uint64_t>> gate, uint32_t generation) noexcept
    : gate_(std::move(gate)) {
  if (!gate_) return;
  gate_.get()[1].fetch_add(1, std::memory_order_seq_cst);
  open_ = uint32_t(gate_.get()[0].load(std::memory_order_seq_cst)) == generation;
}

CopyGateHold::~CopyGateHold() { release(); }

void CopyGateHold::release() noexcept {
  if (gate_) gate_.get()[1].fetch_sub(1, std::memory_order_seq_cst);
  gate_.reset();
}

uint64_t copy_gate_fence(std::atomic<uint64_t>* gate, uint64_t stuck, std::chrono::nanoseconds bound) noexcept {
  if (!gate) return 0;
  gate[0].fetch_add(1, std::memory_order_seq_cst);
  const auto until = std::chrono::steady_clock::now() + bound;
  for (;;) {
    const uint64_t busy = gate[1].load(std::memory_order_seq_cst);
    if (busy <= stuck || std::chrono::steady_clock::now() >= until) return busy;
    ::sched_yield();
  }
}

// A copy in progress takes tens of microseconds (1 MiB); one still going
// after this (a copier descheduled for a whole cgroup quota period is
// waited for) stopped or died in the middle.
constexpr std::chrono::milliseconds kFenceBound{100};

uint32_t Nic::copy_request_gate() noexcept {
  copy_sent_ = true;
  return copy_gate_generation(io_->copy_gate());
}

void Nic::copy_fence() noexcept {
  if (!copy_sent_) return;
  ++counters_.req_copy_fences;
  // Copies a dead copier left counted would make every fence wait the
  // whole bound: once one outlasted it, its count is the floor to wait
  // down to (lowered again when such a copy does end after all).
  const uint64_t left = copy_gate_fence(io_->copy_gate(), copy_gate_stuck_, kFenceBound);
  const bool timed_out = left > copy_gate_stuck_;
  copy_gate_stuck_ = left;
  if (!timed_out) return;
  ++counters_.req_copy_fence_timeouts;
  UROCE_LOG(warn, "a peer's copy into or out of our memory did not end within %lld ms (its process stopped or died?)",
            (long long)kFenceBound.count());
}

}  // namespace uroce::transport
