// A victim NIC and an attacker, for hostile-traffic tests.
//
// The victim is a core device on a FakeNetwork (10.0.0.2) with RC QPs
// connected to 10.0.0.1, where the attacker sits: a bare FakeIo that sends
// hand-built RoCEv2 packets (valid ICRC unless a test spoils it) and reads
// the victim's answers.  Every memory region of the victim is surrounded by
// PROT_NONE guard pages: a byte moved outside a region would crash the test.
// After each attack the test checks the counter that names the refusal and
// that no region changed.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "net/fake_io.hpp"
#include "support/roce_packet.hpp"
#include "transport/nic.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/mr.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp.hpp"
#include "wire/packet.hpp"

namespace uroce::test {

using namespace uroce::verbs;

// `len` bytes (a multiple of the page size) between two PROT_NONE pages.
class Guarded {
 public:
  explicit Guarded(size_t len) : len_(len) {
    const size_t page = size_t(::sysconf(_SC_PAGESIZE));
    total_ = len + 2 * page;
    base_ = static_cast<uint8_t*>(::mmap(nullptr, total_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) std::abort();
    p_ = base_ + page;
    if (::mprotect(p_, len, PROT_READ | PROT_WRITE) != 0) std::abort();
  }
  ~Guarded() { ::munmap(base_, total_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  uint8_t* data() const { return p_; }
  size_t size() const { return len_; }
  uint64_t addr() const { return uint64_t(uintptr_t(p_)); }

 private:
  uint8_t* base_;
  uint8_t* p_;
  size_t len_, total_;
};

inline const IpAddr kVictimIp = *IpAddr::parse("10.0.0.2");
inline const IpAddr kPeerIp = *IpAddr::parse("10.0.0.1");
inline const IpAddr kForeignIp = *IpAddr::parse("10.0.0.66");
inline constexpr uint32_t kPeerQpn = 0x000777;  // what the victim's QPs are connected to
inline constexpr uint32_t kRqPsn = 0x000100;    // the victim's first expected PSN

struct Region {
  std::unique_ptr<Guarded> mem;
  std::unique_ptr<Mr> mr;
  std::vector<uint8_t> snapshot;
  uint64_t addr() const { return mem->addr(); }
  uint32_t rkey() const { return mr->rkey(); }
};

class Victim {
 public:
  static constexpr size_t kRegion = 4 * 4096;

  std::shared_ptr<net::FakeNetwork> net = net::FakeNetwork::create();
  std::unique_ptr<net::FakeIo> attacker, foreigner;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd, pd2;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;       // all remote rights
  std::unique_ptr<Qp> qp_none;  // no remote rights at all
  Region all, read_only, write_only, other_pd, recv;
  // what the attacker believes the victim expects next, per QP
  uint32_t epsn = kRqPsn, epsn_none = kRqPsn;

  // `cc`: the victim's congestion control and loss recovery (unset: as
  // UROCE_CC and UROCE_SR say).
  explicit Victim(std::optional<transport::CongestionConfig> cc = std::nullopt) {
    net->set_queue_limit(1 << 20);
    attacker = std::move(net->attach({kPeerIp, 4791}).value());
    foreigner = std::move(net->attach({kForeignIp, 4791}).value());
    DeviceConfig cfg;
    cfg.name = "victim";
    cfg.gids = {kVictimIp};
    cfg.udp_port = 4791;
    cfg.faults = FaultConfig{};  // no injected faults, whatever UROCE_FAULTS says
    cfg.congestion = cc;
    auto n = net;
    cfg.io_factory = [n]() -> Result<std::unique_ptr<net::PacketIo>> {
      auto io = n->attach({kVictimIp, 4791});
      if (!io.ok()) return io.status();
      return std::unique_ptr<net::PacketIo>(std::move(*io));
    };
    ctx = std::move(Context::open(cfg).value());
    pd = verbs::Pd::create(*ctx).value();
    pd2 = verbs::Pd::create(*ctx).value();
    cq = std::move(Cq::create(*ctx, 256, nullptr).value());
    const uint32_t lw = access::kLocalWrite;
    all = region(*pd, lw | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic, 1);
    read_only = region(*pd, access::kRemoteRead, 2);
    write_only = region(*pd, lw | access::kRemoteWrite, 3);
    other_pd = region(*pd2, lw | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic, 4);
    recv = region(*pd, lw, 5);
    qp = make_qp(access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic, kPeerQpn);
    qp_none = make_qp(0, kPeerQpn + 1);
    // One receive of exactly one page for SENDs, at the end of its region:
    // a byte past it is in the guard page.
    post_recv(kRegion - 4096, 4096);
  }
  ~Victim() {
    qp.reset();
    qp_none.reset();
    for (Region* r : {&all, &read_only, &write_only, &other_pd, &recv}) r->mr.reset();
    cq.reset();
    pd.reset();
    pd2.reset();
    ctx.reset();
  }

  Region region(Pd& p, uint32_t acc, uint32_t seed) {
    Region r;
    r.mem = std::make_unique<Guarded>(kRegion);
    for (size_t i = 0; i < kRegion; ++i) r.mem->data()[i] = uint8_t(seed * 131 + i * 7);
    auto mr = Mr::reg(p, r.mem->addr(), kRegion, r.mem->addr(), acc);
    EXPECT_TRUE(mr.ok()) << mr.status().to_string();
    r.mr = std::move(*mr);
    r.snapshot.assign(r.mem->data(), r.mem->data() + kRegion);
    return r;
  }

  std::unique_ptr<Qp> make_qp(uint32_t qp_access, uint32_t dest_qpn) {
    QpInitAttr init;
    init.send_cq = init.recv_cq = cq.get();
    init.cap = QpCap{16, 16, 1, 1, 0};
    auto q = std::move(Qp::create(*pd, init).value());
    namespace m = qp_attr_mask;
    QpAttr a;
    a.qp_state = QpState::init;
    a.qp_access_flags = qp_access;
    EXPECT_TRUE(q->modify(a, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags).ok());
    a = QpAttr{};
    a.qp_state = QpState::rtr;
    a.path_mtu = Mtu::m1024;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = kRqPsn;
    a.ah_attr.dgid = kPeerIp;
    a.ah_attr.is_global = true;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    EXPECT_TRUE(
        q->modify(a, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn | m::kMaxDestRdAtomic | m::kMinRnrTimer)
            .ok());
    return q;
  }

  void post_recv(size_t off, uint32_t len) {
    Sge s{recv.addr() + off, len, recv.mr->lkey()};
    RecvWr wr{42, {&s, 1}};
    size_t bad;
    ASSERT_TRUE(qp->post_recv({&wr, 1}, &bad).ok());
  }

  transport::Counters counters() const {
    std::lock_guard g(ctx->nic().mu());
    return ctx->nic().snapshot();
  }

  // The UDP payload of a packet to the victim's QP `qpn` from `src`.
  static std::vector<uint8_t> packet(wire::Headers h, std::span<const uint8_t> payload, const IpAddr& src = kPeerIp) {
    wire::IpUdpFields ip;
    ip.src = src;
    ip.dst = kVictimIp;
    ip.src_port = 4791;
    ip.dst_port = 4791;
    return make_udp_payload(h, payload, ip);
  }

  // Sends raw UDP payloads from the attacker (or the foreigner) and waits
  // until the victim has received them all.
  void send(const std::vector<std::vector<uint8_t>>& pkts, bool foreign = false) {
    const uint64_t before = counters().rx_packets;
    std::vector<net::TxPacket> tx;
    for (const auto& p : pkts) tx.push_back(net::TxPacket{{kVictimIp, 4791}, p, {}, {}, 0});
    for (size_t i = 0; i < tx.size(); i += 64) {
      const size_t n = std::min<size_t>(64, tx.size() - i);
      (foreign ? *foreigner : *attacker).send_batch(std::span(tx).subspan(i, n));
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (counters().rx_packets < before + pkts.size() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    ASSERT_EQ(counters().rx_packets, before + pkts.size()) << "the victim did not receive everything";
    // Let it answer (NAKs leave at once, ACKs within a progress tick).
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  void send1(const std::vector<uint8_t>& p, bool foreign = false) { send({p}, foreign); }

  // What the victim sent back to the attacker since the last call.
  std::vector<wire::Headers> answers(std::vector<size_t>* payload_sizes = nullptr) {
    std::vector<wire::Headers> out;
    std::vector<net::RxPacket> rx(64);
    for (size_t n; (n = attacker->recv_batch(rx)) > 0;)
      for (size_t i = 0; i < n; ++i) {
        wire::Packet p;
        wire::DecodeError e;
        if (!wire::decode(rx[i].data, p, e)) continue;
        out.push_back(p.hdr);
        if (payload_sizes) payload_sizes->push_back(p.payload.size());
      }
    return out;
  }

  // No region changed (and no byte outside them was touched: guard pages).
  void expect_untouched(const char* what) {
    for (const Region* r : {&all, &read_only, &write_only, &other_pd, &recv})
      EXPECT_EQ(std::memcmp(r->mem->data(), r->snapshot.data(), kRegion), 0) << what << ": a region changed";
  }
  // Accepts a change the test made on purpose.
  void resnapshot() {
    for (Region* r : {&all, &read_only, &write_only, &other_pd, &recv})
      r->snapshot.assign(r->mem->data(), r->mem->data() + kRegion);
  }
};

inline wire::Headers bth(uint8_t opcode, uint32_t qpn, uint32_t psn, bool ack_req = true) {
  wire::Headers h;
  h.bth.opcode = opcode;
  h.bth.dest_qp = qpn;
  h.bth.psn = psn;
  h.bth.ack_req = ack_req;
  return h;
}

inline wire::Headers write_only(uint32_t qpn, uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len) {
  wire::Headers h = bth(uint8_t(wire::Opcode::rc_write_only), qpn, psn);
  h.reth = {va, rkey, len};
  return h;
}

inline wire::Headers read_req(uint32_t qpn, uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len) {
  wire::Headers h = bth(uint8_t(wire::Opcode::rc_read_request), qpn, psn);
  h.reth = {va, rkey, len};
  return h;
}

inline wire::Headers fetch_add(uint32_t qpn, uint32_t psn, uint64_t va, uint32_t rkey, uint64_t add) {
  wire::Headers h = bth(uint8_t(wire::Opcode::rc_fetch_add), qpn, psn);
  h.atomic = {va, rkey, add, 0};
  return h;
}

}  // namespace uroce::test
