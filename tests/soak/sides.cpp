// The soak's devices: core verbs on a FakeNetwork, and the public C++ API.
#include <sys/mman.h>

#include <cstring>

#include "net/fake_io.hpp"
#include "soak.hpp"
#include "transport/nic.hpp"
#include "uroce/uroce.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/mr.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp.hpp"

namespace uroce::soak {
namespace {

constexpr uint32_t kAccess = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;

// Page-aligned anonymous memory, unmapped with its owner.
struct Mapping {
  void* p = nullptr;
  size_t len = 0;
  Mapping() = default;
  explicit Mapping(size_t n) : len((n + 4095) & ~size_t(4095)) {
    p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = nullptr;
  }
  Mapping(Mapping&& o) noexcept : p(std::exchange(o.p, nullptr)), len(o.len) {}
  ~Mapping() {
    if (p) ::munmap(p, len);
  }
};

// ------------------------------------------------------------- core verbs

class FakeSide final : public Side {
 public:
  Status open(std::shared_ptr<net::FakeNetwork> net, const char* addr, const std::optional<FaultConfig>& faults) {
    addr_ = addr;
    verbs::DeviceConfig cfg;
    cfg.name = std::string("soak-") + addr;
    auto ip = IpAddr::parse(addr);
    if (!ip) return err::inval(std::string("bad address ") + addr);
    cfg.gids.push_back(*ip);
    cfg.udp_port = 4791;
    cfg.mtu = 4096;
    cfg.faults = faults ? faults : std::optional<FaultConfig>(FaultConfig{});
    const Endpoint ep{*ip, 4791};
    cfg.io_factory = [net, ep]() -> Result<std::unique_ptr<net::PacketIo>> {
      auto io = net->attach(ep);
      if (!io.ok()) return io.status();
      return std::unique_ptr<net::PacketIo>(std::move(*io));
    };
    auto ctx = verbs::Context::open(cfg);
    if (!ctx.ok()) return ctx.status();
    ctx_ = std::move(*ctx);
    pd_ = verbs::Pd::create(*ctx_).value();
    return {};
  }
  ~FakeSide() override {
    qps_.clear();
    cqs_.clear();
    mrs_.clear();
    pd_.reset();
    ctx_.reset();
  }
  std::string name() const override { return std::string("core/fake ") + addr_; }
  Result<Region> reg(size_t len) override {
    Mapping m(len);
    if (!m.p) return err::nomem("mmap");
    auto mr = verbs::Mr::reg(*pd_, uint64_t(uintptr_t(m.p)), len, uint64_t(uintptr_t(m.p)), kAccess);
    if (!mr.ok()) return mr.status();
    Region r{static_cast<uint8_t*>(m.p), len, (*mr)->lkey(), (*mr)->rkey()};
    maps_.push_back(std::move(m));
    mrs_.push_back(std::move(*mr));
    return r;
  }
  Status create_qps(int n, uint32_t depth) override {
    for (int i = 0; i < n; ++i) {
      auto cq = verbs::Cq::create(*ctx_, 4 * depth + 16, nullptr);
      if (!cq.ok()) return cq.status();
      verbs::QpInitAttr init;
      init.qp_type = QpType::rc;
      init.send_cq = init.recv_cq = cq->get();
      init.cap = QpCap{depth, depth, 1, 1, 0};
      auto qp = verbs::Qp::create(*pd_, init);
      if (!qp.ok()) return qp.status();
      cqs_.push_back(std::move(*cq));
      qps_.push_back(std::move(*qp));
      psns_.push_back((0x1234u * uint32_t(i + 1) + 0xfff000u) & 0xffffffu);  // near the wrap
    }
    return {};
  }
  QpInfo info(int i) const override { return {ctx_->config().gids[0], qps_[size_t(i)]->qpn(), psns_[size_t(i)]}; }
  Status connect(int i, const QpInfo& peer, const QpParams& p) override {
    verbs::Qp& qp = *qps_[size_t(i)];
    namespace m = qp_attr_mask;
    QpAttr a;
    a.qp_state = QpState::init;
    a.qp_access_flags = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
    UROCE_TRY(qp.modify(a, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags));
    a = QpAttr{};
    a.qp_state = QpState::rtr;
    a.path_mtu = p.mtu;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = peer.psn;
    a.ah_attr.dgid = peer.gid;
    a.ah_attr.is_global = true;
    a.max_dest_rd_atomic = p.max_rd_atomic;
    a.min_rnr_timer = p.min_rnr_timer;
    UROCE_TRY(qp.modify(
        a, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn | m::kMaxDestRdAtomic | m::kMinRnrTimer));
    a = QpAttr{};
    a.qp_state = QpState::rts;
    a.sq_psn = psns_[size_t(i)];
    a.timeout = p.timeout;
    a.retry_cnt = p.retry_cnt;
    a.rnr_retry = p.rnr_retry;
    a.max_rd_atomic = p.max_rd_atomic;
    return qp.modify(a, m::kState | m::kSqPsn | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kMaxQpRdAtomic);
  }
  Status post_send(int i, const SendWr& wr) override {
    size_t bad;
    return qps_[size_t(i)]->post_send({&wr, 1}, &bad);
  }
  Status post_recv(int i, const RecvWr& wr) override {
    size_t bad;
    return qps_[size_t(i)]->post_recv({&wr, 1}, &bad);
  }
  Result<size_t> poll(int i, std::span<Wc> out) override {
    auto r = cqs_[size_t(i)]->poll(out);
    if (!r.ok()) return r.status();
    return size_t(*r);
  }
  void sync() override { std::lock_guard g(ctx_->nic().mu()); }
  CounterList counters() override {
    transport::Counters c;
    {
      std::lock_guard g(ctx_->nic().mu());
      c = ctx_->nic().snapshot();
    }
    CounterList out;
    c.for_each([&](const char* n, uint64_t v) { out.emplace_back(n, v); });
    return out;
  }

 private:
  std::string addr_;
  std::unique_ptr<verbs::Context> ctx_;
  std::unique_ptr<verbs::Pd> pd_;
  std::vector<Mapping> maps_;
  std::vector<std::unique_ptr<verbs::Mr>> mrs_;
  std::vector<std::unique_ptr<verbs::Cq>> cqs_;
  std::vector<std::unique_ptr<verbs::Qp>> qps_;
  std::vector<uint32_t> psns_;
};

// ---------------------------------------------------------- public C++ API

class ApiSide final : public Side {
 public:
  Status open(const DeviceInfo& dev) {
    auto ctx = Context::open(dev);
    if (!ctx.ok()) return ctx.status();
    ctx_.emplace(std::move(*ctx));
    auto pd = ctx_->alloc_pd();
    if (!pd.ok()) return pd.status();
    pd_.emplace(std::move(*pd));
    return {};
  }
  ~ApiSide() override {  // children first
    qps_.clear();
    cqs_.clear();
    mrs_.clear();
    pd_.reset();
    ctx_.reset();
  }
  std::string name() const override { return "api " + ctx_->local_endpoint().to_string(); }
  Result<Region> reg(size_t len) override {
    Mapping m(len);
    if (!m.p) return err::nomem("mmap");
    auto mr = pd_->reg_mr(m.p, len, kAccess);
    if (!mr.ok()) return mr.status();
    Region r{static_cast<uint8_t*>(m.p), len, mr->lkey(), mr->rkey()};
    maps_.push_back(std::move(m));
    mrs_.push_back(std::move(*mr));
    return r;
  }
  Status create_qps(int n, uint32_t depth) override {
    for (int i = 0; i < n; ++i) {
      auto cq = ctx_->create_cq(4 * depth + 16);
      if (!cq.ok()) return cq.status();
      cqs_.push_back(std::make_unique<CompletionQueue>(std::move(*cq)));
      auto qp = pd_->create_qp({.type = QpType::rc,
                                .send_cq = cqs_.back().get(),
                                .recv_cq = cqs_.back().get(),
                                .cap = QpCap{depth, depth, 1, 1, 0}});
      if (!qp.ok()) return qp.status();
      qps_.push_back(std::make_unique<QueuePair>(std::move(*qp)));
    }
    return {};
  }
  QpInfo info(int i) const override {
    const PeerInfo pi = qps_[size_t(i)]->local_info();
    return {pi.gid, pi.qpn, pi.psn};
  }
  Status connect(int i, const QpInfo& peer, const QpParams& p) override {
    ConnectOptions o;
    o.mtu = p.mtu;
    o.timeout = p.timeout;
    o.retry_cnt = p.retry_cnt;
    o.rnr_retry = p.rnr_retry;
    o.min_rnr_timer = p.min_rnr_timer;
    o.max_rd_atomic = p.max_rd_atomic;
    o.max_dest_rd_atomic = p.max_rd_atomic;
    return qps_[size_t(i)]->connect(PeerInfo{peer.gid, peer.qpn, peer.psn, 0}, o);
  }
  Status post_send(int i, const SendWr& wr) override { return qps_[size_t(i)]->post_send(wr); }
  Status post_recv(int i, const RecvWr& wr) override { return qps_[size_t(i)]->post_recv(wr); }
  Result<size_t> poll(int i, std::span<Wc> out) override {
    auto r = cqs_[size_t(i)]->poll(out);
    if (!r.ok()) return r.status();
    return size_t(*r);
  }
  void sync() override { (void)ctx_->counters(); }  // takes the NIC lock
  CounterList counters() override {
    CounterList out;
    for (const Counter& c : ctx_->counters()) out.emplace_back(c.name, c.value);
    return out;
  }

 private:
  std::optional<Context> ctx_;
  std::optional<ProtectionDomain> pd_;
  std::vector<Mapping> maps_;
  std::vector<MemoryRegion> mrs_;
  std::vector<std::unique_ptr<CompletionQueue>> cqs_;
  std::vector<std::unique_ptr<QueuePair>> qps_;
};

}  // namespace

Result<std::unique_ptr<Side>> open_fake_side(std::shared_ptr<net::FakeNetwork> net, const char* addr,
                                             const std::optional<FaultConfig>& faults) {
  auto s = std::make_unique<FakeSide>();
  UROCE_TRY(s->open(std::move(net), addr, faults));
  return std::unique_ptr<Side>(std::move(s));
}

Result<std::unique_ptr<Side>> open_api_side(const DeviceInfo& dev) {
  auto s = std::make_unique<ApiSide>();
  UROCE_TRY(s->open(dev));
  return std::unique_ptr<Side>(std::move(s));
}

}  // namespace uroce::soak
