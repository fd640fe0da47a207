// Queue pair: the send and receive queues, the IB state machine
// (qp_state_table.cpp) and the transport state of the requester, completer
// and responder (transport/).  Data-path state is guarded by the NIC lock.
#pragma once

#include <atomic>
#include <memory>
#include <span>

#include "common/status.hpp"
#include "transport/queues.hpp"
#include "verbs/types.hpp"
#include "wire/icrc.hpp"

namespace uroce::transport {
class Nic;
}

namespace uroce::verbs {

class Pd;
class Cq;
class Srq;

struct QpInitAttr {
  QpType qp_type = QpType::rc;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  QpCap cap;
  bool sq_sig_all = false;
  void* user_context = nullptr;
};

class Qp {
 public:
  static constexpr uint32_t kMaxWr = 1u << 15;
  static constexpr uint32_t kMaxSge = 32;
  static constexpr uint32_t kMaxInline = 1024;
  static constexpr uint8_t kMaxRdAtomic = 128;

  static Result<std::unique_ptr<Qp>> create(Pd& pd, const QpInitAttr& init);
  ~Qp();
  Qp(const Qp&) = delete;
  Qp& operator=(const Qp&) = delete;

  Status modify(const QpAttr& attr, uint32_t mask);
  QpAttr query() const;
  const QpInitAttr& init_attr() const noexcept { return init_; }

  // Posts send WRs in order; stops at the first invalid one (*bad = index).
  Status post_send(std::span<const SendWr> wrs, size_t* bad);
  Status post_recv(std::span<const RecvWr> wrs, size_t* bad);

  uint32_t qpn() const noexcept { return qpn_; }
  QpType type() const noexcept { return init_.qp_type; }
  QpState state() const noexcept { return attr_.qp_state; }
  Pd& pd() const noexcept { return *pd_; }
  transport::Nic& nic() const noexcept { return *nic_; }
  void* user_context() const noexcept { return init_.user_context; }

  // ---- transport side: everything below needs the NIC lock ----
  QpAttr attr_;  // current attributes
  transport::WorkQueue<transport::SendWqe> sq_;
  transport::WorkQueue<transport::RecvWqe> rq_;
  transport::RequesterState req_;
  transport::ResponderState resp_;
  Endpoint peer_;                            // RC/UC: the peer's UDP endpoint
  wire::IpUdpFields icrc_ip_;                // RC/UC: ICRC fields of packets to the peer
  uint32_t mtu_ = 1024;                      // path MTU in bytes
  bool in_ready_ = false;                    // on the NIC's transmit list
  bool in_lazy_ = false;                     // on the NIC's lazy-ACK list
  bool timer_queued_ = false;                // has an entry in the NIC's timer heap
  transport::Clock::time_point timer_when_;  // ... due then

  // Moves to `s` from inside the transport (errors); flushes on ERR.
  void set_error_state() noexcept;
  // Completes every outstanding WQE with WR_FLUSH_ERR (QP in ERR).
  void flush_locked() noexcept;
  void complete_send_locked(transport::SendWqe& wqe, WcStatus status) noexcept;

 private:
  Qp(Pd& pd, const QpInitAttr& init);
  Status modify_locked(const QpAttr& attr, uint32_t mask);
  Status validate_send(const SendWr& wr) const;
  void reset_locked() noexcept;
  // Sends the coalesced ACK the responder still owes, if any: the peer
  // whose last message this QP received must get its ACK even when the
  // application destroys the QP (or moves it to RESET or ERR) right after
  // seeing the receive completion, before the ACK's usual occasion.
  void send_owed_ack_locked() noexcept;

  Pd* pd_;
  transport::Nic* nic_;
  QpInitAttr init_;
  uint32_t qpn_ = 0;
};

}  // namespace uroce::verbs
