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

CopyGateHold::~CopyGateHold() {
  if (gate_) gate_.get()[1].fetch_sub(1, std::memory_order_seq_cst);
}

bool copy_gate_fence(std::atomic<uint64_t>* gate, std::chrono::nanoseconds bound) noexcept {
  if (!gate) return true;
  gate[0].fetch_add(1, std::memory_order_seq_cst);
  const auto until = std::chrono::steady_clock::now() + bound;
  while (gate[1].load(std::memory_order_seq_cst) != 0) {
    if (std::chrono::steady_clock::now() >= until) return false;
    ::sched_yield();
  }
  return true;
}

// A copy in progress takes tens of microseconds (1 MiB); one still going
// after this stopped or died in the middle.
constexpr std::chrono::milliseconds kFenceBound{20};

uint32_t Nic::copy_request_gate() noexcept {
  copy_sent_ = true;
  return copy_gate_generation(io_->copy_gate());
}

void Nic::copy_fence() noexcept {
  if (!copy_sent_) return;
  ++counters_.req_copy_fences;
  if (copy_gate_fence(io_->copy_gate(), kFenceBound)) return;
  ++counters_.req_copy_fence_timeouts;
  UROCE_LOG(warn, "a peer's copy into or out of our memory did not end within %lld ms (its process stopped?)",
            (long long)kFenceBound.count());
}

}  // namespace uroce::transport
