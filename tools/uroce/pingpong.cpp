// `uroce pingpong`: seed 000's ping-pong experiment in one command.
//
//   uroce pingpong [MODE...] [--local]          both ends here (the default)
//   uroce pingpong --listen [--addr A]          the server: listener + agents
//   uroce pingpong --connect HOST[:PORT] ...    the client, against a listener
//
// With --local the server is a copy of this program (/proc/self/exe) pinned
// to the second CPU, the client runs here on the first, and each mode is
// one connection to the listener, which hands it to an agent.  Both sides
// report round-trip time (median, p99) and CPU as a share of the elapsed
// time, split into the application's threads and the library's progress
// thread; the table ranks the modes like the seed's summary.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "pingpong_common.hpp"
#include "uroce/version.hpp"

namespace uroce::pingpong {
namespace {

struct Options {
  std::vector<std::string> modes;
  bool local = false;
  bool listen = false;
  std::string connect;
  uint32_t size = 8;
  uint64_t iters = 10000;
  uint64_t warmup = 1000;
  std::string addr;                     // this side's RDMA address
  std::string peer_addr = "127.0.0.2";  // --local: the server's
  uint16_t port = 0;
  uint16_t udp_port = 4791;
  uint32_t mtu = 0;
  std::string cpus;
  uint64_t connections = 0;
  bool json = false;
  int ready_fd = -1;
  int cpu = -1;
  bool quiet = false;
};

int fail(const std::string& what) {
  std::fprintf(stderr, "uroce pingpong: %s\n", what.c_str());
  return 1;
}

std::string pct(double v) { return bench::fmt(v) + "%"; }

// ------------------------------------------------------------------ table

void print_table(const Options& o, const std::vector<Outcome>& out, const std::string& where) {
  std::printf("uroce pingpong: %s ping-pong, %llu round trips per mode after %llu warm-up\n",
              bench::size_name(o.size).c_str(), static_cast<unsigned long long>(o.iters),
              static_cast<unsigned long long>(o.warmup));
  std::printf("%s\n", where.c_str());
  std::printf("load average %s\n\n", bench::load_average().c_str());
  // Columns: mode 22, side 6 | median 9, p99 9 | user 8, kernel 8 | user 8, kernel 8 | total 7.
  std::printf("%-22s %-6s | %-19s | %-17s | %-17s | %7s\n", "", "", "  round trip (us)", "  application CPU",
              " library progress", "total");
  std::printf("%-22s %-6s | %9s %9s | %8s %8s | %8s %8s | %7s\n", "mode", "side", "median", "p99", "user", "kernel",
              "user", "kernel", "CPU");
  std::printf("%s\n", std::string(22 + 1 + 6 + 3 + 19 + 3 + 17 + 3 + 17 + 3 + 7, '-').c_str());
  // Fastest first, like the seed's ranking.
  std::vector<const Outcome*> rows;
  for (const Outcome& r : out) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(), [](const Outcome* a, const Outcome* b) {
    if (a->ok != b->ok) return a->ok;
    return a->client.rtt_median < b->client.rtt_median;
  });
  bool passive = false;
  for (const Outcome* r : rows) {
    if (!r->ok) {
      std::printf("%-22s FAILED: %s\n", name(r->params.mode), r->error.c_str());
      continue;
    }
    const bool tcp = is_tcp(r->params.mode);
    auto line = [&](const char* mode, const char* side, const Figures& f) {
      std::string med = bench::fmt(f.rtt_from_elapsed ? f.rtt_mean : f.rtt_median);
      if (f.rtt_from_elapsed) {
        med = "*" + med;
        passive = true;
      }
      std::printf("%-22s %-6s | %9s %9s | %8s %8s | %8s %8s | %7s\n", mode, side, med.c_str(),
                  bench::fmt(f.rtt_p99).c_str(), pct(f.cpu.app_user).c_str(), pct(f.cpu.app_sys).c_str(),
                  tcp ? "-" : pct(f.cpu.prog_user).c_str(), tcp ? "-" : pct(f.cpu.prog_sys).c_str(),
                  pct(f.cpu.total()).c_str());
    };
    line(name(r->params.mode), "client", r->client);
    line("", "server", r->server);
  }
  std::printf("\n");
  if (passive) std::printf("* the passive server sees no round trips: its figure is elapsed time / round trips\n");
  std::printf(
      "CPU: user and kernel time as %% of elapsed time; application = the process minus the NIC's\n"
      "progress thread (the library's work for a side that does not poll: ACKs, READ responses).\n\n");

  std::printf("Ranked by round-trip time (client median):\n");
  for (const Outcome* r : rows)
    if (r->ok)
      std::printf("  %7s us  %-22s %s\n", bench::fmt(r->client.rtt_median).c_str(), name(r->params.mode),
                  describe(r->params.mode));
  std::vector<const Outcome*> by_cpu;
  for (const Outcome* r : rows)
    if (r->ok) by_cpu.push_back(r);
  std::stable_sort(by_cpu.begin(), by_cpu.end(),
                   [](const Outcome* a, const Outcome* b) { return a->client.cpu.total() < b->client.cpu.total(); });
  std::printf("Ranked by client total CPU:\n");
  for (const Outcome* r : by_cpu)
    std::printf("  %7s     %-22s server %s\n", pct(r->client.cpu.total()).c_str(), name(r->params.mode),
                pct(r->server.cpu.total()).c_str());
  std::printf(
      "\nSeed 000 (InfiniBand QDR, hardware NIC): 8.3 us unsignaled WRITE/READ, 14.3 signaled,\n"
      "15.7 SEND/RECV busy polling, 21.1 SEND/RECV wait-for-notify; passive server 0%% CPU.\n");
}

void json_figures(bench::Json& j, const Figures& f) {
  j.begin_object();
  j.field("iters", f.iters);
  j.field("rtt_median_us", f.rtt_median).field("rtt_p99_us", f.rtt_p99).field("rtt_mean_us", f.rtt_mean);
  j.field("rtt_from_elapsed", f.rtt_from_elapsed);
  j.field("elapsed_us", f.cpu.elapsed_us);
  j.key("cpu_percent").begin_object();
  j.field("app_user", f.cpu.app_user).field("app_kernel", f.cpu.app_sys);
  j.field("progress_user", f.cpu.prog_user).field("progress_kernel", f.cpu.prog_sys);
  j.field("total", f.cpu.total());
  j.end_object();
  j.field("pid", f.pid).field("pinned_cpu", f.cpu_pinned);
  j.end_object();
}

void print_json(const Options& o, const std::vector<Outcome>& out, const std::string& client_addr,
                const std::string& server_addr, int client_cpu, int server_cpu) {
  bench::Json j;
  j.begin_object();
  j.field("tool", "uroce pingpong").field("version", uroce::version());
  j.field("size", o.size).field("iters", o.iters).field("warmup", o.warmup);
  j.field("load_average", bench::load_average());
  j.key("client").begin_object().field("addr", client_addr).field("cpu", client_cpu).end_object();
  j.key("server").begin_object().field("addr", server_addr).field("cpu", server_cpu).end_object();
  j.key("modes").begin_array();
  for (const Outcome& r : out) {
    j.begin_object();
    j.field("mode", name(r.params.mode)).field("description", describe(r.params.mode)).field("ok", r.ok);
    if (!r.ok) {
      j.field("error", r.error);
    } else {
      j.key("client");
      json_figures(j, r.client);
      j.key("server");
      json_figures(j, r.server);
    }
    j.end_object();
  }
  j.end_array();
  j.end_object();
  std::printf("%s\n", j.str().c_str());
}

// ------------------------------------------------------------------ roles

Result<std::vector<Mode>> modes_of(const Options& o) {
  std::vector<Mode> modes;
  if (o.modes.empty() || (o.modes.size() == 1 && o.modes[0] == "all"))
    return std::vector<Mode>(std::begin(kAllModes), std::end(kAllModes));
  for (const std::string& s : o.modes) {
    auto m = parse_mode(s);
    if (!m) {
      std::string all;
      for (Mode k : kAllModes) all += std::string(all.empty() ? "" : ", ") + name(k);
      return err::inval("unknown mode '" + s + "' (modes: " + all + ", or all)");
    }
    modes.push_back(*m);
  }
  return modes;
}

int run_listen(const Options& o) {
  ListenerConfig cfg;
  auto a = IpAddr::parse(o.addr.empty() ? "127.0.0.1" : o.addr);
  if (!a) return fail("--addr " + o.addr + " is not an IP address");
  cfg.addr = *a;
  cfg.port = o.port ? o.port : (o.ready_fd >= 0 ? 0 : kDefaultPort);
  cfg.udp_port = o.udp_port;
  cfg.connections = o.connections;
  cfg.ready_fd = o.ready_fd;
  cfg.quiet = o.quiet;
  cfg.cpu = o.cpu;
  return run_listener(cfg);
}

int run_clients(const Options& o, const Endpoint& server, const IpAddr& addr, int cpu, int server_cpu,
                const std::vector<Mode>& modes, const std::string& where) {
  std::vector<Outcome> out;
  ClientConfig cfg;
  cfg.server = server;
  cfg.addr = addr;
  cfg.udp_port = o.udp_port;
  cfg.mtu = o.mtu;
  cfg.cpu = cpu;
  for (Mode m : modes) {
    Params p;
    p.mode = m;
    p.size = o.size;
    p.iters = o.iters;
    p.warmup = o.warmup;
    out.push_back(run_client(cfg, p));
    if (!o.json && !out.back().ok) std::fprintf(stderr, "uroce pingpong: %s: %s\n", name(m), out.back().error.c_str());
  }
  if (o.json)
    print_json(o, out, addr.is_unspecified() ? "" : addr.to_string(), server.addr.to_string(), cpu, server_cpu);
  else
    print_table(o, out, where);
  return std::all_of(out.begin(), out.end(), [](const Outcome& r) { return r.ok; }) ? 0 : 1;
}

int run_connect(const Options& o) {
  auto modes = modes_of(o);
  if (!modes.ok()) return fail(modes.status().to_string());
  auto server = bench::parse_endpoint(o.connect, kDefaultPort);
  if (!server.ok()) return fail(server.status().to_string());
  IpAddr addr{};
  if (!o.addr.empty()) {
    auto a = IpAddr::parse(o.addr);
    if (!a) return fail("--addr " + o.addr + " is not an IP address");
    addr = *a;
  }
  return run_clients(o, *server, addr, -1, -1, *modes,
                     "client pid " + std::to_string(::getpid()) + " -> listener " + server->to_string());
}

int run_local(const Options& o) {
  auto modes = modes_of(o);
  if (!modes.ok()) return fail(modes.status().to_string());
  auto cpus = bench::parse_cpu_pair(o.cpus.empty() ? bench::default_cpu_pair() : o.cpus);
  if (!cpus.ok()) return fail(cpus.status().to_string());
  auto caddr = IpAddr::parse(o.addr.empty() ? "127.0.0.1" : o.addr);
  auto saddr = IpAddr::parse(o.peer_addr);
  if (!caddr || !saddr) return fail("--addr/--peer-addr: not IP addresses");
  // Pin before any NIC exists: its progress thread inherits the CPU.
  if (Status s = bench::pin_to_cpu(cpus->first); !s.ok()) return fail(s.to_string());
  bench::Child server;
  std::vector<std::string> args = {"pingpong",
                                   "--listen",
                                   "--quiet",
                                   "--addr",
                                   saddr->to_string(),
                                   "--port",
                                   "0",
                                   "--udp-port",
                                   std::to_string(o.udp_port),
                                   "--connections",
                                   std::to_string(modes->size()),
                                   "--ready-fd",
                                   "3",
                                   "--cpu",
                                   std::to_string(cpus->second)};
  if (Status s = server.spawn(args); !s.ok()) return fail("start the server: " + s.to_string());
  auto port = server.wait_ready();
  if (!port.ok()) return fail("the server: " + port.status().to_string());
  const Endpoint ep{*saddr, uint16_t(std::stoi(*port))};
  auto cpu_name = [](int c) { return c < 0 ? std::string("any CPU") : "CPU " + std::to_string(c); };
  const std::string where = "client " + caddr->to_string() + " (pid " + std::to_string(::getpid()) + ", " +
                            cpu_name(cpus->first) + ") <-> server " + saddr->to_string() + " (pid " +
                            std::to_string(server.pid()) + ", " + cpu_name(cpus->second) +
                            "), RoCEv2 (through shared memory; UROCE_SHM=0: UDP) and TCP on loopback";
  const int rc = run_clients(o, ep, *caddr, cpus->first, cpus->second, *modes, where);
  const int child = server.wait(10000);
  if (child != 0) std::fprintf(stderr, "uroce pingpong: the server exited with status %d\n", child);
  return rc != 0 ? rc : (child != 0 ? 1 : 0);
}

}  // namespace
}  // namespace uroce::pingpong

namespace uroce::cli {

Command add_pingpong(CLI::App& root) {
  static pingpong::Options o;
  Command c;
  c.app = root.add_subcommand(
      "pingpong",
      "Seed 000's ping-pong experiment: SEND/RECV busy-polling and wait-for-notify, RDMA WRITE/READ signaled "
      "and unsignaled, and TCP; round-trip time and CPU of both sides");
  c.app->add_option("modes", o.modes,
                    "modes to play: send-busy send-notify write-read-signaled write-read-unsignaled tcp "
                    "tcp-busy, or all (default)");
  auto* local = c.app->add_flag("--local", o.local, "run both ends here, the server as a child process (default)");
  auto* listen = c.app->add_flag("--listen", o.listen, "be the server: a listener handing connections to agents");
  auto* conn = c.app->add_option("--connect", o.connect, "be the client of the listener at HOST[:PORT]");
  local->excludes(listen)->excludes(conn);
  listen->excludes(conn);
  c.app->add_option("--size", o.size, "bytes in each ping and pong (suffixes K, M)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(uint32_t(1), uint32_t(16) << 20))
      ->capture_default_str();
  c.app->add_option("--iters", o.iters, "round trips measured per mode")
      ->check(CLI::Range(uint64_t(2), uint64_t(1) << 32))
      ->capture_default_str();
  c.app->add_option("--warmup", o.warmup, "round trips before measuring")->capture_default_str();
  c.app->add_option("--addr", o.addr,
                    "this side's RDMA device address (default: 127.0.0.1 for --local and --listen; the control "
                    "connection's local address for --connect)");
  c.app->add_option("--peer-addr", o.peer_addr, "--local: the server's RDMA device address")->capture_default_str();
  c.app->add_option("--port", o.port, "TCP port of the listener (default 7471; --local: any)");
  c.app->add_option("--udp-port", o.udp_port, "UDP port of the RDMA devices (0: ephemeral)")->capture_default_str();
  c.app->add_option("--mtu", o.mtu, "path MTU (default: the ports' smaller MTU)")
      ->check(CLI::IsMember({256u, 512u, 1024u, 2048u, 4096u}));
  c.app->add_option("--cpus", o.cpus, "--local: CPUs of client and server, \"A,B\" or none (default: the first two)");
  c.app->add_option("--connections", o.connections, "--listen: exit after serving this many (0: never)")
      ->capture_default_str();
  c.app->add_flag("--json", o.json, "print the results as JSON");
  c.app->add_option("--ready-fd", o.ready_fd, "(internal) report the port here once listening")->group("");
  c.app->add_option("--cpu", o.cpu, "(internal) pin the listener to this CPU")->group("");
  c.app->add_flag("--quiet", o.quiet, "(internal) no line per connection")->group("");
  c.run = [] {
    if (o.listen) return pingpong::run_listen(o);
    if (!o.connect.empty()) return pingpong::run_connect(o);
    return pingpong::run_local(o);
  };
  return c;
}

}  // namespace uroce::cli
