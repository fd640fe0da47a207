// uroce::QueuePair over verbs::Qp, with connect(): the state walk every
// RDMA program writes by hand.
#include <algorithm>
#include <bit>

#include "impl.hpp"

namespace uroce {

namespace m = qp_attr_mask;

QueuePair::QueuePair(std::unique_ptr<detail::QpImpl> impl) noexcept : impl_(std::move(impl)) {
  if (impl_) impl_->owner = this;
}

QueuePair::QueuePair(QueuePair&& o) noexcept : impl_(std::move(o.impl_)) {
  if (impl_) impl_->owner = this;
}

QueuePair& QueuePair::operator=(QueuePair&& o) noexcept {
  if (this != &o) {
    impl_ = std::move(o.impl_);
    if (impl_) impl_->owner = this;
  }
  return *this;
}

QueuePair::~QueuePair() = default;

namespace detail {
QpImpl::~QpImpl() {
  if (!qp) return;  // creation failed
  qp->close();      // its events are forgotten before its address can be reused
  ctx->untrack(ctx->qps, qp.get());
  qp.reset();
}
}  // namespace detail

uint32_t QueuePair::qpn() const noexcept { return impl_->qp->qpn(); }
QpType QueuePair::type() const noexcept { return impl_->qp->type(); }
QpState QueuePair::state() const { return impl_->qp->query().qp_state; }
QpCap QueuePair::cap() const { return impl_->qp->query().cap; }
QpAttr QueuePair::query() const { return impl_->qp->query(); }

PeerInfo QueuePair::local_info(uint8_t sgid_index) const {
  const detail::ContextImpl& c = *impl_->ctx;
  PeerInfo p;
  if (sgid_index < c.info.gids.size()) p.gid = c.info.gids[sgid_index];
  p.qpn = impl_->qp->qpn();
  p.psn = impl_->initial_psn;
  p.mtu = c.port_attr.active_mtu_bytes;
  return p;
}

Status QueuePair::modify(const QpAttr& attr, uint32_t mask) { return impl_->qp->modify(attr, mask); }

Status QueuePair::connect(const PeerInfo& peer, const ConnectOptions& o) {
  verbs::Qp& qp = *impl_->qp;
  const QpState cur = qp.query().qp_state;
  if (cur != QpState::reset)
    return err::inval(std::string("connect: the QP is in ") + to_string(cur) +
                      ", connect() starts from RESET (modify it to RESET first)");
  const QpType type = qp.type();
  const bool ud = type == QpType::ud;
  const bool rc = type == QpType::rc;
  const detail::ContextImpl& c = *impl_->ctx;

  Mtu mtu = c.port_attr.active_mtu();
  if (o.mtu) {
    mtu = *o.mtu;
  } else if (peer.mtu != 0) {
    auto pm = mtu_from_bytes(
        std::min<uint32_t>(std::bit_floor(std::clamp<uint32_t>(peer.mtu, 256, 4096)), c.port_attr.active_mtu_bytes));
    if (pm.ok()) mtu = *pm;
  }
  if (!ud && peer.qpn == 0) return err::inval("connect: the peer's QP number is 0");
  if (!ud && peer.gid.is_unspecified()) return err::inval("connect: the peer's GID is not set");

  auto step = [&](const char* what, const QpAttr& a, uint32_t mask) -> Status {
    Status s = qp.modify(a, mask);
    if (s.ok()) return s;
    QpAttr reset;
    reset.qp_state = QpState::reset;
    (void)qp.modify(reset, m::kState);
    return Status::error(s.code(), std::string("connect: ") + what + ": " + std::string(s.message()));
  };

  // RESET -> INIT
  QpAttr a;
  a.qp_state = QpState::init;
  a.pkey_index = 0;
  a.port_num = 1;
  uint32_t mask = m::kState | m::kPkeyIndex | m::kPort;
  if (ud) {
    a.qkey = o.qkey;
    mask |= m::kQkey;
  } else {
    a.qp_access_flags = o.access;
    mask |= m::kAccessFlags;
  }
  UROCE_TRY(step("RESET->INIT", a, mask));

  // INIT -> RTR
  a = QpAttr{};
  a.qp_state = QpState::rtr;
  mask = m::kState;
  if (!ud) {
    a.path_mtu = mtu;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = peer.psn & 0xffffff;
    a.ah_attr.dgid = peer.gid;
    a.ah_attr.is_global = true;
    a.ah_attr.sgid_index = o.sgid_index;
    a.ah_attr.hop_limit = o.hop_limit;
    a.ah_attr.traffic_class = o.traffic_class;
    a.ah_attr.port_num = 1;
    mask |= m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn;
    if (rc) {
      a.max_dest_rd_atomic = o.max_dest_rd_atomic;
      a.min_rnr_timer = o.min_rnr_timer;
      mask |= m::kMaxDestRdAtomic | m::kMinRnrTimer;
    }
  }
  UROCE_TRY(step("INIT->RTR", a, mask));

  // RTR -> RTS
  a = QpAttr{};
  a.qp_state = QpState::rts;
  a.sq_psn = o.sq_psn.value_or(impl_->initial_psn) & 0xffffff;
  mask = m::kState | m::kSqPsn;
  if (rc) {
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = o.max_rd_atomic;
    mask |= m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kMaxQpRdAtomic;
  }
  UROCE_TRY(step("RTR->RTS", a, mask));
  return {};
}

Status QueuePair::post_send(std::span<const SendWr> wrs, size_t* bad) {
  size_t b = 0;
  Status s = impl_->qp->post_send(wrs, &b);
  if (bad) *bad = b;
  return s;
}

Status QueuePair::post_send(const SendWr& wr) { return post_send(std::span<const SendWr>(&wr, 1)); }

Status QueuePair::post_recv(std::span<const RecvWr> wrs, size_t* bad) {
  size_t b = 0;
  Status s = impl_->qp->post_recv(wrs, &b);
  if (bad) *bad = b;
  return s;
}

Status QueuePair::post_recv(const RecvWr& wr) { return post_recv(std::span<const RecvWr>(&wr, 1)); }

// ------------------------------------------------------------ SharedReceiveQueue

SharedReceiveQueue::SharedReceiveQueue(std::unique_ptr<detail::SrqImpl> impl) noexcept : impl_(std::move(impl)) {
  if (impl_) impl_->owner = this;
}

SharedReceiveQueue::SharedReceiveQueue(SharedReceiveQueue&& o) noexcept : impl_(std::move(o.impl_)) {
  if (impl_) impl_->owner = this;
}

SharedReceiveQueue& SharedReceiveQueue::operator=(SharedReceiveQueue&& o) noexcept {
  if (this != &o) {
    if (impl_) detail::destroy_children_first(impl_, impl_->srq->users().load(), "SharedReceiveQueue");
    impl_ = std::move(o.impl_);
    if (impl_) impl_->owner = this;
  }
  return *this;
}

SharedReceiveQueue::~SharedReceiveQueue() {
  if (impl_) detail::destroy_children_first(impl_, impl_->srq->users().load(), "SharedReceiveQueue");
}

namespace detail {
SrqImpl::~SrqImpl() {
  if (!srq) return;  // creation failed
  srq->close();      // its events are forgotten before its address can be reused
  ctx->untrack(ctx->srqs, srq.get());
  srq.reset();
}
}  // namespace detail

Status SharedReceiveQueue::post_recv(std::span<const RecvWr> wrs, size_t* bad) {
  size_t b = 0;
  Status s = impl_->srq->post_recv(wrs, &b);
  if (bad) *bad = b;
  return s;
}

Status SharedReceiveQueue::post_recv(const RecvWr& wr) { return post_recv(std::span<const RecvWr>(&wr, 1)); }

Status SharedReceiveQueue::arm_limit(uint32_t limit) {
  verbs::SrqAttr a;
  a.srq_limit = limit;
  return impl_->srq->modify(a, verbs::srq_attr_mask::kLimit);
}

SrqConfig SharedReceiveQueue::query() const {
  const verbs::SrqAttr a = impl_->srq->query();
  return SrqConfig{a.max_wr, a.max_sge, a.srq_limit};
}

Status QueuePair::attach_mcast(const IpAddr& group) { return impl_->qp->attach_mcast(group); }
Status QueuePair::detach_mcast(const IpAddr& group) { return impl_->qp->detach_mcast(group); }

}  // namespace uroce
