// uroce::ProtectionDomain, MemoryRegion and AddressHandle over verbs::Pd,
// verbs::Mr and verbs::Ah.
#include <sys/random.h>

#include <limits>

#include "impl.hpp"

namespace uroce {

// ------------------------------------------------------------ ProtectionDomain

ProtectionDomain::ProtectionDomain(std::unique_ptr<detail::PdImpl> impl) noexcept : impl_(std::move(impl)) {}
ProtectionDomain::ProtectionDomain(ProtectionDomain&&) noexcept = default;

ProtectionDomain& ProtectionDomain::operator=(ProtectionDomain&& o) noexcept {
  if (this != &o) {
    if (impl_) detail::destroy_children_first(impl_, impl_->pd->users().load(), "ProtectionDomain");
    impl_ = std::move(o.impl_);
  }
  return *this;
}

ProtectionDomain::~ProtectionDomain() {
  if (impl_) detail::destroy_children_first(impl_, impl_->pd->users().load(), "ProtectionDomain");
}

Result<MemoryRegion> ProtectionDomain::reg_mr(void* addr, size_t length, uint32_t access) {
  const auto a = uint64_t(reinterpret_cast<uintptr_t>(addr));
  auto mr = verbs::Mr::reg(*impl_->pd, a, length, a, access);
  if (!mr.ok()) return mr.status();
  auto impl = std::make_unique<detail::MrImpl>();
  impl->mr = std::move(*mr);
  return MemoryRegion(std::move(impl));
}

Result<MemoryRegion> ProtectionDomain::reg_mr(std::span<std::byte> memory, uint32_t access) {
  return reg_mr(memory.data(), memory.size(), access);
}

Result<MemoryWindow> ProtectionDomain::alloc_mw(MwType type) {
  if (type != MwType::type1 && type != MwType::type2) return err::inval("alloc_mw: type must be type1 or type2");
  auto mw = verbs::Mw::alloc(*impl_->pd, type);
  if (!mw.ok()) return mw.status();
  auto impl = std::make_unique<detail::MwImpl>();
  impl->mw = std::move(*mw);
  impl->last_grant = impl->mw->rkey();
  return MemoryWindow(std::move(impl));
}

Result<QueuePair> ProtectionDomain::create_qp(const QpConfig& config) {
  // XRC needs a domain object this API does not have yet (the C ABI does).
  if (config.type == QpType::xrc_send || config.type == QpType::xrc_recv)
    return err::notsup("create_qp: XRC QPs are available through the C ABI (ibv_open_xrcd) only");
  if (!config.send_cq || !config.recv_cq) return err::inval("create_qp: a QP needs a send CQ and a receive CQ");
  if (!config.send_cq->impl_ || !config.recv_cq->impl_ || (config.srq && !config.srq->impl_))
    return err::inval("create_qp: a CQ or the SRQ was moved from");
  verbs::QpInitAttr init;
  init.qp_type = config.type;
  init.send_cq = config.send_cq->impl_->cq.get();
  init.recv_cq = config.recv_cq->impl_->cq.get();
  init.srq = config.srq ? config.srq->impl_->srq.get() : nullptr;
  init.cap = config.cap;
  init.sq_sig_all = config.sq_sig_all;
  auto impl = std::make_unique<detail::QpImpl>();
  init.user_context = impl.get();
  auto qp = verbs::Qp::create(*impl_->pd, init);
  if (!qp.ok()) return qp.status();
  impl->qp = std::move(*qp);
  impl->ctx = impl_->ctx;
  uint32_t psn = 0;
  if (::getrandom(&psn, sizeof psn, 0) != ssize_t(sizeof psn)) psn = impl->qp->qpn() * 2654435761u;
  impl->initial_psn = psn & 0xffffff;
  impl_->ctx->track(impl_->ctx->qps, impl->qp.get(), impl.get());
  return QueuePair(std::move(impl));
}

Result<SharedReceiveQueue> ProtectionDomain::create_srq(const SrqConfig& config) {
  auto impl = std::make_unique<detail::SrqImpl>();
  auto srq =
      verbs::Srq::create(*impl_->pd, verbs::SrqAttr{config.max_wr, config.max_sge, config.srq_limit}, impl.get());
  if (!srq.ok()) return srq.status();
  impl->srq = std::move(*srq);
  impl->ctx = impl_->ctx;
  impl_->ctx->track(impl_->ctx->srqs, impl->srq.get(), impl.get());
  return SharedReceiveQueue(std::move(impl));
}

Result<AddressHandle> ProtectionDomain::create_ah(const AhAttr& attr) {
  auto ah = verbs::Ah::create(*impl_->pd, attr);
  if (!ah.ok()) return ah.status();
  auto impl = std::make_unique<detail::AhImpl>();
  impl->ah = std::move(*ah);
  return AddressHandle(std::move(impl));
}

// ------------------------------------------------------------ MemoryRegion

MemoryRegion::MemoryRegion(std::unique_ptr<detail::MrImpl> impl) noexcept : impl_(std::move(impl)) {}
MemoryRegion::MemoryRegion(MemoryRegion&&) noexcept = default;
MemoryRegion& MemoryRegion::operator=(MemoryRegion&&) noexcept = default;
MemoryRegion::~MemoryRegion() = default;

uint32_t MemoryRegion::lkey() const noexcept { return impl_->mr->lkey(); }
uint32_t MemoryRegion::rkey() const noexcept { return impl_->mr->rkey(); }
uint64_t MemoryRegion::addr() const noexcept { return impl_->mr->iova(); }
std::byte* MemoryRegion::data() const noexcept { return reinterpret_cast<std::byte*>(uintptr_t(impl_->mr->addr())); }
size_t MemoryRegion::length() const noexcept { return size_t(impl_->mr->length()); }
uint32_t MemoryRegion::access() const noexcept { return impl_->mr->access(); }

// ------------------------------------------------------------ MemoryWindow

MemoryWindow::MemoryWindow(std::unique_ptr<detail::MwImpl> impl) noexcept : impl_(std::move(impl)) {}
MemoryWindow::MemoryWindow(MemoryWindow&&) noexcept = default;
MemoryWindow& MemoryWindow::operator=(MemoryWindow&&) noexcept = default;
MemoryWindow::~MemoryWindow() = default;

MwType MemoryWindow::type() const noexcept { return impl_->mw->type(); }
uint32_t MemoryWindow::rkey() const noexcept { return impl_->mw->rkey(); }

SendWr MemoryWindow::bind(const MemoryRegion& mr, uint64_t addr, uint64_t length, uint32_t access,
                          uint64_t wr_id) noexcept {
  const uint32_t grant = (impl_->last_grant & ~0xffu) | ((impl_->last_grant + 1) & 0xffu);
  impl_->last_grant = grant;
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = WrOpcode::bind_mw;
  wr.send_flags = send_flags::kSignaled;
  wr.rkey = grant;
  wr.bind = {impl_->mw->rkey(), mr.lkey(), addr, length, access};
  return wr;
}

SendWr MemoryWindow::unbind(uint64_t wr_id) noexcept {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = WrOpcode::bind_mw;
  wr.send_flags = send_flags::kSignaled;
  wr.rkey = impl_->last_grant;
  wr.bind = {impl_->mw->rkey(), 0, 0, 0, 0};
  return wr;
}

SendWr MemoryWindow::invalidate(uint32_t rkey, uint64_t wr_id) noexcept {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = WrOpcode::local_inv;
  wr.send_flags = send_flags::kSignaled;
  wr.imm_data = rkey;
  return wr;
}

Sge MemoryRegion::sge(size_t offset, uint32_t len) const noexcept {
  return Sge{impl_->mr->addr() + offset, len, impl_->mr->lkey()};
}

Sge MemoryRegion::sge() const noexcept {
  const uint64_t len = std::min<uint64_t>(impl_->mr->length(), std::numeric_limits<uint32_t>::max());
  return Sge{impl_->mr->addr(), uint32_t(len), impl_->mr->lkey()};
}

// ------------------------------------------------------------ AddressHandle

AddressHandle::AddressHandle(std::unique_ptr<detail::AhImpl> impl) noexcept : impl_(std::move(impl)) {}
AddressHandle::AddressHandle(AddressHandle&&) noexcept = default;
AddressHandle& AddressHandle::operator=(AddressHandle&&) noexcept = default;
AddressHandle::~AddressHandle() = default;

const verbs::Ah* AddressHandle::get() const noexcept { return impl_ ? impl_->ah.get() : nullptr; }
const AhAttr& AddressHandle::attr() const noexcept { return impl_->ah->attr(); }

}  // namespace uroce
