// Queue pair: the verbs checks, the IB state machine (qp_state_table.cpp),
// and the transport state of its queues, requester, completer and responder,
// held as a transport::QpEngine that nothing outside the QP sees.  Data-path
// state is guarded by the NIC lock.
#pragma once

#include <atomic>
#include <memory>
#include <span>

#include "common/status.hpp"
#include "transport/ports.hpp"
#include "verbs/types.hpp"

namespace uroce::transport {
class Nic;
class QpEngine;
struct EngineSnapshot;
}  // namespace uroce::transport

namespace uroce::verbs {

class Pd;
class Cq;
class Srq;
class Xrcd;

struct QpInitAttr {
  QpType qp_type = QpType::rc;
  Cq* send_cq = nullptr;  // XRC_SEND: the only CQ; XRC_RECV: none
  Cq* recv_cq = nullptr;  // XRC: none (an XRC SRQ has its own)
  Srq* srq = nullptr;
  Xrcd* xrcd = nullptr;  // XRC_RECV: its domain (create with the domain's pd())
  QpCap cap;
  bool sq_sig_all = false;
  void* user_context = nullptr;
};

class Qp final : private transport::QpOwner {
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
  // UD multicast (ibv_attach_mcast / ibv_detach_mcast): receive what is
  // sent to multicast GID `group`.  EINVAL for a QP that is not UD, a GID
  // that is not multicast or not of the device's family, attaching twice
  // or detaching what is not attached.
  Status attach_mcast(const IpAddr& group);
  Status detach_mcast(const IpAddr& group);

  uint32_t qpn() const noexcept { return qpn_; }
  QpType type() const noexcept { return init_.qp_type; }
  QpState state() const noexcept;
  Pd& pd() const noexcept { return *pd_; }
  transport::Nic& nic() const noexcept { return *nic_; }
  void* user_context() const noexcept { return init_.user_context; }
  // The first step of destroying: detaches the QP from the NIC, so that no
  // packet reaches it and it raises no more async events, and drops its
  // queued events.  Only destruction may follow.  The destructor closes a
  // QP not closed yet.
  void close() noexcept;
  // The transport's view of this QP (queue sizes, PSNs), taken under the
  // NIC lock: for tests and traces.
  transport::EngineSnapshot debug_snapshot() const;

 private:
  Qp(Pd& pd, const QpInitAttr& init);
  // transport::QpOwner: the event goes to the context's queue, about this QP.
  void async_event(AsyncEventType type) noexcept override;
  Status modify_locked(const QpAttr& attr, uint32_t mask);
  Status validate_send(const SendWr& wr) const;
  transport::SendPlan send_plan(const SendWr& wr) const noexcept;

  Pd* pd_;
  transport::Nic* nic_;
  QpInitAttr init_;
  uint32_t qpn_ = 0;
  std::unique_ptr<transport::QpEngine> engine_;
  bool closed_ = false;
};

}  // namespace uroce::verbs
