#include "loopback.hpp"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "net/shm_io.hpp"
#include "net/udp_io.hpp"
#include "transport/nic.hpp"

namespace uroce::test {

const char* to_string(PacketPath p) noexcept {
  switch (p) {
    case PacketPath::udp: return "Udp";
    case PacketPath::fake: return "Fake";
    case PacketPath::shm: return "Shm";
  }
  return "?";
}

ShmDir::ShmDir() {
  char tmpl[] = "/dev/shm/uroce-loopback-XXXXXX";
  char tmpl_tmp[] = "/tmp/uroce-loopback-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  if (!d) d = ::mkdtemp(tmpl_tmp);
  if (d) path_ = d;
  EXPECT_FALSE(path_.empty()) << "no directory for ring files";
}

ShmDir::~ShmDir() {
  if (path_.empty()) return;
  if (DIR* dir = ::opendir(path_.c_str())) {
    while (const dirent* e = ::readdir(dir)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") ::unlink((path_ + "/" + n).c_str());
    }
    ::closedir(dir);
  }
  ::rmdir(path_.c_str());
}

PairOptions over(PacketPath path, PairOptions o) {
  switch (path) {
    case PacketPath::udp: break;
    case PacketPath::fake: o.fake = net::FakeNetwork::create(); break;
    case PacketPath::shm: o.shm = std::make_shared<ShmDir>(); break;
  }
  return o;
}

Pair::Pair(const PairOptions& o) : opt(o) {
  const char* aa = o.addr_a ? o.addr_a : o.fake ? "10.0.0.1" : "127.0.0.1";
  const char* ab = o.addr_b ? o.addr_b : o.fake ? "10.0.0.2" : "127.0.0.2";
  open_side(a, aa, false);
  open_side(b, ab, o.srq_b);
  if (o.connect) connect();
}

Pair::~Pair() = default;

void Pair::open_side(Side& s, const char* addr, bool use_srq) {
  DeviceConfig cfg;
  cfg.name = std::string("test-") + addr;
  auto ip = IpAddr::parse(addr);
  ASSERT_TRUE(ip.has_value()) << addr;
  cfg.gids.push_back(*ip);
  cfg.udp_port = opt.udp_port;
  cfg.mtu = opt.device_mtu;
  cfg.shm = false;  // the UDP path is the socket's; PacketPath::shm has rings of its own
  cfg.shm_copy = &s == &b && opt.shm_copy_b ? *opt.shm_copy_b : opt.shm_copy;
  cfg.congestion = &s == &b && opt.congestion_b ? opt.congestion_b : opt.congestion;
  if (&s == &b && opt.faults_b) cfg.faults = opt.faults_b;
  if (opt.fake) {
    auto net = opt.fake;
    IoWrap wrap = opt.wrap;
    const Endpoint ep{*ip, 0};
    cfg.io_factory = [net, wrap, ep]() -> Result<std::unique_ptr<net::PacketIo>> {
      auto io = net->attach(ep);
      if (!io.ok()) return io.status();
      std::unique_ptr<net::PacketIo> p = std::move(*io);
      if (wrap) p = wrap(std::move(p));
      return p;
    };
  } else if (opt.shm) {
    // A UDP socket (ephemeral port, found through the host registry) whose
    // packets to same-host peers go through the peers' rings in the Pair's
    // directory.
    net::ShmConfig scfg;
    scfg.dir = opt.shm->path();
    const IpAddr local = *ip;
    const IoWrap wrap = &s == &b ? opt.wrap_b : opt.wrap_a;
    cfg.io_factory = [scfg, local, wrap]() -> Result<std::unique_ptr<net::PacketIo>> {
      net::UdpConfig ucfg;
      ucfg.local = local;
      ucfg.port = 0;
      auto udp = net::UdpIo::open(ucfg);
      if (!udp.ok()) return udp.status();
      auto shm = net::ShmIo::wrap(std::move(*udp), scfg);
      if (!shm.ok()) return shm.status();
      std::unique_ptr<net::PacketIo> p = std::move(*shm);
      if (wrap) p = wrap(std::move(p));
      return p;
    };
  }
  auto ctx = Context::open(cfg);
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  s.ctx = std::move(*ctx);
  s.pd = verbs::Pd::create(*s.ctx).value();
  if (opt.channel) {
    auto ch = CompChannel::create(*s.ctx);
    ASSERT_TRUE(ch.ok());
    s.ch = std::move(*ch);
  }
  auto scq = Cq::create(*s.ctx, opt.cqe, s.ch.get());
  auto rcq = Cq::create(*s.ctx, opt.cqe, s.ch.get());
  ASSERT_TRUE(scq.ok() && rcq.ok());
  s.scq = std::move(*scq);
  s.rcq = std::move(*rcq);
  if (use_srq) {
    auto srq = Srq::create(*s.pd, SrqAttr{opt.max_recv_wr, opt.max_sge, 0});
    ASSERT_TRUE(srq.ok()) << srq.status().to_string();
    s.srq = std::move(*srq);
  }
  s.qp = create_qp(s, nullptr, nullptr, s.srq.get());
  ASSERT_TRUE(s.qp);
  s.buf.assign(opt.buf_size, 0);
  s.mr = reg_mr(*s.pd, s.buf.data(), s.buf.size(), opt.access);
}

std::unique_ptr<Qp> Pair::create_qp(Side& s, Cq* scq, Cq* rcq, Srq* srq) {
  QpInitAttr init;
  init.qp_type = opt.type;
  init.send_cq = scq ? scq : s.scq.get();
  init.recv_cq = rcq ? rcq : s.rcq.get();
  init.srq = srq;
  init.sq_sig_all = opt.sq_sig_all;
  init.cap = QpCap{opt.max_send_wr, opt.max_recv_wr, opt.max_sge, opt.max_sge, opt.max_inline};
  auto qp = Qp::create(*s.pd, init);
  EXPECT_TRUE(qp.ok()) << qp.status().to_string();
  return qp.ok() ? std::move(*qp) : nullptr;
}

Status Pair::to_init(Qp& qp) {
  QpAttr at;
  at.qp_state = QpState::init;
  at.pkey_index = 0;
  at.port_num = 1;
  uint32_t mask = qp_attr_mask::kState | qp_attr_mask::kPkeyIndex | qp_attr_mask::kPort;
  if (opt.type == QpType::ud) {
    at.qkey = opt.qkey;
    mask |= qp_attr_mask::kQkey;
  } else {
    at.qp_access_flags = opt.qp_access != ~0u ? opt.qp_access : opt.access & ~access::kLocalWrite;
    mask |= qp_attr_mask::kAccessFlags;
  }
  return qp.modify(at, mask);
}

Status Pair::to_rtr(Qp& qp, uint32_t dest_qpn, const IpAddr& dgid, uint32_t rq_psn) {
  QpAttr at;
  at.qp_state = QpState::rtr;
  uint32_t mask = qp_attr_mask::kState;
  if (opt.type != QpType::ud) {
    at.path_mtu = opt.mtu;
    at.dest_qp_num = dest_qpn;
    at.rq_psn = rq_psn;
    at.ah_attr.dgid = dgid;
    at.ah_attr.is_global = true;
    at.max_dest_rd_atomic = opt.max_rd_atomic;
    at.min_rnr_timer = opt.min_rnr_timer;
    mask |= qp_attr_mask::kAv | qp_attr_mask::kPathMtu | qp_attr_mask::kDestQpn | qp_attr_mask::kRqPsn;
    if (opt.type == QpType::rc) mask |= qp_attr_mask::kMaxDestRdAtomic | qp_attr_mask::kMinRnrTimer;
  }
  return qp.modify(at, mask);
}

Status Pair::to_rts(Qp& qp, uint32_t sq_psn) {
  QpAttr at;
  at.qp_state = QpState::rts;
  at.sq_psn = sq_psn;
  uint32_t mask = qp_attr_mask::kState | qp_attr_mask::kSqPsn;
  if (opt.type == QpType::rc) {
    at.timeout = opt.timeout;
    at.retry_cnt = opt.retry_cnt;
    at.rnr_retry = opt.rnr_retry;
    at.max_rd_atomic = opt.max_rd_atomic;
    mask |= qp_attr_mask::kTimeout | qp_attr_mask::kRetryCnt | qp_attr_mask::kRnrRetry | qp_attr_mask::kMaxQpRdAtomic;
  }
  return qp.modify(at, mask);
}

void Pair::connect_qp(Qp& qp, Qp& peer_qp, const Side& peer, uint32_t rq_psn, uint32_t sq_psn) {
  Status s = to_init(qp);
  ASSERT_TRUE(s.ok()) << s.to_string();
  s = to_rtr(qp, peer_qp.qpn(), peer.gid(), rq_psn);
  ASSERT_TRUE(s.ok()) << s.to_string();
  s = to_rts(qp, sq_psn);
  ASSERT_TRUE(s.ok()) << s.to_string();
}

void Pair::connect() {
  if (!a.qp || !b.qp) return;
  ASSERT_TRUE(to_init(a).ok());
  ASSERT_TRUE(to_init(b).ok());
  Status s = to_rtr(a, b, opt.psn_b);
  ASSERT_TRUE(s.ok()) << s.to_string();
  s = to_rtr(b, a, opt.psn_a);
  ASSERT_TRUE(s.ok()) << s.to_string();
  s = to_rts(a, opt.psn_a);
  ASSERT_TRUE(s.ok()) << s.to_string();
  s = to_rts(b, opt.psn_b);
  ASSERT_TRUE(s.ok()) << s.to_string();
}

std::vector<Wc> poll_n(Cq& cq, size_t n, int ms) {
  std::vector<Wc> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  Wc wc[16];
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    auto r = cq.poll(std::span<Wc>(wc, std::min<size_t>(16, n - out.size())));
    if (!r.ok()) break;
    out.insert(out.end(), wc, wc + *r);
    if (*r == 0) std::this_thread::yield();
  }
  return out;
}

std::vector<Wc> drain(Cq& cq, int ms) {
  std::vector<Wc> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  Wc wc[16];
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = cq.poll(wc);
    if (!r.ok()) break;
    out.insert(out.end(), wc, wc + *r);
    if (*r == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return out;
}

bool wait_until(const std::function<bool()>& pred, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

Status post_send(Qp& qp, const SendWr& wr) {
  size_t bad;
  return qp.post_send(std::span<const SendWr>(&wr, 1), &bad);
}

Status post_recv(Qp& qp, uint64_t wr_id, std::vector<Sge> sges) {
  RecvWr wr{wr_id, sges};
  size_t bad;
  return qp.post_recv(std::span<const RecvWr>(&wr, 1), &bad);
}

}  // namespace uroce::test
