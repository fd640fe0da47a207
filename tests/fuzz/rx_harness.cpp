#include "rx_harness.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "net/fake_io.hpp"
#include "transport/nic.hpp"
#include "transport/qp_engine.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/mr.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp.hpp"
#include "wire/bytes.hpp"
#include "wire/icrc.hpp"
#include "wire/opcode.hpp"

namespace uroce::fuzz {
namespace {

using namespace uroce::verbs;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "rx_harness: %s\n", what);
  std::abort();
}

const IpAddr kVictim = *IpAddr::parse("10.0.0.2");
const IpAddr kPeer = *IpAddr::parse("10.0.0.1");
const IpAddr kForeign = *IpAddr::parse("10.0.0.66");
constexpr uint32_t kPeerQpn = 0x000777;
constexpr size_t kRegion = 4 * 4096;

struct Region {
  uint8_t* base = nullptr;  // guard page, region, guard page
  uint8_t* p = nullptr;
  std::unique_ptr<Mr> mr;
  std::vector<uint8_t> snapshot;
};

struct Victim {
  std::shared_ptr<net::FakeNetwork> net = net::FakeNetwork::create();
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd, pd2;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> rc, uc, ud;
  Region all, read_only, write_only, other_pd, recv;
  uint32_t recv_next = 0;
};

Victim* g = nullptr;

Region make_region(Pd& pd, uint32_t acc, uint8_t seed) {
  Region r;
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  r.base = static_cast<uint8_t*>(::mmap(nullptr, kRegion + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (r.base == MAP_FAILED) die("mmap");
  r.p = r.base + page;
  if (::mprotect(r.p, kRegion, PROT_READ | PROT_WRITE) != 0) die("mprotect");
  for (size_t i = 0; i < kRegion; ++i) r.p[i] = uint8_t(seed + i * 13);
  auto mr = Mr::reg(pd, uint64_t(uintptr_t(r.p)), kRegion, uint64_t(uintptr_t(r.p)), acc);
  if (!mr.ok()) die("reg_mr");
  r.mr = std::move(*mr);
  r.snapshot.assign(r.p, r.p + kRegion);
  return r;
}

std::unique_ptr<Qp> make_qp(QpType type) {
  QpInitAttr init;
  init.qp_type = type;
  init.send_cq = init.recv_cq = g->cq.get();
  init.cap = QpCap{8, 16, 2, 2, 0};
  auto q = Qp::create(*g->pd, init);
  if (!q.ok()) die("create_qp");
  return std::move(*q);
}

// RESET -> RTS (from any state).
void bring_up(Qp& qp, uint32_t dest_qpn) {
  namespace m = qp_attr_mask;
  QpAttr a;
  a.qp_state = QpState::reset;
  if (!qp.modify(a, m::kState).ok()) die("to RESET");
  a = QpAttr{};
  a.qp_state = QpState::init;
  uint32_t mask = m::kState | m::kPkeyIndex | m::kPort;
  if (qp.type() == QpType::ud) {
    a.qkey = 0x11111111;
    mask |= m::kQkey;
  } else {
    a.qp_access_flags = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
    mask |= m::kAccessFlags;
  }
  if (!qp.modify(a, mask).ok()) die("to INIT");
  a = QpAttr{};
  a.qp_state = QpState::rtr;
  mask = m::kState;
  if (qp.type() != QpType::ud) {
    a.path_mtu = Mtu::m256;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = 0x100;
    a.ah_attr.dgid = kPeer;
    a.ah_attr.is_global = true;
    mask |= m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn;
    if (qp.type() == QpType::rc) {
      a.max_dest_rd_atomic = 4;
      a.min_rnr_timer = 1;
      mask |= m::kMaxDestRdAtomic | m::kMinRnrTimer;
    }
  }
  if (!qp.modify(a, mask).ok()) die("to RTR");
  a = QpAttr{};
  a.qp_state = QpState::rts;
  a.sq_psn = 0x200;
  mask = m::kState | m::kSqPsn;
  if (qp.type() == QpType::rc) {
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    mask |= m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kMaxQpRdAtomic;
  }
  if (!qp.modify(a, mask).ok()) die("to RTS");
}

// Keeps a few receives posted: 1 KiB each, round robin over the region.
void replenish(Qp& qp, size_t want) {
  while (qp.query().cap.max_recv_wr > 0) {
    const size_t have = qp.debug_snapshot().rq_size;
    if (have >= want) return;
    const uint32_t slot = g->recv_next++ % 16;
    Sge sge{uint64_t(uintptr_t(g->recv.p)) + slot * 1024, 1024, g->recv.mr->lkey()};
    RecvWr wr{slot, {&sge, 1}};
    size_t bad;
    if (!qp.post_recv({&wr, 1}, &bad).ok()) return;
  }
}

void setup() {
  g = new Victim();  // never destroyed: the fuzzer exits without cleanup
  g->net->set_queue_limit(1 << 12);
  DeviceConfig cfg;
  cfg.name = "fuzz-victim";
  cfg.gids = {kVictim};
  cfg.udp_port = 4791;
  cfg.mtu = 4096;
  cfg.faults = FaultConfig{};
  auto net = g->net;
  cfg.io_factory = [net]() -> Result<std::unique_ptr<net::PacketIo>> {
    auto io = net->attach({kVictim, 4791});
    if (!io.ok()) return io.status();
    return std::unique_ptr<net::PacketIo>(std::move(*io));
  };
  auto ctx = Context::open(cfg);
  if (!ctx.ok()) die(ctx.status().to_string().c_str());
  g->ctx = std::move(*ctx);
  g->pd = verbs::Pd::create(*g->ctx).value();
  g->pd2 = verbs::Pd::create(*g->ctx).value();
  auto cq = Cq::create(*g->ctx, 1024, nullptr);
  if (!cq.ok()) die("create_cq");
  g->cq = std::move(*cq);
  const uint32_t lw = access::kLocalWrite;
  g->all = make_region(*g->pd, lw | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic, 1);
  g->read_only = make_region(*g->pd, access::kRemoteRead, 2);
  g->write_only = make_region(*g->pd, lw | access::kRemoteWrite, 3);
  g->other_pd = make_region(*g->pd2, lw | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic, 4);
  g->recv = make_region(*g->pd, lw, 5);
  g->rc = make_qp(QpType::rc);
  g->uc = make_qp(QpType::uc);
  g->ud = make_qp(QpType::ud);
  bring_up(*g->rc, kPeerQpn);
  bring_up(*g->uc, kPeerQpn + 1);
  bring_up(*g->ud, 0);
}

Region& region_by(uint8_t sel) {
  switch (sel & 3) {
    case 0: return g->all;
    case 1: return g->read_only;
    case 2: return g->write_only;
    default: return g->other_pd;
  }
}

#if defined(__SANITIZE_THREAD__)
constexpr bool kCanChangeMemory = false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kCanChangeMemory = false;
#else
constexpr bool kCanChangeMemory = true;
#endif
#else
constexpr bool kCanChangeMemory = true;
#endif

uint64_t g_memory_changes = 0;

// Control bit 0x80: what the application does to a region's pages before
// the packet (see rx_harness.hpp), undone by the returned function.
struct MemoryChange {
  Region* r = nullptr;
  uint8_t* at = nullptr;
  size_t len = 0;
  bool unmapped = false;
};

MemoryChange change_memory(uint8_t c1) {
  MemoryChange ch;
  if (!kCanChangeMemory) return ch;
  ch.r = (c1 & 0x04) ? &g->recv : &region_by(c1);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const unsigned what = (c1 >> 5) & 3;
  ch.at = what == 3 ? ch.r->p : ch.r->p + ((c1 >> 3) & 3) * page;
  ch.len = what == 3 ? kRegion : page;
  int rc = 0;
  switch (what) {
    case 1: rc = ::mprotect(ch.at, ch.len, PROT_READ); break;
    case 2:
      rc = ::munmap(ch.at, ch.len);
      ch.unmapped = true;
      break;
    default: rc = ::mprotect(ch.at, ch.len, PROT_NONE); break;
  }
  if (rc != 0) die("changing a region's memory");
  ++g_memory_changes;
  return ch;
}

void restore_memory(const MemoryChange& ch) {
  if (!ch.r) return;
  if (ch.unmapped) {
    void* p = ::mmap(ch.at, ch.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p != ch.at) die("mapping a region's page back");
    std::memcpy(ch.at, ch.r->snapshot.data() + (ch.at - ch.r->p), ch.len);
  } else if (::mprotect(ch.at, ch.len, PROT_READ | PROT_WRITE) != 0) {
    die("re-protecting a region's pages");
  }
}

}  // namespace

void init() {
  if (!g) setup();
}

void one_input(const uint8_t* data, size_t size) {
  init();
  if (size < 2) return;
  const uint8_t c0 = data[0], c1 = data[1];
  std::vector<uint8_t> pkt(data + 2, data + size);
  Qp* dst = nullptr;
  switch ((c0 >> 2) & 3) {
    case 0: dst = g->rc.get(); break;
    case 1: dst = g->uc.get(); break;
    case 2: dst = g->ud.get(); break;
    default: break;
  }
  if (pkt.size() >= wire::kBthLen) {
    if (dst) wire::store_be24(pkt.data() + 5, dst->qpn());
    if ((c0 & 0x10) && dst) {
      const uint32_t epsn = dst->debug_snapshot().epsn;
      const int8_t delta = int8_t(pkt[11]);
      wire::store_be24(pkt.data() + 9, (epsn + uint32_t(int32_t(delta))) & 0xffffff);
    }
    const wire::OpcodeInfo& oi = wire::info(pkt[0]);
    const unsigned at = oi.reth ? oi.reth : oi.atomic_eth;
    if (oi.valid() && at && pkt.size() >= at + 12) {
      Region& r = region_by(c1);
      if (c0 & 0x20) wire::store_be32(pkt.data() + at + 8, r.mr->rkey());
      if (c0 & 0x40) {
        const uint64_t va = wire::load_be64(pkt.data() + at);
        wire::store_be64(pkt.data() + at, uint64_t(uintptr_t(r.p)) + va % (kRegion + 128) - 64);
      }
    }
  }
  const IpAddr src = (c0 & 0x02) ? kForeign : kPeer;
  if ((c0 & 0x01) && pkt.size() >= wire::kBthLen + wire::kIcrcLen) {
    wire::IpUdpFields ip;
    ip.src = src;
    ip.dst = kVictim;
    ip.src_port = 4791;
    ip.dst_port = 4791;
    wire::put_icrc(wire::compute_icrc(ip, pkt), pkt.data() + pkt.size() - wire::kIcrcLen);
  }
  replenish(*g->rc, 4);
  replenish(*g->uc, 4);
  replenish(*g->ud, 4);
  const MemoryChange changed = (c0 & 0x80) ? change_memory(c1) : MemoryChange{};
  net::FakePacket fp;
  fp.src = {src, 4791};
  fp.dst = {kVictim, 4791};
  fp.data = std::move(pkt);
  g->net->inject(fp.dst, std::move(fp));
  transport::Nic& nic = g->ctx->nic();
  {
    std::lock_guard lk(nic.mu());
    while (nic.poll_rx() > 0) {
    }
    nic.pump();  // READ responses, ACKs: gathered from the regions
    nic.flush_acks();
  }
  restore_memory(changed);
  // Whatever completed (receives, errors) is not needed; QPs in error are
  // brought back so later inputs reach them.
  Wc wc[32];
  while (true) {
    auto n = g->cq->poll(wc);
    if (!n.ok() || *n == 0) break;
  }
  if (g->rc->state() != QpState::rts) bring_up(*g->rc, kPeerQpn);
  if (g->uc->state() != QpState::rts) bring_up(*g->uc, kPeerQpn + 1);
  if (g->ud->state() != QpState::rts) bring_up(*g->ud, 0);
  for (const Region* r : {&g->read_only, &g->other_pd})
    if (std::memcmp(r->p, r->snapshot.data(), kRegion) != 0) die("a region the peer may not write changed");
}

std::string counters() {
  init();
  transport::Counters c;
  {
    std::lock_guard lk(g->ctx->nic().mu());
    c = g->ctx->nic().snapshot();
  }
  std::string out;
  c.for_each([&](const char* n, uint64_t v) {
    if (v) out += std::string(out.empty() ? "" : " ") + n + "=" + std::to_string(v);
  });
  return out + " harness_memory_changes=" + std::to_string(g_memory_changes);
}

}  // namespace uroce::fuzz
