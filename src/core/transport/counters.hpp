// Per-NIC counters, like the kernel's hw_counters.  Updated under the NIC
// lock; read a consistent copy with Nic::snapshot() under the same lock
// (it also fills in the counters kept by the packet I/O: rx_kernel_drops,
// the fault_* and the shm_* / doorbells_* counts).  Names are stable: docs/counters.md describes each.
#pragma once

#include <cstdint>
#include <utility>

namespace uroce::transport {

// clang-format off
#define UROCE_COUNTERS(X) \
  X(tx_packets) X(tx_bytes) X(tx_errors) X(rx_packets) X(rx_bytes) X(rx_truncated) X(rx_malformed) \
  X(rx_icrc_bad) X(rx_icrc_id_solved) X(rx_pkey_violations) X(rx_unknown_qp) X(rx_bad_state) X(rx_foreign_source) \
  X(rx_wrong_service) X(rx_cnp) X(req_packets) X(req_retransmits) X(req_timeouts) X(req_retry_exc) X(req_retry_floor_timeouts) \
  X(req_rnr_retry_exc) X(req_acks_rcvd) X(req_seq_naks_rcvd) X(req_rnr_naks_rcvd) \
  X(req_err_naks_rcvd) X(req_stale_responses) X(req_read_gaps) X(req_window_cuts) X(path_cuts) X(path_waits) \
  X(resp_acks_sent) X(resp_held_acks_alone) X(resp_seq_naks_sent) X(resp_rnr_naks_sent) X(resp_access_naks_sent) \
  X(resp_inv_req_naks_sent) X(resp_op_err_naks_sent) X(resp_duplicates) X(resp_dup_reads) \
  X(resp_dup_atomics) X(resp_future_psn) X(resp_read_packets) X(uc_dropped_messages) \
  X(ud_qkey_drops) X(ud_no_recv_drops) X(ud_len_errors) X(ud_oversize_sends) X(cq_overflows) X(completions) \
  X(resp_dup_unmatched) X(resp_rkey_errors) X(resp_pd_errors) X(resp_rights_errors) \
  X(resp_bounds_errors) X(resp_misaligned_atomics) X(resp_rd_atomic_limit) \
  X(resp_opcode_seq_errors) X(resp_len_errors) X(resp_seq_naks_repeated) X(resp_qp_errors) X(resp_memory_faults) X(resp_unmapped_regions) X(rx_kernel_drops) \
  X(fault_tx_dropped) X(fault_tx_duplicated) X(fault_tx_reordered) X(fault_tx_delayed) \
  X(fault_tx_corrupted) X(fault_rx_dropped) X(fault_rx_duplicated) X(fault_rx_reordered) \
  X(fault_rx_delayed) X(fault_rx_corrupted) X(fault_tx_ce_marked) X(fault_rx_ce_marked) X(shm_tx_packets) X(shm_rx_packets) X(shm_tx_full) \
  X(shm_rx_skipped) X(doorbells_tx) X(doorbells_rx) \
  X(mw_binds) X(mw_bind_errors) X(mw_local_invalidations) X(mw_remote_invalidations) X(resp_invalidate_errors) \
  X(mcast_attaches) X(mcast_rx_packets) X(mcast_tx_packets) X(xrc_tx_requests) X(xrc_rx_requests) \
  X(resp_xrc_srq_errors) X(xrc_handoff_sent) X(xrc_handoff_full) X(xrc_handoff_received) X(xrc_handoff_errors) \
  X(resp_final_acks_repeated) X(ecn_marked) X(cnp_sent) X(cnp_handled) X(cc_paced) X(cc_rate_mbps) \
  X(resp_ooo_kept) X(resp_ooo_duplicates) X(resp_ooo_executed) X(req_selective_resends) X(req_sr_peers) \
  X(req_sr_probes_failed) X(srtt_us) X(cc_window) X(cc_delay_cuts) X(req_sr_stale_naks) \
  X(req_sr_trains_split) X(req_sr_rd_atomic_resends) X(req_rtt_samples) X(req_rtt_from_resends) \
  X(req_read_kept) X(req_read_holes) X(resp_sack_peers) X(resp_sacks_sent) X(req_sack_hellos) X(req_sacks_rcvd) \
  X(req_sacks_ignored) X(req_sack_resends) X(thread_rx_packets) X(thread_socket_wakes) X(thread_spinner_watches) X(thread_spin_rx) X(thread_spin_pauses) \
  X(app_wait_sleeps) X(req_copy_writes) X(req_copy_bytes) X(req_copy_naks_rcvd) X(resp_copy_writes) \
  X(resp_copy_bytes) X(resp_copy_refused) X(resp_copy_requester_faults) X(copy_untrusted) \
  X(req_copy_reads) X(req_copy_read_bytes) X(resp_copy_reads) X(resp_copy_read_bytes) X(req_copy_fences) \
  X(req_copy_fence_timeouts) X(resp_copy_stale) X(thread_looks_skipped) X(app_wait_spins) \
  X(app_wait_ack_spins)
// clang-format on

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
