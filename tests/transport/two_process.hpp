// Two processes of a test: this one and a forked child, each with its own
// device and one RC QP (End), talking over pipes (QPN, rkey and address
// out, one-character commands back and forth: support/pipe_io.hpp) while RDMA
// runs between them.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "loopback.hpp"
#include "support/pipe_io.hpp"

namespace uroce::test::two_proc {

inline constexpr int kWaitMs = 10000;

// The address of both ends (loopback): one per test that may run beside
// another, since a port shared on one address sees the others' strays.
inline constexpr const char* kAddr = "127.0.93.1";

struct Info {
  uint32_t qpn, rkey;
  uint64_t addr;
  uint16_t port;
};

// One process's end: device, PD, CQ, RC QP, a registered buffer (1 MiB by
// default) and the path MTU its QP uses.
struct End {
  explicit End(size_t buf_size = size_t(1) << 20, Mtu mtu = Mtu::m1024, const char* addr = kAddr)
      : mtu(mtu), addr(addr), buf(buf_size) {}

  Mtu mtu;
  const char* addr;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::vector<uint8_t> buf;
  std::unique_ptr<Mr> mr;

  bool open() {
    DeviceConfig cfg;
    // Port 4791 (falling back to an ephemeral one) of an address no other
    // test uses: the two processes share its port with nobody else, whose
    // stray datagrams the group's default position would receive.
    cfg.gids.push_back(*IpAddr::parse(addr));
    auto c = Context::open(cfg);
    if (!c.ok()) return false;
    ctx = std::move(*c);
    pd = verbs::Pd::create(*ctx).value();
    auto q = Cq::create(*ctx, 64, nullptr);
    if (!q.ok()) return false;
    cq = std::move(*q);
    QpInitAttr init;
    init.send_cq = init.recv_cq = cq.get();
    init.cap = QpCap{16, 16, 1, 1, 0};
    auto qp_r = Qp::create(*pd, init);
    if (!qp_r.ok()) return false;
    qp = std::move(*qp_r);
    auto m = Mr::reg(*pd, uint64_t(uintptr_t(buf.data())), buf.size(), uint64_t(uintptr_t(buf.data())),
                     access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic);
    if (!m.ok()) return false;
    mr = std::move(*m);
    return true;
  }
  void close() {  // children first
    mr.reset();
    qp.reset();
    cq.reset();
    pd.reset();
    ctx.reset();
  }
  Info info() const { return {qp->qpn(), mr->rkey(), uint64_t(uintptr_t(buf.data())), ctx->nic().local().port}; }
  bool connect(const Info& peer) {
    QpAttr a;
    a.qp_state = QpState::init;
    a.qp_access_flags = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
    if (!qp->modify(a,
                    qp_attr_mask::kState | qp_attr_mask::kPkeyIndex | qp_attr_mask::kPort | qp_attr_mask::kAccessFlags)
             .ok())
      return false;
    a.qp_state = QpState::rtr;
    a.path_mtu = mtu;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = 0x100;
    a.ah_attr.dgid = *IpAddr::parse(addr);
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    if (!qp->modify(a, qp_attr_mask::kState | qp_attr_mask::kAv | qp_attr_mask::kPathMtu | qp_attr_mask::kDestQpn |
                           qp_attr_mask::kRqPsn | qp_attr_mask::kMaxDestRdAtomic | qp_attr_mask::kMinRnrTimer)
             .ok())
      return false;
    a.qp_state = QpState::rts;
    a.sq_psn = 0x100;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    return qp
        ->modify(a, qp_attr_mask::kState | qp_attr_mask::kSqPsn | qp_attr_mask::kTimeout | qp_attr_mask::kRetryCnt |
                        qp_attr_mask::kRnrRetry | qp_attr_mask::kMaxQpRdAtomic)
        .ok();
  }
  // One successful completion of `opc` with `len` bytes (and wr_id `id`).
  bool complete(WcOpcode opc, uint32_t len, uint64_t id) {
    auto wc = poll_n(*cq, 1, kWaitMs);
    return wc.size() == 1 && wc[0].status == WcStatus::success && wc[0].opcode == opc && wc[0].byte_len == len &&
           wc[0].wr_id == id;
  }
  bool post(uint64_t id, WrOpcode opc, size_t off, uint32_t len, const Info* peer = nullptr, uint64_t roff = 0,
            uint64_t add = 0, uint64_t swap = 0) {
    Sge s = Sge{uint64_t(uintptr_t(buf.data() + off)), len, mr->lkey()};
    SendWr wr;
    wr.wr_id = id;
    wr.opcode = opc;
    wr.send_flags = send_flags::kSignaled;
    wr.sg_list = {&s, 1};
    if (peer) {
      wr.remote_addr = peer->addr + roff;
      wr.rkey = peer->rkey;
    }
    wr.compare_add = add;
    wr.swap = swap;
    return post_send(*qp, wr).ok();
  }
  // The NIC writes our buffer under its lock, and we learn of it through a
  // pipe, which ThreadSanitizer cannot see: taking the lock orders our reads.
  void sync() const { std::lock_guard g(ctx->nic().mu()); }
  bool same(size_t off, uint32_t seed, size_t len) const {
    sync();
    std::vector<uint8_t> want(len);
    fill_pattern(want.data(), len, seed);
    return std::memcmp(want.data(), buf.data() + off, len) == 0;
  }
};

}  // namespace uroce::test::two_proc
