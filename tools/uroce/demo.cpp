// `uroce demo`: RDMA between two processes, explained step by step.
//
// This process is the active side.  It starts a copy of itself
// (/proc/self/exe) as the passive side (demo_peer.cpp), the two swap what
// a connection needs over a socket pair, then the active side runs SEND,
// RDMA WRITE (and reads it back), RDMA READ and FETCH_AND_ADD against the
// passive's memory, checks every byte and prints what happened.  The exit
// status is 0 only if every check passed.
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstring>
#include <optional>
#include <vector>

#include "commands.hpp"
#include "demo_common.hpp"

extern char** environ;

namespace uroce::demo {
namespace {

constexpr const char* kSendText = "Hello, passive side! These bytes travel in a SEND. ";
constexpr const char* kWriteText = "RDMA WRITE: placed in the passive's memory by its NIC alone. ";
constexpr const char* kReadText = "The passive's memory, fetched by an RDMA READ. ";
constexpr uint64_t kCounterStart = 1000;
constexpr uint64_t kAdd = 42;

template <class T>
std::optional<T> get(Result<T> r, const char* what) {
  if (!r.ok()) {
    say("active", "error: %s: %s", what, r.status().to_string().c_str());
    return std::nullopt;
  }
  return std::move(r).value();
}

bool ok(const Status& s, const char* what) {
  if (!s.ok()) say("active", "error: %s: %s", what, s.to_string().c_str());
  return s.ok();
}

struct Checks {
  int passed = 0, failed = 0;
  void check(bool good, const std::string& what) {
    note("   [%s] %s", good ? "ok" : "FAIL", what.c_str());
    (good ? passed : failed)++;
  }
};

// The passive process: started with the socket as fd 3, reaped at the end
// (or killed, if we stop early).
class Peer {
 public:
  ~Peer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  Status spawn(const Options& o, int fd) {
    // The child sees the socket as fd 3, whatever number it has here.
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 3);
    const std::string size = std::to_string(o.size), mtu = std::to_string(o.mtu);
    std::vector<const char*> argv = {"uroce",  "demo",       "--peer-fd", "3",         "--addr", o.addr.c_str(),
                                     "--size", size.c_str(), "--mtu",     mtu.c_str(), nullptr};
    const int e = posix_spawn(&pid_, "/proc/self/exe", &fa, nullptr, const_cast<char* const*>(argv.data()), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0) {
      pid_ = -1;
      return err::from_errno(e, std::string("posix_spawn /proc/self/exe: ") + std::strerror(e));
    }
    return {};
  }
  pid_t pid() const { return pid_; }
  // Waits for the exit; returns the exit status (or 128 + signal).
  int wait() {
    int st = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &st, 0) != pid_) return 255;
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

 private:
  pid_t pid_ = -1;
};

struct Op {
  Wc wc;
  double us = 0;
  uint64_t out = 0, in = 0;  // packets sent / received meanwhile
  bool done = false;
};

uint64_t count(const Context& c, const char* name) {
  auto v = c.counter(name);
  return v.ok() ? *v : 0;
}

// Posts `wr` and busy-polls its completion, timing the round trip.
Op run(Context& ctx, QueuePair& qp, CompletionQueue& cq, const SendWr& wr) {
  Op op;
  const uint64_t tx0 = count(ctx, "tx_packets"), rx0 = count(ctx, "rx_packets");
  const auto t0 = std::chrono::steady_clock::now();
  if (!ok(qp.post_send(wr), "post_send")) return op;
  auto n = cq.poll_for(std::span<Wc>(&op.wc, 1), std::chrono::milliseconds(10000));
  const auto t1 = std::chrono::steady_clock::now();
  if (!n.ok() || *n != 1) {
    say("active", "error: no completion within 10 s%s", n.ok() ? "" : (": " + n.status().to_string()).c_str());
    return op;
  }
  op.us = std::chrono::duration<double, std::micro>(t1 - t0).count();
  op.out = count(ctx, "tx_packets") - tx0;
  op.in = count(ctx, "rx_packets") - rx0;
  op.done = true;
  say("active", "completion: %s", describe(op.wc).c_str());
  say("active", "round trip %.1f us; on the wire: %" PRIu64 " packet%s out, %" PRIu64 " in", op.us, op.out,
      op.out == 1 ? "" : "s", op.in);
  return op;
}

SendWr one_sided(WrOpcode opcode, const Sge& local, uint64_t remote, uint32_t rkey) {
  SendWr wr;
  wr.opcode = opcode;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&local, 1};
  wr.remote_addr = remote;
  wr.rkey = rkey;
  return wr;
}

std::string kib(uint64_t n) { return n % 1024 == 0 ? std::to_string(n / 1024) + " KiB" : std::to_string(n) + " bytes"; }

}  // namespace

int run_active(const Options& o) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Layout L(o.size);
  Checks checks;
  const uint32_t n = uint32_t(o.size);

  note("uroce demo: RDMA between two processes over RoCEv2 on %s (same host: through", o.addr.c_str());
  note("shared memory, or UDP with UROCE_SHM=0)");
  blank();
  note("This process is the ACTIVE side: it posts every operation.  It starts a copy of");
  note("itself as the PASSIVE side, which registers memory, posts one receive buffer and");
  note("otherwise leaves the work to its NIC: uroce, running inside each process.");
  blank();
  note("1. Set up: open the device, register memory, create a queue pair");

  auto addr = IpAddr::parse(o.addr);
  if (!addr) {
    say("active", "error: --addr %s is not an IPv4 or IPv6 address", o.addr.c_str());
    return 1;
  }
  DeviceInfo dev;
  dev.name = "uroce0";
  dev.gids = {*addr};
  dev.udp_port = 4791;
  std::optional<Context> ctx = get(Context::open(dev), "open the device");
  if (!ctx) return 1;
  std::optional<CompletionQueue> cq = get(ctx->create_cq(16), "create a completion queue");
  std::optional<ProtectionDomain> pd = get(ctx->alloc_pd(), "allocate a protection domain");
  if (!cq || !pd) return 1;
  Buffer buf(L.total());
  if (!buf.data) {
    say("active", "error: cannot allocate %s", kib(L.total()).c_str());
    return 1;
  }
  std::optional<MemoryRegion> mr = get(pd->reg_mr(buf.data, buf.size, access::kLocalWrite), "register memory");
  QpConfig qc;
  qc.type = QpType::rc;
  qc.send_cq = qc.recv_cq = &*cq;
  qc.cap = QpCap{16, 16, 1, 1, 64};
  std::optional<QueuePair> qp = get(pd->create_qp(qc), "create a queue pair");
  if (!mr || !qp) return 1;
  const PeerInfo me = qp->local_info();
  say("active", "pid %d: device %s speaks RoCEv2 on %s (port MTU %u)", int(::getpid()), ctx->name().c_str(),
      ctx->local_endpoint().to_string().c_str(), ctx->port_attr().active_mtu_bytes);
  say("active", "registered %s at %s: lkey %s, rkey %s", kib(buf.size).c_str(), hex(mr->addr()).c_str(),
      hex(mr->lkey(), 8).c_str(), hex(mr->rkey(), 8).c_str());
  say("active", "created RC queue pair %s, first PSN %s", hex(me.qpn, 6).c_str(), hex(me.psn, 6).c_str());

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    say("active", "error: socketpair: %s", std::strerror(errno));
    return 1;
  }
  Link link(sv[0]);
  Peer peer;
  say("active", "starting the passive side: /proc/self/exe demo --peer-fd 3 ...");
  std::fflush(stdout);
  if (!ok(peer.spawn(o, sv[1]), "start the passive side")) return 1;
  ::close(sv[1]);
  auto hello = link.expect("hello");
  if (!hello.ok()) {
    say("active", "error: %s", hello.status().to_string().c_str());
    return 1;
  }
  const PeerInfo them = peer_from(*hello);
  const uint64_t their_addr = hello->num("addr");
  const uint32_t their_rkey = uint32_t(hello->num("rkey"));
  const uint64_t their_read_hash = hello->num("read_hash");

  blank();
  note("2. Exchange what a connection needs, over a socket pair (rdma_cm's job, one day)");
  note("                     active               passive");
  note("   GID (IP address)  %-20s %s", me.gid.to_string().c_str(), them.gid.to_string().c_str());
  note("   QP number         %-20s %s", hex(me.qpn, 6).c_str(), hex(them.qpn, 6).c_str());
  note("   first PSN         %-20s %s", hex(me.psn, 6).c_str(), hex(them.psn, 6).c_str());
  note("   buffer address    %-20s %s", hex(mr->addr()).c_str(), hex(their_addr).c_str());
  note("   rkey              %-20s %s", hex(mr->rkey(), 8).c_str(), hex(their_rkey, 8).c_str());
  note("   Each side moves its QP RESET -> INIT -> RTR -> RTS towards the other, path MTU %u.", o.mtu);
  auto kv = to_kv(me);
  kv["mtu"] = std::to_string(o.mtu);
  if (!ok(link.send("connect", kv), "talk to the passive side")) return 1;
  ConnectOptions co;
  co.mtu = *mtu_from_bytes(o.mtu);
  if (!ok(qp->connect(them, co), "connect")) return 1;
  say("active", "queue pair %s is in %s, connected to %s QP %s", hex(me.qpn, 6).c_str(), to_string(qp->state()),
      them.gid.to_string().c_str(), hex(them.qpn, 6).c_str());
  if (auto r = link.expect("ready"); !r.ok()) {
    say("active", "error: %s", r.status().to_string().c_str());
    return 1;
  }

  // ---- SEND
  blank();
  note("3. SEND %s (two-sided: it lands in the receive buffer the passive posted)", kib(n).c_str());
  fill_text(buf.span(L.send(), n), kSendText);
  say("active", "SEND %s", preview(buf.span(L.send(), n)).c_str());
  Sge s_send = mr->sge(L.send(), n);
  SendWr send;
  send.opcode = WrOpcode::send;
  send.send_flags = send_flags::kSignaled;
  send.sg_list = {&s_send, 1};
  Op op_send = run(*ctx, *qp, *cq, send);
  const uint64_t send_hash = fnv1a(buf.span(L.send(), n));
  if (!ok(link.send("show-recv"), "talk to the passive side")) return 1;
  auto recv = link.expect("recv");
  if (!recv.ok()) say("active", "error: %s", recv.status().to_string().c_str());
  checks.check(op_send.done && op_send.wc.status == WcStatus::success && op_send.wc.byte_len == n,
               "the SEND completed successfully");
  checks.check(recv.ok() && recv->num("status") == 0 && recv->num("len") == n && recv->num("hash") == send_hash,
               "the passive received exactly the " + std::to_string(n) + " bytes sent");

  // ---- RDMA WRITE
  blank();
  note("4. RDMA WRITE %s into the passive's memory (one-sided: no receive, no code runs there)", kib(n).c_str());
  fill_text(buf.span(L.write(), n), kWriteText);
  say("active", "RDMA WRITE to %s, rkey %s: %s", hex(their_addr + L.write()).c_str(), hex(their_rkey, 8).c_str(),
      preview(buf.span(L.write(), n)).c_str());
  Sge s_write = mr->sge(L.write(), n);
  Op op_write = run(*ctx, *qp, *cq, one_sided(WrOpcode::rdma_write, s_write, their_addr + L.write(), their_rkey));
  const uint64_t write_hash = fnv1a(buf.span(L.write(), n));
  if (!ok(link.send("check-write", {{"hash", hex(write_hash)}}), "talk to the passive side")) return 1;
  auto wcheck = link.expect("write");
  if (!wcheck.ok()) say("active", "error: %s", wcheck.status().to_string().c_str());
  checks.check(op_write.done && op_write.wc.status == WcStatus::success, "the RDMA WRITE completed successfully");
  checks.check(wcheck.ok() && wcheck->num("hash") == write_hash,
               "the passive's memory holds exactly the bytes written (compared there)");
  say("active", "reading the written bytes back with an RDMA READ:");
  Sge s_back = mr->sge(L.back(), n);
  Op op_back = run(*ctx, *qp, *cq, one_sided(WrOpcode::rdma_read, s_back, their_addr + L.write(), their_rkey));
  checks.check(op_back.done && op_back.wc.status == WcStatus::success &&
                   std::memcmp(buf.data + L.back(), buf.data + L.write(), n) == 0,
               "read back byte for byte what was written (compared here)");

  // ---- RDMA READ
  blank();
  note("5. RDMA READ %s of the passive's memory (one-sided)", kib(n).c_str());
  say("active", "RDMA READ from %s, rkey %s", hex(their_addr + L.read()).c_str(), hex(their_rkey, 8).c_str());
  Sge s_read = mr->sge(L.read(), n);
  Op op_read = run(*ctx, *qp, *cq, one_sided(WrOpcode::rdma_read, s_read, their_addr + L.read(), their_rkey));
  say("active", "got %s", preview(buf.span(L.read(), n)).c_str());
  Buffer expect(n);
  if (expect.data) fill_text(expect.span(0, n), kReadText);
  if (!ok(link.send("note-read"), "talk to the passive side")) return 1;
  (void)link.expect("noted");
  checks.check(op_read.done && op_read.wc.status == WcStatus::success && op_read.wc.byte_len == n,
               "the RDMA READ completed successfully");
  checks.check(fnv1a(buf.span(L.read(), n)) == their_read_hash && expect.data &&
                   std::memcmp(buf.data + L.read(), expect.data, n) == 0,
               "got exactly the passive's bytes");

  // ---- FETCH_AND_ADD
  blank();
  note("6. ATOMIC FETCH_AND_ADD %" PRIu64 " on the passive's 64-bit counter (one-sided)", kAdd);
  say("active", "FETCH_AND_ADD +%" PRIu64 " at %s, rkey %s", kAdd, hex(their_addr + L.counter()).c_str(),
      hex(their_rkey, 8).c_str());
  Sge s_old = mr->sge(L.counter(), 8);
  SendWr faa = one_sided(WrOpcode::atomic_fetch_and_add, s_old, their_addr + L.counter(), their_rkey);
  faa.compare_add = kAdd;
  Op op_faa = run(*ctx, *qp, *cq, faa);
  uint64_t old = 0;
  std::memcpy(&old, buf.data + L.counter(), 8);
  say("active", "the counter held %" PRIu64 " before the add", old);
  if (!ok(link.send("show-counter"), "talk to the passive side")) return 1;
  auto counter = link.expect("counter");
  checks.check(op_faa.done && op_faa.wc.status == WcStatus::success && op_faa.wc.byte_len == 8 && old == kCounterStart,
               "FETCH_AND_ADD returned the counter's old value " + std::to_string(kCounterStart));
  checks.check(counter.ok() && counter->num("value") == kCounterStart + kAdd,
               "the passive's counter is now " + std::to_string(kCounterStart + kAdd));

  // ---- counters
  blank();
  note("7. NIC counters (each process runs its own NIC)");
  if (!ok(link.send("counters"), "talk to the passive side")) return 1;
  auto theirs = link.expect("counters");
  struct Row {
    const char* name;
    const char* what;
  };
  static constexpr Row rows[] = {
      {"tx_packets", "packets sent"},
      {"rx_packets", "packets received"},
      {"shm_rx_packets", "of them through our shared-memory ring (same-host peers)"},
      {"req_packets", "request packets sent (SEND, WRITE, READ request, atomic)"},
      {"resp_read_packets", "READ response packets sent"},
      {"resp_acks_sent", "ACKs sent (besides READ responses and atomic ACKs)"},
      {"req_acks_rcvd", "ACKs received"},
      {"req_retransmits", "packets sent again (loss recovery)"},
      {"req_timeouts", "retransmission timer expiries"},
      {"req_seq_naks_rcvd", "sequence-error NAKs received (a packet went missing)"},
      {"req_rnr_naks_rcvd", "receiver-not-ready NAKs received"},
      {"resp_duplicates", "duplicate requests answered"},
      {"rx_icrc_bad", "packets dropped for a bad ICRC"},
      {"completions", "work completions delivered"},
  };
  note("   %-18s %8s %8s", "counter", "active", "passive");
  for (const Row& r : rows)
    note("   %-18s %8" PRIu64 " %8s   %s", r.name, count(*ctx, r.name),
         theirs.ok() ? std::to_string(theirs->num(r.name)).c_str() : "?", r.what);
  const uint64_t resent = count(*ctx, "req_retransmits") + (theirs.ok() ? theirs->num("req_retransmits") : 0);
  if (resent == 0)
    note("   Nothing was sent twice: loopback loses no packets.  (Under loss, go-back-N");
  else
    note("   %" PRIu64 " packet(s) were sent again: the retransmission timer or a NAK fired.  (Go-back-N", resent);
  note("   retransmission recovers and the checks above still hold byte for byte.)");

  // ---- tear down
  blank();
  note("8. Tear down, children first: QP, memory region, PD, CQ, context");
  if (!ok(link.send("bye"), "talk to the passive side")) return 1;
  (void)link.expect("bye");
  const int peer_status = peer.wait();
  qp.reset();
  mr.reset();
  pd.reset();
  cq.reset();
  ctx.reset();
  say("active", "done; the passive process exited with status %d", peer_status);
  checks.check(peer_status == 0, "the passive side finished cleanly");

  blank();
  if (checks.failed == 0) {
    note("All %d checks passed.", checks.passed);
    return 0;
  }
  note("%d of %d checks FAILED.", checks.failed, checks.passed + checks.failed);
  return 1;
}

}  // namespace uroce::demo

namespace uroce::cli {

Command add_demo(CLI::App& root) {
  static demo::Options o;
  Command c;
  c.app =
      root.add_subcommand("demo",
                          "Move data between two processes over loopback RoCEv2: SEND, RDMA WRITE, RDMA READ and an "
                          "atomic, explained step by step");
  c.app->add_option("--addr", o.addr, "IP address both processes use (an address of this host)")->capture_default_str();
  c.app->add_option("--size", o.size, "bytes moved by each operation (suffixes K, M)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(uint64_t(1), uint64_t(64) << 20))
      ->capture_default_str();
  c.app->add_option("--mtu", o.mtu, "path MTU of the connection")
      ->check(CLI::IsMember({256u, 512u, 1024u, 2048u, 4096u}))
      ->capture_default_str();
  c.app->add_option("--peer-fd", o.peer_fd, "run as the passive side on this socket (internal)")->group("");
  c.run = [] { return o.peer_fd >= 0 ? demo::run_passive(o) : demo::run_active(o); };
  return c;
}

}  // namespace uroce::cli
