// The server of `uroce pingpong` (seed 000's listener and agents).
//
// The listener opens the device, listens on TCP and hands every connection
// to an agent thread; it never moves data itself.  An agent creates its own
// CQ, QP and registered memory for its one client, swaps connection details
// with it over the TCP connection, plays its part of the ping-pong, reports
// what it measured and tears everything down.  Numbered comments are the
// seed's steps.
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "pingpong_common.hpp"

namespace uroce::pingpong {
namespace {

using bench::now_us;

std::mutex g_print_mu;

class Agent {
 public:
  Agent(Context& ctx, int fd, int cpu) : ctx_(ctx), fd_(fd), link_(fd), cpu_(cpu) {}
  ~Agent() { breakdown(); }

  Status setup();
  Status use();
  Status report();
  void breakdown() noexcept;
  void fail(const Status& s) { (void)link_.send("error " + s.to_string()); }

  const Params& params() const { return p_; }
  const Figures& figures() const { return mine_; }
  const IpAddr& client() const { return client_; }

 private:
  Status use_send();
  Status use_write_read();
  Status use_tcp();

  Context& ctx_;
  int fd_;
  demo::Link link_;
  int cpu_;
  Params p_;
  IpAddr client_{};
  uint64_t slot_ = 0;  // bytes of the ping buffer (rounded up)
  std::optional<CompletionChannel> channel_;
  std::optional<CompletionQueue> cq_;
  std::optional<ProtectionDomain> pd_;
  std::optional<QueuePair> qp_;
  std::unique_ptr<demo::Buffer> buf_;
  std::optional<MemoryRegion> mr_;
  Figures mine_;
};

// ------------------------------------------------------------------ setup

Status Agent::setup() {
  // 1. make a copy of the listener's options: what the client asks for.
  auto hello = link_.expect("hello");
  if (!hello.ok()) return hello.status();
  auto mode = parse_mode(hello->str("mode"));
  if (!mode) return err::inval("unknown mode '" + hello->str("mode") + "'");
  p_.mode = *mode;
  p_.size = uint32_t(hello->num("size"));
  p_.iters = hello->num("iters");
  p_.warmup = hello->num("warmup");
  if (p_.size == 0 || p_.size > (64u << 20) || p_.iters == 0)
    return err::inval("size " + std::to_string(p_.size) + " / iters " + std::to_string(p_.iters) + " out of range");
  if (auto a = IpAddr::parse(hello->str("gid"))) client_ = *a;
  slot_ = (uint64_t(p_.size) + 63) / 64 * 64;
  // 4. allocate user virtual memory: the ping buffer and two 8-byte slots
  //    for the client's "start" and "finished" messages.
  buf_ = std::make_unique<demo::Buffer>(slot_ + 64);
  if (!buf_->data) return err::nomem("cannot allocate the buffer");
  if (is_tcp(p_.mode)) return link_.send("hello");

  // 2. create a completion queue (and a channel, unless busy polling).
  if (p_.mode != Mode::send_busy) {
    auto ch = ctx_.create_comp_channel();
    if (!ch.ok()) return ch.status();
    channel_ = std::move(*ch);
  }
  auto cq = ctx_.create_cq(16, channel_ ? &*channel_ : nullptr);
  if (!cq.ok()) return cq.status();
  cq_ = std::move(*cq);
  auto pd = ctx_.alloc_pd();
  if (!pd.ok()) return pd.status();
  pd_ = std::move(*pd);
  // 3. create a queue pair.
  QpConfig qc;
  qc.type = QpType::rc;
  qc.send_cq = qc.recv_cq = &*cq_;
  qc.cap = QpCap{8, 8, 1, 1, 0};
  auto qp = pd_->create_qp(qc);
  if (!qp.ok()) return qp.status();
  qp_ = std::move(*qp);
  // 5. register user virtual memory: the client WRITEs and READs it.
  const uint32_t acc =
      is_write_read(p_.mode) ? access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead : access::kLocalWrite;
  auto mr = pd_->reg_mr(buf_->data, buf_->size, acc);
  if (!mr.ok()) return mr.status();
  mr_ = std::move(*mr);
  // Finalize the connection with the client (rdma_accept's work).
  // The path MTU is the smaller of the client's (as it announced it) and
  // our port's, as connect() picks by default; the client picks the same.
  UROCE_TRY(qp_->connect(demo::peer_from(*hello)));
  // 6. post the first receive(s): a ping, or the client's two messages.
  if (is_send(p_.mode)) {
    Sge s = mr_->sge(0, p_.size);
    UROCE_TRY(qp_->post_recv(RecvWr{.wr_id = 1, .sg_list = {&s, 1}}));
  } else {
    Sge start = mr_->sge(slot_, 8), finished = mr_->sge(slot_ + 8, 8);
    UROCE_TRY(qp_->post_recv(RecvWr{.wr_id = 10, .sg_list = {&start, 1}}));
    UROCE_TRY(qp_->post_recv(RecvWr{.wr_id = 11, .sg_list = {&finished, 1}}));
  }
  auto kv = demo::to_kv(qp_->local_info());
  kv["addr"] = demo::hex(mr_->addr());
  kv["rkey"] = demo::hex(mr_->rkey());
  return link_.send("hello", kv);
}

// -------------------------------------------------------------------- use

Status Agent::use() {
  if (is_tcp(p_.mode)) return use_tcp();
  if (is_send(p_.mode)) return use_send();
  return use_write_read();
}

Status Agent::use_send() {
  Waiter w(*cq_, channel_ ? &*channel_ : nullptr, p_.mode == Mode::send_busy ? Waiter::How::busy : Waiter::How::notify);
  Sge s = mr_->sge(0, p_.size);
  const RecvWr recv{.wr_id = 1, .sg_list = {&s, 1}};
  const SendWr pong{.wr_id = 2, .opcode = WrOpcode::send, .send_flags = send_flags::kSignaled, .sg_list = {&s, 1}};
  const uint64_t total = p_.warmup + p_.iters;
  uint64_t recvs = 0, sends = 0;
  double last_ping = 0;
  std::vector<double> rtt;
  rtt.reserve(p_.iters);
  bench::CpuSample c0, c1;
  // Takes one completion: a ping arrived (its time is the agent's view of
  // the round trip) or a pong was sent.
  auto take = [&]() -> Status {
    auto wc = w.next();
    if (!wc.ok()) return wc.status();
    if (wc->status != WcStatus::success)
      return err::io(std::string(to_string(wc->opcode)) + " completed with " + to_string(wc->status));
    if (wc->opcode != WcOpcode::recv) {
      ++sends;
      return {};
    }
    const double t = now_us();
    if (recvs == p_.warmup) c0 = bench::sample_cpu(&ctx_);
    if (recvs > p_.warmup) rtt.push_back(t - last_ping);
    last_ping = t;
    ++recvs;
    return {};
  };
  // 8. the start time is taken at the first ping after the warm-up;
  // 9. start of the loop.
  for (uint64_t i = 0; i < total; ++i) {
    // 10. wait to receive the ping.
    while (recvs <= i) UROCE_TRY(take());
    // 11. post the next receive (the client sends again only after our pong).
    if (i + 1 < total) UROCE_TRY(qp_->post_recv(recv));
    // 12. post a send of the pong (the ping, echoed from the same buffer).
    UROCE_TRY(qp_->post_send(pong));
    if (i + 1 == total) c1 = bench::sample_cpu(&ctx_);
    // 13. wait for the send to complete.
    while (sends <= i) UROCE_TRY(take());
  }
  // 15. stop time and statistics.
  mine_.cpu = bench::cpu_between(c0, c1);
  const bench::Summary s2 = bench::summarize(rtt);
  mine_.iters = p_.iters;
  mine_.rtt_median = s2.median;
  mine_.rtt_p99 = s2.p99;
  mine_.rtt_mean = s2.mean;
  return {};
}

Status Agent::use_write_read() {
  // The passive side: the client's WRITEs and READs are served by the NIC
  // (its progress thread) while this thread sleeps on the completion
  // channel, waiting for the client's "start" and "finished" messages.
  Waiter w(*cq_, &*channel_, Waiter::How::sleep, 120000);
  auto wait_msg = [&](uint64_t want) -> Status {
    auto wc = w.next();
    if (!wc.ok()) return wc.status();
    if (wc->status != WcStatus::success || wc->opcode != WcOpcode::recv || wc->wr_id != want)
      return err::io(std::string("unexpected completion ") + to_string(wc->opcode) + " " + to_string(wc->status));
    return {};
  };
  UROCE_TRY(wait_msg(10));  // "start"
  const bench::CpuSample c0 = bench::sample_cpu(&ctx_);
  UROCE_TRY(wait_msg(11));  // "finished", with the number of round trips
  const bench::CpuSample c1 = bench::sample_cpu(&ctx_);
  uint64_t n = 0;
  std::memcpy(&n, buf_->data + slot_ + 8, sizeof n);
  mine_.cpu = bench::cpu_between(c0, c1);
  mine_.iters = n;
  mine_.rtt_mean = n ? mine_.cpu.elapsed_us / double(n) : std::nan("");
  mine_.rtt_from_elapsed = true;
  return {};
}

Status Agent::use_tcp() {
  const bool busy = p_.mode == Mode::tcp_busy;
  const uint64_t total = p_.warmup + p_.iters;
  std::vector<double> rtt;
  rtt.reserve(p_.iters);
  double last_ping = 0;
  bench::CpuSample c0, c1;
  for (uint64_t i = 0; i < total; ++i) {
    // 10. recv() the ping;  12. send() it back.
    if (!bench::read_all(fd_, buf_->data, p_.size, busy))
      return err::io("the TCP connection broke during the ping-pong");
    const double t = now_us();
    if (i == p_.warmup) c0 = bench::sample_cpu(nullptr);
    if (i > p_.warmup) rtt.push_back(t - last_ping);
    last_ping = t;
    if (!bench::write_all(fd_, buf_->data, p_.size)) return err::io("the TCP connection broke during the ping-pong");
    if (i + 1 == total) c1 = bench::sample_cpu(nullptr);
  }
  mine_.cpu = bench::cpu_between(c0, c1);
  const bench::Summary s = bench::summarize(rtt);
  mine_.iters = p_.iters;
  mine_.rtt_median = s.median;
  mine_.rtt_p99 = s.p99;
  mine_.rtt_mean = s.mean;
  return {};
}

Status Agent::report() {
  mine_.pid = int(::getpid());
  mine_.cpu_pinned = cpu_;
  UROCE_TRY(link_.send("figures", to_kv(mine_)));
  auto bye = link_.expect("bye", 30000);
  return bye.ok() ? Status{} : bye.status();
}

// ------------------------------------------------------------- break-down

void Agent::breakdown() noexcept {
  // 16. break the connection (below);  17. deregister the memory;  18. free
  // it;  19. destroy the QP;  20. the CQ (and its channel).
  const bool was_open = fd_ >= 0;
  mr_.reset();
  qp_.reset();
  buf_.reset();
  pd_.reset();
  cq_.reset();
  channel_.reset();
  if (was_open) {
    (void)link_.send("bye");
    ::close(fd_);
    fd_ = -1;
  }
}

void agent_main(Context& ctx, int fd, uint64_t n, const ListenerConfig& cfg) {
  Agent a(ctx, fd, cfg.cpu);
  Status s = a.setup();
  if (s.ok()) s = a.use();
  if (s.ok()) s = a.report();
  if (!s.ok()) a.fail(s);
  a.breakdown();
  if (cfg.quiet && s.ok()) return;
  std::lock_guard g(g_print_mu);
  if (!s.ok()) {
    std::fprintf(stderr, "uroce pingpong: agent %" PRIu64 ": %s\n", n, s.to_string().c_str());
    return;
  }
  const Figures& f = a.figures();
  std::printf("agent %" PRIu64 ": %-21s with %s: round trip %s us%s, CPU application %s%%, library progress %s%%\n", n,
              name(a.params().mode), a.client().to_string().c_str(),
              bench::fmt(f.rtt_from_elapsed ? f.rtt_mean : f.rtt_median).c_str(),
              f.rtt_from_elapsed ? " (mean)" : " (median)", bench::fmt(f.cpu.app()).c_str(),
              bench::fmt(f.cpu.progress()).c_str());
  std::fflush(stdout);
}

}  // namespace

int run_listener(const ListenerConfig& cfg) {
  // Listener setup: 1. options;  2.-3. create the local endpoints: the RDMA
  // device (shared by the agents) and the TCP socket;  4. bind;  5. listen.
  if (Status s = bench::pin_to_cpu(cfg.cpu); !s.ok()) {
    std::fprintf(stderr, "uroce pingpong: %s\n", s.to_string().c_str());
    return 1;
  }
  DeviceInfo dev;
  dev.name = "uroce0";
  dev.gids = {cfg.addr};
  dev.udp_port = cfg.udp_port;
  auto ctx = Context::open(dev);
  if (!ctx.ok()) {
    std::fprintf(stderr, "uroce pingpong: open the device on %s: %s\n", cfg.addr.to_string().c_str(),
                 ctx.status().to_string().c_str());
    return 1;
  }
  uint16_t port = 0;
  auto lfd = bench::tcp_listen(cfg.addr, cfg.port, &port);
  if (!lfd.ok()) {
    std::fprintf(stderr, "uroce pingpong: %s\n", lfd.status().to_string().c_str());
    return 1;
  }
  if (cfg.ready_fd >= 0) bench::report_ready(cfg.ready_fd, std::to_string(port));
  if (!cfg.quiet) {
    std::printf("uroce pingpong: listening on %s (TCP), RoCEv2 on %s\n", Endpoint{cfg.addr, port}.to_string().c_str(),
                ctx->local_endpoint().to_string().c_str());
    std::fflush(stdout);
  }
  // 6. start of the loop;  7. get a connection request;  8. hand it over to
  // an agent;  9. end of the loop.
  struct Running {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<Running> agents;
  int status = 0;
  for (uint64_t n = 1; cfg.connections == 0 || n <= cfg.connections; ++n) {
    agents.remove_if([](Running& r) {  // reap the agents that finished
      if (!r.done->load()) return false;
      r.thread.join();
      return true;
    });
    // With a fixed number of connections (--local), a client that went away
    // must not keep us forever.
    auto fd = bench::tcp_accept(*lfd, cfg.connections ? 120000 : -1);
    if (!fd.ok()) {
      std::fprintf(stderr, "uroce pingpong: %s\n", fd.status().to_string().c_str());
      status = 1;
      break;
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    agents.push_back({std::thread([&ctx, &cfg, fd = *fd, n, done] {
                        agent_main(*ctx, fd, n, cfg);
                        done->store(true);
                      }),
                      done});
  }
  // Listener break-down: 10. destroy the endpoints.
  for (Running& r : agents) r.thread.join();
  ::close(*lfd);
  return status;
}

}  // namespace uroce::pingpong
