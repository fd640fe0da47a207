// Requester-side helpers shared by requester.cpp, completer.cpp and
// retransmit.cpp (NIC lock held for all of them).
#pragma once

#include <chrono>

#include "transport/nic.hpp"
#include "transport/psn.hpp"
#include "transport/queues.hpp"
#include "verbs/qp.hpp"

namespace uroce::transport {

inline bool is_read(verbs::WrOpcode op) noexcept { return op == verbs::WrOpcode::rdma_read; }
inline bool is_atomic(verbs::WrOpcode op) noexcept {
  return op == verbs::WrOpcode::atomic_cmp_and_swp || op == verbs::WrOpcode::atomic_fetch_and_add;
}
inline bool is_rd_atomic(verbs::WrOpcode op) noexcept { return is_read(op) || is_atomic(op); }

// Packets a QP may have unacknowledged (a window of ~256 KiB).
inline uint32_t window_pkts(const verbs::Qp& qp) noexcept {
  uint32_t w = (256u * 1024) / qp.mtu_;
  return w < 16 ? 16 : w;
}

// Local ACK timeout of the QP attribute: 4.096 us * 2^timeout, at least 1 ms
// (a user-space stack's scheduling jitter is larger than a NIC's).  Timeout 0
// means "infinite" (IBA 9.7.6.1.3): we still retransmit, never give up.
std::chrono::nanoseconds retransmit_interval(uint8_t timeout) noexcept;
// RNR NAK timer field (IBA table 45) in nanoseconds.
std::chrono::nanoseconds rnr_delay(uint8_t timer) noexcept;

// Rewinds transmission to PSN `psn` (go-back-N): the WQE holding it resends
// from that packet on, and everything after it follows.
void go_back(Nic& nic, verbs::Qp& qp, uint32_t psn) noexcept;
// Retires completed WQEs from the SQ head in order, with their completions.
void retire(Nic& nic, verbs::Qp& qp) noexcept;
// Completes the WQE at `idx` with an error and moves the QP to ERR.
void fail_wqe(Nic& nic, verbs::Qp& qp, uint32_t idx, verbs::WcStatus status) noexcept;
// Finds the SQ counter of the assigned WQE whose PSN range holds `psn`.
bool find_wqe(verbs::Qp& qp, uint32_t psn, uint32_t& idx) noexcept;

}  // namespace uroce::transport
