// `uroce perf`: latency, bandwidth and message rate of RC SEND, WRITE, READ
// and atomics over message sizes 1 B .. 4 MiB, between two processes.
//
//   uroce perf [--local]                 both ends here (the default): the
//                                        server is a child pinned to the
//                                        second CPU, the client on the first
//   uroce perf --listen [--addr A]       the server
//   uroce perf --connect HOST[:PORT]     the client
//
// A human table, or --json.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "commands.hpp"
#include "perf_common.hpp"
#include "uroce/version.hpp"

namespace uroce::perf {

const char* name(Op o) noexcept {
  switch (o) {
    case Op::send: return "send";
    case Op::write: return "write";
    case Op::read: return "read";
    case Op::atomic: return "atomic";
  }
  return "?";
}

const char* name(Test t) noexcept { return t == Test::lat ? "lat" : "bw"; }

double Outcome::jain() const {
  double sum = 0, sq = 0;
  for (double x : qp_bytes_per_s) {
    sum += x;
    sq += x * x;
  }
  return sq > 0 ? sum * sum / (double(qp_bytes_per_s.size()) * sq) : std::nan("");
}

std::optional<Op> parse_op(std::string_view s) noexcept {
  for (Op o : {Op::send, Op::write, Op::read, Op::atomic})
    if (s == name(o)) return o;
  return std::nullopt;
}

std::optional<Test> parse_test(std::string_view s) noexcept {
  if (s == "lat") return Test::lat;
  if (s == "bw") return Test::bw;
  return std::nullopt;
}

namespace {

struct Options {
  std::string ops = "send,write,read,atomic";
  std::string tests = "lat,bw";
  std::string sizes = "all";
  bool local = false;
  bool listen = false;
  std::string connect;
  std::string addr;
  std::string peer_addr = "127.0.0.2";
  uint16_t port = 0;
  uint16_t udp_port = 4791;
  std::string cpus;
  std::string wait = "busy";
  std::string server = "poll";
  uint64_t connections = 0;
  bool json = false;
  bool no_inline = false;
  Config cfg;
  int ready_fd = -1;
  int cpu = -1;
  bool quiet = false;
};

int fail(const std::string& what) {
  std::fprintf(stderr, "uroce perf: %s\n", what.c_str());
  return 1;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// "8", "4K", "64KiB", "1M"
std::optional<uint32_t> parse_size(const std::string& s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  std::string unit(end);
  uint64_t mult = 1;
  if (unit == "K" || unit == "k" || unit == "KiB")
    mult = 1024;
  else if (unit == "M" || unit == "m" || unit == "MiB")
    mult = 1u << 20;
  else if (!unit.empty() && unit != "B")
    return std::nullopt;
  const uint64_t b = v * mult;
  if (end == s.c_str() || b == 0 || b > kMaxSize) return std::nullopt;
  return uint32_t(b);
}

Result<std::vector<Point>> points_of(const Options& o) {
  std::vector<Op> ops;
  for (const std::string& s : split(o.ops)) {
    auto op = parse_op(s);
    if (!op) return err::inval("--op " + s + ": one of send, write, read, atomic");
    ops.push_back(*op);
  }
  std::vector<Test> tests;
  for (const std::string& s : split(o.tests)) {
    auto t = parse_test(s);
    if (!t) return err::inval("--test " + s + ": lat or bw");
    tests.push_back(*t);
  }
  std::vector<uint32_t> sizes;
  if (o.sizes == "all") {
    for (uint32_t s = 1; s <= kMaxSize; s *= 2) sizes.push_back(s);
  } else {
    for (const std::string& s : split(o.sizes)) {
      auto v = parse_size(s);
      if (!v) return err::inval("--size " + s + ": a size of 1 B .. 4 MiB (suffixes K, M)");
      sizes.push_back(*v);
    }
  }
  std::vector<Point> pts;
  for (Test t : tests)
    for (Op op : ops) {
      if (op == Op::atomic) {  // always 8 bytes
        pts.push_back({op, t, 8});
        continue;
      }
      for (uint32_t s : sizes) pts.push_back({op, t, s});
    }
  if (pts.empty()) return err::inval("nothing to measure");
  if (o.cfg.qps > 1)
    for (const Point& pt : pts)
      if (pt.test != Test::bw || pt.op == Op::send)
        return err::inval("--qps " + std::to_string(o.cfg.qps) + ": bandwidth of write, read or atomic only");
  return pts;
}

std::string upper(const char* s) {
  std::string u(s);
  for (char& c : u) c = char(std::toupper(uint8_t(c)));
  return u;
}

std::string cpu_cell(const bench::CpuShare& c) {
  return bench::fmt(c.app(), 0) + "+" + bench::fmt(c.progress(), 0) + "%";
}

void print_table(const Options& o, const std::vector<Outcome>& out, const std::string& where) {
  std::printf("uroce perf: RC %s\n", where.c_str());
  std::printf("load average %s; client waits by %s; one-sided server %s\n\n", bench::load_average().c_str(),
              o.cfg.notify ? "wait-for-notify" : "busy polling",
              o.cfg.server == Server::sleep ? "asleep (the NIC's progress thread answers)"
                                            : "busy-polling its CQ (the NIC runs in its thread)");
  const bool any_lat = std::any_of(out.begin(), out.end(), [](const Outcome& r) { return r.point.test == Test::lat; });
  const bool any_bw = std::any_of(out.begin(), out.end(), [](const Outcome& r) { return r.point.test == Test::bw; });
  if (any_lat) {
    std::printf("Latency: round trip of one operation (us); CPU: application + library progress, %% of elapsed\n");
    std::printf("%-7s %9s %9s %9s %9s %9s %9s   %10s %10s\n", "op", "size", "iters", "min", "median", "p99", "mean",
                "client CPU", "server CPU");
    for (const Outcome& r : out) {
      if (r.point.test != Test::lat) continue;
      if (!r.ok) {
        std::printf("%-7s %9s   FAILED: %s\n", upper(name(r.point.op)).c_str(), bench::size_name(r.point.size).c_str(),
                    r.error.c_str());
        continue;
      }
      std::printf("%-7s %9s %9zu %9s %9s %9s %9s   %10s %10s\n", upper(name(r.point.op)).c_str(),
                  bench::size_name(r.point.size).c_str(), r.rtt.n, bench::fmt(r.rtt.min, 2).c_str(),
                  bench::fmt(r.rtt.median, 2).c_str(), bench::fmt(r.rtt.p99, 2).c_str(),
                  bench::fmt(r.rtt.mean, 2).c_str(), cpu_cell(r.client_cpu).c_str(), cpu_cell(r.server_cpu).c_str());
    }
    std::printf("\n");
  }
  if (any_bw) {
    std::printf("Bandwidth and message rate: window %u%s, post list %u, one signaled per %u\n", o.cfg.window,
                o.cfg.qps > 1 ? (" on each of " + std::to_string(o.cfg.qps) + " QPs").c_str() : "", o.cfg.post_list,
                o.cfg.signal_every);
    std::printf("%-7s %9s %10s %10s %10s %10s   %10s %10s\n", "op", "size", "messages", "Mmsg/s", "MB/s", "Gbit/s",
                "client CPU", "server CPU");
    for (const Outcome& r : out) {
      if (r.point.test != Test::bw) continue;
      if (!r.ok) {
        std::printf("%-7s %9s   FAILED: %s\n", upper(name(r.point.op)).c_str(), bench::size_name(r.point.size).c_str(),
                    r.error.c_str());
        continue;
      }
      std::printf("%-7s %9s %10llu %10s %10s %10s   %10s %10s\n", upper(name(r.point.op)).c_str(),
                  bench::size_name(r.point.size).c_str(), static_cast<unsigned long long>(r.msgs),
                  bench::fmt(r.msgs_per_s() / 1e6, 3).c_str(), bench::fmt(r.bytes_per_s() / 1e6, 1).c_str(),
                  bench::fmt(r.bytes_per_s() * 8 / 1e9, 2).c_str(), cpu_cell(r.client_cpu).c_str(),
                  cpu_cell(r.server_cpu).c_str());
      if (!r.qp_bytes_per_s.empty()) {
        const auto [lo, hi] = std::minmax_element(r.qp_bytes_per_s.begin(), r.qp_bytes_per_s.end());
        std::printf("%-7s %9s %zu QPs: MB/s per QP min %s, max %s; Jain's index %s\n", "", "", r.qp_bytes_per_s.size(),
                    bench::fmt(*lo / 1e6, 1).c_str(), bench::fmt(*hi / 1e6, 1).c_str(),
                    bench::fmt(r.jain(), 3).c_str());
      }
    }
    std::printf("\n");
  }
}

void json_cpu(bench::Json& j, const bench::CpuShare& c) {
  j.begin_object();
  j.field("app_user", c.app_user).field("app_kernel", c.app_sys);
  j.field("progress_user", c.prog_user).field("progress_kernel", c.prog_sys).field("total", c.total());
  j.end_object();
}

void print_json(const Options& o, const std::vector<Outcome>& out, const std::string& client_addr,
                const std::string& server_addr, int ccpu, int scpu, const std::string& error) {
  bench::Json j;
  j.begin_object();
  j.field("tool", "uroce perf").field("version", uroce::version());
  j.field("load_average", bench::load_average());
  j.key("config").begin_object();
  j.field("duration_s", o.cfg.duration_s).field("max_iters", o.cfg.max_iters);
  j.field("window", o.cfg.window).field("post_list", o.cfg.post_list).field("signal_every", o.cfg.signal_every);
  j.field("wait", o.cfg.notify ? "notify" : "busy");
  j.field("server", o.cfg.server == Server::sleep ? "sleep" : "poll");
  j.field("mtu", o.cfg.mtu).field("inline_up_to", o.cfg.inline_small ? 64 : 0).field("qps", o.cfg.qps);
  j.end_object();
  j.key("client").begin_object().field("addr", client_addr).field("cpu", ccpu).end_object();
  j.key("server").begin_object().field("addr", server_addr).field("cpu", scpu).end_object();
  j.field("ok", error.empty());
  if (!error.empty()) j.field("error", error);
  j.key("results").begin_array();
  for (const Outcome& r : out) {
    j.begin_object();
    j.field("op", name(r.point.op)).field("test", name(r.point.test)).field("size", r.point.size);
    j.field("ok", r.ok);
    if (!r.ok) {
      j.field("error", r.error).end_object();
      continue;
    }
    if (r.point.test == Test::lat) {
      j.field("iters", uint64_t(r.rtt.n));
      j.key("rtt_us").begin_object();
      j.field("min", r.rtt.min).field("median", r.rtt.median).field("p99", r.rtt.p99);
      j.field("mean", r.rtt.mean).field("max", r.rtt.max);
      j.end_object();
    } else {
      j.field("msgs", r.msgs).field("seconds", r.seconds);
      j.field("msgs_per_s", r.msgs_per_s()).field("bytes_per_s", r.bytes_per_s());
      j.field("gbytes_per_s", r.bytes_per_s() / 1e9);
      if (!r.qp_bytes_per_s.empty()) {
        j.key("qp_bytes_per_s").begin_array();
        for (double x : r.qp_bytes_per_s) j.value(x);
        j.end_array();
        j.field("jain", r.jain());
      }
    }
    if (r.point.op == Op::send) j.field("server_received", r.server_received);
    j.key("client_cpu");
    json_cpu(j, r.client_cpu);
    j.key("server_cpu");
    json_cpu(j, r.server_cpu);
    j.end_object();
  }
  j.end_array();
  j.end_object();
  std::printf("%s\n", j.str().c_str());
}

Status apply_modes(Options& o) {
  if (o.wait != "busy" && o.wait != "notify") return err::inval("--wait busy or notify");
  if (o.server != "poll" && o.server != "sleep") return err::inval("--server poll or sleep");
  o.cfg.notify = o.wait == "notify";
  o.cfg.server = o.server == "sleep" ? Server::sleep : Server::poll;
  o.cfg.inline_small = !o.no_inline;
  return {};
}

int run_clients(const Options& o, const Endpoint& server, const IpAddr& addr, int ccpu, int scpu,
                const std::string& where) {
  auto pts = points_of(o);
  if (!pts.ok()) return fail(pts.status().to_string());
  ClientConfig cc;
  cc.server = server;
  cc.addr = addr;
  cc.udp_port = o.udp_port;
  cc.cfg = o.cfg;
  std::string error;
  const std::vector<Outcome> out = run_client(cc, *pts, &error);
  if (o.json) {
    print_json(o, out, addr.is_unspecified() ? "" : addr.to_string(), server.addr.to_string(), ccpu, scpu, error);
  } else {
    print_table(o, out, where);
    if (!error.empty()) std::fprintf(stderr, "uroce perf: %s\n", error.c_str());
  }
  return error.empty() ? 0 : 1;
}

int run_local(const Options& o) {
  auto cpus = bench::parse_cpu_pair(o.cpus.empty() ? bench::default_cpu_pair() : o.cpus);
  if (!cpus.ok()) return fail(cpus.status().to_string());
  auto caddr = IpAddr::parse(o.addr.empty() ? "127.0.0.1" : o.addr);
  auto saddr = IpAddr::parse(o.peer_addr);
  if (!caddr || !saddr) return fail("--addr/--peer-addr: not IP addresses");
  if (auto pts = points_of(o); !pts.ok()) return fail(pts.status().to_string());
  if (Status s = bench::pin_to_cpu(cpus->first); !s.ok()) return fail(s.to_string());
  bench::Child server;
  const std::vector<std::string> args = {"perf",
                                         "--listen",
                                         "--quiet",
                                         "--addr",
                                         saddr->to_string(),
                                         "--port",
                                         "0",
                                         "--udp-port",
                                         std::to_string(o.udp_port),
                                         "--connections",
                                         "1",
                                         "--ready-fd",
                                         "3",
                                         "--cpu",
                                         std::to_string(cpus->second)};
  if (Status s = server.spawn(args); !s.ok()) return fail("start the server: " + s.to_string());
  auto port = server.wait_ready();
  if (!port.ok()) return fail("the server: " + port.status().to_string());
  auto cpu_name = [](int c) { return c < 0 ? std::string("any CPU") : "CPU " + std::to_string(c); };
  const std::string where = "client " + caddr->to_string() + " (" + cpu_name(cpus->first) + ") -> server " +
                            saddr->to_string() + " (pid " + std::to_string(server.pid()) + ", " +
                            cpu_name(cpus->second) + "), loopback";
  const int rc = run_clients(o, Endpoint{*saddr, uint16_t(std::stoi(*port))}, *caddr, cpus->first, cpus->second, where);
  const int child = server.wait(15000);
  if (child != 0) std::fprintf(stderr, "uroce perf: the server exited with status %d\n", child);
  return rc != 0 ? rc : (child != 0 ? 1 : 0);
}

int run_connect(const Options& o) {
  auto server = bench::parse_endpoint(o.connect, kDefaultPort);
  if (!server.ok()) return fail(server.status().to_string());
  IpAddr addr{};
  if (!o.addr.empty()) {
    auto a = IpAddr::parse(o.addr);
    if (!a) return fail("--addr " + o.addr + " is not an IP address");
    addr = *a;
  }
  return run_clients(o, *server, addr, -1, -1, "client -> server " + server->to_string());
}

int run_listen(const Options& o) {
  auto a = IpAddr::parse(o.addr.empty() ? "127.0.0.1" : o.addr);
  if (!a) return fail("--addr " + o.addr + " is not an IP address");
  ServerConfig sc;
  sc.addr = *a;
  sc.port = o.port ? o.port : (o.ready_fd >= 0 ? 0 : kDefaultPort);
  sc.udp_port = o.udp_port;
  sc.connections = o.connections;
  sc.ready_fd = o.ready_fd;
  sc.cpu = o.cpu;
  sc.quiet = o.quiet;
  return run_server(sc);
}

}  // namespace
}  // namespace uroce::perf

namespace uroce::cli {

Command add_perf(CLI::App& root) {
  static perf::Options o;
  Command c;
  c.app = root.add_subcommand(
      "perf", "Latency, bandwidth and message rate of RC SEND, RDMA WRITE, RDMA READ and atomics, 1 B .. 4 MiB");
  c.app->add_option("--op", o.ops, "operations: send,write,read,atomic")->capture_default_str();
  c.app->add_option("--test", o.tests, "lat (round trip of one operation), bw (bandwidth and message rate)")
      ->capture_default_str();
  c.app->add_option("--size", o.sizes, "message sizes, e.g. 8,4K,64K,1M, or all (1 B .. 4 MiB, powers of 2)")
      ->capture_default_str();
  auto* local = c.app->add_flag("--local", o.local, "run both ends here, the server as a child process (default)");
  auto* listen = c.app->add_flag("--listen", o.listen, "be the server");
  auto* conn = c.app->add_option("--connect", o.connect, "be the client of the server at HOST[:PORT]");
  local->excludes(listen)->excludes(conn);
  listen->excludes(conn);
  c.app->add_option("--duration", o.cfg.duration_s, "seconds per point (bounded)")
      ->check(CLI::Range(0.001, 60.0))
      ->capture_default_str();
  c.app->add_option("--iters", o.cfg.max_iters, "latency: at most this many round trips per point")
      ->check(CLI::Range(uint64_t(1), uint64_t(100'000'000)))
      ->capture_default_str();
  c.app->add_option("--window", o.cfg.window, "bw: work requests outstanding")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  c.app->add_option("--post-list", o.cfg.post_list, "bw: work requests per post_send call")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  c.app->add_option("--signal-every", o.cfg.signal_every, "bw: one signaled work request per this many")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  c.app
      ->add_option("--qps", o.cfg.qps,
                   "bw of write, read, atomic: over this many RC QPs, a window on each; reports each QP's share and "
                   "Jain's fairness index")
      ->check(CLI::Range(1u, perf::kMaxQps))
      ->capture_default_str();
  c.app->add_option("--wait", o.wait, "how the client waits: busy or notify")->capture_default_str();
  c.app
      ->add_option("--server", o.server,
                   "one-sided tests: the server's thread busy-polls (poll) or sleeps, leaving the work to the NIC's "
                   "progress thread (sleep)")
      ->capture_default_str();
  c.app->add_flag("--no-inline", o.no_inline, "never post SENDs and WRITEs inline (default: up to 64 bytes)");
  c.app->add_option("--mtu", o.cfg.mtu, "path MTU (default: the ports' smaller MTU)")
      ->check(CLI::IsMember({256u, 512u, 1024u, 2048u, 4096u}));
  c.app->add_option("--addr", o.addr, "this side's RDMA device address");
  c.app->add_option("--peer-addr", o.peer_addr, "--local: the server's RDMA device address")->capture_default_str();
  c.app->add_option("--port", o.port, "TCP port of the server (default 7472; --local: any)");
  c.app->add_option("--udp-port", o.udp_port, "UDP port of the RDMA devices (0: ephemeral)")->capture_default_str();
  c.app->add_option("--cpus", o.cpus, "--local: CPUs of client and server, \"A,B\" or none (default: the first two)");
  c.app->add_option("--connections", o.connections, "--listen: exit after this many clients (0: never)");
  c.app->add_flag("--json", o.json, "print the results as JSON");
  c.app->add_option("--ready-fd", o.ready_fd, "(internal)")->group("");
  c.app->add_option("--cpu", o.cpu, "(internal)")->group("");
  c.app->add_flag("--quiet", o.quiet, "(internal)")->group("");
  c.run = [] {
    if (Status s = perf::apply_modes(o); !s.ok()) return perf::fail(s.to_string());
    if (o.listen) return perf::run_listen(o);
    if (!o.connect.empty()) return perf::run_connect(o);
    return perf::run_local(o);
  };
  return c;
}

}  // namespace uroce::cli
