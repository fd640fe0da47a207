// soak: the full soak from the command line (docs/faults.md).
//
//   soak --gib 1                          1 GiB per QP, 4 QPs, at 1%, 5% and 20% drop
//                                         (+1% duplication, +1% reordering), in memory
//                                         and over UDP on loopback
//   soak --mib 64 --drops 0.05 --net udp  one rate, one network
//   soak --faults 'drop=0.1,delay=0.05:2ms,dir=both'   any fault spec (UROCE_FAULTS syntax)
//
// Two processes (the kernel does the dropping, e.g. iptables in network
// namespaces; tests/soak/netns_soak.sh):
//   soak --server 10.77.0.1                 serves on 10.77.0.1 (UDP 4791, control TCP 47910)
//   soak --client 10.77.0.2 --peer 10.77.0.1 --mib 64
// Exit status 0 only if every run was byte-exact and exactly-once in time.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "net/fake_io.hpp"
#include "soak.hpp"

using namespace uroce;
using namespace uroce::soak;

namespace {

struct Args {
  Options o;
  std::vector<double> drops{0.01, 0.05, 0.20};
  double dup = 0.01;
  std::string reorder = "0.01:8";
  std::string faults;  // explicit spec
  std::string net = "both";
  std::string server, client, peer;
  uint16_t ctl_port = 47910;
  bool time_limit_set = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "soak: %s\n"
               "usage: soak [--gib N | --mib N] [--qps N] [--drops P,P,..] [--dup P] [--reorder P:N]\n"
               "            [--faults SPEC] [--net fake|udp|both] [--mtu 256..4096] [--depth N] [--chunk KIB]\n"
               "            [--seed N] [--timeout-exp N] [--time-limit SEC]\n"
               "       soak --server ADDR [--ctl-port P] [--qps N ...]\n"
               "       soak --client ADDR --peer ADDR [--ctl-port P] [--mib N ...]\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  a.o.bytes_per_qp = 64ull << 20;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + k).c_str());
      return argv[++i];
    };
    if (k == "--gib")
      a.o.bytes_per_qp = uint64_t(std::stod(val()) * double(1ull << 30));
    else if (k == "--mib")
      a.o.bytes_per_qp = uint64_t(std::stod(val()) * double(1ull << 20));
    else if (k == "--qps")
      a.o.qps = std::stoi(val());
    else if (k == "--drops") {
      a.drops.clear();
      std::string s = val();
      for (size_t p = 0; p <= s.size();) {
        size_t e = s.find(',', p);
        if (e == std::string::npos) e = s.size();
        a.drops.push_back(std::stod(s.substr(p, e - p)));
        p = e + 1;
      }
    } else if (k == "--dup")
      a.dup = std::stod(val());
    else if (k == "--reorder")
      a.reorder = val();
    else if (k == "--faults")
      a.faults = val();
    else if (k == "--net")
      a.net = val();
    else if (k == "--mtu") {
      const int m = std::stoi(val());
      a.o.qp.mtu = m == 256    ? Mtu::m256
                   : m == 512  ? Mtu::m512
                   : m == 1024 ? Mtu::m1024
                   : m == 2048 ? Mtu::m2048
                               : Mtu::m4096;
    } else if (k == "--depth")
      a.o.depth = uint32_t(std::stoul(val()));
    else if (k == "--chunk")
      a.o.chunk = uint32_t(std::stoul(val())) << 10;
    else if (k == "--seed")
      a.o.seed = std::stoull(val());
    else if (k == "--timeout-exp")
      a.o.qp.timeout = uint8_t(std::stoul(val()));
    else if (k == "--time-limit") {
      a.o.time_limit = std::chrono::seconds(std::stol(val()));
      a.time_limit_set = true;
    } else if (k == "--server")
      a.server = val();
    else if (k == "--client")
      a.client = val();
    else if (k == "--peer")
      a.peer = val();
    else if (k == "--ctl-port")
      a.ctl_port = uint16_t(std::stoul(val()));
    else if (k == "-h" || k == "--help")
      usage("help");
    else
      usage(("unknown option " + k).c_str());
  }
  if (a.o.qps < 1 || a.o.qps > 64) usage("--qps must be 1..64");
  if (a.o.chunk < 1024 || a.o.chunk > (1u << 20)) usage("--chunk must be 1..1024 KiB");
  if (!a.time_limit_set)  // generous: 40 s per GiB per QP at the worst rate, at least 60 s
    a.o.time_limit =
        std::chrono::seconds(std::max<uint64_t>(60, 60 + 40 * uint64_t(a.o.qps) * (a.o.bytes_per_qp >> 20) / 1024));
  return a;
}

FaultConfig faults_for(const Args& a, double drop, uint64_t seed) {
  std::string spec = a.faults;
  if (spec.empty()) {
    char b[200];
    std::snprintf(b, sizeof b, "drop=%g,dup=%g,reorder=%s", drop, a.dup, a.reorder.c_str());
    spec = b;
  }
  spec += ",seed=" + std::to_string(seed);
  auto c = parse_faults(spec);
  if (!c.ok()) {
    std::fprintf(stderr, "soak: %s\n", c.status().to_string().c_str());
    std::exit(2);
  }
  return *c;
}

// ------------------------------------------------------------ two processes

bool write_all(int fd, const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  while (n) {
    const ssize_t r = ::write(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= size_t(r);
  }
  return true;
}
bool read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n) {
    const ssize_t r = ::read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= size_t(r);
  }
  return true;
}

struct WireQp {  // QpInfo on the control connection
  uint8_t gid[16];
  uint32_t qpn, psn;
};
WireQp to_wire(const QpInfo& q) {
  WireQp w{};
  std::memcpy(w.gid, q.gid.bytes().data(), 16);
  w.qpn = q.qpn;
  w.psn = q.psn;
  return w;
}
QpInfo from_wire(const WireQp& w) { return QpInfo{IpAddr::from_bytes(w.gid), w.qpn, w.psn}; }
struct WireServerQp {
  WireQp qp;
  uint64_t src_addr, dst_addr, atom_addr;
  uint32_t src_rkey, dst_rkey, atom_rkey, pad;
};

DeviceInfo device(const std::string& addr, const char* name) {
  auto ip = IpAddr::parse(addr);
  if (!ip) {
    std::fprintf(stderr, "soak: bad address %s\n", addr.c_str());
    std::exit(2);
  }
  DeviceInfo d;
  d.name = name;
  d.gids = {*ip};
  d.udp_port = 4791;
  return d;  // faults: UROCE_FAULTS, if set
}

sockaddr_in tcp_addr(const std::string& ip, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (::inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) != 1) {
    std::fprintf(stderr, "soak: two-process mode needs IPv4 addresses (%s)\n", ip.c_str());
    std::exit(2);
  }
  return sa;
}

int run_server(const Args& a) {
  auto side = open_api_side(device(a.server, "soak-server"));
  if (!side.ok()) {
    std::fprintf(stderr, "soak server: %s\n", side.status().to_string().c_str());
    return 1;
  }
  Server server(**side, a.o);
  if (Status s = server.setup(); !s.ok()) {
    std::fprintf(stderr, "soak server: %s\n", s.to_string().c_str());
    return 1;
  }
  int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa = tcp_addr(a.server, a.ctl_port);
  if (::bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(ls, 1) != 0) {
    std::perror("soak server: control socket");
    return 1;
  }
  std::printf("soak server: listening on %s:%u\n", a.server.c_str(), a.ctl_port);
  std::fflush(stdout);
  const int fd = ::accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(ls);
  if (fd < 0) return 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<WireServerQp> mine(size_t(a.o.qps));
  for (int i = 0; i < a.o.qps; ++i) {
    const ServerQp e = server.exposed(i);
    mine[size_t(i)] = {to_wire(e.qp), e.src_addr, e.dst_addr, e.atom_addr, e.src_rkey, e.dst_rkey, e.atom_rkey, 0};
  }
  std::vector<WireQp> theirs(size_t(a.o.qps));
  const uint32_t n = uint32_t(a.o.qps);
  uint32_t their_n = 0;
  if (!write_all(fd, &n, 4) || !write_all(fd, mine.data(), mine.size() * sizeof(WireServerQp)) ||
      !read_all(fd, &their_n, 4) || their_n != n || !read_all(fd, theirs.data(), theirs.size() * sizeof(WireQp))) {
    std::fprintf(stderr, "soak server: control exchange failed (same --qps on both sides?)\n");
    return 1;
  }
  for (int i = 0; i < a.o.qps; ++i)
    if (Status s = server.connect(i, from_wire(theirs[size_t(i)])); !s.ok()) {
      std::fprintf(stderr, "soak server: %s\n", s.to_string().c_str());
      return 1;
    }
  // Serve until the client says how many SENDs it made, then until all are checked.
  std::vector<uint64_t> want;
  Status st;
  const auto deadline = std::chrono::steady_clock::now() + a.o.time_limit + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (st = server.step(); !st.ok()) break;
    if (want.empty()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) == 1) {
        want.resize(size_t(a.o.qps));
        if (!read_all(fd, want.data(), want.size() * 8)) {
          st = err::io("the client went away");
          break;
        }
      }
    } else {
      bool all = true;
      for (int i = 0; i < a.o.qps; ++i) all = all && server.sends_checked(i) >= want[size_t(i)];
      if (all) break;
    }
  }
  if (st.ok() && want.empty()) st = err::from_errno(ETIMEDOUT, "the client never finished");
  if (st.ok())
    for (int i = 0; i < a.o.qps; ++i)
      if (server.sends_checked(i) != want[size_t(i)])
        st = err::io("QP " + std::to_string(i) + ": checked " + std::to_string(server.sends_checked(i)) + " SENDs of " +
                     std::to_string(want[size_t(i)]));
  const std::string msg = st.ok() ? "ok" : st.to_string();
  const uint32_t len = uint32_t(msg.size());
  (void)(write_all(fd, &len, 4) && write_all(fd, msg.data(), len));
  ::close(fd);
  std::printf("soak server: %s (%" PRIu64 " SENDs checked)\n", msg.c_str(), server.sends_checked());
  return st.ok() ? 0 : 1;
}

int run_client(const Args& a) {
  auto side = open_api_side(device(a.client, "soak-client"));
  if (!side.ok()) {
    std::fprintf(stderr, "soak client: %s\n", side.status().to_string().c_str());
    return 1;
  }
  Client client(**side, a.o);
  if (Status s = client.setup(); !s.ok()) {
    std::fprintf(stderr, "soak client: %s\n", s.to_string().c_str());
    return 1;
  }
  int fd = -1;
  const sockaddr_in sa = tcp_addr(a.peer, a.ctl_port);
  for (int tries = 0; tries < 200; ++tries) {  // the server may still be starting
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0) break;
    ::close(fd);
    fd = -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (fd < 0) {
    std::fprintf(stderr, "soak client: cannot reach the server at %s:%u\n", a.peer.c_str(), a.ctl_port);
    return 1;
  }
  const uint32_t n = uint32_t(a.o.qps);
  uint32_t their_n = 0;
  std::vector<WireServerQp> theirs(n);
  std::vector<WireQp> mine(n);
  for (int i = 0; i < a.o.qps; ++i) mine[size_t(i)] = to_wire(client.info(i));
  if (!read_all(fd, &their_n, 4) || their_n != n ||
      !read_all(fd, theirs.data(), theirs.size() * sizeof(WireServerQp)) || !write_all(fd, &n, 4) ||
      !write_all(fd, mine.data(), mine.size() * sizeof(WireQp))) {
    std::fprintf(stderr, "soak client: control exchange failed (same --qps on both sides?)\n");
    return 1;
  }
  for (int i = 0; i < a.o.qps; ++i) {
    const WireServerQp& w = theirs[size_t(i)];
    ServerQp s{from_wire(w.qp), w.src_addr, w.dst_addr, w.atom_addr, w.src_rkey, w.dst_rkey, w.atom_rkey};
    if (Status st = client.connect(i, s); !st.ok()) {
      std::fprintf(stderr, "soak client: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  Report rep;
  const auto t0 = std::chrono::steady_clock::now();
  Status st;
  while (true) {
    auto done = client.step();
    if (!done.ok()) {
      st = done.status();
      break;
    }
    if (*done) break;
    if (std::chrono::steady_clock::now() - t0 > a.o.time_limit) {
      st = err::from_errno(ETIMEDOUT, "no end in time: " + client.progress());
      break;
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<uint64_t> sends(n);
  for (int i = 0; i < a.o.qps; ++i) sends[size_t(i)] = client.sends(i);
  std::string server_says = "no answer";
  uint32_t len = 0;
  if (st.ok() && write_all(fd, sends.data(), sends.size() * 8) && read_all(fd, &len, 4) && len < 4096) {
    server_says.resize(len);
    if (!read_all(fd, server_says.data(), len)) server_says = "no answer";
  }
  ::close(fd);
  if (st.ok() && server_says != "ok") st = err::io("server: " + server_says);
  rep.ok = st.ok();
  if (!st.ok()) rep.error = st.to_string();
  rep.totals = client.totals();
  rep.sends_checked = st.ok() ? rep.totals.sends : 0;
  rep.client_counters = (*side)->counters();
  std::printf("soak client (%s): %s\n", (*side)->name().c_str(), rep.summary().c_str());
  return rep.ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (!a.server.empty()) return run_server(a);
  if (!a.client.empty()) {
    if (a.peer.empty()) usage("--client needs --peer");
    return run_client(a);
  }
  std::printf("soak: %d QPs x %.1f MiB each, chunks of %u KiB, %u in flight per QP, seed %" PRIu64 "\n", a.o.qps,
              double(a.o.bytes_per_qp) / (1 << 20), a.o.chunk >> 10, a.o.depth, a.o.seed);
  int failures = 0;
  std::vector<double> drops = a.drops;
  if (!a.faults.empty()) drops = {0};
  for (const std::string net : {"fake", "udp"}) {
    if (a.net != "both" && a.net != net) continue;
    for (double drop : drops) {
      const FaultConfig fa = faults_for(a, drop, a.o.seed * 2 + 1), fb = faults_for(a, drop, a.o.seed * 2 + 2);
      std::unique_ptr<Side> sa, sb;
      if (net == "fake") {
        auto fnet = net::FakeNetwork::create();
        fnet->set_queue_limit(1 << 16);
        auto x = open_fake_side(fnet, "10.0.0.1", fa);
        auto y = open_fake_side(fnet, "10.0.0.2", fb);
        if (!x.ok() || !y.ok()) {
          std::fprintf(stderr, "soak: %s\n", (x.ok() ? y.status() : x.status()).to_string().c_str());
          return 1;
        }
        sa = std::move(*x);
        sb = std::move(*y);
      } else {
        DeviceInfo da = device("127.0.0.1", "soak-a"), db = device("127.0.0.2", "soak-b");
        da.udp_port = db.udp_port = 0;
        da.faults = fa;
        db.faults = fb;
        auto x = open_api_side(da);
        auto y = open_api_side(db);
        if (!x.ok() || !y.ok()) {
          std::fprintf(stderr, "soak: %s\n", (x.ok() ? y.status() : x.status()).to_string().c_str());
          return 1;
        }
        sa = std::move(*x);
        sb = std::move(*y);
      }
      std::printf("%-4s %s\n", net.c_str(), to_string(fa).c_str());
      std::fflush(stdout);
      const Report r = run_in_process(*sa, *sb, a.o);
      std::printf("     %s\n", r.summary().c_str());
      std::fflush(stdout);
      failures += !r.ok;
    }
  }
  std::printf("soak: %s\n", failures ? "FAILED" : "all runs ok");
  return failures ? 1 : 0;
}
