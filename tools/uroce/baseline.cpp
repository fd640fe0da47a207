// `uroce baseline`: what plain UDP sockets achieve between two processes of
// this host, the floor of any UDP-based stack such as uroce.
//
//   uroce baseline udp-pingpong --wait busy|blocking [--size N] [--ack]
//       A message of N bytes goes as ceil(N / mtu) datagrams (as RoCE
//       segments it at the path MTU) in one sendmmsg (one datagram: sendto
//       and recvfrom, the cheapest calls), and comes back the same way;
//       round-trip time per message.  busy: non-blocking sockets
//       polled in a loop; blocking: the process sleeps in recvmmsg.  --ack
//       adds a 20-byte datagram to each direction's batch, as an RC ACK rides
//       with the reply in uroce (the shape of an RC SEND ping-pong).  --gso
//       (a message of one datagram): each direction's datagrams go as one
//       send with UDP_SEGMENT and come in through UDP_GRO, as uroce sends an
//       answer and the ACK held for it (the ACK the shorter, last segment).
//   uroce baseline udp-rate [--size N] [--batch B] [--gso]
//       One-way datagrams per second: sendmmsg batches of B datagrams (or,
//       --gso, one send of B segments with UDP_SEGMENT, received with
//       UDP_GRO), counted by the receiver.
//
// The server is a copy of this program (/proc/self/exe) on the second CPU,
// the client runs here on the first (--cpus); both use plain syscalls, no
// uroce.  A zero-length datagram ends a run; the server answers it with what
// it counted.
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "commands.hpp"
#include "uroce/version.hpp"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace uroce::baseline {
namespace {

using bench::now_us;

struct Options {
  std::string test;
  std::string wait = "busy";
  uint32_t size = 8;
  uint32_t mtu = 4096;
  bool ack = false;
  uint32_t batch = 32;
  bool gso = false;
  double duration_s = 2.0;
  uint64_t iters = 1'000'000;
  uint64_t warmup = 1000;
  std::string addr = "127.0.0.1";
  std::string peer_addr = "127.0.0.2";
  std::string cpus;
  bool json = false;
  // server side (internal)
  bool serve = false;
  int ready_fd = -1;
  int cpu = -1;
};

constexpr size_t kAckLen = 20;
constexpr size_t kMaxBatch = 128;

int fail(const std::string& what) {
  std::fprintf(stderr, "uroce baseline: %s\n", what.c_str());
  return 1;
}

uint64_t cpu_us() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return uint64_t(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1'000'000 +
         uint64_t(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// A UDP socket bound to addr (port 0: ephemeral), non-blocking if busy.
Result<int> udp_socket(const IpAddr& addr, bool nonblocking) {
  const int fd =
      ::socket(addr.is_v4() ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return err::from_errno(errno, std::string("socket: ") + std::strerror(errno));
  if (!nonblocking) {  // blocking receives wake up now and then to check their deadline
    timeval tv{1, 0};
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  int big = 4 << 20;
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
  sockaddr_storage ss;
  const socklen_t len = Endpoint{addr, 0}.to_sockaddr(ss);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    const int e = errno;
    ::close(fd);
    return err::from_errno(e, "bind " + addr.to_string() + ": " + std::strerror(e));
  }
  return fd;
}

uint16_t port_of(int fd) {
  sockaddr_storage ss;
  socklen_t l = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &l);
  auto ep = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), l);
  return ep ? ep->port : 0;
}

// Batches of datagrams to one peer, and receive buffers.
class Io {
 public:
  Io(int fd, bool busy) : fd_(fd), busy_(busy) {
    rx_buf_.resize(kMaxBatch * kSlot);
    for (size_t i = 0; i < kMaxBatch; ++i) {
      rx_iov_[i] = {rx_buf_.data() + i * kSlot, kSlot};
      rx_[i].msg_hdr = {};
      rx_[i].msg_hdr.msg_iov = &rx_iov_[i];
      rx_[i].msg_hdr.msg_iovlen = 1;
      rx_[i].msg_hdr.msg_name = &rx_addr_[i];
      rx_[i].msg_hdr.msg_control = rx_ctl_[i];
    }
  }
  // Sends the datagrams whose lengths are `lens` (data from `src`), in one
  // sendmmsg (retried until all went).
  bool send(const sockaddr_storage& to, socklen_t tolen, const uint8_t* src, const std::vector<size_t>& lens,
            bool gso = false) {
    if (gso && lens.size() > 1) return send_train(to, tolen, src, lens);
    if (lens.size() == 1) {  // the cheapest call for one datagram
      for (;;) {
        const ssize_t n = ::sendto(fd_, src, lens[0], 0, reinterpret_cast<const sockaddr*>(&to), tolen);
        if (n >= 0) return true;
        if (errno != EINTR && errno != EAGAIN && errno != ENOBUFS) return false;
      }
    }
    size_t off = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      tx_iov_[i] = {const_cast<uint8_t*>(src + off), lens[i]};
      off += lens[i];
      tx_[i].msg_hdr = {};
      tx_[i].msg_hdr.msg_name = const_cast<sockaddr_storage*>(&to);
      tx_[i].msg_hdr.msg_namelen = tolen;
      tx_[i].msg_hdr.msg_iov = &tx_iov_[i];
      tx_[i].msg_hdr.msg_iovlen = 1;
    }
    size_t done = 0;
    while (done < lens.size()) {
      const int n = ::sendmmsg(fd_, tx_ + done, unsigned(lens.size() - done), 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == ENOBUFS)) continue;
      if (n < 0) return false;
      done += size_t(n);
    }
    return true;
  }
  // The datagrams `lens` (all as long as the first but the last, which is
  // no longer) as one UDP_SEGMENT send.
  bool send_train(const sockaddr_storage& to, socklen_t tolen, const uint8_t* src, const std::vector<size_t>& lens) {
    size_t total = 0;
    for (size_t l : lens) total += l;
    iovec v{const_cast<uint8_t*>(src), total};
    alignas(cmsghdr) uint8_t ctl[CMSG_SPACE(sizeof(uint16_t))] = {};
    msghdr h{};
    h.msg_name = const_cast<sockaddr_storage*>(&to);
    h.msg_namelen = tolen;
    h.msg_iov = &v;
    h.msg_iovlen = 1;
    h.msg_control = ctl;
    h.msg_controllen = sizeof ctl;
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    const uint16_t seg = uint16_t(lens[0]);
    std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
    for (;;) {
      if (::sendmsg(fd_, &h, 0) >= 0) return true;
      if (errno != EINTR && errno != EAGAIN && errno != ENOBUFS) return false;
    }
  }
  // Receives at least one and at most `want` datagrams (busy: spinning);
  // returns the count and fills lens_/from_.  One datagram is received with
  // recvfrom(), the cheapest call; more with recvmmsg().  gro: segments are
  // counted through the UDP_GRO cmsg.
  int recv(int timeout_ms = -1, bool gro = false, size_t want = kMaxBatch) {
    const double deadline = timeout_ms < 0 ? 0 : now_us() + timeout_ms * 1000.0;
    want = std::min(std::max<size_t>(want, 1), kMaxBatch);
    for (unsigned spins = 0;; ++spins) {
      if (want == 1 && !gro) {
        socklen_t alen = sizeof(sockaddr_storage);
        const ssize_t r = ::recvfrom(fd_, rx_buf_.data(), kSlot, busy_ ? MSG_DONTWAIT : 0,
                                     reinterpret_cast<sockaddr*>(&rx_addr_[0]), &alen);
        if (r >= 0) {
          rx_[0].msg_hdr.msg_namelen = alen;
          len_[0] = size_t(r);
          segs_ = seg_[0] = 1;
          return 1;
        }
        if (errno != EAGAIN && errno != EINTR) return -1;
        if (timeout_ms >= 0 && (!busy_ || (spins & 63) == 0) && now_us() > deadline) return 0;
        continue;
      }
      for (size_t i = 0; i < want; ++i) {
        rx_[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
        rx_[i].msg_hdr.msg_controllen = gro ? sizeof rx_ctl_[i] : 0;
      }
      const int n = ::recvmmsg(fd_, rx_, unsigned(want), busy_ ? MSG_DONTWAIT : MSG_WAITFORONE, nullptr);
      if (n > 0) {
        segs_ = 0;
        for (int i = 0; i < n; ++i) {
          len_[i] = rx_[i].msg_len;
          size_t segs = 1;
          if (gro) {
            for (cmsghdr* c = CMSG_FIRSTHDR(&rx_[i].msg_hdr); c; c = CMSG_NXTHDR(&rx_[i].msg_hdr, c))
              if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
                int gs;
                std::memcpy(&gs, CMSG_DATA(c), sizeof gs);
                if (gs > 0) segs = (len_[i] + size_t(gs) - 1) / size_t(gs);
              }
          }
          segs_ += segs;
          seg_[i] = segs;
        }
        return n;
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) return -1;
      if (timeout_ms >= 0 && (!busy_ || (spins & 63) == 0) && now_us() > deadline) return 0;
    }
  }
  size_t len(int i) const { return len_[i]; }
  const uint8_t* data(int i) const { return rx_buf_.data() + size_t(i) * kSlot; }
  const sockaddr_storage& from(int i) const { return rx_addr_[i]; }
  socklen_t fromlen(int i) const { return rx_[i].msg_hdr.msg_namelen; }
  size_t segments() const { return segs_; }
  size_t segments(int i) const { return seg_[i]; }  // datagram i's (UDP_GRO)

 private:
  static constexpr size_t kSlot = 65536;
  int fd_;
  bool busy_;
  std::vector<uint8_t> rx_buf_;
  mmsghdr tx_[kMaxBatch];
  iovec tx_iov_[kMaxBatch];
  mmsghdr rx_[kMaxBatch];
  iovec rx_iov_[kMaxBatch];
  sockaddr_storage rx_addr_[kMaxBatch];
  alignas(cmsghdr) uint8_t rx_ctl_[kMaxBatch][64];
  size_t len_[kMaxBatch];
  size_t seg_[kMaxBatch];
  size_t segs_ = 0;
};

// The datagrams of one message: ceil(size / mtu) segments, plus an ACK.
// gso (one datagram and the ACK): the first at least as long as the ACK,
// which must be the shorter, last segment.
std::vector<size_t> segments(uint32_t size, uint32_t mtu, bool ack, bool gso = false) {
  std::vector<size_t> lens;
  for (uint32_t off = 0; off < size; off += mtu) lens.push_back(std::min(mtu, size - off));
  if (ack && gso) lens[0] = std::max(lens[0], kAckLen);
  if (ack) lens.push_back(kAckLen);
  return lens;
}

// ------------------------------------------------------------------ server

int serve(const Options& o) {
  if (Status s = bench::pin_to_cpu(o.cpu); !s.ok()) return fail(s.to_string());
  auto addr = IpAddr::parse(o.addr);
  if (!addr) return fail("bad --addr");
  const bool busy = o.wait == "busy";
  auto fd = udp_socket(*addr, busy);
  if (!fd.ok()) return fail(fd.status().to_string());
  if (o.gso) {
    int one = 1;
    (void)::setsockopt(*fd, IPPROTO_UDP, UDP_GRO, &one, sizeof one);
  }
  auto io = std::make_unique<Io>(*fd, busy);
  bench::report_ready(o.ready_fd, std::to_string(port_of(*fd)));
  const bool pingpong = o.test == "udp-pingpong";
  const std::vector<size_t> reply = segments(o.size, o.mtu, o.ack, o.gso);
  const size_t want = reply.size();
  std::vector<uint8_t> echo(size_t(o.size) + kAckLen + 64);
  uint64_t received = 0, bytes = 0, c0 = 0;
  double first = 0, last = 0;
  size_t pending = 0;  // datagrams of the current ping-pong message
  for (;;) {
    const int n = io->recv(120000, o.gso, pingpong ? want - pending : kMaxBatch);
    if (n <= 0) return fail("no datagram within 120 s");
    for (int i = 0; i < n; ++i) {
      if (io->len(i) == 0) {  // the end: report
        char line[256];
        std::snprintf(line, sizeof line, "result received=%llu bytes=%llu first_us=%.1f last_us=%.1f cpu_us=%llu",
                      static_cast<unsigned long long>(received), static_cast<unsigned long long>(bytes), first, last,
                      static_cast<unsigned long long>(cpu_us() - c0));
        for (int k = 0; k < 3; ++k)
          (void)::sendto(*fd, line, std::strlen(line), 0, reinterpret_cast<const sockaddr*>(&io->from(i)),
                         io->fromlen(i));
        return 0;
      }
      if (received == 0) {
        first = now_us();
        c0 = cpu_us();
      }
      last = now_us();
      bytes += io->len(i);
      if (!pingpong) continue;
      ++received;
      pending += io->segments(i);
      if (pending >= want) {  // the whole ping: send it back
        pending = 0;
        if (!io->send(io->from(i), io->fromlen(i), echo.data(), reply, o.gso)) return fail("sendmmsg failed");
      }
    }
    if (!pingpong) received += io->segments();
  }
}

// ------------------------------------------------------------------ client

struct Report {
  uint64_t received = 0, bytes = 0, cpu_us = 0;
  double first = 0, last = 0;
};

// Sends the end datagram until the server answers with its report.
Result<Report> finish(int fd, const sockaddr_storage& to, socklen_t tolen) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    (void)::sendto(fd, nullptr, 0, 0, reinterpret_cast<const sockaddr*>(&to), tolen);
    const double until = now_us() + 100'000;
    while (now_us() < until) {
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
      if (n <= 0) {
        ::usleep(1000);
        continue;
      }
      buf[n] = 0;
      if (std::strncmp(buf, "result ", 7) != 0) continue;  // a late echo
      Report r;
      unsigned long long rc = 0, by = 0, cu = 0;
      if (std::sscanf(buf, "result received=%llu bytes=%llu first_us=%lf last_us=%lf cpu_us=%llu", &rc, &by, &r.first,
                      &r.last, &cu) == 5) {
        r.received = rc;
        r.bytes = by;
        r.cpu_us = cu;
        return r;
      }
    }
  }
  return err::from_errno(ETIMEDOUT, "the server did not report");
}

int client(const Options& o) {
  const bool pingpong = o.test == "udp-pingpong";
  if (!pingpong && o.test != "udp-rate") return fail("unknown test '" + o.test + "' (udp-pingpong, udp-rate)");
  if (o.wait != "busy" && o.wait != "blocking") return fail("--wait busy or blocking");
  if (!pingpong && o.size > o.mtu) return fail("udp-rate: --size at most --mtu");
  if (pingpong && o.gso && o.size > o.mtu) return fail("udp-pingpong --gso: --size at most --mtu");
  auto cpus = bench::parse_cpu_pair(o.cpus.empty() ? bench::default_cpu_pair() : o.cpus);
  if (!cpus.ok()) return fail(cpus.status().to_string());
  auto caddr = IpAddr::parse(o.addr);
  auto saddr = IpAddr::parse(o.peer_addr);
  if (!caddr || !saddr) return fail("--addr/--peer-addr: not IP addresses");
  if (Status s = bench::pin_to_cpu(cpus->first); !s.ok()) return fail(s.to_string());
  const bool busy = o.wait == "busy";
  bench::Child server;
  std::vector<std::string> args = {"baseline",
                                   o.test,
                                   "--serve",
                                   "--ready-fd",
                                   "3",
                                   "--cpu",
                                   std::to_string(cpus->second),
                                   "--addr",
                                   saddr->to_string(),
                                   "--wait",
                                   o.wait,
                                   "--size",
                                   std::to_string(o.size),
                                   "--mtu",
                                   std::to_string(o.mtu)};
  if (o.ack) args.push_back("--ack");
  if (o.gso) args.push_back("--gso");
  if (Status s = server.spawn(args); !s.ok()) return fail("start the server: " + s.to_string());
  auto port = server.wait_ready();
  if (!port.ok()) return fail("the server: " + port.status().to_string());
  auto fd = udp_socket(*caddr, busy);
  if (!fd.ok()) return fail(fd.status().to_string());
  if (o.gso) {
    int one = 1;
    (void)::setsockopt(*fd, IPPROTO_UDP, UDP_GRO, &one, sizeof one);
  }
  sockaddr_storage to;
  const socklen_t tolen = Endpoint{*saddr, uint16_t(std::stoi(*port))}.to_sockaddr(to);
  auto io = std::make_unique<Io>(*fd, busy);
  std::vector<uint8_t> data(std::max<size_t>(o.size, size_t(o.mtu) * o.batch) + kAckLen + 64, 0x5a);

  bench::Json j;
  j.begin_object();
  j.field("tool", "uroce baseline").field("version", uroce::version()).field("test", o.test);
  j.field("size", o.size).field("mtu", o.mtu).field("load_average", bench::load_average());
  j.field("client_cpu", cpus->first).field("server_cpu", cpus->second);
  std::string human;
  char line[512];
  if (pingpong) {
    const std::vector<size_t> msg = segments(o.size, o.mtu, o.ack, o.gso);
    std::vector<double> rtt;
    rtt.reserve(std::min<uint64_t>(o.iters, 1u << 22));
    // Warm-up: o.warmup round trips or a tenth of the duration, whichever
    // ends first; then measure for the duration (or o.iters round trips).
    const double warm_end = now_us() + o.duration_s * 1e5;
    double end = 0;
    uint64_t c0 = 0;
    double t_start = 0;
    bool warm = true;
    for (uint64_t i = 0; rtt.size() < o.iters && (warm || now_us() < end); ++i) {
      if (warm && (i >= o.warmup || now_us() >= warm_end)) {
        warm = false;
        c0 = cpu_us();
        t_start = now_us();
        end = t_start + o.duration_s * 1e6;
      }
      const double t0 = now_us();
      if (!io->send(to, tolen, data.data(), msg, o.gso)) return fail("sendmmsg failed");
      for (size_t got = 0; got < msg.size();) {
        const int n = io->recv(10000, o.gso, msg.size() - got);
        if (n <= 0) return fail("no echo within 10 s");
        got += o.gso ? io->segments() : size_t(n);
      }
      if (!warm) rtt.push_back(now_us() - t0);
    }
    const double elapsed = now_us() - t_start;
    const double ccpu = 100.0 * double(cpu_us() - c0) / elapsed;
    auto rep = finish(*fd, to, tolen);
    if (!rep.ok()) return fail(rep.status().to_string());
    const double scpu = rep->last > rep->first ? 100.0 * double(rep->cpu_us) / (rep->last - rep->first) : 0;
    const bench::Summary s = bench::summarize(rtt);
    j.field("wait", o.wait).field("ack", o.ack).field("gso", o.gso);
    j.field("datagrams_per_message", uint64_t(msg.size()));
    j.field("iters", uint64_t(s.n));
    j.key("rtt_us").begin_object().field("min", s.min).field("median", s.median).field("p99", s.p99);
    j.field("mean", s.mean).field("max", s.max).end_object();
    j.field("client_cpu_percent", ccpu).field("server_cpu_percent", scpu);
    std::snprintf(line, sizeof line,
                  "raw UDP ping-pong, %s sockets, %s in %zu datagram%s%s%s each way: RTT median %.2f us, p99 %.2f, "
                  "min %.2f (%zu round trips); CPU client %.0f%%, server %.0f%%\n",
                  busy ? "busy-polled non-blocking" : "blocking", bench::size_name(o.size).c_str(), msg.size(),
                  msg.size() == 1 ? "" : "s", o.ack ? " (one an ACK)" : "",
                  o.gso && msg.size() > 1 ? " in one UDP GSO send" : "", s.median, s.p99, s.min, s.n, ccpu, scpu);
    human = line;
  } else {
    const uint32_t b = std::min<uint32_t>(o.batch, kMaxBatch);
    std::vector<size_t> lens(b, o.size);
    const double t0 = now_us();
    const double end = t0 + o.duration_s * 1e6;
    uint64_t sent = 0;
    while (now_us() < end) {
      if (!io->send(to, tolen, data.data(), lens, o.gso)) return fail(std::string("send: ") + std::strerror(errno));
      sent += b;
    }
    const double t1 = now_us();
    ::usleep(50'000);  // let the receiver drain its socket
    auto rep = finish(*fd, to, tolen);
    if (!rep.ok()) return fail(rep.status().to_string());
    const double secs = (rep->last - rep->first) / 1e6;
    const double rate = secs > 0 ? double(rep->received) / secs : 0;
    j.field("batch", b).field("gso", o.gso).field("sent", sent).field("received", rep->received);
    j.field("seconds", secs).field("msgs_per_s", rate).field("sender_msgs_per_s", double(sent) / ((t1 - t0) / 1e6));
    j.field("server_cpu_percent", secs > 0 ? 100.0 * double(rep->cpu_us) / (secs * 1e6) : 0.0);
    std::snprintf(line, sizeof line,
                  "raw UDP message rate, %s datagrams, %s%u per call: %.3f M/s received (%.3f M/s sent, %.1f%% "
                  "lost)\n",
                  bench::size_name(o.size).c_str(), o.gso ? "UDP GSO/GRO, " : "sendmmsg, ", b, rate / 1e6,
                  double(sent) / ((t1 - t0) / 1e6) / 1e6,
                  sent ? 100.0 * double(sent - std::min(sent, rep->received)) / double(sent) : 0.0);
    human = line;
  }
  j.end_object();
  const int child = server.wait(10000);
  ::close(*fd);
  if (o.json)
    std::printf("%s\n", j.str().c_str());
  else
    std::fputs(human.c_str(), stdout);
  return child == 0 ? 0 : fail("the server exited with status " + std::to_string(child));
}

}  // namespace
}  // namespace uroce::baseline

namespace uroce::cli {

Command add_baseline(CLI::App& root) {
  static baseline::Options o;
  Command c;
  c.app = root.add_subcommand("baseline",
                              "Raw UDP between two processes (no uroce): ping-pong round trip, busy-polled or "
                              "blocking, and message rate; the floor of a UDP-based stack");
  c.app->add_option("test", o.test, "udp-pingpong or udp-rate")->required();
  c.app->add_option("--wait", o.wait, "busy (non-blocking sockets, polled) or blocking")->capture_default_str();
  c.app->add_option("--size", o.size, "bytes per message (suffixes K, M)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(uint32_t(1), uint32_t(16) << 20))
      ->capture_default_str();
  c.app->add_option("--mtu", o.mtu, "largest datagram payload: a message is cut into datagrams of this size")
      ->check(CLI::Range(64u, 65000u))
      ->capture_default_str();
  c.app->add_flag("--ack", o.ack, "udp-pingpong: a 20-byte datagram rides along each way (an RC ACK's shape)");
  c.app->add_option("--batch", o.batch, "udp-rate: datagrams per send call")
      ->check(CLI::Range(1u, 128u))
      ->capture_default_str();
  c.app->add_flag("--gso", o.gso,
                  "one UDP_SEGMENT send per batch (udp-rate) or per direction's datagrams (udp-pingpong), UDP_GRO "
                  "receive");
  c.app->add_option("--duration", o.duration_s, "seconds (bounded)")
      ->check(CLI::Range(0.01, 60.0))
      ->capture_default_str();
  c.app->add_option("--iters", o.iters, "udp-pingpong: at most this many round trips")->capture_default_str();
  c.app->add_option("--warmup", o.warmup, "udp-pingpong: round trips before measuring")->capture_default_str();
  c.app->add_option("--addr", o.addr, "the client's address")->capture_default_str();
  c.app->add_option("--peer-addr", o.peer_addr, "the server's address")->capture_default_str();
  c.app->add_option("--cpus", o.cpus, "CPUs of client and server, \"A,B\" or none (default: the first two)");
  c.app->add_flag("--json", o.json, "print the result as JSON");
  c.app->add_flag("--serve", o.serve, "(internal) be the server")->group("");
  c.app->add_option("--ready-fd", o.ready_fd, "(internal)")->group("");
  c.app->add_option("--cpu", o.cpu, "(internal)")->group("");
  c.run = [] { return o.serve ? baseline::serve(o) : baseline::client(o); };
  return c;
}

}  // namespace uroce::cli
