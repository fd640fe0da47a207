// The server of `uroce perf`: one connection at a time; for each point it
// keeps receive buffers posted, echoes SENDs (latency), sinks them
// (bandwidth) or stays passive (WRITE, READ, atomics: busy-polling its CQ
// or asleep, --server), until the client's marker, then reports its CPU.
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>

#include "perf_common.hpp"
#include "pingpong_common.hpp"

namespace uroce::perf {
namespace {

using pingpong::Waiter;

class Session {
 public:
  Session(Context& ctx, int fd) : ctx_(ctx), fd_(fd), link_(fd) {}
  ~Session() { breakdown(); }
  Status setup();
  Status serve();
  void breakdown() noexcept;

 private:
  Status top_up(uint32_t want);
  Status point(const demo::Msg& m);

  Context& ctx_;
  int fd_;
  demo::Link link_;
  std::optional<CompletionChannel> channel_;
  std::optional<CompletionQueue> cq_;
  std::optional<ProtectionDomain> pd_;
  std::optional<QueuePair> qp_;
  std::vector<QueuePair> more_;  // --qps: one-sided targets only
  std::unique_ptr<demo::Buffer> buf_;
  std::optional<MemoryRegion> mr_;
  uint32_t rq_depth_ = 0;
  uint32_t posted_ = 0;  // receive WRs posted and not completed
};

Status Session::setup() {
  auto hello = link_.expect("hello");
  if (!hello.ok()) return hello.status();
  const uint32_t window = std::max<uint32_t>(1, uint32_t(hello->num("window")));
  rq_depth_ = std::min<uint32_t>(8192, std::max<uint32_t>(256, 4 * window) + 16);
  auto ch = ctx_.create_comp_channel();
  if (!ch.ok()) return ch.status();
  channel_ = std::move(*ch);
  auto cq = ctx_.create_cq(2 * rq_depth_ + 1024, &*channel_);
  if (!cq.ok()) return cq.status();
  cq_ = std::move(*cq);
  auto pd = ctx_.alloc_pd();
  if (!pd.ok()) return pd.status();
  pd_ = std::move(*pd);
  QpConfig qc;
  qc.type = QpType::rc;
  qc.send_cq = qc.recv_cq = &*cq_;
  qc.cap = QpCap{512, rq_depth_, 1, 1, 64};
  auto qp = pd_->create_qp(qc);
  if (!qp.ok()) return qp.status();
  qp_ = std::move(*qp);
  // [0, kMaxSize): SEND target, WRITE target and READ source; then the
  // 8-byte atomic counter.
  buf_ = std::make_unique<demo::Buffer>(kMaxSize + 4096);
  if (!buf_->data) return err::nomem("cannot allocate the buffer");
  auto mr = pd_->reg_mr(buf_->data, buf_->size,
                        access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic);
  if (!mr.ok()) return mr.status();
  mr_ = std::move(*mr);
  ConnectOptions co;
  co.max_rd_atomic = co.max_dest_rd_atomic = uint8_t(std::min<uint32_t>(128, ctx_.device_attr().max_qp_rd_atom));
  UROCE_TRY(qp_->connect(demo::peer_from(*hello), co));
  UROCE_TRY(top_up(1));
  auto kv = demo::to_kv(qp_->local_info());
  kv["addr"] = demo::hex(mr_->addr());
  kv["rkey"] = demo::hex(mr_->rkey());
  kv["counter"] = demo::hex(mr_->addr() + kMaxSize);
  kv["rd_atomic"] = std::to_string(unsigned(co.max_dest_rd_atomic));
  UROCE_TRY(link_.send("hello", kv));
  const uint64_t qps = hello->num("qps");
  if (qps > kMaxQps) return err::inval("more QPs asked for than " + std::to_string(kMaxQps));
  qc.cap = QpCap{16, 1, 1, 1, 0};
  for (uint64_t i = 1; i < qps; ++i) {
    auto m = link_.expect("qp");
    if (!m.ok()) return m.status();
    auto q = pd_->create_qp(qc);
    if (!q.ok()) return q.status();
    UROCE_TRY(q->connect(demo::peer_from(*m), co));
    UROCE_TRY(link_.send("qp", demo::to_kv(q->local_info())));
    more_.push_back(std::move(*q));
  }
  return {};
}

// Posts receive buffers until `want` are outstanding (each takes any
// message: the whole buffer).
Status Session::top_up(uint32_t want) {
  Sge sge = mr_->sge(0, kMaxSize);
  RecvWr wrs[32];
  while (posted_ < want) {
    const uint32_t n = std::min<uint32_t>(32, want - posted_);
    // (only those posted: a round trip reposts one)
    for (uint32_t i = 0; i < n; ++i) wrs[i] = RecvWr{.wr_id = 1, .sg_list = {&sge, 1}};
    UROCE_TRY(qp_->post_recv(std::span<const RecvWr>(wrs, n)));
    posted_ += n;
  }
  return {};
}

Status Session::point(const demo::Msg& m) {
  const auto op = parse_op(m.str("op"));
  const auto test = parse_test(m.str("test"));
  const uint32_t size = uint32_t(m.num("size"));
  if (!op || !test || size > kMaxSize) return err::inval("bad point");
  const bool notify = m.str("wait") == "notify";
  const bool sleep = m.str("server") == "sleep";
  const bool sends = *op == Op::send;
  // Enough receive buffers for a window of SENDs, or one for the marker.
  UROCE_TRY(top_up(sends ? rq_depth_ : 1));
  UROCE_TRY(link_.send("ready"));

  Waiter::How how = Waiter::How::busy;
  if (sends && notify) how = Waiter::How::notify;
  if (!sends && sleep) how = Waiter::How::sleep;
  Waiter w(*cq_, &*channel_, how, 600000);
  Sge echo = mr_->sge(0, size);
  SendWr pong{.wr_id = 2, .opcode = WrOpcode::send, .send_flags = send_flags::kSignaled, .sg_list = {&echo, 1}};
  if (size <= 64) pong.send_flags |= send_flags::kInline;
  uint64_t got = 0;
  const bench::CpuSample c0 = bench::sample_cpu(&ctx_);
  for (;;) {
    auto wc = w.next();
    if (!wc.ok()) return wc.status();
    if (wc->status != WcStatus::success)
      return err::io(std::string(to_string(wc->opcode)) + " completed with " + to_string(wc->status));
    if (wc->opcode != WcOpcode::recv) continue;  // an echo was sent
    --posted_;
    if ((wc->wc_flags & wc_flags::kWithImm) && wc->imm_data == kMarker) break;
    ++got;
    UROCE_TRY(top_up(rq_depth_));
    if (*test == Test::lat) UROCE_TRY(qp_->post_send(pong));
  }
  const bench::CpuShare c = bench::cpu_between(c0, bench::sample_cpu(&ctx_));
  return link_.send("result", {{"received", std::to_string(got)},
                               {"elapsed_us", bench::fmt(c.elapsed_us, 0)},
                               {"app_user", bench::fmt(c.app_user, 3)},
                               {"app_sys", bench::fmt(c.app_sys, 3)},
                               {"prog_user", bench::fmt(c.prog_user, 3)},
                               {"prog_sys", bench::fmt(c.prog_sys, 3)}});
}

Status Session::serve() {
  for (;;) {
    auto m = link_.recv(600000);
    if (!m.ok()) return m.status();
    if (m->verb == "bye") return link_.send("bye");
    if (m->verb != "run") return err::from_errno(EPROTO, "unexpected '" + m->verb + "'");
    if (Status s = point(*m); !s.ok()) {
      (void)link_.send("error " + s.to_string());
      return s;
    }
  }
}

void Session::breakdown() noexcept {
  mr_.reset();
  more_.clear();
  qp_.reset();
  buf_.reset();
  pd_.reset();
  cq_.reset();
  channel_.reset();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace

int run_server(const ServerConfig& sc) {
  if (Status s = bench::pin_to_cpu(sc.cpu); !s.ok()) {
    std::fprintf(stderr, "uroce perf: %s\n", s.to_string().c_str());
    return 1;
  }
  DeviceInfo dev;
  dev.name = "uroce0";
  dev.gids = {sc.addr};
  dev.udp_port = sc.udp_port;
  auto ctx = Context::open(dev);
  if (!ctx.ok()) {
    std::fprintf(stderr, "uroce perf: open the device on %s: %s\n", sc.addr.to_string().c_str(),
                 ctx.status().to_string().c_str());
    return 1;
  }
  uint16_t port = 0;
  auto lfd = bench::tcp_listen(sc.addr, sc.port, &port);
  if (!lfd.ok()) {
    std::fprintf(stderr, "uroce perf: %s\n", lfd.status().to_string().c_str());
    return 1;
  }
  if (sc.ready_fd >= 0) bench::report_ready(sc.ready_fd, std::to_string(port));
  if (!sc.quiet) {
    std::printf("uroce perf: server listening on %s (TCP), RoCEv2 on %s\n", Endpoint{sc.addr, port}.to_string().c_str(),
                ctx->local_endpoint().to_string().c_str());
    std::fflush(stdout);
  }
  int status = 0;
  for (uint64_t n = 1; sc.connections == 0 || n <= sc.connections; ++n) {
    auto fd = bench::tcp_accept(*lfd, sc.connections ? 120000 : -1);
    if (!fd.ok()) {
      std::fprintf(stderr, "uroce perf: %s\n", fd.status().to_string().c_str());
      status = 1;
      break;
    }
    Session s(*ctx, *fd);
    Status st = s.setup();
    if (st.ok()) st = s.serve();
    if (!st.ok()) {
      std::fprintf(stderr, "uroce perf: connection %" PRIu64 ": %s\n", n, st.to_string().c_str());
      status = 1;
    } else if (!sc.quiet) {
      std::printf("uroce perf: connection %" PRIu64 " done\n", n);
      std::fflush(stdout);
    }
  }
  ::close(*lfd);
  return status;
}

}  // namespace uroce::perf
