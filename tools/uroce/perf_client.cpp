// The client of `uroce perf`: connects one RC QP to the server and measures
// each point.
//
//  - Latency: one operation at a time; the round trip is from posting to
//    its completion: SEND until the server's echo arrives, WRITE until its
//    ACK, READ until its data, FETCH_AND_ADD until the old value.
//  - Bandwidth and message rate: `window` operations outstanding, posted
//    `post_list` per post_send call, one signaled every `signal_every` (an
//    RC completion covers the unsignaled ones before it); messages and
//    bytes per second of payload, after a warm-up of a tenth of the time.
#include <unistd.h>

#include <cstring>
#include <memory>

#include "perf_common.hpp"
#include "pingpong_common.hpp"

namespace uroce::perf {
namespace {

using bench::now_us;
using pingpong::Waiter;

class Client {
 public:
  explicit Client(const ClientConfig& cc) : cc_(cc), c_(cc.cfg) {}
  ~Client() { breakdown(); }
  Status setup();
  Status point(const Point& p, Outcome& out);
  void breakdown() noexcept;

 private:
  // The work request of a point (the caller sets wr_id and flags).
  SendWr wr_for(const Point& p, const Sge* sge) const;
  Status latency(const Point& p, Outcome& out);
  Status bandwidth(const Point& p, Outcome& out);
  Status marker(Waiter& w);

  ClientConfig cc_;
  Config c_;
  int fd_ = -1;
  std::unique_ptr<demo::Link> link_;
  std::optional<Context> ctx_;
  std::optional<CompletionChannel> channel_;
  std::optional<CompletionQueue> cq_;
  std::optional<ProtectionDomain> pd_;
  std::optional<QueuePair> qp_;
  std::unique_ptr<demo::Buffer> buf_;
  std::optional<MemoryRegion> mr_;
  uint64_t their_addr_ = 0, their_counter_ = 0;
  uint32_t their_rkey_ = 0;
  uint32_t rd_atomic_ = 16;
};

// The buffer: [0, kMaxSize) source of SENDs and WRITEs; [kMaxSize,
// 2 kMaxSize) where READs and echoes land; then the atomics' old value.
constexpr uint64_t kSrc = 0, kDst = kMaxSize, kOld = 2ull * kMaxSize;

Status Client::setup() {
  auto fd = bench::tcp_connect(cc_.server);
  if (!fd.ok()) return fd.status();
  fd_ = *fd;
  link_ = std::make_unique<demo::Link>(fd_);
  IpAddr addr = cc_.addr;
  if (addr.is_unspecified()) {
    auto a = bench::local_addr_of(fd_);
    if (!a.ok()) return a.status();
    addr = *a;
  }
  DeviceInfo dev;
  dev.name = "uroce0";
  dev.gids = {addr};
  dev.udp_port = cc_.udp_port;
  auto ctx = Context::open(dev);
  if (!ctx.ok()) return ctx.status();
  ctx_ = std::move(*ctx);
  auto ch = ctx_->create_comp_channel();
  if (!ch.ok()) return ch.status();
  channel_ = std::move(*ch);
  auto cq = ctx_->create_cq(4096, &*channel_);
  if (!cq.ok()) return cq.status();
  cq_ = std::move(*cq);
  auto pd = ctx_->alloc_pd();
  if (!pd.ok()) return pd.status();
  pd_ = std::move(*pd);
  QpConfig qc;
  qc.type = QpType::rc;
  qc.send_cq = qc.recv_cq = &*cq_;
  qc.cap = QpCap{c_.window + c_.post_list + c_.signal_every + 8, 64, 1, 1, 64};
  auto qp = pd_->create_qp(qc);
  if (!qp.ok()) return qp.status();
  qp_ = std::move(*qp);
  buf_ = std::make_unique<demo::Buffer>(kOld + 4096);
  if (!buf_->data) return err::nomem("cannot allocate the buffers");
  for (size_t i = 0; i < kMaxSize; ++i) buf_->data[i] = std::byte(i * 7 + 1);
  auto mr = pd_->reg_mr(buf_->data, buf_->size, access::kLocalWrite);
  if (!mr.ok()) return mr.status();
  mr_ = std::move(*mr);
  auto kv = demo::to_kv(qp_->local_info());
  if (c_.mtu) kv["mtu"] = std::to_string(c_.mtu);
  kv["window"] = std::to_string(c_.window);
  UROCE_TRY(link_->send("hello", kv));
  auto r = link_->expect("hello");
  if (!r.ok()) return r.status();
  their_addr_ = r->num("addr");
  their_rkey_ = uint32_t(r->num("rkey"));
  their_counter_ = r->num("counter");
  ConnectOptions co;
  if (c_.mtu) co.mtu = *mtu_from_bytes(c_.mtu);
  rd_atomic_ = std::min<uint32_t>(uint32_t(r->num("rd_atomic")), ctx_->device_attr().max_qp_init_rd_atom);
  co.max_rd_atomic = co.max_dest_rd_atomic = uint8_t(std::max<uint32_t>(1, rd_atomic_));
  return qp_->connect(demo::peer_from(*r), co);
}

SendWr Client::wr_for(const Point& p, const Sge* sge) const {
  SendWr w;
  w.sg_list = {sge, 1};
  switch (p.op) {
    case Op::send: w.opcode = WrOpcode::send; break;
    case Op::write:
      w.opcode = WrOpcode::rdma_write;
      w.remote_addr = their_addr_;
      w.rkey = their_rkey_;
      break;
    case Op::read:
      w.opcode = WrOpcode::rdma_read;
      w.remote_addr = their_addr_;
      w.rkey = their_rkey_;
      break;
    case Op::atomic:
      w.opcode = WrOpcode::atomic_fetch_and_add;
      w.remote_addr = their_counter_;
      w.rkey = their_rkey_;
      w.compare_add = 1;
      break;
  }
  return w;
}

// Ends a point: a zero-byte SEND with the marker as immediate data.
Status Client::marker(Waiter& w) {
  SendWr m;
  m.wr_id = ~0ull;
  m.opcode = WrOpcode::send_with_imm;
  m.send_flags = send_flags::kSignaled;
  m.imm_data = kMarker;
  UROCE_TRY(qp_->post_send(m));
  for (;;) {
    auto wc = w.next();
    if (!wc.ok()) return wc.status();
    if (wc->status != WcStatus::success)
      return err::io(std::string(to_string(wc->opcode)) + " completed with " + to_string(wc->status));
    if (wc->wr_id == ~0ull) return {};
  }
}

Status Client::latency(const Point& p, Outcome& out) {
  Waiter w(*cq_, &*channel_, c_.notify ? Waiter::How::notify : Waiter::How::busy, 60000);
  const uint32_t size = p.op == Op::atomic ? 8 : p.size;
  Sge local = p.op == Op::send || p.op == Op::write ? mr_->sge(kSrc, size)
              : p.op == Op::read                    ? mr_->sge(kDst, size)
                                                    : mr_->sge(kOld, 8);
  SendWr wr = wr_for(p, &local);
  wr.wr_id = 1;
  wr.send_flags = send_flags::kSignaled;
  if (c_.inline_small && size <= 64 && (p.op == Op::send || p.op == Op::write)) wr.send_flags |= send_flags::kInline;
  Sge echo = mr_->sge(kDst, size);
  const RecvWr recv{.wr_id = 2, .sg_list = {&echo, 1}};
  const bool send = p.op == Op::send;
  // A SEND's round trip ends with the echo's arrival, as in perftest: our
  // SEND is signaled only every 16th time (its completion, carried by the
  // ACK that precedes the echo, is not waited for).
  uint64_t sends_unsignaled = 0;
  std::vector<double> rtt;
  rtt.reserve(std::min<uint64_t>(c_.max_iters, 1u << 20));
  constexpr uint64_t kWarmup = 50;
  bench::CpuSample c0;
  double end = 0;
  for (uint64_t i = 0;; ++i) {
    if (i == kWarmup) {
      c0 = bench::sample_cpu(&*ctx_);
      end = c0.wall_us + c_.duration_s * 1e6;
    }
    if (i > kWarmup && (rtt.size() >= c_.max_iters || now_us() >= end)) break;
    if (send) {
      UROCE_TRY(qp_->post_recv(recv));
      const bool sig = ++sends_unsignaled == 16;
      if (sig) sends_unsignaled = 0;
      wr.send_flags = (wr.send_flags & ~send_flags::kSignaled) | (sig ? send_flags::kSignaled : 0u);
    }
    const double t0 = now_us();
    UROCE_TRY(qp_->post_send(wr));
    // SEND: until the echo arrives; else the operation's own completion.
    for (;;) {
      auto wc = w.next();
      if (!wc.ok()) return wc.status();
      if (wc->status != WcStatus::success)
        return err::io(std::string(to_string(wc->opcode)) + " completed with " + to_string(wc->status));
      if (!send || wc->opcode == WcOpcode::recv) break;
    }
    if (i >= kWarmup) rtt.push_back(now_us() - t0);
  }
  out.client_cpu = bench::cpu_between(c0, bench::sample_cpu(&*ctx_));
  out.rtt = bench::summarize(rtt);
  return marker(w);
}

Status Client::bandwidth(const Point& p, Outcome& out) {
  Waiter w(*cq_, &*channel_, c_.notify ? Waiter::How::notify : Waiter::How::busy, 60000);
  const uint32_t size = p.op == Op::atomic ? 8 : p.size;
  // READs and atomics in flight are limited by the QP's rd_atomic depth.
  uint32_t window = c_.window;
  if (p.op == Op::read || p.op == Op::atomic) window = std::min(window, rd_atomic_);
  const uint32_t list = std::max<uint32_t>(1, std::min(c_.post_list, window));
  const uint32_t every = std::max<uint32_t>(1, std::min(c_.signal_every, window));
  Sge local = p.op == Op::send || p.op == Op::write ? mr_->sge(kSrc, size)
              : p.op == Op::read                    ? mr_->sge(kDst, size)
                                                    : mr_->sge(kOld, 8);
  SendWr base = wr_for(p, &local);
  if (c_.inline_small && size <= 64 && (p.op == Op::send || p.op == Op::write)) base.send_flags |= send_flags::kInline;
  std::vector<SendWr> wrs(list, base);
  uint64_t posted = 0, completed = 0;
  // Posts n work requests; every `every`-th is signaled, its wr_id the
  // number of work requests up to it.
  auto post = [&](uint32_t n) -> Status {
    for (uint32_t k = 0; k < n; ++k) {
      const uint64_t idx = posted + k;
      wrs[k].wr_id = idx + 1;
      wrs[k].send_flags =
          (base.send_flags & ~send_flags::kSignaled) | ((idx + 1) % every == 0 ? send_flags::kSignaled : 0u);
    }
    UROCE_TRY(qp_->post_send(std::span<const SendWr>(wrs.data(), n)));
    posted += n;
    return {};
  };
  const double t0 = now_us();
  const double warm_end = t0 + c_.duration_s * 1e6 / 10;
  const double end = warm_end + c_.duration_s * 1e6;
  bool warmed = false, stopping = false;
  double t_first = 0, t_last = 0;
  uint64_t c_first = 0;
  bench::CpuSample c0;
  for (;;) {
    while (!stopping && posted + list - completed <= window) UROCE_TRY(post(list));
    auto wc = w.next();
    if (!wc.ok()) return wc.status();
    if (wc->status != WcStatus::success)
      return err::io(std::string(to_string(wc->opcode)) + " completed with " + to_string(wc->status));
    completed = wc->wr_id;
    const double t = now_us();
    t_last = t;
    if (!warmed && t >= warm_end) {
      warmed = true;
      t_first = t;
      c_first = completed;
      c0 = bench::sample_cpu(&*ctx_);
    }
    if (!stopping && t >= end) {
      stopping = true;
      // The last work request must be signaled for its completion to come.
      if (posted % every != 0) UROCE_TRY(post(uint32_t(every - posted % every)));
    }
    if (stopping && completed == posted) break;
  }
  out.client_cpu = bench::cpu_between(c0, bench::sample_cpu(&*ctx_));
  out.msgs = completed - c_first;
  out.seconds = (t_last - t_first) / 1e6;
  return marker(w);
}

Status Client::point(const Point& p, Outcome& out) {
  out.point = p;
  UROCE_TRY(link_->send("run", {{"op", name(p.op)},
                                {"test", name(p.test)},
                                {"size", std::to_string(p.size)},
                                {"wait", c_.notify ? "notify" : "busy"},
                                {"server", c_.server == Server::sleep ? "sleep" : "poll"}}));
  if (auto r = link_->expect("ready"); !r.ok()) return r.status();
  UROCE_TRY(p.test == Test::lat ? latency(p, out) : bandwidth(p, out));
  auto r = link_->expect("result", 60000);
  if (!r.ok()) return r.status();
  auto d = [&](const char* k) { return std::strtod(r->str(k).c_str(), nullptr); };
  out.server_cpu.elapsed_us = d("elapsed_us");
  out.server_cpu.app_user = d("app_user");
  out.server_cpu.app_sys = d("app_sys");
  out.server_cpu.prog_user = d("prog_user");
  out.server_cpu.prog_sys = d("prog_sys");
  out.server_received = r->num("received");
  out.ok = true;
  return {};
}

void Client::breakdown() noexcept {
  if (link_ && fd_ >= 0 && link_->send("bye").ok()) (void)link_->expect("bye", 5000);
  mr_.reset();
  qp_.reset();
  buf_.reset();
  pd_.reset();
  cq_.reset();
  channel_.reset();
  ctx_.reset();
  link_.reset();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace

std::vector<Outcome> run_client(const ClientConfig& cc, const std::vector<Point>& points, std::string* error) {
  std::vector<Outcome> out;
  Client c(cc);
  if (Status s = c.setup(); !s.ok()) {
    if (error) *error = s.to_string();
    return out;
  }
  for (const Point& p : points) {
    Outcome o;
    Status s = c.point(p, o);
    if (!s.ok()) {
      o.point = p;
      o.error = s.to_string();
      out.push_back(o);
      if (error)
        *error = std::string(name(p.op)) + " " + name(p.test) + " " + bench::size_name(p.size) + ": " + s.to_string();
      break;
    }
    out.push_back(o);
  }
  return out;
}

}  // namespace uroce::perf
