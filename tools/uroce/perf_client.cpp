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
//    With `qps` QPs (one-sided operations), a window on each, posted in
//    turn, and each QP's share counted apart.
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
  std::vector<QueuePair> more_;  // --qps: the QPs after the first
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
  // Room for every QP's signaled work requests in flight.
  const uint32_t per_qp = c_.window / std::max<uint32_t>(1, c_.signal_every) + c_.post_list + 2;
  auto cq = ctx_->create_cq(std::max<uint32_t>(4096, c_.qps * per_qp + 64), &*channel_);
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
  kv["qps"] = std::to_string(c_.qps);
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
  UROCE_TRY(qp_->connect(demo::peer_from(*r), co));
  // The other QPs, one exchange each.
  qc.cap.max_recv_wr = 1;
  for (uint32_t i = 1; i < c_.qps; ++i) {
    auto q = pd_->create_qp(qc);
    if (!q.ok()) return q.status();
    UROCE_TRY(link_->send("qp", demo::to_kv(q->local_info())));
    auto m = link_->expect("qp");
    if (!m.ok()) return m.status();
    UROCE_TRY(q->connect(demo::peer_from(*m), co));
    more_.push_back(std::move(*q));
  }
  return {};
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
  std::vector<QueuePair*> qps{&*qp_};
  for (QueuePair& q : more_) qps.push_back(&q);
  // Per QP: work requests posted and completed, completed when the
  // measurement began and when posting stopped.  A wr_id is the QP's index
  // (high bits) and the number of its work requests up to this one.
  struct Flow {
    uint64_t posted = 0, completed = 0, first = 0, at_stop = 0;
    bool warm = false;  // has completed a whole window
  };
  std::vector<Flow> f(qps.size());
  constexpr int kQpShift = 40;
  // Posts n work requests on QP q; every `every`-th is signaled.
  auto post = [&](uint32_t q, uint32_t n) -> Status {
    for (uint32_t k = 0; k < n; ++k) {
      const uint64_t idx = f[q].posted + k;
      wrs[k].wr_id = (uint64_t(q) << kQpShift) | (idx + 1);
      wrs[k].send_flags =
          (base.send_flags & ~send_flags::kSignaled) | ((idx + 1) % every == 0 ? send_flags::kSignaled : 0u);
    }
    UROCE_TRY(qps[q]->post_send(std::span<const SendWr>(wrs.data(), n)));
    f[q].posted += n;
    return {};
  };
  // The measurement starts once the warm-up time is over and every QP has
  // completed a whole window: before that, the first polls find the
  // completions of all the windows posted at the start (with many QPs, far
  // more than a second's worth) and would count them as if just done.  It
  // lasts the duration from there.  A QP that never gets a window through
  // does not stall the test: the warm-up ends regardless after a while.
  const double t0 = now_us();
  const double warm_end = t0 + c_.duration_s * 1e6 / 10;
  const double warm_limit = warm_end + 5e6 + c_.duration_s * 1e6;
  double end = 0;
  uint32_t warm_qps = 0;
  bool warmed = false, stopping = false;
  double t_first = 0, t_last = 0, t_stop = 0;
  uint32_t draining = 0;  // QPs whose last work request has not completed
  bench::CpuSample c0;
  for (;;) {
    if (!stopping)
      for (uint32_t q = 0; q < qps.size(); ++q)
        while (f[q].posted + list - f[q].completed <= window) UROCE_TRY(post(q, list));
    auto wc = w.next();
    if (!wc.ok()) return wc.status();
    if (wc->status != WcStatus::success)
      return err::io(std::string(to_string(wc->opcode)) + " completed with " + to_string(wc->status));
    const uint64_t q = wc->wr_id >> kQpShift;
    if (q >= f.size()) return err::io("a completion of no work request of this test");
    f[q].completed = wc->wr_id & ((uint64_t(1) << kQpShift) - 1);
    if (!f[q].warm && f[q].completed >= window) {
      f[q].warm = true;
      ++warm_qps;
    }
    const double t = now_us();
    t_last = t;
    if (!warmed && ((t >= warm_end && warm_qps == qps.size()) || t >= warm_limit)) {
      warmed = true;
      t_first = t;
      end = t + c_.duration_s * 1e6;
      for (Flow& x : f) x.first = x.completed;
      c0 = bench::sample_cpu(&*ctx_);
    }
    if (!stopping && warmed && t >= end) {
      stopping = true;
      t_stop = t;
      // The last work request of each QP must be signaled for its
      // completion to come.
      for (uint32_t k = 0; k < qps.size(); ++k) {
        f[k].at_stop = f[k].completed;
        if (f[k].posted % every != 0) UROCE_TRY(post(k, uint32_t(every - f[k].posted % every)));
        if (f[k].completed != f[k].posted) ++draining;
      }
    } else if (stopping && f[q].completed == f[q].posted) {
      --draining;
    }
    if (stopping && draining == 0) break;
  }
  out.client_cpu = bench::cpu_between(c0, bench::sample_cpu(&*ctx_));
  out.msgs = 0;
  for (const Flow& x : f) out.msgs += x.completed - x.first;
  out.seconds = (t_last - t_first) / 1e6;
  if (qps.size() > 1 && t_stop > t_first)
    for (const Flow& x : f)
      out.qp_bytes_per_s.push_back(double(x.at_stop - x.first) * size / ((t_stop - t_first) / 1e6));
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
  more_.clear();
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
