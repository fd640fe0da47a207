// Per-NIC counters, like the kernel's hw_counters.  Updated under the NIC
// lock; read a consistent copy with Nic::counters() under the same lock.
#pragma once

#include <cstdint>
#include <utility>

namespace uroce::transport {

#define UROCE_COUNTERS(X)                                                        \
  X(tx_packets) X(tx_bytes) X(tx_errors) X(rx_packets) X(rx_bytes)               \
  X(rx_truncated) X(rx_malformed) X(rx_icrc_bad) X(rx_icrc_id_solved)            \
  X(rx_unknown_qp) X(rx_bad_state) X(rx_foreign_source) X(rx_wrong_service)      \
  X(rx_cnp) X(req_packets) X(req_retransmits) X(req_timeouts) X(req_retry_exc)   \
  X(req_rnr_retry_exc) X(req_acks_rcvd) X(req_seq_naks_rcvd) X(req_rnr_naks_rcvd) \
  X(req_err_naks_rcvd) X(req_stale_responses) X(req_read_gaps)                   \
  X(resp_acks_sent) X(resp_seq_naks_sent) X(resp_rnr_naks_sent)                  \
  X(resp_access_naks_sent) X(resp_inv_req_naks_sent) X(resp_op_err_naks_sent)    \
  X(resp_duplicates) X(resp_dup_reads) X(resp_dup_atomics) X(resp_future_psn)    \
  X(resp_read_packets) X(uc_dropped_messages) X(ud_qkey_drops)                   \
  X(ud_no_recv_drops) X(ud_len_errors) X(cq_overflows) X(completions)

struct Counters {
#define UROCE_COUNTER_FIELD(name) uint64_t name = 0;
  UROCE_COUNTERS(UROCE_COUNTER_FIELD)
#undef UROCE_COUNTER_FIELD

  // Calls f(name, value) for every counter, in declaration order.
  template <class F>
  void for_each(F&& f) const {
#define UROCE_COUNTER_VISIT(name) f(#name, name);
    UROCE_COUNTERS(UROCE_COUNTER_VISIT)
#undef UROCE_COUNTER_VISIT
  }
};

}  // namespace uroce::transport
