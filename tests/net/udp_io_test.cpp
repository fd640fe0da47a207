// UdpIo over loopback: gathered sends, batched receives with metadata, port
// fallback, truncation, batching beyond the ring, wait_fd, and (as root) the
// IPv4 ID / DF bits our datagrams carry on the wire.
#include "net/udp_io.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

namespace uroce::net {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

const IpAddr kLo4 = *IpAddr::parse("127.0.0.1");
const IpAddr kLo6 = *IpAddr::parse("::1");

std::unique_ptr<UdpIo> open_io(const IpAddr& addr, UdpConfig cfg = {}) {
  cfg.local = addr;
  if (cfg.port == kRoceV2Port) cfg.port = 0;  // tests never depend on 4791 being free
  auto r = UdpIo::open(cfg);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

struct Got {
  Bytes data;
  Endpoint src;
  IpAddr dst;
  uint8_t tos, ttl;
  bool truncated;
};

// Receives until `n` packets arrived or `limit` passed, polling wait_fd.
std::vector<Got> recv_n(UdpIo& io, size_t n, std::chrono::milliseconds limit = 2000ms) {
  std::vector<Got> got;
  std::vector<RxPacket> rx(64);
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    pollfd p{io.wait_fd(), POLLIN, 0};
    ::poll(&p, 1, 50);
    size_t k = io.recv_batch(rx);
    EXPECT_LE(k, io.batch());
    for (size_t i = 0; i < k; ++i)
      got.push_back(
          {Bytes(rx[i].data.begin(), rx[i].data.end()), rx[i].src, rx[i].dst, rx[i].tos, rx[i].ttl, rx[i].truncated});
  }
  return got;
}

int read_sysctl(const char* path, int fallback) {
  std::ifstream f(path);
  int v = fallback;
  f >> v;
  return v;
}

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

// Packets i = 0..n-1 with distinct contents and every head/body/tail shape.
struct Batch {
  std::vector<Bytes> heads, bodies, tails;
  std::vector<TxPacket> pkts;
  Batch(Endpoint dst, size_t n, size_t body_len = 100) {
    for (size_t i = 0; i < n; ++i) {
      heads.push_back(Bytes(i % 3 == 1 ? 0 : 12 + i % 5, uint8_t(0x10 + i)));
      bodies.push_back(Bytes(i % 4 == 2 ? 0 : body_len + i, uint8_t(0x80 + i)));
      tails.push_back(Bytes(i % 5 == 3 ? 0 : 4, uint8_t(0xf0 + i % 16)));
      if (!heads[i].empty()) heads[i][0] = uint8_t(i);  // a sequence mark
    }
    for (size_t i = 0; i < n; ++i)
      pkts.push_back({dst, heads[i], bodies[i], tails[i], uint8_t(i % 2 ? (i % 64) << 2 | 2 : 0)});
  }
  Bytes wire(size_t i) const {
    Bytes b = heads[i];
    b.insert(b.end(), bodies[i].begin(), bodies[i].end());
    b.insert(b.end(), tails[i].begin(), tails[i].end());
    return b;
  }
};

void check_loopback(const IpAddr& lo, int ttl) {
  auto a = open_io(lo), b = open_io(lo);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->local().addr, lo);
  EXPECT_NE(a->local().port, 0);
  Batch batch(b->local(), 20);
  ASSERT_EQ(a->send_batch(batch.pkts), 20u);
  auto got = recv_n(*b, 20);
  ASSERT_EQ(got.size(), 20u);
  size_t bytes = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].data, batch.wire(i));
    EXPECT_EQ(got[i].src, a->local());
    EXPECT_EQ(got[i].dst, lo);
    EXPECT_EQ(got[i].tos, batch.pkts[i].tos);
    EXPECT_EQ(got[i].ttl, ttl);
    EXPECT_FALSE(got[i].truncated);
    bytes += batch.wire(i).size();
  }
  EXPECT_EQ(a->stats().tx_packets, 20u);
  EXPECT_EQ(a->stats().tx_bytes, bytes);
  EXPECT_EQ(a->stats().tx_errors, 0u);
  EXPECT_EQ(b->stats().rx_packets, 20u);
  EXPECT_EQ(b->stats().rx_bytes, bytes);
}

TEST(UdpIo, Ipv4LoopbackBatchGathered) { check_loopback(kLo4, read_sysctl("/proc/sys/net/ipv4/ip_default_ttl", 64)); }

TEST(UdpIo, Ipv6LoopbackBatchGathered) {
  UdpConfig probe;
  probe.local = kLo6;
  probe.port = 0;
  auto r = UdpIo::open(probe);
  if (!r.ok() && (r.status().code() == EADDRNOTAVAIL || r.status().code() == EAFNOSUPPORT))
    GTEST_SKIP() << "no IPv6 loopback: " << r.status().to_string();
  check_loopback(kLo6, read_sysctl("/proc/sys/net/ipv6/conf/lo/hop_limit", 64));
}

// Packets to an address of this host, or anywhere in 127.0.0.0/8, never
// leave it; the rest may.
TEST(UdpIo, HostLocalAddressesAreOursAndTheLoopbackSubnet) {
  auto io = open_io(kLo4);
  ASSERT_TRUE(io);
  EXPECT_TRUE(io->host_local(kLo4));
  EXPECT_TRUE(io->host_local(*IpAddr::parse("127.0.0.2")));
  EXPECT_TRUE(io->host_local(*IpAddr::parse("127.255.0.9")));
  EXPECT_FALSE(io->host_local(*IpAddr::parse("192.0.2.1")));  // TEST-NET-1: documentation only
  EXPECT_FALSE(io->host_local(*IpAddr::parse("2001:db8::1")));
  EXPECT_FALSE(io->host_local(*IpAddr::parse("224.0.0.1")));
  EXPECT_FALSE(io->host_local(IpAddr{}));
  // asked again (the kept answers), the same
  EXPECT_TRUE(io->host_local(*IpAddr::parse("127.0.0.2")));
  EXPECT_FALSE(io->host_local(*IpAddr::parse("192.0.2.1")));
}

TEST(UdpIo, WildcardBindReportsDestinationAddress) {
  auto a = open_io(kLo4), b = open_io(IpAddr::from_v4(0));
  ASSERT_TRUE(a && b);
  const IpAddr other = *IpAddr::parse("127.0.0.2");  // all of 127/8 is local
  Bytes payload(64, 0x42);
  TxPacket pkts[] = {{{kLo4, b->local().port}, payload, {}, {}, 0}, {{other, b->local().port}, payload, {}, {}, 0}};
  ASSERT_EQ(a->send_batch(pkts), 2u);
  auto got = recv_n(*b, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].dst, kLo4);
  EXPECT_EQ(got[1].dst, other);
}

TEST(UdpIo, PortFallbackWhenTaken) {
  UniqueFd blocker(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss;
  ASSERT_EQ(::bind(blocker.get(), reinterpret_cast<sockaddr*>(&ss), Endpoint{kLo4, 0}.to_sockaddr(ss)), 0);
  socklen_t len = sizeof ss;
  ASSERT_EQ(::getsockname(blocker.get(), reinterpret_cast<sockaddr*>(&ss), &len), 0);
  const uint16_t taken = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len)->port;

  UdpConfig cfg;
  cfg.local = kLo4;
  cfg.port = taken;
  cfg.port_fallback = false;
  auto strict = UdpIo::open(cfg);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), EADDRINUSE);
  EXPECT_EQ(strict.status().message(), "bind 127.0.0.1:" + std::to_string(taken) + ": Address already in use");

  cfg.port_fallback = true;
  auto io = UdpIo::open(cfg);
  ASSERT_TRUE(io.ok()) << io.status().to_string();
  EXPECT_NE((*io)->local().port, taken);
  EXPECT_NE((*io)->local().port, 0);
  // And it works on its fallback port.
  auto peer = open_io(kLo4);
  Bytes hello{1, 2, 3};
  TxPacket p{(*io)->local(), hello, {}, {}, 0};
  ASSERT_EQ(peer->send_batch({&p, 1}), 1u);
  auto got = recv_n(**io, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data, hello);
}

TEST(UdpIo, DefaultPortFallsBackWhen4791IsTaken) {
  // Hold 127.0.0.1:4791 ourselves (if something else already holds it, that
  // does just as well).
  UniqueFd blocker(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss;
  int rc = ::bind(blocker.get(), reinterpret_cast<sockaddr*>(&ss), Endpoint{kLo4, kRoceV2Port}.to_sockaddr(ss));
  ASSERT_TRUE(rc == 0 || errno == EADDRINUSE) << std::strerror(errno);
  UdpConfig cfg;
  cfg.local = kLo4;
  auto io = UdpIo::open(cfg);
  ASSERT_TRUE(io.ok()) << io.status().to_string();
  EXPECT_NE((*io)->local().port, kRoceV2Port);
  EXPECT_NE((*io)->local().port, 0);
}

TEST(UdpIo, OversizeDatagramIsFlaggedTruncated) {
  UdpConfig cfg;
  cfg.gso = false;  // with GRO the buffers are 64 KiB (udp_gso_test.cpp)
  cfg.max_payload = 1000;
  cfg.batch = 4;
  auto rx = open_io(kLo4, cfg);
  ASSERT_TRUE(rx);
  UniqueFd raw(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss;
  socklen_t sl = rx->local().to_sockaddr(ss);
  const size_t sizes[] = {1000, 1001, 1064, 3000, 10};
  for (size_t s : sizes) {
    Bytes d(s, uint8_t(s));
    ASSERT_EQ(::sendto(raw.get(), d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&ss), sl), ssize_t(s));
  }
  auto got = recv_n(*rx, 5);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_FALSE(got[0].truncated);
  EXPECT_EQ(got[0].data.size(), 1000u);
  EXPECT_TRUE(got[1].truncated);  // within the margin: whole, but over max_payload
  EXPECT_TRUE(got[2].truncated);
  EXPECT_TRUE(got[3].truncated);  // beyond the buffer: MSG_TRUNC
  EXPECT_LT(got[3].data.size(), 3000u);
  EXPECT_FALSE(got[4].truncated);
  EXPECT_EQ(got[4].data, Bytes(10, 10));
  EXPECT_EQ(rx->stats().rx_truncated, 3u);

  // The sender side refuses what is over its own max_payload.
  auto tx = open_io(kLo4, cfg);
  Bytes big(1001, 1);
  TxPacket p{rx->local(), big, {}, {}, 0};
  EXPECT_EQ(tx->send_batch({&p, 1}), 0u);
  EXPECT_EQ(tx->stats().tx_errors, 1u);
}

TEST(UdpIo, BatchLargerThanRing) {
  UdpConfig cfg;
  cfg.batch = 8;
  auto a = open_io(kLo4, cfg), b = open_io(kLo4, cfg);
  ASSERT_TRUE(a && b);
  Batch batch(b->local(), 100, 20);
  ASSERT_EQ(a->send_batch(batch.pkts), 100u);
  auto got = recv_n(*b, 100);  // asks for 64 at a time, gets at most 8
  ASSERT_EQ(got.size(), 100u);
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(got[i].data, batch.wire(i)) << i;
}

TEST(UdpIo, WaitFdReadableWhilePacketsWait) {
  auto a = open_io(kLo4), b = open_io(kLo4);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(readable(b->wait_fd(), 0));
  Bytes d(32, 7);
  TxPacket p{b->local(), d, {}, {}, 0};
  ASSERT_EQ(a->send_batch({&p, 1}), 1u);
  EXPECT_TRUE(readable(b->wait_fd(), 1000));
  std::vector<RxPacket> rx(4);
  EXPECT_EQ(b->recv_batch(rx), 1u);
  EXPECT_FALSE(readable(b->wait_fd(), 0));
  EXPECT_EQ(b->recv_batch(rx), 0u);
}

// Datagrams one recvmmsg read but recv_batch() has not handed out yet are
// invisible to wait_fd(): prepare_wait() says they wait, so that no thread
// sleeps on them (they sat there until the sender's retransmission timeout
// brought a new datagram: 67 ms a time under qperf rc_bw).
TEST(UdpIo, DatagramsReadButNotHandedOutForbidSleep) {
  auto a = open_io(kLo4), b = open_io(kLo4);
  ASSERT_TRUE(a && b);
  Batch batch(b->local(), 3, 20);
  ASSERT_EQ(a->send_batch(batch.pkts), 3u);
  ASSERT_TRUE(readable(b->wait_fd(), 1000));
  EXPECT_FALSE(b->prepare_wait());
  std::vector<RxPacket> one(1);
  size_t taken = 0;
  for (auto until = std::chrono::steady_clock::now() + 2s; taken == 0 && std::chrono::steady_clock::now() < until;)
    taken = b->recv_batch(one);
  ASSERT_EQ(taken, 1u);
  EXPECT_EQ(Bytes(one[0].data.begin(), one[0].data.end()), batch.wire(0));
  if (!b->rx_buffered()) GTEST_SKIP() << "the kernel had one datagram ready for the first recvmmsg";
  EXPECT_FALSE(readable(b->wait_fd(), 0)) << "read from the socket already";
  EXPECT_TRUE(b->prepare_wait());
  auto got = recv_n(*b, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].data, batch.wire(1));
  EXPECT_EQ(got[1].data, batch.wire(2));
  EXPECT_FALSE(b->prepare_wait());
}

TEST(UdpIo, RefusedPacketIsSkippedAndTheRestSent) {
  auto a = open_io(kLo4), b = open_io(kLo4);
  ASSERT_TRUE(a && b);
  Bytes d0(16, 0), d1(16, 1), d2(16, 2), d3(16, 3);
  const Endpoint bcast{*IpAddr::parse("255.255.255.255"), 9};  // no SO_BROADCAST: EACCES
  const Endpoint v6{kLo6, 9};                                  // wrong family
  TxPacket pkts[] = {{b->local(), d0, {}, {}, 0},
                     {bcast, d1, {}, {}, 0},
                     {b->local(), d2, {}, {}, 0},
                     {v6, d1, {}, {}, 0},
                     {b->local(), d3, {}, {}, 0}};
  EXPECT_EQ(a->send_batch(pkts), 3u);
  EXPECT_EQ(a->stats().tx_errors, 2u);
  auto got = recv_n(*b, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].data, d0);
  EXPECT_EQ(got[1].data, d2);
  EXPECT_EQ(got[2].data, d3);
}

TEST(UdpIo, ReceiveQueueOverflowIsCounted) {
  UdpConfig small;
  small.rcvbuf = 64 << 10;
  auto a = open_io(kLo4), b = open_io(kLo4, small);
  ASSERT_TRUE(a && b);
  EXPECT_LT(b->rcvbuf(), 1 << 20);
  constexpr size_t kSent = 400;
  Bytes d(4000, 0x5a);
  std::vector<TxPacket> pkts(kSent, TxPacket{b->local(), d, {}, {}, 0});
  EXPECT_EQ(a->send_batch(pkts), kSent);  // loopback never pushes back: the receiver drops
  EXPECT_EQ(a->stats().tx_errors, 0u);
  auto got = recv_n(*b, kSent, 300ms);
  ASSERT_LT(got.size(), kSent);
  // The drop count rides on the next datagram that gets in.
  TxPacket one{b->local(), d, {}, {}, 0};
  ASSERT_EQ(a->send_batch({&one, 1}), 1u);
  ASSERT_EQ(recv_n(*b, 1).size(), 1u);
  EXPECT_EQ(got.size() + b->stats().rx_dropped, kSent);
}

// A full send buffer (EAGAIN) needs a link that holds packets: loopback
// never does.  As root, in a private network namespace: a veth whose qdisc
// drains at 1 Mbit/s, and a 16 KiB send buffer.
TEST(UdpIo, FullSendBufferGivesUpQuickly) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a network namespace";
  struct Outcome {
    int code;  // 0 ok, 77 no namespace or tools
    size_t sent, errors, again;
    long long usec;
  } out{};
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd r(fds[0]), w(fds[1]);
  std::fflush(stdout);
  pid_t kid = ::fork();
  if (kid == 0) {
    Outcome o{77, 0, 0, 0, 0};
    if (::unshare(CLONE_NEWNET) == 0 &&
        std::system("(ip link add v0 type veth peer name v1 && ip addr add 10.9.0.1/24 dev v0 && "
                    "ip link set v0 up && ip link set v1 up && "
                    "ip neigh add 10.9.0.2 lladdr 02:00:00:00:00:02 dev v0 && "
                    "tc qdisc add dev v0 root tbf rate 1mbit burst 16kb limit 10mb) "
                    ">/dev/null 2>&1") == 0) {
      UdpConfig cfg;
      cfg.local = *IpAddr::parse("10.9.0.1");
      cfg.sndbuf = 16 << 10;
      auto io = UdpIo::open(cfg);
      if (io.ok()) {
        Bytes d(1400, 1);
        std::vector<TxPacket> pkts(100, TxPacket{{*IpAddr::parse("10.9.0.2"), 4791}, d, {}, {}, 0});
        auto t0 = std::chrono::steady_clock::now();
        o.sent = (*io)->send_batch(pkts);
        o.errors = (*io)->stats().tx_errors;
        o.again = (*io)->send_batch(pkts);  // still full
        o.usec = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
        o.code = 0;
      } else {
        o.code = 1;
      }
    }
    (void)!::write(w.get(), &o, sizeof o);
    ::_exit(0);
  }
  w.reset();
  pollfd p{r.get(), POLLIN, 0};
  const bool got = ::poll(&p, 1, 10000) == 1 && ::read(r.get(), &out, sizeof out) == sizeof out;
  int st = 0;
  if (!got) ::kill(kid, SIGKILL);
  ::waitpid(kid, &st, 0);
  ASSERT_TRUE(got);
  if (out.code == 77) GTEST_SKIP() << "no veth / tc / ip here";
  ASSERT_EQ(out.code, 0);
  EXPECT_GT(out.sent, 0u);    // the first few fit
  EXPECT_LT(out.sent, 100u);  // then the buffer is full
  EXPECT_EQ(out.sent + out.errors, 100u);
  EXPECT_EQ(out.again, 0u);
  EXPECT_LT(out.usec, 200'000);  // bounded retries, no blocking
}

TEST(UdpIo, RejectsBadConfig) {
  UdpConfig cfg;
  cfg.local = kLo4;
  cfg.batch = 65;
  EXPECT_EQ(UdpIo::open(cfg).status().code(), EINVAL);
  cfg.batch = 32;
  cfg.max_payload = 9001;
  EXPECT_EQ(UdpIo::open(cfg).status().code(), EINVAL);
}

// IPv4 header fields of datagrams sent through lo, seen by a packet socket.
struct WireIp {
  uint16_t id, frag;
  uint8_t tos;
};
std::vector<WireIp> capture(int psock, uint16_t sport, uint16_t dport, size_t n) {
  std::vector<WireIp> out;
  uint8_t buf[2048];
  auto deadline = std::chrono::steady_clock::now() + 2s;
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    if (!readable(psock, 50)) continue;
    sockaddr_ll from{};
    socklen_t fl = sizeof from;
    ssize_t len = ::recvfrom(psock, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (len < ssize_t(sizeof(iphdr) + sizeof(udphdr))) continue;
    // Bound to ETH_P_IP (not ETH_P_ALL), the socket sees each looped-back
    // datagram once, on its way in (PACKET_HOST).
    if (from.sll_pkttype == PACKET_OUTGOING) continue;
    iphdr ip;
    std::memcpy(&ip, buf, sizeof ip);
    if (ip.version != 4 || ip.protocol != IPPROTO_UDP) continue;
    udphdr udp;
    std::memcpy(&udp, buf + ip.ihl * 4, sizeof udp);
    if (ntohs(udp.source) != sport || ntohs(udp.dest) != dport) continue;
    out.push_back({ntohs(ip.id), ntohs(ip.frag_off), ip.tos});
  }
  return out;
}

// A classic BPF program for a cooked (SOCK_DGRAM) packet socket, which sees
// the IP header first: IPv4 UDP datagrams to `dport` only.  Tests running
// beside this one flood the loopback; unfiltered, the socket's queue fills
// and the datagrams looked for are dropped before they are read.
bool filter_udp_to(int fd, uint16_t dport) {
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 9),  // IP protocol
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 0, 4),
      BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 0),  // X = IP header length
      BPF_STMT(BPF_LD | BPF_H | BPF_IND, 2),   // UDP destination port
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, dport, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, 0xffff),
      BPF_STMT(BPF_RET | BPF_K, 0),
  };
  sock_fprog prog{uint16_t(std::size(code)), code};
  return ::setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) == 0;
}

TEST(UdpIo, Ipv4IdIsZeroAndDfSetOnTheWire) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for an AF_PACKET socket";
  auto a = open_io(kLo4), b = open_io(kLo4);
  ASSERT_TRUE(a && b);
  // Protocol 0: nothing is queued until the filter is on and bind names IP.
  UniqueFd ps(::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!ps.valid()) GTEST_SKIP() << "AF_PACKET: " << std::strerror(errno);
  ASSERT_TRUE(filter_udp_to(ps.get(), b->local().port)) << std::strerror(errno);
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_IP);
  ll.sll_ifindex = int(::if_nametoindex("lo"));
  ASSERT_EQ(::bind(ps.get(), reinterpret_cast<sockaddr*>(&ll), sizeof ll), 0) << std::strerror(errno);

  EXPECT_EQ(a->tx_ipv4_id(), 0);
  EXPECT_EQ(a->tx_ipv4_frag(), 0x4000);
  Batch batch(b->local(), 6);
  ASSERT_EQ(a->send_batch(batch.pkts), 6u);
  auto seen = capture(ps.get(), a->local().port, b->local().port, 6);
  ASSERT_EQ(seen.size(), 6u);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].id, a->tx_ipv4_id()) << i;
    EXPECT_EQ(seen[i].frag, a->tx_ipv4_frag()) << i;  // DF, no MF, offset 0
    EXPECT_EQ(seen[i].tos, batch.pkts[i].tos) << i;
  }

  // Control: a connected socket with DF numbers its datagrams, so the capture
  // above would have caught a non-zero ID.
  UniqueFd c(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  int df = IP_PMTUDISC_DO;
  ASSERT_EQ(::setsockopt(c.get(), IPPROTO_IP, IP_MTU_DISCOVER, &df, sizeof df), 0);
  sockaddr_storage ss;
  ASSERT_EQ(::connect(c.get(), reinterpret_cast<sockaddr*>(&ss), b->local().to_sockaddr(ss)), 0);
  socklen_t sl = sizeof ss;
  ASSERT_EQ(::getsockname(c.get(), reinterpret_cast<sockaddr*>(&ss), &sl), 0);
  const uint16_t cport = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), sl)->port;
  for (int i = 0; i < 4; ++i) ASSERT_EQ(::send(c.get(), "ping", 4, 0), 4);
  auto ctl = capture(ps.get(), cport, b->local().port, 4);
  ASSERT_EQ(ctl.size(), 4u);
  EXPECT_NE(ctl[0].id, ctl[1].id);
}

}  // namespace
}  // namespace uroce::net
