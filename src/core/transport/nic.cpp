#include "transport/nic.hpp"

#include <cstdlib>
#include <map>
#include <string_view>

#include "common/log.hpp"
#include "net/registry.hpp"
#include "net/udp_io.hpp"
#include "transport/protocol.hpp"
#include "transport/psn.hpp"
#include "verbs/cq.hpp"
#include "verbs/comp_channel.hpp"
#include "verbs/qp.hpp"
#include "wire/icrc.hpp"
#include "wire/packet.hpp"

namespace uroce::transport {
namespace {

constexpr uint32_t kQpIndexBits = 14;
constexpr uint32_t kQpIndexMask = (1u << kQpIndexBits) - 1;
constexpr size_t kPerQpBudget = 16;

std::mutex g_nics_mu;
std::map<std::pair<IpAddr, uint16_t>, std::weak_ptr<Nic>>& nics() {
  static auto* m = new std::map<std::pair<IpAddr, uint16_t>, std::weak_ptr<Nic>>;
  return *m;
}

}  // namespace

Result<std::shared_ptr<Nic>> Nic::get(const NicConfig& cfg) {
  std::lock_guard g(g_nics_mu);
  auto key = std::make_pair(cfg.addr, cfg.port);
  if (auto it = nics().find(key); it != nics().end())
    if (auto nic = it->second.lock()) return nic;
  std::shared_ptr<Nic> nic(new Nic(cfg));
  UROCE_TRY(nic->open_io(nullptr));
  nics()[key] = nic;
  return nic;
}

Result<std::shared_ptr<Nic>> Nic::create(const NicConfig& cfg, const IoFactory& io) {
  std::shared_ptr<Nic> nic(new Nic(cfg));
  UROCE_TRY(nic->open_io(&io));
  return nic;
}

Nic::Nic(const NicConfig& cfg) : cfg_(cfg), qps_(1u << kQpIndexBits, nullptr) {
  rx_.resize(TxBatch::kSlots);
  now_ = Clock::now();
}

Status Nic::open_io(const IoFactory* factory) {
  auto reg = net::HostRegistry::instance();
  if (reg.ok()) {
    registry_ = *reg;
    slot_ = registry_->slot();
  } else {
    UROCE_LOG(warn, "host registry unavailable: %s", reg.status().to_string().c_str());
  }
  if (factory) {
    auto io = (*factory)();
    if (!io.ok()) return io.status();
    io_ = std::move(*io);
  } else {
    net::UdpConfig ucfg;
    ucfg.local = cfg_.addr;
    ucfg.port = cfg_.port;
    ucfg.port_fallback = cfg_.port_fallback;
    const char* gso = std::getenv("UROCE_GSO");
    ucfg.gso = !(gso && std::string_view(gso) == "0");
    auto io = net::UdpIo::open(ucfg);
    if (!io.ok()) return io.status();
    io_ = std::move(*io);
  }
  local_ = io_->local();
  tx_.set_gso_max(io_->gso_max_segments());
  if (registry_) {
    Status s = registry_->publish(local_.addr, local_.port);
    if (!s.ok()) UROCE_LOG(warn, "registry publish: %s", s.to_string().c_str());
  }
  UROCE_LOG(info, "%s: RoCEv2 on %s", cfg_.name.c_str(), local_.to_string().c_str());
  return {};
}

Nic::~Nic() {
  if (thread_.joinable()) {
    stop_.store(true);
    kick();
    thread_.join();
  }
  if (epfd_ >= 0) ::close(epfd_);
  if (kick_fd_ >= 0) ::close(kick_fd_);
  if (registry_) (void)registry_->unpublish(local_.addr, local_.port);
  std::lock_guard g(g_nics_mu);
  auto it = nics().find({cfg_.addr, cfg_.port});
  if (it != nics().end() && it->second.expired()) nics().erase(it);
}

Status Nic::attach(verbs::Qp& qp, uint32_t& qpn_out) {
  std::lock_guard g(mu_);
  uint32_t index;
  if (!free_qp_.empty()) {
    index = free_qp_.front();
    free_qp_.erase(free_qp_.begin());
  } else if (next_qp_ <= kQpIndexMask) {
    index = next_qp_++;
  } else {
    return err::nomem("no free QP number on " + cfg_.name + " (" +
                      std::to_string(kQpIndexMask - 1) + " QPs per process)");
  }
  uint32_t qpn = (slot_ << kQpIndexBits | index) & kPsnMask;
  if (qpn == 0xffffff) return err::nomem("QP number space exhausted");
  qps_[index] = &qp;
  qpn_out = qpn;
  return {};
}

void Nic::detach(verbs::Qp& qp) noexcept {
  uint32_t index = qp.qpn() & kQpIndexMask;
  if (qps_[index] == &qp) {
    qps_[index] = nullptr;
    free_qp_.push_back(index);  // reused oldest-first
  }
  detach_lists(qp);
}

void Nic::detach_lists(verbs::Qp& qp) noexcept {
  if (qp.in_ready_) std::erase(ready_, &qp);
  if (qp.in_lazy_) std::erase(lazy_, &qp);
  qp.in_ready_ = qp.in_lazy_ = false;
}

verbs::Qp* Nic::find_qp(uint32_t qpn) const noexcept {
  if ((qpn >> kQpIndexBits) != slot_) return nullptr;
  return qps_[qpn & kQpIndexMask];
}

Endpoint Nic::resolve(const IpAddr& gid, uint32_t qpn) noexcept {
  if (!registry_) return {gid, net::kRoceV2Port};
  const uint32_t slot = qpn >> kQpIndexBits;
  const Clock::time_point now = Clock::now();
  auto key = std::make_pair(slot, gid);
  if (auto it = resolved_.find(key); it != resolved_.end() && it->second.expires > now)
    return {gid, it->second.port};
  const uint16_t port = registry_->lookup_port(slot, gid).value_or(net::kRoceV2Port);
  if (resolved_.size() > 4096) resolved_.clear();
  resolved_[key] = {port, now + std::chrono::seconds(1)};
  return {gid, port};
}

// ---------------------------------------------------------------- transmit

void Nic::schedule(verbs::Qp& qp) noexcept {
  if (!qp.in_ready_) {
    qp.in_ready_ = true;
    ready_.push_back(&qp);
  }
}

void Nic::schedule_ack(verbs::Qp& qp) noexcept {
  if (!qp.in_ready_ && !qp.in_lazy_) {
    qp.in_lazy_ = true;
    lazy_.push_back(&qp);
  }
}

void Nic::pump() noexcept {
  while (!ready_.empty()) {
    verbs::Qp* qp = ready_.front();
    ready_.pop_front();
    qp->in_ready_ = false;
    size_t budget = kPerQpBudget;
    bool more = responder_produce(*this, *qp, budget);
    if (budget > 0) more = requester_produce(*this, *qp, budget) || more;
    if (more) schedule(*qp);
    if (tx_.full()) tx_.flush(*io_, counters_);
  }
  // Lazy ACKs ride along with whatever else is leaving now.
  if (tx_.size() > 0 && !lazy_.empty()) flush_acks();
  tx_.flush(*io_, counters_);
}

void Nic::flush_acks() noexcept {
  for (verbs::Qp* qp : lazy_) {
    qp->in_lazy_ = false;
    if (tx_.full()) tx_.flush(*io_, counters_);
    responder_flush_ack(*this, *qp);
  }
  lazy_.clear();
  tx_.flush(*io_, counters_);
}

// ----------------------------------------------------------------- receive

size_t Nic::poll_rx() noexcept {
  size_t n = io_->recv_batch(rx_);
  if (n == 0) return 0;
  refresh_now();
  for (size_t i = 0; i < n; ++i) dispatch(rx_[i]);
  pump();
  return n;
}

void Nic::dispatch(net::RxPacket& raw) noexcept {
  ++counters_.rx_packets;
  counters_.rx_bytes += raw.data.size();
  if (raw.truncated) {
    ++counters_.rx_truncated;
    return;
  }
  wire::Packet pkt;
  wire::DecodeError derr;
  if (!wire::decode(raw.data, pkt, derr)) {
    ++counters_.rx_malformed;
    UROCE_LOG(debug, "drop from %s: %s", raw.src.to_string().c_str(), wire::to_string(derr));
    return;
  }
  wire::IpUdpFields ip;
  ip.src = raw.src.addr;
  ip.dst = raw.dst;
  ip.src_port = raw.src.port;
  ip.dst_port = local_.port;
  ip.ipv4_id = raw.ipv4_id_hint;  // a GRO train's packet i: ID i (verify_icrc solves others)
  ip.ipv4_frag = 0x4000;
  switch (wire::verify_icrc(ip, raw.data)) {
    case wire::IcrcCheck::ok: break;
    case wire::IcrcCheck::ok_id_solved: ++counters_.rx_icrc_id_solved; break;
    case wire::IcrcCheck::bad:
      ++counters_.rx_icrc_bad;
      UROCE_LOG(debug, "drop from %s: bad ICRC", raw.src.to_string().c_str());
      return;
  }
  const wire::OpcodeInfo& info = *pkt.info;
  if (info.service == wire::Service::cnp) {
    ++counters_.rx_cnp;
    return;
  }
  verbs::Qp* qp = find_qp(pkt.hdr.bth.dest_qp);
  if (!qp) {
    ++counters_.rx_unknown_qp;
    return;
  }
  const verbs::QpType t = qp->type();
  const bool service_ok = (info.service == wire::Service::rc && t == verbs::QpType::rc) ||
                          (info.service == wire::Service::uc && t == verbs::QpType::uc) ||
                          (info.service == wire::Service::ud && t == verbs::QpType::ud);
  if (!service_ok) {
    ++counters_.rx_wrong_service;
    return;
  }
  const verbs::QpState st = qp->state();
  if (st == verbs::QpState::reset || st == verbs::QpState::init || st == verbs::QpState::err) {
    ++counters_.rx_bad_state;
    return;
  }
  if (t == verbs::QpType::ud) {
    ud_receive(*this, *qp, pkt, raw);
    return;
  }
  // A connected QP listens to its peer only.
  if (raw.src.addr != qp->peer_.addr) {
    ++counters_.rx_foreign_source;
    return;
  }
  if (info.flags & wire::op::kResponse) {
    if (t == verbs::QpType::rc && st != verbs::QpState::rtr) completer_receive(*this, *qp, pkt);
    else ++counters_.rx_bad_state;
  } else {
    responder_receive(*this, *qp, pkt);
  }
}

// ------------------------------------------------------------------ timers

void Nic::arm_timer(verbs::Qp& qp, Clock::time_point when) noexcept {
  if (qp.timer_queued_ && qp.timer_when_ <= when) return;
  qp.timer_queued_ = true;
  qp.timer_when_ = when;
  timers_.push({when, qp.qpn()});
  const int64_t w = when.time_since_epoch().count();
  if (w < thread_sleep_until_.load(std::memory_order_acquire)) kick();
}

void Nic::run_timers() noexcept {
  while (!timers_.empty() && timers_.top().when <= now_) {
    Timer t = timers_.top();
    timers_.pop();
    verbs::Qp* qp = find_qp(t.qpn);
    if (!qp || !qp->timer_queued_ || qp->timer_when_ != t.when) continue;
    qp->timer_queued_ = false;
    requester_on_timer(*this, *qp);
  }
  pump();
}

void Nic::cq_notify(verbs::Cq& cq) noexcept {
  if (verbs::CompChannel* ch = cq.channel()) ch->post(cq);
}

}  // namespace uroce::transport
