#include "net/udp_io.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/log.hpp"
#include "net/interface_index.hpp"
#include "net/proc_info.hpp"

namespace uroce::net {
namespace {

// Extra room in each receive buffer: a datagram longer than max_payload is
// still seen whole up to here, and MSG_TRUNC flags anything longer.
constexpr size_t kRxMargin = 64;
constexpr size_t kRxAlign = 64;
// A full socket buffer (EAGAIN / ENOBUFS) is retried this many times, each
// after a poll for POLLOUT of at most kTxRetryWaitNs.
constexpr int kTxRetries = 8;
constexpr long kTxRetryWaitNs = 50'000;

constexpr size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

struct alignas(cmsghdr) TxControl {
  uint8_t b[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(uint16_t))];  // TOS + UDP_SEGMENT
};
// A GRO datagram holds up to 64 KiB.
constexpr size_t kGroBufSize = 65536;
struct alignas(cmsghdr) RxControl {
  // pktinfo + TOS/TCLASS + TTL/HOPLIMIT + drop count + GRO size, and room for one more.
  uint8_t b[CMSG_SPACE(sizeof(in6_pktinfo)) + 5 * CMSG_SPACE(sizeof(int))];
};

struct FreeDeleter {
  void operator()(uint8_t* p) const noexcept { std::free(p); }
};

// "bind 127.0.0.1:4791: Address already in use"; pass errno as it was.
Status sys_error(int e, const std::string& what) { return err::from_errno(e, what + ": " + std::strerror(e)); }

// A port held by another user's socket is theirs: moving to another port
// would leave remote peers talking to them (and them answering as us).
// Only our own processes' sockets (several uroce processes of one user on
// one address) send us to another port.
Status not_held_by_others(const Endpoint& want) {
  for (uid_t uid : udp_port_holders(want.addr, want.port)) {
    if (uid == ::geteuid()) continue;
    return err::from_errno(EADDRINUSE, "bind " + want.to_string() +
                                           ": the port is held by a socket of another user (uid " +
                                           std::to_string(uid) +
                                           "); uroce will not move to another port, where its peers would not find it: "
                                           "free the port, or choose another with UROCE_PORT");
  }
  return {};
}

Status set_int(int fd, int level, int name, int value, const char* what) {
  if (::setsockopt(fd, level, name, &value, sizeof value) != 0) {
    const int e = errno;
    return sys_error(e, std::string("setsockopt(") + what + ")");
  }
  return {};
}

// Asks for `bytes` of socket buffer, with FORCE first (allowed for root /
// CAP_NET_ADMIN, beyond rmem_max), then the capped option; returns the size
// in effect.
int set_buffer(int fd, int force_opt, int opt, int bytes) {
  if (bytes > 0 && ::setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof bytes) != 0)
    (void)::setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof bytes);
  int v = 0;
  socklen_t len = sizeof v;
  (void)::getsockopt(fd, SOL_SOCKET, opt, &v, &len);
  return v;
}

}  // namespace

// What recvmmsg said about one datagram.
struct RxMeta {
  Endpoint src;
  IpAddr dst;
  uint8_t tos = 0, ttl = 0;
  size_t len = 0;
  size_t gso = 0;  // GRO segment size, 0 for a plain datagram
  bool truncated = false;
};

struct UdpIo::Rings {
  std::array<mmsghdr, kMaxBatch> tx_msgs{};
  std::array<iovec, 3 * kMaxBatch> tx_iov{};  // a batch has at most kMaxBatch packets
  std::array<uint16_t, kMaxBatch> tx_pkts{};  // packets in each message (GSO trains)
  std::array<sockaddr_storage, kMaxBatch> tx_addr{};
  std::array<TxControl, kMaxBatch> tx_ctl{};
  std::array<RxMeta, kMaxBatch> rx_meta{};

  std::array<mmsghdr, kMaxBatch> rx_msgs{};
  std::array<iovec, kMaxBatch> rx_iov{};
  std::array<sockaddr_storage, kMaxBatch> rx_addr{};
  std::array<RxControl, kMaxBatch> rx_ctl{};
  std::unique_ptr<uint8_t, FreeDeleter> rx_bufs;  // batch x rx_buf_size, page aligned
};

UdpIo::~UdpIo() {
  // Our copy of the group's socket goes before the group: a group that
  // leaves with its last member frees the port for the next founder.
  fd_.reset();
}

namespace {

// The options every socket of ours has (also each socket of a shared
// port's group, set by the process that founds it).
Status configure_socket(int fd, bool v6, const UdpConfig& cfg) {
  if (v6) {
    UROCE_TRY(set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1, "IPV6_V6ONLY"));
    UROCE_TRY(set_int(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER"));
    UROCE_TRY(set_int(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1, "IPV6_RECVPKTINFO"));
    UROCE_TRY(set_int(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS"));
    UROCE_TRY(set_int(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1, "IPV6_RECVHOPLIMIT"));
  } else {
    UROCE_TRY(set_int(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO, "IP_MTU_DISCOVER"));
    UROCE_TRY(set_int(fd, IPPROTO_IP, IP_PKTINFO, 1, "IP_PKTINFO"));
    UROCE_TRY(set_int(fd, IPPROTO_IP, IP_RECVTOS, 1, "IP_RECVTOS"));
    UROCE_TRY(set_int(fd, IPPROTO_IP, IP_RECVTTL, 1, "IP_RECVTTL"));
  }
  UROCE_TRY(set_int(fd, SOL_SOCKET, SO_RXQ_OVFL, 1, "SO_RXQ_OVFL"));
  if (cfg.gso) {
    int seg = 0;
    socklen_t sl = sizeof seg;
    if (::getsockopt(fd, IPPROTO_UDP, UDP_SEGMENT, &seg, &sl) == 0)
      (void)set_int(fd, IPPROTO_UDP, UDP_GRO, 1, "UDP_GRO");
  }
  (void)set_buffer(fd, SO_RCVBUFFORCE, SO_RCVBUF, cfg.rcvbuf);
  (void)set_buffer(fd, SO_SNDBUFFORCE, SO_SNDBUF, cfg.sndbuf);
  return {};
}

// Whether GRO is on for `fd` (and so GSO usable).
bool gro_on(int fd) {
  int seg = 0, gro = 0;
  socklen_t sl = sizeof seg, gl = sizeof gro;
  return ::getsockopt(fd, IPPROTO_UDP, UDP_SEGMENT, &seg, &sl) == 0 &&
         ::getsockopt(fd, IPPROTO_UDP, UDP_GRO, &gro, &gl) == 0 && gro;
}

}  // namespace

Result<std::unique_ptr<UdpIo>> UdpIo::open(const UdpConfig& cfg) {
  if (cfg.batch == 0 || cfg.batch > kMaxBatch)
    return err::inval("UdpIo batch " + std::to_string(cfg.batch) + " not in 1.." + std::to_string(kMaxBatch));
  if (cfg.max_payload < 64 || cfg.max_payload > kMaxUdpPayload)
    return err::inval("UdpIo max_payload " + std::to_string(cfg.max_payload) + " not in 64.." +
                      std::to_string(kMaxUdpPayload));

  std::unique_ptr<UdpIo> io(new UdpIo());
  io->v6_ = !cfg.local.is_v4();
  io->batch_ = cfg.batch;
  io->rx_dirty_ = io->batch_;
  io->max_payload_ = cfg.max_payload;
  const Endpoint want{cfg.local, cfg.port};
  const auto configure = [&](int fd) { return configure_socket(fd, io->v6_, cfg); };

  // The port shared with this user's other processes on the address.
  if (cfg.share_through && cfg.port != 0) {
    auto group = PortGroup::join(cfg.share_through, want, configure);
    if (group.ok()) {
      io->fd_.reset(::fcntl((*group)->fd(), F_DUPFD_CLOEXEC, 0));
      if (!io->fd_.valid()) return sys_error(errno, "dup of the port group's socket");
      io->group_ = std::move(*group);
    } else {
      UROCE_LOG(info, "udp: %s not shared (%s): a socket of our own", want.to_string().c_str(),
                group.status().to_string().c_str());
    }
  }
  if (!io->fd_.valid()) {
    io->fd_.reset(::socket(io->v6_ ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP));
    if (!io->fd_.valid()) {
      const int e = errno;
      return sys_error(e, io->v6_ ? "socket(AF_INET6)" : "socket(AF_INET)");
    }
    UROCE_TRY(configure(io->fd_.get()));
  }
  const int fd = io->fd_.get();
  io->gso_ = cfg.gso && gro_on(fd);
  io->rx_buf_size_ = round_up((io->gso_ ? kGroBufSize : cfg.max_payload) + kRxMargin, kRxAlign);
  {
    int ttl = 0;
    socklen_t tl = sizeof ttl;
    if (::getsockopt(fd, io->v6_ ? IPPROTO_IPV6 : IPPROTO_IP, io->v6_ ? IPV6_UNICAST_HOPS : IP_TTL, &ttl, &tl) == 0 &&
        ttl > 0 && ttl < 256)
      io->ttl_ = uint8_t(ttl);
  }
  io->rcvbuf_ = set_buffer(fd, SO_RCVBUFFORCE, SO_RCVBUF, 0);
  io->sndbuf_ = set_buffer(fd, SO_SNDBUFFORCE, SO_SNDBUF, 0);

  sockaddr_storage ss;
  if (!io->group_ && ::bind(fd, reinterpret_cast<sockaddr*>(&ss), want.to_sockaddr(ss)) != 0) {
    const int e = errno;
    if (e == EADDRINUSE && cfg.port != 0) UROCE_TRY(not_held_by_others(want));
    if (e != EADDRINUSE || !cfg.port_fallback || cfg.port == 0) return sys_error(e, "bind " + want.to_string());
    Endpoint any{cfg.local, 0};
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), any.to_sockaddr(ss)) != 0) {
      const int e2 = errno;
      return sys_error(e2, "bind " + any.to_string());
    }
  }
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    const int e = errno;
    return sys_error(e, "getsockname");
  }
  auto local = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len);
  if (!local) return err::io("getsockname: unexpected address family");
  io->local_ = *local;
  if (io->local_.port != cfg.port && cfg.port != 0)
    UROCE_LOG(info, "udp: %s is taken, bound %s instead", want.to_string().c_str(), io->local_.to_string().c_str());

  // Preallocate everything the data path touches.
  io->r_ = std::make_unique<Rings>();
  Rings& r = *io->r_;
  const size_t total = round_up(io->rx_buf_size_ * io->batch_, 4096);
  r.rx_bufs.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, total)));
  if (!r.rx_bufs) return err::nomem("UdpIo: " + std::to_string(total) + " bytes of receive buffers");
  std::memset(r.rx_bufs.get(), 0, total);
  for (size_t i = 0; i < kMaxBatch; ++i) {
    r.tx_msgs[i].msg_hdr.msg_name = &r.tx_addr[i];
    if (i >= io->batch_) continue;
    r.rx_iov[i] = {r.rx_bufs.get() + i * io->rx_buf_size_, io->rx_buf_size_};
    msghdr& rx = r.rx_msgs[i].msg_hdr;
    rx.msg_name = &r.rx_addr[i];
    rx.msg_iov = &r.rx_iov[i];
    rx.msg_iovlen = 1;
    rx.msg_control = r.rx_ctl[i].b;
  }
  return io;
}

bool UdpIo::wait_writable() noexcept {
  pollfd p{fd_.get(), POLLOUT, 0};
  timespec ts{0, kTxRetryWaitNs};
  return ::ppoll(&p, 1, &ts, nullptr) >= 0 || errno == EINTR;
}

size_t UdpIo::flush(size_t n) noexcept {
  Rings& r = *r_;
  size_t i = 0, sent = 0;
  int tries = 0;
  while (i < n) {
    int got = ::sendmmsg(fd_.get(), &r.tx_msgs[i], unsigned(n - i), 0);
    if (got > 0) {
      for (size_t j = i; j < i + size_t(got); ++j) {
        stats_.tx_bytes += r.tx_msgs[j].msg_len;
        sent += r.tx_pkts[j];
      }
      i += size_t(got);
      tries = 0;
      continue;
    }
    const int e = got == 0 ? EAGAIN : errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS) {
      if (tries++ < kTxRetries && wait_writable()) continue;
      UROCE_LOG(debug, "udp: send buffer full (%s), dropping %zu messages", std::strerror(e), n - i);
      for (size_t j = i; j < n; ++j) stats_.tx_errors += r.tx_pkts[j];
      congested_ = true;
      break;
    }
    // The kernel refused this one packet (EPERM: a firewall DROP, EMSGSIZE,
    // ENETUNREACH, ...): count it and go on with the next.
    UROCE_LOG(debug, "udp: sendmmsg: %s", std::strerror(e));
    stats_.tx_errors += r.tx_pkts[i];
    ++i;
  }
  stats_.tx_packets += sent;
  return sent;
}

size_t UdpIo::send_batch(std::span<const TxPacket> pkts) noexcept {
  finish_icrcs(pkts);
  Rings& r = *r_;
  size_t n = 0, sent = 0, k = 0, iov_used = 0;
  congested_ = false;
  while (k < pkts.size() && !congested_) {
    const TxPacket& p = pkts[k];
    // A GSO train: the packets this one heads (or just itself).
    size_t segs = 1;
    if (gso_ && p.gso_segments > 1) segs = std::min<size_t>(p.gso_segments, pkts.size() - k);
    bool ok = true;
    for (size_t j = k; j < k + segs; ++j)
      if (pkts[j].dst.addr.is_v4() == v6_ || pkts[j].size() > max_payload_) ok = false;
    if (!ok) {  // wrong family / too big: the whole train is refused
      stats_.tx_errors += segs;
      k += segs;
      continue;
    }
    if (iov_used + 3 * segs > r.tx_iov.size()) {  // the iovec ring is full: send what we have
      sent += flush(n);
      n = 0;
      iov_used = 0;
      if (congested_) break;
    }
    msghdr& h = r.tx_msgs[n].msg_hdr;
    h.msg_namelen = p.dst.to_sockaddr(r.tx_addr[n]);
    iovec* iov = &r.tx_iov[iov_used];
    h.msg_iov = iov;
    size_t c = 0;
    for (size_t j = k; j < k + segs; ++j)
      for (auto part : {pkts[j].head, pkts[j].body, pkts[j].tail})
        if (!part.empty()) iov[c++] = {const_cast<uint8_t*>(part.data()), part.size()};
    h.msg_iovlen = c;
    iov_used += c;
    r.tx_pkts[n] = uint16_t(segs);
    h.msg_control = r.tx_ctl[n].b;
    h.msg_controllen = sizeof r.tx_ctl[n].b;
    size_t ctl = 0;
    cmsghdr* cm = CMSG_FIRSTHDR(&h);
    if (p.tos != 0) {
      cm->cmsg_level = v6_ ? IPPROTO_IPV6 : IPPROTO_IP;
      cm->cmsg_type = v6_ ? IPV6_TCLASS : IP_TOS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      const int tos = p.tos;
      std::memcpy(CMSG_DATA(cm), &tos, sizeof tos);
      ctl += CMSG_SPACE(sizeof(int));
      cm = CMSG_NXTHDR(&h, cm);
    }
    if (segs > 1) {
      cm->cmsg_level = IPPROTO_UDP;
      cm->cmsg_type = UDP_SEGMENT;
      cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const uint16_t seg = uint16_t(p.size());
      std::memcpy(CMSG_DATA(cm), &seg, sizeof seg);
      ctl += CMSG_SPACE(sizeof(uint16_t));
    }
    h.msg_controllen = ctl;
    if (ctl == 0) h.msg_control = nullptr;
    k += segs;
    if (++n == batch_) {
      sent += flush(n);
      n = 0;
      iov_used = 0;
    }
  }
  if (n > 0 && !congested_) sent += flush(n);
  // After a give-up, what was neither sent nor tried is dropped too.
  if (congested_) stats_.tx_errors += pkts.size() - k;
  return sent;
}

void UdpIo::parse_rx(size_t i) noexcept {
  Rings& r = *r_;
  const msghdr& h = r.rx_msgs[i].msg_hdr;
  RxMeta& m = r.rx_meta[i];
  m.len = r.rx_msgs[i].msg_len;
  m.truncated = (h.msg_flags & MSG_TRUNC) != 0;
  auto src = Endpoint::from_sockaddr(static_cast<const sockaddr*>(h.msg_name), h.msg_namelen);
  m.src = src ? *src : Endpoint{};
  m.dst = local_.addr;
  m.tos = m.ttl = 0;
  m.gso = 0;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&h); cm; cm = CMSG_NXTHDR(const_cast<msghdr*>(&h), cm)) {
    const unsigned char* d = CMSG_DATA(cm);
    int v = 0;
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_RXQ_OVFL) {
      uint32_t drops;
      std::memcpy(&drops, d, sizeof drops);
      stats_.rx_dropped = drops;
    } else if (cm->cmsg_level == IPPROTO_UDP && cm->cmsg_type == UDP_GRO) {
      std::memcpy(&v, d, sizeof v);
      m.gso = v > 0 ? size_t(v) : 0;
    } else if (cm->cmsg_level == IPPROTO_IP) {
      if (cm->cmsg_type == IP_PKTINFO) {
        in_pktinfo pi;
        std::memcpy(&pi, d, sizeof pi);
        m.dst = IpAddr::from_in(pi.ipi_addr);
      } else if (cm->cmsg_type == IP_TOS) {
        m.tos = d[0];
      } else if (cm->cmsg_type == IP_TTL) {
        std::memcpy(&v, d, sizeof v);
        m.ttl = uint8_t(v);
      }
    } else if (cm->cmsg_level == IPPROTO_IPV6) {
      if (cm->cmsg_type == IPV6_PKTINFO) {
        in6_pktinfo pi;
        std::memcpy(&pi, d, sizeof pi);
        m.dst = IpAddr::from_in6(pi.ipi6_addr);
      } else if (cm->cmsg_type == IPV6_TCLASS || cm->cmsg_type == IPV6_HOPLIMIT) {
        std::memcpy(&v, d, sizeof v);
        (cm->cmsg_type == IPV6_TCLASS ? m.tos : m.ttl) = uint8_t(v);
      }
    }
  }
  stats_.rx_bytes += m.len;
}

size_t UdpIo::recv_batch(std::span<RxPacket> out) noexcept {
  if (out.empty()) return 0;
  if (const size_t n = recv_some(out, fd_.get()); n > 0) return n;
  for (const McastSocket& m : mcast_)  // then the multicast groups
    if (const size_t n = recv_some(out, m.fd.get()); n > 0) return n;
  return 0;
}

Status UdpIo::join_group(const IpAddr& group) {
  if (!group.is_multicast()) return err::inval(group.to_string() + " is not a multicast address");
  if (group.is_v4() != local_.addr.is_v4())
    return err::inval("multicast group " + group.to_string() + " is not of the device's address family");
  for (const McastSocket& m : mcast_)
    if (m.group == group) return {};
  UniqueFd fd(::socket(v6_ ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP));
  if (!fd.valid()) return err::from_errno(errno, "socket for multicast " + group.to_string());
  UdpConfig cfg;
  cfg.gso = false;
  UROCE_TRY(configure_socket(fd.get(), v6_, cfg));
  UROCE_TRY(set_int(fd.get(), SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR"));
  const std::string what = "multicast " + group.to_string() + " on " + local_.addr.to_string();
  if (v6_) {
    UROCE_TRY(set_int(fd.get(), IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0, "IPV6_MULTICAST_ALL"));
    const unsigned ifindex = interface_index(local_.addr);
    ipv6_mreq mr{};
    mr.ipv6mr_multiaddr = group.to_in6();
    mr.ipv6mr_interface = ifindex;
    if (::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, &mr, sizeof mr) != 0)
      return err::from_errno(errno, what + ": IPV6_ADD_MEMBERSHIP: " + std::strerror(errno));
  } else {
    UROCE_TRY(set_int(fd.get(), IPPROTO_IP, IP_MULTICAST_ALL, 0, "IP_MULTICAST_ALL"));
    ip_mreq mr{};
    mr.imr_multiaddr = group.to_in();
    mr.imr_interface = local_.addr.to_in();
    if (::setsockopt(fd.get(), IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof mr) != 0)
      return err::from_errno(errno, what + ": IP_ADD_MEMBERSHIP: " + std::strerror(errno));
  }
  sockaddr_storage ss;
  const Endpoint at{group, kRoceV2Port};
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), at.to_sockaddr(ss)) != 0)
    return err::from_errno(errno, what + ": bind " + at.to_string() + ": " + std::strerror(errno));
  if (!wait_ep_.valid()) {
    UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
    if (!ep.valid()) return err::from_errno(errno, "epoll_create1 for multicast");
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd_.get(), &ev) != 0) return err::from_errno(errno, "epoll_ctl");
    wait_ep_ = std::move(ep);
    wait_ep_fd_.store(wait_ep_.get(), std::memory_order_release);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (::epoll_ctl(wait_ep_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) return err::from_errno(errno, "epoll_ctl");
  mcast_.push_back({group, std::move(fd)});
  return {};
}

Status UdpIo::leave_group(const IpAddr& group) {
  for (auto it = mcast_.begin(); it != mcast_.end(); ++it)
    if (it->group == group) {
      if (rx_cur_ < rx_msgs_) rx_cur_ = rx_msgs_;  // (buffered datagrams may be of this socket: dropped)
      rx_pending_.store(false, std::memory_order_release);
      (void)::epoll_ctl(wait_ep_.get(), EPOLL_CTL_DEL, it->fd.get(), nullptr);
      mcast_.erase(it);  // closing the socket leaves the group
      return {};
    }
  return err::inval("multicast group " + group.to_string() + " was not joined");
}

bool UdpIo::host_local(const IpAddr& dst) noexcept {
  if (dst.is_multicast() || dst.is_unspecified()) return false;
  const auto now = std::chrono::steady_clock::now();
  for (const LocalAnswer& a : local_answers_)
    if (a.addr == dst && a.at != decltype(now){} && now - a.at < std::chrono::seconds(1)) return a.local;
  const bool local = interface_index(dst) != 0;
  std::move_backward(local_answers_.begin(), local_answers_.end() - 1, local_answers_.end());
  local_answers_[0] = LocalAnswer{dst, local, now};
  return local;
}

size_t UdpIo::recv_some(std::span<RxPacket> out, int fd) noexcept {
  Rings& r = *r_;
  if (rx_cur_ == rx_msgs_) {  // everything handed out: read more
    // Only the headers the kernel wrote to need their lengths back: an empty
    // busy poll costs the system call alone, not a pass over the batch.
    for (size_t i = 0; i < rx_dirty_; ++i) {
      msghdr& h = r.rx_msgs[i].msg_hdr;
      h.msg_namelen = sizeof(sockaddr_storage);
      h.msg_controllen = sizeof(RxControl);
      h.msg_flags = 0;
    }
    // MSG_TRUNC: msg_len reports the datagram's real length.
    const int got = ::recvmmsg(fd, r.rx_msgs.data(), unsigned(batch_), MSG_TRUNC, nullptr);
    // (and the one after them, should a failed receive have touched it)
    rx_dirty_ = std::min(batch_, size_t(std::max(got, 0)) + 1);
    if (got <= 0) {  // EAGAIN: nothing waiting
      rx_msgs_ = rx_cur_ = 0;
      return 0;
    }
    for (size_t i = 0; i < size_t(got); ++i) parse_rx(i);
    rx_msgs_ = size_t(got);
    rx_cur_ = rx_off_ = 0;
    rx_seg_ = 0;
  }
  // Hand out packets; a GRO datagram is cut at its segment size.
  size_t n = 0;
  while (n < out.size() && rx_cur_ < rx_msgs_) {
    const RxMeta& m = r.rx_meta[rx_cur_];
    const size_t len = std::min(m.len, rx_buf_size_);
    const size_t seg = m.gso ? std::min(m.gso, len - rx_off_) : len;
    uint8_t* const data = static_cast<uint8_t*>(r.rx_iov[rx_cur_].iov_base) + rx_off_;
    RxPacket& p = out[n++];
    p.data = {data, seg};
    p.truncated = m.truncated || seg > max_payload_;
    p.src = m.src;
    p.dst = m.dst;
    p.tos = m.tos;
    p.ttl = m.ttl;
    p.ipv4_id_hint = rx_seg_;
    p.via_ring = false;
    p.icrc_omitted = false;
    ++stats_.rx_packets;
    if (p.truncated) ++stats_.rx_truncated;
    rx_off_ += seg;
    ++rx_seg_;
    if (rx_off_ >= len || seg == 0) {
      ++rx_cur_;
      rx_off_ = 0;
      rx_seg_ = 0;
    }
  }
  rx_pending_.store(rx_cur_ < rx_msgs_, std::memory_order_release);
  return n;
}

}  // namespace uroce::net
