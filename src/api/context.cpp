// uroce::devices() and uroce::Context over verbs::Context.
#include <cerrno>
#include <chrono>

#include "impl.hpp"
#include "transport/nic.hpp"

namespace uroce {
namespace {

DeviceInfo to_info(const verbs::DeviceConfig& c) {
  DeviceInfo d;
  d.name = c.name;
  d.gids = c.gids;
  d.udp_port = c.udp_port;
  d.mtu = c.mtu;
  d.faults = c.faults;
  d.shared_memory = c.shm;
  return d;
}

}  // namespace

Result<std::vector<DeviceInfo>> devices() {
  auto cfgs = verbs::devices_from_env();
  if (!cfgs.ok()) return cfgs.status();
  std::vector<DeviceInfo> out;
  for (const auto& c : *cfgs) out.push_back(to_info(c));
  return out;
}

Result<Context> Context::open(const DeviceInfo& device) {
  verbs::DeviceConfig cfg;
  cfg.name = device.name;
  cfg.gids = device.gids;
  cfg.udp_port = device.udp_port;
  cfg.mtu = device.mtu;
  cfg.faults = device.faults;
  cfg.shm = device.shared_memory;
  auto ctx = verbs::Context::open(cfg);
  if (!ctx.ok()) return ctx.status();
  auto impl = std::make_unique<detail::ContextImpl>();
  impl->ctx = std::move(*ctx);
  const verbs::Context& c = *impl->ctx;
  impl->info = to_info(c.config());
  impl->info.shared_memory = c.nic().shared_memory();  // what the NIC does, asked or not
  impl->dev_attr = c.device_attr();
  impl->port_attr = c.port_attr();
  return detail::ContextImpl::make(std::move(impl));
}

Result<Context> Context::open(std::string_view name) {
  auto devs = devices();
  if (!devs.ok()) return devs.status();
  std::string names;
  for (const DeviceInfo& d : *devs) {
    if (d.name == name) return open(d);
    names += (names.empty() ? "" : ", ") + d.name;
  }
  return err::from_errno(ENODEV, "no device named '" + std::string(name) + "' (UROCE_ADDR gives: " + names + ")");
}

Context::Context(std::unique_ptr<detail::ContextImpl> impl) noexcept : impl_(std::move(impl)) {}
Context::Context(Context&&) noexcept = default;

Context& Context::operator=(Context&& o) noexcept {
  if (this != &o) {
    if (impl_) detail::destroy_children_first(impl_, impl_->ctx->users().load(), "Context");
    impl_ = std::move(o.impl_);
  }
  return *this;
}

Context::~Context() {
  if (impl_) detail::destroy_children_first(impl_, impl_->ctx->users().load(), "Context");
}

const DeviceInfo& Context::info() const noexcept { return impl_->info; }
const std::string& Context::name() const noexcept { return impl_->info.name; }
const DeviceAttributes& Context::device_attr() const noexcept { return impl_->dev_attr; }
const PortAttributes& Context::port_attr() const noexcept { return impl_->port_attr; }

Result<IpAddr> Context::gid(unsigned index) const {
  const auto& gids = impl_->info.gids;
  if (index >= gids.size())
    return err::inval("GID index " + std::to_string(index) + " is out of range (" + impl_->info.name + " has " +
                      std::to_string(gids.size()) + " GID" + (gids.size() == 1 ? "" : "s") + ")");
  return gids[index];
}

Endpoint Context::local_endpoint() const noexcept { return impl_->ctx->nic().local(); }

CpuTime Context::progress_cpu() const noexcept {
  const auto t = impl_->ctx->nic().progress_cpu();
  return {t.user_us, t.system_us};
}

std::vector<Counter> Context::counters() const {
  transport::Nic& nic = impl_->ctx->nic();
  transport::Counters snap;
  {
    std::lock_guard g(nic.mu());
    snap = nic.snapshot();
  }
  std::vector<Counter> out;
  snap.for_each([&](const char* name, uint64_t v) { out.push_back(Counter{name, v}); });
  return out;
}

Result<uint64_t> Context::counter(std::string_view name) const {
  for (const Counter& c : counters())
    if (c.name == name) return c.value;
  std::string msg = "'";  // (not "'" + std::string: GCC 12's false -Wrestrict)
  msg += name;
  return err::noent(msg + "' is not a NIC counter");
}

std::optional<FaultConfig> Context::faults() const { return impl_->ctx->nic().faults(); }

std::string Context::publish_counters() {
  transport::Nic& nic = impl_->ctx->nic();
  std::lock_guard g(nic.mu());
  nic.publish_stats();
  return nic.stats_path();
}

int Context::async_fd() const noexcept { return impl_->ctx->async_fd(); }

Result<AsyncEvent> Context::get_async_event(int timeout_ms) {
  detail::ContextImpl& c = *impl_;
  AsyncEvent out;
  // The object is named under the core queue's lock: an API object's
  // destructor closes its core object (forgetting its events) before it is
  // untracked, so an event never names a newer object at the same address.
  auto ev = c.ctx->get_async_event([&](const verbs::AsyncEvent& e) { out = c.name_event(e); }, timeout_ms);
  if (!ev.ok()) return ev.status();
  return out;
}

Result<ProtectionDomain> Context::alloc_pd() {
  auto impl = std::make_unique<detail::PdImpl>();
  auto pd = verbs::Pd::create(*impl_->ctx);
  if (!pd.ok()) return pd.status();
  impl->pd = std::move(*pd);
  impl->ctx = impl_.get();
  return ProtectionDomain(std::move(impl));
}

Result<CompletionChannel> Context::create_comp_channel() {
  auto ch = verbs::CompChannel::create(*impl_->ctx);
  if (!ch.ok()) return ch.status();
  auto impl = std::make_unique<detail::ChannelImpl>();
  impl->ch = std::move(*ch);
  impl->ctx = impl_.get();
  return CompletionChannel(std::move(impl));
}

Result<CompletionQueue> Context::create_cq(uint32_t cqe, CompletionChannel* channel) {
  if (channel && !channel->impl_) return err::inval("create_cq: the completion channel was moved from");
  auto impl = std::make_unique<detail::CqImpl>();
  auto cq = verbs::Cq::create(*impl_->ctx, cqe, channel ? channel->impl_->ch.get() : nullptr, impl.get());
  if (!cq.ok()) return cq.status();
  impl->cq = std::move(*cq);
  impl->ctx = impl_.get();
  impl_->track(impl_->cqs, impl->cq.get(), impl.get());
  return CompletionQueue(std::move(impl));
}

namespace detail {

// An impl whose creation failed has no core object and was never counted.

ChannelImpl::~ChannelImpl() {
  if (!ch) return;
  ch.reset();
}

AsyncEvent ContextImpl::name_event(const verbs::AsyncEvent& ev) {
  AsyncEvent out;
  out.type = ev.type;
  std::lock_guard g(mu);
  switch (ev.type) {
    case AsyncEventType::cq_err:
      if (auto it = cqs.find(ev.element); it != cqs.end()) out.cq = it->second->owner.load();
      break;
    case AsyncEventType::srq_err:
    case AsyncEventType::srq_limit_reached:
      if (auto it = srqs.find(ev.element); it != srqs.end()) out.srq = it->second->owner.load();
      break;
    case AsyncEventType::qp_fatal:
    case AsyncEventType::qp_req_err:
    case AsyncEventType::qp_access_err:
    case AsyncEventType::comm_est:
    case AsyncEventType::sq_drained:
    case AsyncEventType::path_mig:
    case AsyncEventType::path_mig_err:
    case AsyncEventType::qp_last_wqe_reached:
      if (auto it = qps.find(ev.element); it != qps.end()) {
        out.qp = it->second->owner.load();
        out.qp_num = it->second->qp->qpn();
      }
      break;
    default: break;
  }
  return out;
}

// As ibv_destroy_cq: no event about the CQ is handed out once it is
// closed, and the destructor waits for those handed out to be
// acknowledged (CompletionQueue::ack_events), so that the thread that took
// one may still use the CQ until it acknowledges.  A missing acknowledgement
// would hang here for ever, as in rdma-core: said once after a second.
void CqImpl::quiesce() {
  if (!cq) return;
  cq->close();
  if (!cq->wait_events_acked_for(std::chrono::seconds(1))) {
    std::fprintf(stderr,
                 "uroce: a CompletionQueue being destroyed waits for the acknowledgement (ack_events) of "
                 "events that get_event() returned for it\n");
    cq->wait_events_acked();
  }
}

CqImpl::~CqImpl() {
  if (!cq) return;
  quiesce();  // (done already: destroy_children_first ran it)
  ctx->untrack(ctx->cqs, cq.get());
  cq.reset();
}

PdImpl::~PdImpl() {
  if (!pd) return;
  pd.reset();
}

}  // namespace detail
}  // namespace uroce
