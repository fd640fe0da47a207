// The NIC's XRC SRQ numbers (IBA 9.9.4): an XRC_RECV QP takes the receive
// WQE of each request from the SRQ its XRCETH names.
#include "transport/nic.hpp"
#include "transport/qp_engine.hpp"

namespace uroce::transport {

Result<uint32_t> Nic::add_xrc_srq(RecvSource& srq) {
  std::lock_guard g(mu_);
  const uint32_t prefix = qps_->slot() << QpTable::kIndexBits;
  for (uint32_t tries = 0; tries < QpTable::kIndexMask; ++tries) {
    const uint32_t index = next_xrc_srq_;
    next_xrc_srq_ = index == QpTable::kIndexMask ? 1 : index + 1;
    const uint32_t srqn = prefix | index;
    if (xrc_srqs_.emplace(srqn, &srq).second) return srqn;
  }
  return err::nomem(cfg_.name + ": every XRC SRQ number is taken");
}

void Nic::remove_xrc_srq(uint32_t srqn) noexcept {
  std::lock_guard g(mu_);
  auto it = xrc_srqs_.find(srqn);
  if (it == xrc_srqs_.end()) return;
  RecvSource* gone = it->second;
  xrc_srqs_.erase(it);
  qps_->for_each([gone](QpEngine& qp) {
    if (qp.xrc_target == gone) qp.xrc_target = nullptr;
  });
}

RecvSource* Nic::find_xrc_srq(uint32_t srqn) const noexcept {
  auto it = xrc_srqs_.find(srqn);
  return it == xrc_srqs_.end() ? nullptr : it->second;
}

}  // namespace uroce::transport
