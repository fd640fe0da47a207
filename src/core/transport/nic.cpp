#include "transport/nic.hpp"

#include <pthread.h>
#include <sys/epoll.h>

#include <cstdlib>
#include <map>
#include <new>
#include <string_view>
#include <type_traits>

#include "common/log.hpp"
#include "common/own_mappings.hpp"
#include "common/quiet_thread.hpp"
#include "net/fault_io.hpp"
#include "net/pcap_io.hpp"
#include "net/peer_process.hpp"
#include "net/port_group.hpp"
#include "net/registry.hpp"
#include "net/shm_io.hpp"
#include "net/stats_file.hpp"
#include "net/udp_io.hpp"
#include "transport/protocol.hpp"
#include "transport/qp_engine.hpp"
#include "transport/requester.hpp"
#include "transport/xrc_share.hpp"

namespace uroce::transport {
namespace {

std::mutex g_nics_mu;
std::map<std::pair<IpAddr, uint16_t>, std::weak_ptr<Nic>>& nics() {
  static auto* m = new std::map<std::pair<IpAddr, uint16_t>, std::weak_ptr<Nic>>;
  return *m;
}

// fork(): a child must not use its parent's NICs (their socket, progress
// thread and registry binding are the parent's: the child would take the
// parent's packets).  Around fork the NIC table and every NIC's lock are
// held, so none is mid-change in the child; there the NICs it inherited are
// kept alive forever and never touched again (destroying one would join a
// thread that does not exist there and withdraw the parent's binding), and
// the table is emptied: the child's first open of an address makes a NIC of
// its own.  rdma-core's tests fork their rdma_cm peers after using the
// device in the parent.
std::vector<std::shared_ptr<Nic>>& forking() {
  static auto* v = new std::vector<std::shared_ptr<Nic>>;
  return *v;
}

void before_fork() noexcept {
  g_nics_mu.lock();
  for (auto& [key, weak] : nics())
    if (auto nic = weak.lock()) forking().push_back(std::move(nic));
  for (auto& nic : forking()) nic->mu().lock();
  own_mappings::lock_for_fork();  // last: it is taken under a NIC's lock too
}

void after_fork_in_parent() noexcept {
  own_mappings::unlock_after_fork();
  for (auto& nic : forking()) nic->mu().unlock();
  forking().clear();
  g_nics_mu.unlock();
}

// Allocates and frees nothing: an allocator that does not guard fork (the
// sanitizers') may have been in use by another thread at the fork.
void after_fork_in_child() noexcept {
  own_mappings::unlock_after_fork();
  for (auto& nic : forking()) nic->mu().unlock();
  // The inherited NICs stay referenced by the old list, left behind.
  using Forking = std::remove_reference_t<decltype(forking())>;
  using Table = std::remove_reference_t<decltype(nics())>;
  new (&forking()) Forking();
  new (&nics()) Table();
  g_nics_mu.unlock();
  net::PortGroup::after_fork_in_child();  // the child is no member of the parent's shared ports
}

[[maybe_unused]] const int g_fork_handlers = ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);

}  // namespace

Result<std::shared_ptr<Nic>> Nic::get(const NicConfig& cfg) {
  std::unique_lock g(g_nics_mu);
  auto key = std::make_pair(cfg.addr, cfg.port);
  if (auto it = nics().find(key); it != nics().end())
    if (auto nic = it->second.lock()) {
      // Faults are a property of the NIC, which contexts of one address share.
      if (cfg.faults) {
        std::optional<FaultConfig> want;
        if (cfg.faults->any()) want = cfg.faults;
        if (want != nic->faults_)
          return err::busy(
              cfg.name + ": " + cfg.addr.to_string() + " is already open in this process " +
              (nic->faults_ ? "with the faults " + to_string(*nic->faults_) : std::string("without faults")) +
              "; the first open of an address sets them");
      }
      if (cfg.shm && *cfg.shm != nic->shm_)
        return err::busy(cfg.name + ": " + cfg.addr.to_string() + " is already open in this process " +
                         (nic->shm_ ? "with" : "without") + " shared memory; the first open of an address decides");
      return nic;
    }
  std::shared_ptr<Nic> nic(new Nic(cfg));
  if (Status s = nic->open_io(nullptr); !s.ok()) {
    g.unlock();  // ~Nic takes g_nics_mu
    nic.reset();
    return s;
  }
  nics()[key] = nic;
  return nic;
}

Result<std::shared_ptr<Nic>> Nic::create(const NicConfig& cfg, const IoFactory& io) {
  std::shared_ptr<Nic> nic(new Nic(cfg));
  UROCE_TRY(nic->open_io(&io));
  return nic;
}

Nic::Nic(const NicConfig& cfg) : cfg_(cfg) {
  rx_.resize(TxBatch::kSlots);
  now_ = Clock::now();
}

Status Nic::open_io(const IoFactory* factory) {
  // Without the registry, QP numbers and keys could collide with another
  // process's and same-host peers could not find us: refuse rather than run
  // half-working (and say why: usually a directory someone else made).
  auto reg = net::HostRegistry::instance();
  if (!reg.ok()) {
    UROCE_LOG(error, "host registry unavailable: %s", reg.status().to_string().c_str());
    return reg.status();
  }
  registry_ = *reg;
  qps_ = std::make_unique<QpTable>(registry_ ? registry_->slot() : 0);
  ports_ = PeerPorts(registry_);
  if (factory) {
    auto io = (*factory)();
    if (!io.ok()) return io.status();
    io_ = std::move(*io);
  } else {
    net::UdpConfig ucfg;
    ucfg.local = cfg_.addr;
    ucfg.port = cfg_.port;
    ucfg.port_fallback = cfg_.port_fallback;
    // One port for all of this user's processes on the address, as a NIC
    // is shared (net/port_group.hpp); UROCE_SHARED_PORT=0 keeps the older
    // first-come port with an ephemeral one for the others.  The shared-
    // memory path then names its rings after our slot too.
    const char* shared = std::getenv("UROCE_SHARED_PORT");
    if (!(shared && std::string_view(shared) == "0")) ucfg.share_through = registry_;
    const char* gso = std::getenv("UROCE_GSO");
    ucfg.gso = !(gso && std::string_view(gso) == "0");
    auto io = net::UdpIo::open(ucfg);
    if (!io.ok()) {
      UROCE_LOG(error, "device %s: %s", cfg_.name.c_str(), io.status().to_string().c_str());
      return io.status();
    }
    // Same-host peers through shared memory, unless UROCE_SHM=0.
    shm_ = cfg_.shm.value_or(net::ShmIo::enabled_by_env());
    uint32_t slots = 0;
    if (shm_) {
      auto n = net::ShmIo::slots_from_env();
      if (!n.ok()) return n.status();
      slots = *n;
    }
    io_ = net::ShmIo::wrap_if_enabled(std::move(*io), registry_ ? int(registry_->slot()) : -1, shm_, slots);
  }
  // Fault injection: the device's own configuration, else UROCE_FAULTS.
  if (cfg_.faults) {
    if (cfg_.faults->any()) faults_ = cfg_.faults;
  } else {
    auto env = net::FaultIo::from_env();
    if (!env.ok()) return env.status();
    faults_ = *env;
  }
  // One-copy WRITEs and READs with same-host peers: asked for, or by
  // default where that is safe (no seccomp filter that could kill the
  // probe, Yama letting us reach our peers), and allowed here.
  std::optional<bool> asked = cfg_.shm_copy;
  if (!asked) {
    auto env = net::ShmIo::copy_from_env();
    if (!env.ok()) return env.status();
    asked = *env;
  }
  if (!asked) {
    copy_serve_ = shm_ && net::cross_memory_attach_by_default() && net::cross_memory_attach_works();
    UROCE_LOG(debug, "device %s: one-copy WRITEs and READs %s by default", cfg_.name.c_str(),
              copy_serve_ ? "on" : "off");
  } else if (*asked && !net::cross_memory_attach_works()) {
    UROCE_LOG(warn,
              "device %s: one-copy WRITEs and READs asked for, but this process may not use "
              "process_vm_readv: they go as packets",
              cfg_.name.c_str());
    copy_serve_ = false;
  } else {
    copy_serve_ = *asked;
  }
  copy_send_ = copy_serve_;
  if (cfg_.congestion) {
    cfg_.cc = *cfg_.congestion;
  } else if (const char* bad = nullptr; !congestion_from_env(cfg_.cc, bad)) {
    const std::string_view b(bad);
    return err::inval(std::string(bad) + "=" + std::getenv(bad) +
                      (b == "UROCE_SR"               ? ": expected 0 or 1"
                       : b == "UROCE_RETRY_FLOOR_MS" ? ": expected milliseconds, 0 to 3600000"
                                                     : ": expected swift, dcqcn or none"));
  }
  if (faults_) {
    auto fio = net::FaultIo::wrap(std::move(io_), *faults_);
    if (!fio.ok()) return fio.status();
    io_ = std::move(*fio);
  }
  // The packet trace sees what leaves before the injected faults and what
  // arrives after them, as a capture at the NIC would.
  if (const char* pcap = std::getenv("UROCE_PCAP"); pcap && *pcap) {
    auto count = net::pcap_count_from_env();
    if (!count.ok()) return count.status();
    auto pio = net::PcapIo::wrap(std::move(io_), pcap, *count);
    if (!pio.ok()) return pio.status();
    io_ = std::move(*pio);
    // A trace shows every byte we send as the RoCEv2 packets that carry it:
    // no one-copy requests while tracing (a peer's still show, as
    // UROCE_COPY_WRITE).
    if (copy_send_)
      UROCE_LOG(info, "device %s: UROCE_PCAP: WRITEs and READs go as packets while tracing", cfg_.name.c_str());
    copy_send_ = false;
  }
  io_->advertise((copy_serve_ ? net::kRingTakesCopy | net::kRingHonoursGate : 0) | net::kRingTakesNoIcrc);
  local_ = io_->local();
  tx_.set_gso_max(io_->gso_max_segments());
  tx_.set_defer_icrc(io_->defers_icrc());
  io_->use_clock(&now_);  // (as of the last receive batch or poll)
  if (net::stats_enabled()) {
    std::vector<std::string_view> names;
    counters_.for_each([&](const char* n, uint64_t) { names.emplace_back(n); });
    auto pub = net::StatsPublisher::create(
        {cfg_.name, local_.to_string(), faults_ ? to_string(*faults_) : std::string()}, names);
    if (pub.ok())
      stats_ = std::move(*pub);
    else
      UROCE_LOG(warn, "counters not published: %s", pub.status().to_string().c_str());
  }
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
    join_quiet_thread(thread_);
  }
  log_counters("closed");
  stats_.reset();  // unlinks the stats file
  if (epfd_ >= 0) ::close(epfd_);
  if (kick_fd_ >= 0) ::close(kick_fd_);
  if (xrc_bell_fd_ >= 0) ::close(xrc_bell_fd_.load());
  if (registry_) (void)registry_->unpublish(local_.addr, local_.port);
  std::lock_guard g(g_nics_mu);
  auto it = nics().find({cfg_.addr, cfg_.port});
  if (it != nics().end() && it->second.expired()) nics().erase(it);
}

Status Nic::attach(QpEngine& qp) {
  std::lock_guard g(mu_);
  auto qpn = qps_->add(qp);
  if (!qpn.ok()) return err::nomem(cfg_.name + ": " + std::string(qpn.status().message()));
  qp.qpn_ = *qpn;
  return {};
}

void Nic::detach(QpEngine& qp) noexcept {
  detach_mcast_all(qp.qpn());
  qps_->remove(qp.qpn(), qp);
  detach_lists(qp);
}

Status Nic::attach_mcast(const IpAddr& group, uint32_t qpn) {
  std::lock_guard g(mu_);
  if (!mcast_.contains(group) && mcast_.size() >= kMaxMcastGroups)
    return err::nomem("the device is in " + std::to_string(kMaxMcastGroups) + " multicast groups (max_mcast_grp)");
  auto& qps = mcast_[group];
  if (qps.size() >= kMaxMcastQpAttach)
    return err::nomem(std::to_string(kMaxMcastQpAttach) + " QPs are attached to " + group.to_string() +
                      " (max_mcast_qp_attach)");
  if (std::find(qps.begin(), qps.end(), qpn) != qps.end())
    return err::inval("QP " + std::to_string(qpn) + " is already attached to " + group.to_string());
  if (qps.empty()) {
    const int old = io_->wait_fd();
    if (Status s = io_->join_group(group); !s.ok()) {
      mcast_.erase(group);
      return s;
    }
    if (const int now = io_->wait_fd(); now != old && epfd_ >= 0) {
      // The thread sleeps on the old fd, perhaps: it re-arms the new one.
      (void)::epoll_ctl(epfd_, EPOLL_CTL_DEL, old, nullptr);
      epoll_event ev{};
      ev.data.u32 = 1;
      (void)::epoll_ctl(epfd_, EPOLL_CTL_ADD, now, &ev);
      rearm_.store(true, std::memory_order_release);
      kick();
    }
  }
  qps.push_back(qpn);
  ++counters_.mcast_attaches;
  return {};
}

void Nic::leave_if_empty(const IpAddr& group) noexcept {
  auto it = mcast_.find(group);
  if (it == mcast_.end() || !it->second.empty()) return;
  (void)io_->leave_group(group);
  mcast_.erase(it);
}

Status Nic::detach_mcast(const IpAddr& group, uint32_t qpn) {
  std::lock_guard g(mu_);
  auto it = mcast_.find(group);
  if (it == mcast_.end() || std::erase(it->second, qpn) == 0)
    return err::inval("QP " + std::to_string(qpn) + " is not attached to " + group.to_string());
  leave_if_empty(group);
  return {};
}

void Nic::detach_mcast_all(uint32_t qpn) noexcept {
  std::vector<IpAddr> emptied;
  for (auto& [group, qps] : mcast_)
    if (std::erase(qps, qpn) && qps.empty()) emptied.push_back(group);
  for (const IpAddr& group : emptied) leave_if_empty(group);
}

void Nic::detach_lists(QpEngine& qp) noexcept {
  path_unbind(*this, qp);
  if (qp.in_ready_) std::erase(ready_, &qp);
  if (qp.in_lazy_) std::erase(lazy_, &qp);
  qp.in_ready_ = qp.in_lazy_ = false;
}

// ---------------------------------------------------------------- counters

void Nic::log_counters(const char* why) const noexcept {
  if (!log::enabled(log::Level::debug)) return;
  std::string line;
  const Counters c = snapshot();
  c.for_each([&](const char* name, uint64_t v) {
    if (v != 0) line += std::string(" ") + name + "=" + std::to_string(v);
  });
  UROCE_LOG(debug, "%s: %s; counters:%s", cfg_.name.c_str(), why, line.c_str());
}

Counters Nic::snapshot() const noexcept {
  Counters c = counters_;
  const net::IoStats s = io_->stats();
  c.rx_kernel_drops = s.rx_dropped;
  c.fault_tx_dropped = s.tx_faults.dropped;
  c.fault_tx_duplicated = s.tx_faults.duplicated;
  c.fault_tx_reordered = s.tx_faults.reordered;
  c.fault_tx_delayed = s.tx_faults.delayed;
  c.fault_tx_corrupted = s.tx_faults.corrupted;
  c.fault_tx_ce_marked = s.tx_faults.ce_marked;
  c.fault_rx_ce_marked = s.rx_faults.ce_marked;
  c.fault_rx_dropped = s.rx_faults.dropped;
  c.fault_rx_duplicated = s.rx_faults.duplicated;
  c.fault_rx_reordered = s.rx_faults.reordered;
  c.fault_rx_delayed = s.rx_faults.delayed;
  c.fault_rx_corrupted = s.rx_faults.corrupted;
  c.shm_tx_packets = s.shm_tx_packets;
  c.shm_rx_packets = s.shm_rx_packets;
  c.shm_tx_full = s.shm_tx_full;
  c.shm_rx_skipped = s.shm_rx_skipped;
  c.doorbells_tx = s.doorbells_tx;
  c.doorbells_rx = s.doorbells_rx;
  return c;
}

std::string Nic::stats_path() const { return stats_ ? stats_->path() : std::string(); }

void Nic::publish_stats() noexcept {
  if (!stats_) return;
  const Counters c = snapshot();
  uint64_t vals[sizeof(Counters) / sizeof(uint64_t)];
  size_t n = 0;
  c.for_each([&](const char*, uint64_t v) { vals[n++] = v; });
  stats_->publish(std::span<const uint64_t>(vals, n));
  stats_at_ = now_;
  stats_mark_ = counters_.rx_packets + counters_.tx_packets + counters_.tx_errors + counters_.completions +
                counters_.req_timeouts;
}

Clock::time_point Nic::maybe_publish_stats() noexcept {
  if (!stats_) return Clock::time_point::max();
  const uint64_t mark = counters_.rx_packets + counters_.tx_packets + counters_.tx_errors + counters_.completions +
                        counters_.req_timeouts;
  if (mark == stats_mark_) return Clock::time_point::max();  // nothing new
  const Clock::time_point due = stats_at_ + kStatsInterval;
  if (now_ < due) return due;
  publish_stats();
  return Clock::time_point::max();
}

// ------------------------------------------------------------------ timers

void Nic::arm_timer(QpEngine& qp, Clock::time_point when) noexcept {
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
    QpEngine* qp = find_qp(t.qpn);
    if (!qp || !qp->timer_queued_ || qp->timer_when_ != t.when) continue;
    qp->timer_queued_ = false;
    requester_on_timer(*this, *qp);
  }
  pump();
}

}  // namespace uroce::transport
