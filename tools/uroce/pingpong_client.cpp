// The client of `uroce pingpong` (seed 000's client): setup, use and
// break-down phases for one connection to a listener.  Numbered comments
// are the seed's steps.
//
// The control connection is TCP: there is no rdma_cm yet, so the QP
// information (GID, QPN, PSN, MTU) and the agent's buffer address and rkey
// travel over it as text lines (demo::Link), and the agent reports its
// figures back over it.  In the tcp modes the ping-pong itself runs on it.
#include <unistd.h>

#include <cstring>
#include <memory>

#include "pingpong_common.hpp"

namespace uroce::pingpong {
namespace {

using bench::now_us;

// Every buffer starts at a multiple of this (cache-line aligned pings).
uint64_t round64(uint64_t n) { return (n + 63) / 64 * 64; }

// The first bytes of a ping carry its iteration number, so verifying the
// pong checks this very round trip.
void stamp(std::byte* p, uint32_t size, uint64_t i) { std::memcpy(p, &i, std::min<size_t>(size, sizeof i)); }

class Client {
 public:
  Client(const ClientConfig& cfg, const Params& p) : cfg_(cfg), p_(p), layout_{round64(p.size)} {}
  ~Client() { breakdown(); }

  Status setup();
  Status use();
  // Asks the agent for its figures (after use()).
  Status collect();
  void breakdown() noexcept;

  const Figures& mine() const { return mine_; }
  const Figures& theirs() const { return theirs_; }

 private:
  Status setup_rdma();
  Status use_send();
  Status use_write_read();
  Status use_tcp();
  Status wait_wr(Waiter& w, WcOpcode op);
  Status send_ctl(Waiter& w, uint64_t value);
  Status verify(uint64_t i) const;

  // The registered buffer: ping at 0, pong at `slot`, an 8-byte control
  // message after them.
  struct Layout {
    uint64_t slot;
    uint64_t ping() const { return 0; }
    uint64_t pong() const { return slot; }
    uint64_t ctl() const { return 2 * slot; }
    uint64_t total() const { return 2 * slot + 64; }
  };

  ClientConfig cfg_;
  Params p_;
  Layout layout_;
  int fd_ = -1;
  std::unique_ptr<demo::Link> link_;
  std::optional<Context> ctx_;
  std::optional<CompletionChannel> channel_;
  std::optional<CompletionQueue> cq_;
  std::optional<ProtectionDomain> pd_;
  std::optional<QueuePair> qp_;
  std::unique_ptr<demo::Buffer> buf_;
  std::optional<MemoryRegion> mr_;
  uint64_t their_addr_ = 0;
  uint32_t their_rkey_ = 0;
  Figures mine_, theirs_;
};

// ------------------------------------------------------------------ setup

Status Client::setup() {
  // 1. process command-line options: cfg_ and p_.
  // 2.-3. find the listener and connect to it (the control connection; the
  //    RDMA endpoint is created in setup_rdma).
  auto fd = bench::tcp_connect(cfg_.server);
  if (!fd.ok()) return fd.status();
  fd_ = *fd;
  link_ = std::make_unique<demo::Link>(fd_);
  std::map<std::string, std::string> hello = {{"mode", name(p_.mode)},
                                              {"size", std::to_string(p_.size)},
                                              {"iters", std::to_string(p_.iters)},
                                              {"warmup", std::to_string(p_.warmup)}};
  // 6. allocate user virtual memory.
  buf_ = std::make_unique<demo::Buffer>(layout_.total());
  if (!buf_->data) return err::nomem("cannot allocate " + std::to_string(layout_.total()) + " bytes");
  if (is_tcp(p_.mode)) {
    UROCE_TRY(link_->send("hello", hello));
    auto r = link_->expect("hello");
    return r.ok() ? Status{} : r.status();
  }
  UROCE_TRY(setup_rdma());
  const PeerInfo me = qp_->local_info();
  for (auto& [k, v] : demo::to_kv(me)) hello[k] = v;
  // A path MTU of our choice: announced as our MTU, the agent picks it too.
  if (cfg_.mtu) hello["mtu"] = std::to_string(cfg_.mtu);
  // 8. create the connection: our QP's details go to the agent, whose QP
  //    details (and buffer address and rkey) come back.
  UROCE_TRY(link_->send("hello", hello));
  auto r = link_->expect("hello");
  if (!r.ok()) return r.status();
  their_addr_ = r->num("addr");
  their_rkey_ = uint32_t(r->num("rkey"));
  ConnectOptions co;
  if (cfg_.mtu) {
    auto m = mtu_from_bytes(cfg_.mtu);
    if (!m.ok()) return m.status();
    co.mtu = *m;
  }
  return qp_->connect(demo::peer_from(*r), co);
}

Status Client::setup_rdma() {
  IpAddr addr = cfg_.addr;
  if (addr.is_unspecified()) {
    auto a = bench::local_addr_of(fd_);
    if (!a.ok()) return a.status();
    addr = *a;
  }
  // 3. create the local RDMA endpoint: open the device on our address.
  DeviceInfo dev;
  dev.name = "uroce0";
  dev.gids = {addr};
  dev.udp_port = cfg_.udp_port;
  auto ctx = Context::open(dev);
  if (!ctx.ok()) return ctx.status();
  ctx_ = std::move(*ctx);
  // 4. create a completion queue (with a channel to wait for notify).
  if (p_.mode != Mode::send_busy) {
    auto ch = ctx_->create_comp_channel();
    if (!ch.ok()) return ch.status();
    channel_ = std::move(*ch);
  }
  auto cq = ctx_->create_cq(16, channel_ ? &*channel_ : nullptr);
  if (!cq.ok()) return cq.status();
  cq_ = std::move(*cq);
  auto pd = ctx_->alloc_pd();
  if (!pd.ok()) return pd.status();
  pd_ = std::move(*pd);
  // 5. create a queue pair.
  QpConfig qc;
  qc.type = QpType::rc;
  qc.send_cq = qc.recv_cq = &*cq_;
  qc.cap = QpCap{8, 8, 1, 1, 0};
  auto qp = pd_->create_qp(qc);
  if (!qp.ok()) return qp.status();
  qp_ = std::move(*qp);
  // 7. register user virtual memory.
  auto mr = pd_->reg_mr(buf_->data, buf_->size, access::kLocalWrite);
  if (!mr.ok()) return mr.status();
  mr_ = std::move(*mr);
  return {};
}

// -------------------------------------------------------------------- use

Status Client::verify(uint64_t i) const {
  const std::byte* ping = buf_->data + layout_.ping();
  const std::byte* pong = buf_->data + layout_.pong();
  if (std::memcmp(ping, pong, p_.size) != 0)
    return err::io("round trip " + std::to_string(i) + ": the pong differs from the ping");
  return {};
}

// Waits for the completion of the one outstanding work request of opcode
// `op` (the others have completed already).
Status Client::wait_wr(Waiter& w, WcOpcode op) {
  auto wc = w.next();
  if (!wc.ok()) return wc.status();
  if (wc->status != WcStatus::success)
    return err::io(std::string(to_string(wc->opcode)) + " completed with " + to_string(wc->status));
  if (wc->opcode != op)
    return err::io(std::string("expected a ") + to_string(op) + " completion, got " + to_string(wc->opcode));
  return {};
}

// A SEND of one 8-byte number to the agent (its "start" and "finished").
Status Client::send_ctl(Waiter& w, uint64_t value) {
  std::memcpy(buf_->data + layout_.ctl(), &value, sizeof value);
  Sge sge = mr_->sge(layout_.ctl(), sizeof value);
  UROCE_TRY(qp_->post_send(
      SendWr{.wr_id = 3, .opcode = WrOpcode::send, .send_flags = send_flags::kSignaled, .sg_list = {&sge, 1}}));
  return wait_wr(w, WcOpcode::send);
}

Status Client::use() {
  if (is_tcp(p_.mode)) return use_tcp();
  if (is_send(p_.mode)) return use_send();
  return use_write_read();
}

Status Client::use_send() {
  Waiter w(*cq_, channel_ ? &*channel_ : nullptr, p_.mode == Mode::send_busy ? Waiter::How::busy : Waiter::How::notify);
  Sge ping = mr_->sge(layout_.ping(), p_.size), pong = mr_->sge(layout_.pong(), p_.size);
  const SendWr send{.wr_id = 1, .opcode = WrOpcode::send, .send_flags = send_flags::kSignaled, .sg_list = {&ping, 1}};
  const RecvWr recv{.wr_id = 2, .sg_list = {&pong, 1}};
  std::vector<double> rtt;
  rtt.reserve(p_.iters);
  bench::CpuSample c0;
  const uint64_t total = p_.warmup + p_.iters;
  // 9. mark the start time (after the warm-up);  10. start of the loop.
  for (uint64_t i = 0; i < total; ++i) {
    if (i == p_.warmup) c0 = bench::sample_cpu(&*ctx_);
    stamp(buf_->data + layout_.ping(), p_.size, i);
    const double t0 = now_us();
    // 11. post a receive to catch the agent's pong.
    UROCE_TRY(qp_->post_recv(recv));
    // 12. post a send to start the transfer of the ping.
    UROCE_TRY(qp_->post_send(send));
    // 13. wait for both the send and the receive to complete.
    bool sent = false, got = false;
    while (!sent || !got) {
      auto wc = w.next();
      if (!wc.ok()) return wc.status();
      if (wc->status != WcStatus::success)
        return err::io(std::string(to_string(wc->opcode)) + " completed with " + to_string(wc->status));
      (wc->opcode == WcOpcode::recv ? got : sent) = true;
    }
    if (i >= p_.warmup) rtt.push_back(now_us() - t0);
    // 14. verify the pong.
    UROCE_TRY(verify(i));
  }
  // 16. mark the stop time; statistics below.
  mine_.cpu = bench::cpu_between(c0, bench::sample_cpu(&*ctx_));
  const bench::Summary s = bench::summarize(rtt);
  mine_.iters = s.n;
  mine_.rtt_median = s.median;
  mine_.rtt_p99 = s.p99;
  mine_.rtt_mean = s.mean;
  return {};
}

Status Client::use_write_read() {
  // The seed's client waits for notify in both WRITE/READ variants.
  Waiter w(*cq_, &*channel_, Waiter::How::notify);
  const bool signaled = p_.mode == Mode::write_read_signaled;
  Sge ping = mr_->sge(layout_.ping(), p_.size), pong = mr_->sge(layout_.pong(), p_.size);
  const SendWr write{.wr_id = 1,
                     .opcode = WrOpcode::rdma_write,
                     .send_flags = signaled ? send_flags::kSignaled : 0u,
                     .sg_list = {&ping, 1},
                     .remote_addr = their_addr_,
                     .rkey = their_rkey_};
  const SendWr read{.wr_id = 2,
                    .opcode = WrOpcode::rdma_read,
                    .send_flags = send_flags::kSignaled,
                    .sg_list = {&pong, 1},
                    .remote_addr = their_addr_,
                    .rkey = their_rkey_};
  std::vector<double> rtt;
  rtt.reserve(p_.iters);
  bench::CpuSample c0;
  const uint64_t total = p_.warmup + p_.iters;
  for (uint64_t i = 0; i < total; ++i) {
    if (i == p_.warmup) {
      // The agent measures from our "start" to our "finished".
      UROCE_TRY(send_ctl(w, 0));
      c0 = bench::sample_cpu(&*ctx_);
    }
    stamp(buf_->data + layout_.ping(), p_.size, i);
    const double t0 = now_us();
    // RDMA WRITE of the ping into the agent's buffer; signaled: wait for
    // its completion; unsignaled: don't (the READ that follows completes
    // after it, as RC orders them, and an error would still complete).
    UROCE_TRY(qp_->post_send(write));
    if (signaled) UROCE_TRY(wait_wr(w, WcOpcode::rdma_write));
    // RDMA READ of the agent's buffer into the pong; wait for it.
    UROCE_TRY(qp_->post_send(read));
    UROCE_TRY(wait_wr(w, WcOpcode::rdma_read));
    if (i >= p_.warmup) rtt.push_back(now_us() - t0);
    UROCE_TRY(verify(i));
  }
  mine_.cpu = bench::cpu_between(c0, bench::sample_cpu(&*ctx_));
  // The agent cannot know how many round trips there were: tell it.
  UROCE_TRY(send_ctl(w, p_.iters));
  const bench::Summary s = bench::summarize(rtt);
  mine_.iters = s.n;
  mine_.rtt_median = s.median;
  mine_.rtt_p99 = s.p99;
  mine_.rtt_mean = s.mean;
  return {};
}

Status Client::use_tcp() {
  const bool busy = p_.mode == Mode::tcp_busy;
  std::byte* ping = buf_->data + layout_.ping();
  std::byte* pong = buf_->data + layout_.pong();
  std::vector<double> rtt;
  rtt.reserve(p_.iters);
  bench::CpuSample c0;
  const uint64_t total = p_.warmup + p_.iters;
  for (uint64_t i = 0; i < total; ++i) {
    if (i == p_.warmup) c0 = bench::sample_cpu(nullptr);
    stamp(ping, p_.size, i);
    const double t0 = now_us();
    // 12. send() the ping;  13. recv() the pong.
    if (!bench::write_all(fd_, ping, p_.size) || !bench::read_all(fd_, pong, p_.size, busy))
      return err::io("the TCP connection broke during the ping-pong");
    if (i >= p_.warmup) rtt.push_back(now_us() - t0);
    UROCE_TRY(verify(i));
  }
  mine_.cpu = bench::cpu_between(c0, bench::sample_cpu(nullptr));
  const bench::Summary s = bench::summarize(rtt);
  mine_.iters = s.n;
  mine_.rtt_median = s.median;
  mine_.rtt_p99 = s.p99;
  mine_.rtt_mean = s.mean;
  return {};
}

Status Client::collect() {
  auto f = link_->expect("figures", 30000);
  if (!f.ok()) return f.status();
  theirs_ = figures_from(*f);
  return {};
}

// ------------------------------------------------------------- break-down

void Client::breakdown() noexcept {
  // 17. break the connection: the agent tears its side down and says bye.
  if (link_ && fd_ >= 0) {
    if (link_->send("bye").ok()) (void)link_->expect("bye", 5000);
  }
  // 18. deregister the memory;  19. free it;  20. destroy the QP;  21. the
  // CQ (and its channel);  22. the local endpoint.
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

Outcome run_client(const ClientConfig& cfg, const Params& p) {
  Outcome o;
  o.params = p;
  Client c(cfg, p);
  Status s = c.setup();
  if (s.ok()) s = c.use();
  if (s.ok()) s = c.collect();
  if (!s.ok()) {
    o.error = s.to_string();
    return o;
  }
  o.client = c.mine();
  o.client.pid = int(::getpid());
  o.client.cpu_pinned = cfg.cpu;
  o.server = c.theirs();
  o.ok = true;
  return o;
}

}  // namespace uroce::pingpong
