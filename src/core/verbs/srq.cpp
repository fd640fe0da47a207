#include "verbs/srq.hpp"

#include <algorithm>

#include "transport/nic.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/pd.hpp"
#include "verbs/xrcd.hpp"

namespace uroce::verbs {

Result<std::unique_ptr<Srq>> Srq::create(Pd& pd, const SrqAttr& attr, void* user_context, const XrcSrqInit* xrc) {
  if (xrc && (!xrc->xrcd || !xrc->cq)) return err::inval("an XRC SRQ needs an XRC domain and a CQ");
  if (xrc && (&xrc->xrcd->context().nic() != &pd.context().nic() || &xrc->cq->context() != &pd.context()))
    return err::inval("the XRC domain or CQ belongs to another device than the PD");
  if (attr.max_wr < 1 || attr.max_wr > kMaxWr)
    return err::inval("SRQ max_wr " + std::to_string(attr.max_wr) + " not in 1.." + std::to_string(kMaxWr));
  if (attr.max_sge > kMaxSge) return err::inval("SRQ max_sge above " + std::to_string(kMaxSge));
  if (attr.srq_limit > attr.max_wr) return err::inval("srq_limit above max_wr");
  auto hold = pd.context().resources().take(Resource::srq);
  if (!hold.ok()) return hold.status();
  std::unique_ptr<Srq> srq(new Srq(pd, user_context));
  srq->hold_ = std::move(*hold);
  srq->q_.init(attr.max_wr, std::max<uint32_t>(attr.max_sge, 1));
  srq->limit_ = attr.srq_limit;
  pd.users()++;  // (~Srq gives it back)
  if (xrc) {
    auto n = pd.context().nic().add_xrc_srq(*srq);
    if (!n.ok()) return n.status();
    srq->srqn_ = *n;
    srq->xrc_ = *xrc;
    xrc->xrcd->users()++;
    xrc->cq->users()++;
    if (const transport::XrcFileKey key = xrc->xrcd->file_key(); key.shared()) {
      std::atomic<uint64_t>* credits = pd.context().nic().share_xrc_srq(*n, *srq, key);
      std::lock_guard g(pd.context().nic().mu());  // take() reads it under the lock
      srq->credits_ = credits;
    }
  }
  return srq;
}

void Srq::close() noexcept {
  if (srqn_) nic().remove_xrc_srq(srqn_);
  pd_->context().forget_async_events(this);
}

Srq::~Srq() {
  close();
  if (srqn_) {
    xrc_.xrcd->users()--;
    xrc_.cq->users()--;
  }
  pd_->users()--;
}

transport::CompletionSink* Srq::completions() const noexcept { return xrc_.cq; }
uint32_t Srq::xrc_domain() const noexcept { return xrc_.xrcd ? xrc_.xrcd->id() : 0; }

transport::Nic& Srq::nic() const noexcept { return pd_->context().nic(); }

Status Srq::post_recv(std::span<const RecvWr> wrs, size_t* bad) {
  std::lock_guard g(nic().mu());
  const uint32_t before = q_.size();
  Status st = transport::post_recv_wrs(q_, wrs, bad, "shared receive queue", "the SRQ's max_sge");
  if (credits_) credits_->fetch_add(q_.size() - before, std::memory_order_acq_rel);  // the WQEs are in place
  return st;
}

Status Srq::modify(const SrqAttr& attr, uint32_t mask) {
  std::lock_guard g(nic().mu());
  if (mask & srq_attr_mask::kMaxWr) {
    if (attr.max_wr < q_.size() || attr.max_wr > kMaxWr) return err::inval("SRQ max_wr out of range");
    q_.set_max_wr(attr.max_wr);  // (the storage grows as WRs are posted)
  }
  if (mask & srq_attr_mask::kLimit) {
    if (attr.srq_limit > q_.max_wr()) return err::inval("srq_limit above max_wr");
    limit_ = attr.srq_limit;
  }
  return {};
}

SrqAttr Srq::query() const {
  std::lock_guard g(nic().mu());
  return SrqAttr{q_.max_wr(), q_.max_sge(), limit_};
}

const transport::MemoryDomain& Srq::memory() const noexcept { return *pd_; }

bool Srq::take(transport::RecvWqe& out, std::vector<Sge>& sges) noexcept {
  if (credits_) {  // another process may hold a credit for a WQE still queued
    uint64_t c = credits_->load(std::memory_order_acquire);
    do {
      if (c == 0) return false;
    } while (!credits_->compare_exchange_weak(c, c - 1, std::memory_order_acq_rel));
  }
  return pop(out, sges);
}

bool Srq::take_reserved(transport::RecvWqe& out, std::vector<Sge>& sges) noexcept {
  return credits_ ? pop(out, sges) : take(out, sges);
}

bool Srq::pop(transport::RecvWqe& out, std::vector<Sge>& sges) noexcept {
  if (q_.empty()) return false;
  const uint32_t h = q_.head();
  out = q_.at(h);
  sges.assign(q_.sges(h), q_.sges(h) + out.num_sge);
  q_.pop();
  if (limit_ > 0 && q_.size() < limit_) {
    limit_ = 0;  // one event per arming (IBA 11.5.2.4)
    pd_->context().post_async_event({AsyncEventType::srq_limit_reached, this});
  }
  return true;
}

}  // namespace uroce::verbs
