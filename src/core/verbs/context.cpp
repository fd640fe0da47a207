#include "verbs/context.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "common/quiet_thread.hpp"
#include "transport/nic.hpp"
#include "verbs/cq.hpp"
#include "verbs/mr.hpp"
#include "verbs/qp.hpp"
#include "verbs/srq.hpp"

namespace uroce::verbs {
namespace {

// MTU of the interface holding `addr` (any address of a loopback
// interface's subnet counts: all of 127.0.0.0/8 is local); 0 if none does.
uint32_t interface_mtu(const IpAddr& addr) {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return 0;
  auto sa_len = [](const sockaddr* sa) -> socklen_t {
    return sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  };
  const char* name = nullptr;
  for (ifaddrs* i = ifs; i && !name; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    auto ep = Endpoint::from_sockaddr(i->ifa_addr, sa_len(i->ifa_addr));
    if (!ep) continue;
    if (ep->addr == addr) {
      name = i->ifa_name;
    } else if ((i->ifa_flags & IFF_LOOPBACK) && i->ifa_netmask && addr.is_v4() && ep->addr.is_v4()) {
      auto mask = Endpoint::from_sockaddr(i->ifa_netmask, sa_len(i->ifa_netmask));
      if (mask && (addr.v4() & mask->addr.v4()) == (ep->addr.v4() & mask->addr.v4())) name = i->ifa_name;
    }
  }
  uint32_t mtu = 0;
  if (name) {
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq req{};
    std::strncpy(req.ifr_name, name, IFNAMSIZ - 1);
    if (fd >= 0 && ::ioctl(fd, SIOCGIFMTU, &req) == 0) mtu = uint32_t(req.ifr_mtu);
    if (fd >= 0) ::close(fd);
  }
  freeifaddrs(ifs);
  return mtu;
}

// The largest IB MTU whose packets (IP + UDP + BTH + RETH/ImmDt + ICRC, at
// most 100 bytes more) fit the interface MTU unfragmented.
uint32_t roce_mtu(uint32_t if_mtu) {
  uint32_t m = 4096;
  while (m > 256 && m + 100 > if_mtu) m /= 2;
  return m;
}

}  // namespace

Result<std::vector<DeviceConfig>> devices_from_env() {
  const char* addrs = std::getenv("UROCE_ADDR");
  const char* port = std::getenv("UROCE_PORT");
  uint16_t udp_port = 4791;
  if (port && *port) {
    char* end;
    long p = std::strtol(port, &end, 10);
    if (*end || p < 1 || p > 65535) return err::inval(std::string("UROCE_PORT=") + port + " is not a UDP port");
    udp_port = uint16_t(p);
  }
  std::vector<DeviceConfig> out;
  std::stringstream ss(addrs && *addrs ? addrs : "127.0.0.1");
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto a = IpAddr::parse(item);
    if (!a) return err::inval("UROCE_ADDR: '" + item + "' is not an IPv4 or IPv6 address");
    DeviceConfig d;
    d.name = "uroce" + std::to_string(out.size());
    d.gids.push_back(*a);
    d.udp_port = udp_port;
    out.push_back(std::move(d));
  }
  if (out.empty()) return err::inval("UROCE_ADDR names no address");
  return out;
}

uint64_t node_guid(const DeviceConfig& cfg) noexcept {
  if (cfg.gids.empty()) return 0;
  // A stable GUID from the address: 02:00:00 (locally administered) + low bytes.
  const auto& b = cfg.gids[0].bytes();
  return 0x0200000000000000ull | uint64_t(b[12]) << 24 | uint64_t(b[13]) << 16 | uint64_t(b[14]) << 8 | b[15] |
         uint64_t(cfg.udp_port) << 32;
}

namespace {

// The object counts of each device (NIC) in the process, made by the first
// context on it and shared by the others.
std::shared_ptr<DeviceResources> resources_of(const transport::Nic* nic, const DeviceAttr& limits) {
  static std::mutex mu;
  static auto* counts = new std::map<const transport::Nic*, std::weak_ptr<DeviceResources>>;
  std::lock_guard g(mu);
  std::erase_if(*counts, [](const auto& kv) { return kv.second.expired(); });
  auto& w = (*counts)[nic];
  auto r = w.lock();
  if (!r) {
    r = std::make_shared<DeviceResources>(limits);
    w = r;
  }
  return r;
}

}  // namespace

Result<std::unique_ptr<Context>> Context::open(const DeviceConfig& cfg) {
  if (cfg.gids.empty()) return err::inval("device " + cfg.name + " has no address");
  DeviceConfig c = cfg;
  if (c.mtu == 0 && c.io_factory) c.mtu = 4096;
  if (c.mtu == 0) {
    const uint32_t ifm = interface_mtu(c.gids[0]);
    if (ifm == 0) return err::from_errno(EADDRNOTAVAIL, c.gids[0].to_string() + " is not an address of this host");
    c.mtu = roce_mtu(ifm);
  }
  transport::NicConfig nc;
  nc.name = c.name;
  nc.addr = c.gids[0];
  nc.port = c.udp_port;
  nc.mtu = c.mtu;
  nc.faults = c.faults;
  nc.congestion = c.congestion;
  nc.shm = c.shm;
  nc.shm_copy = c.shm_copy;
  auto nic = c.io_factory ? transport::Nic::create(nc, c.io_factory) : transport::Nic::get(nc);
  if (!nic.ok()) return nic.status();
  auto count = EventCount::create("async events");
  if (!count.ok()) return count.status();
  return std::unique_ptr<Context>(new Context(std::move(c), std::move(*nic), std::move(*count)));
}

Context::Context(DeviceConfig cfg, std::shared_ptr<transport::Nic> nic, EventCount async_count)
    : cfg_(std::move(cfg)), nic_(std::move(nic)), async_count_(std::move(async_count)) {
  DeviceAttr& d = dev_attr_;
  d.max_qp_wr = Qp::kMaxWr;
  d.max_sge = Qp::kMaxSge;
  d.max_cq = 1u << 16;
  d.max_cqe = Cq::kMaxCqe;
  d.max_mr = MrTable::kMaxMrs - 1;
  d.max_qp_rd_atom = Qp::kMaxRdAtomic;
  d.max_qp_init_rd_atom = Qp::kMaxRdAtomic;
  d.max_srq = 1u << 16;
  d.max_srq_wr = Srq::kMaxWr;
  d.max_srq_sge = Srq::kMaxSge;
  d.max_inline = Qp::kMaxInline;
  // The software-device vendor ID rxe reports (no IEEE OUI of ours);
  // programs and tests take vendor_id 0 for "no device".
  d.vendor_id = 0xFFFFFF;
  d.node_guid = node_guid(cfg_);
  d.sys_image_guid = d.node_guid;
  port_attr_.active_mtu_bytes = cfg_.mtu;
  port_attr_.max_mtu_bytes = 4096;
  port_attr_.gid_tbl_len = uint32_t(cfg_.gids.size());
  resources_ = resources_of(nic_.get(), dev_attr_);
}

Context::~Context() = default;

void Context::post_async_event(const AsyncEvent& ev) noexcept {
  std::lock_guard g(async_mu_);
  async_.push_back(ev);
  async_count_.add();
}

void Context::forget_async_events(const void* element) noexcept {
  std::lock_guard g(async_mu_);
  for (auto it = async_.begin(); it != async_.end();) {
    if (it->element != element) {
      ++it;
      continue;
    }
    it = async_.erase(it);
    async_count_.take();
  }
}

Result<AsyncEvent> Context::get_async_event(const std::function<void(const AsyncEvent&)>& delivered, int timeout_ms) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  for (;;) {
    {
      std::lock_guard g(async_mu_);
      if (!async_.empty()) {
        AsyncEvent ev = async_.front();
        async_.pop_front();
        async_count_.take();
        if (delivered) delivered(ev);
        return ev;
      }
    }
    // Nothing queued: what a read() of the fd would do, without reading it
    // outside the lock (a count read there could be a forgotten event's).
    if (async_count_.non_blocking()) return err::again("no async event");
    int wait = -1;
    if (timeout_ms >= 0) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0) return err::from_errno(ETIMEDOUT, "no async event");
      wait = int(left);
    }
    pollfd p{async_count_.fd(), POLLIN, 0};
    if (::poll(&p, 1, wait) < 0 && !(errno == EINTR && restart_after_signal()))
      return err::from_errno(errno, "waiting for an async event");
  }
}

}  // namespace uroce::verbs
