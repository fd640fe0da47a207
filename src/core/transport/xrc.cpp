// The NIC's XRC SRQ numbers (IBA 9.9.4): an XRC_RECV QP takes the receive
// WQE of each request from the SRQ its XRCETH names.
#include <sys/epoll.h>

#include <exception>
#include <string_view>

#include "common/log.hpp"
#include "net/shm_ring.hpp"
#include "transport/nic.hpp"
#include "transport/qp_engine.hpp"
#include "transport/xrc_share.hpp"

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
  if (auto box = xrc_inboxes_.find(srqn); box != xrc_inboxes_.end()) {
    box->second->close();  // other processes' QPs find it gone
    xrc_inboxes_.erase(box);
    have_inboxes_.store(!xrc_inboxes_.empty(), std::memory_order_release);
    kick();  // a progress thread asleep with it lets go of it
  }
}

std::atomic<uint64_t>* Nic::share_xrc_srq(uint32_t srqn, RecvSource& srq, XrcFileKey key) noexcept {
  auto local_only = [&](std::string_view why) -> std::atomic<uint64_t>* {
    UROCE_LOG(info, "%s: XRC SRQ %u stays within this process: %s", cfg_.name.c_str(), srqn, std::string(why).c_str());
    return nullptr;
  };
  try {
    auto dir = net::shm_dir();
    if (!dir.ok()) return local_only(dir.status().message());
    // Inboxes of processes killed before they could remove theirs.
    (void)net::ShmRing::clean_stale(*dir);
    auto in = XrcInbox::create(*dir, share_dev(), srqn, key, srq);
    if (!in.ok()) return local_only(in.status().message());
    start_progress_thread();  // it drains the inbox when the application does not
    std::lock_guard g(mu_);
    if (xrc_bell_fd_.load(std::memory_order_relaxed) < 0) {
      auto bell = xrc_share::open_bell(share_dev(), qps_->slot());
      if (!bell.ok()) return local_only(bell.status().message());
      const int fd = bell->release();
      xrc_bell_fd_.store(fd, std::memory_order_release);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = 2;
      ::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
    }
    std::shared_ptr<XrcInbox> box = std::move(*in);
    std::atomic<uint64_t>* credits = &box->credits();
    xrc_inboxes_[srqn] = std::move(box);
    have_inboxes_.store(true, std::memory_order_release);
    return credits;
  } catch (const std::exception& e) {  // no thread, no memory
    return local_only(e.what());
  }
}

XrcRemote* Nic::find_remote_xrc_srq(uint32_t srqn, XrcFileKey key) noexcept {
  if (!key.shared() || !qps_ || srqn >> QpTable::kIndexBits == qps_->slot()) return nullptr;
  auto it = xrc_remotes_.find(srqn);
  if (it != xrc_remotes_.end() && it->second->usable()) return it->second->domain() == key ? it->second.get() : nullptr;
  if (it != xrc_remotes_.end()) {  // its process destroyed it or died: QPs let go of it
    XrcRemote* gone = it->second.get();
    qps_->for_each([gone](QpEngine& qp) {
      if (qp.xrc_remote == gone) qp.xrc_remote = nullptr;
    });
    xrc_remotes_.erase(it);
  }
  try {
    auto dir = net::shm_dir();
    if (!dir.ok()) return nullptr;
    auto r = XrcRemote::attach(*dir, share_dev(), srqn);
    if (!r.ok() || !(*r)->usable()) return nullptr;
    XrcRemote* p = r->get();
    xrc_remotes_[srqn] = std::move(*r);
    return p->domain() == key ? p : nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
}

size_t Nic::drain_xrc_inboxes() noexcept {
  size_t n = 0;
  for (auto& [srqn, box] : xrc_inboxes_) n += box->drain(*this);
  return n;
}

void Nic::xrc_sleep(bool& pending) noexcept {
  std::vector<std::shared_ptr<XrcInbox>>& v = xrc_sleeping_;
  v.clear();
  if (!have_inboxes_.load(std::memory_order_acquire)) return;
  {
    // (Any growth of the list happens here, under the lock a fork takes.)
    std::lock_guard g(mu_);
    for (auto& [srqn, box] : xrc_inboxes_) v.push_back(box);
  }
  for (auto& box : v) pending = box->prepare_sleep() || pending;
}

void Nic::xrc_wake() noexcept {
  if (xrc_sleeping_.empty()) return;
  for (auto& box : xrc_sleeping_) box->end_sleep();
  // Under the lock a fork takes: an inbox removed meanwhile is unmapped
  // here, by its last holder.
  std::lock_guard g(mu_);
  xrc_sleeping_.clear();
}

RecvSource* Nic::find_xrc_srq(uint32_t srqn) const noexcept {
  auto it = xrc_srqs_.find(srqn);
  return it == xrc_srqs_.end() ? nullptr : it->second;
}

}  // namespace uroce::transport
