// Unreliable Datagram: SEND and SEND_WITH_IMM with the Q_Key check, the
// 40-byte GRH area (the packet's IP header) in front of the data, and the
// drops UD is allowed (wrong Q_Key, no receive), over IPv4 and IPv6.
#include <arpa/inet.h>

#include "loopback.hpp"
#include "wire/ip_header.hpp"
#include "wire/packet.hpp"

namespace uroce::test {
namespace {

constexpr uint32_t kQkey = 0x11111111;
constexpr size_t kGrh = 40;

struct Ud {
  Pair p;
  std::unique_ptr<Ah> to_b;
  explicit Ud(PairOptions o = {}) : p((o.type = QpType::ud, o)) {
    auto ah = Ah::create(*p.a.pd, AhAttr{p.b.gid()});
    EXPECT_TRUE(ah.ok()) << ah.status().to_string();
    if (ah.ok()) to_b = std::move(*ah);
  }
  ~Ud() { to_b.reset(); }
  SendWr wr(uint64_t id, const Sge* s, uint32_t qkey = kQkey, WrOpcode opc = WrOpcode::send) {
    SendWr w;
    w.wr_id = id;
    w.opcode = opc;
    w.send_flags = send_flags::kSignaled;
    if (s) w.sg_list = {s, 1};
    w.ah = to_b.get();
    w.remote_qpn = p.b.qp->qpn();
    w.remote_qkey = qkey;
    w.imm_data = htonl(0xfeed0000 + uint32_t(id));
    return w;
  }
};

// UDP payload bytes of a UD SEND: BTH + DETH (+ ImmDt) + data + pad + ICRC.
size_t udp_payload(size_t len, bool imm) { return 12 + 8 + (imm ? 4 : 0) + len + wire::pad_for(len) + 4; }

void check_grh(const uint8_t* g, const IpAddr& src, const IpAddr& dst, size_t len, bool imm) {
  if (src.is_v4()) {
    for (int i = 0; i < 20; ++i) ASSERT_EQ(g[i], 0) << "GRH byte " << i;
    const uint8_t* ip = g + 20;
    EXPECT_EQ(ip[0], 0x45);                                                 // version 4, IHL 5
    EXPECT_EQ(size_t(ip[2] << 8 | ip[3]), 20 + 8 + udp_payload(len, imm));  // total length
    EXPECT_EQ(ip[6] & 0x40, 0x40);                                          // DF
    EXPECT_EQ(ip[9], 17);                                                   // UDP
    EXPECT_EQ(wire::ipv4_header_checksum({ip, 20}), 0);                     // a valid header checksum
    EXPECT_EQ(std::memcmp(ip + 12, src.bytes().data() + 12, 4), 0);
    EXPECT_EQ(std::memcmp(ip + 16, dst.bytes().data() + 12, 4), 0);
  } else {
    EXPECT_EQ(g[0] >> 4, 6);
    EXPECT_EQ(size_t(g[4] << 8 | g[5]), 8 + udp_payload(len, imm));  // payload length
    EXPECT_EQ(g[6], 17);                                             // next header UDP
    EXPECT_EQ(std::memcmp(g + 8, src.bytes().data(), 16), 0);
    EXPECT_EQ(std::memcmp(g + 24, dst.bytes().data(), 16), 0);
  }
}

void send_and_check(Ud& u) {
  Pair& p = u.p;
  fill_pattern(p.a.buf.data(), 5000, 1);
  std::memset(p.b.buf.data(), 0xcc, 20000);
  ASSERT_TRUE(post_recv(*p.b.qp, 71, {p.b.sge(0, kGrh + 4096)}).ok());
  ASSERT_TRUE(post_recv(*p.b.qp, 72, {p.b.sge(8192, kGrh + 4096)}).ok());
  Sge s1 = p.a.sge(0, 333), s2 = p.a.sge(1000, 4096);
  SendWr wrs[2] = {u.wr(1, &s1), u.wr(2, &s2, kQkey, WrOpcode::send_with_imm)};
  size_t bad;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  auto sc = poll_n(*p.a.scq, 2);
  ASSERT_EQ(sc.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(sc[i].status, WcStatus::success);
    EXPECT_EQ(sc[i].wr_id, uint64_t(i + 1));
    EXPECT_EQ(sc[i].opcode, WcOpcode::send);
    EXPECT_EQ(sc[i].byte_len, i == 0 ? 333u : 4096u);
  }
  auto rc = poll_n(*p.b.rcq, 2);
  ASSERT_EQ(rc.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const size_t len = i == 0 ? 333 : 4096;
    EXPECT_EQ(rc[i].status, WcStatus::success);
    EXPECT_EQ(rc[i].wr_id, uint64_t(71 + i));
    EXPECT_EQ(rc[i].opcode, WcOpcode::recv);
    EXPECT_EQ(rc[i].byte_len, kGrh + len);
    EXPECT_EQ(rc[i].wc_flags, wc_flags::kGrh | (i == 1 ? wc_flags::kWithImm : 0));
    EXPECT_EQ(rc[i].src_qp, p.a.qp->qpn());
    EXPECT_EQ(rc[i].qp_num, p.b.qp->qpn());
    if (i == 1) {
      EXPECT_EQ(rc[i].imm_data, htonl(0xfeed0002));
    }
    const uint8_t* got = p.b.buf.data() + i * 8192;
    check_grh(got, p.a.gid(), p.b.gid(), len, i == 1);
    EXPECT_EQ(first_diff(p.a.buf.data() + i * 1000, got + kGrh, len), -1);
    EXPECT_EQ(got[kGrh + len], 0xcc);
  }
}

class UdPath : public ::testing::TestWithParam<PacketPath> {};

TEST_P(UdPath, SendAndSendWithImmOverIpv4) {
  Ud u(over(GetParam()));
  send_and_check(u);
}

TEST(Ud, SendAndSendWithImmOverIpv6) {
  PairOptions o;
  o.addr_a = o.addr_b = "::1";  // one IPv6 loopback address: both contexts share its NIC
  Ud u(o);
  ASSERT_FALSE(u.p.a.gid().is_v4());
  send_and_check(u);
}

TEST_P(UdPath, QkeyCheck) {
  Ud u(over(GetParam()));
  Pair& p = u.p;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(post_recv(*p.b.qp, 80 + i, {p.b.sge(i * 1024, 1024)}).ok());
  Sge s = p.a.sge(0, 64);
  // A wrong Q_Key: dropped and counted, the sender still completes.
  ASSERT_TRUE(post_send(*p.a.qp, u.wr(1, &s, 0x22222222)).ok());
  ASSERT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
  ASSERT_TRUE(wait_until([&] { return p.b.counters().ud_qkey_drops == 1; }));
  EXPECT_TRUE(drain(*p.b.rcq, 10).empty());
  // The high bit: use the sending QP's own Q_Key (the same as B's here).
  ASSERT_TRUE(post_send(*p.a.qp, u.wr(2, &s, 0x80000000)).ok());
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 80u);
  // ... and with A's Q_Key changed (RTS->RTS), the high bit sends that one.
  QpAttr at;
  at.qkey = 0x33333333;
  ASSERT_TRUE(p.a.qp->modify(at, qp_attr_mask::kQkey).ok());
  ASSERT_TRUE(post_send(*p.a.qp, u.wr(3, &s, 0x80000000)).ok());
  ASSERT_TRUE(wait_until([&] { return p.b.counters().ud_qkey_drops == 2; }));
  ASSERT_TRUE(post_send(*p.a.qp, u.wr(4, &s, kQkey)).ok());
  rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 81u);
  EXPECT_EQ(poll_n(*p.a.scq, 3).size(), 3u);
}

// IBA C10-93.1.1, as rxe does: a UD message above the port MTU leaves no
// packet and raises no error; the WR completes successfully and the QP
// stays usable.
TEST(Ud, MessageLargerThanMtuSendsNothingAndSucceeds) {
  Ud u;
  Pair& p = u.p;
  const uint32_t mtu = p.a.ctx->port_attr().active_mtu_bytes;
  ASSERT_TRUE(post_recv(*p.b.qp, 70, {p.b.sge(0, kGrh + 2 * mtu)}).ok());
  Sge big = p.a.sge(0, mtu + 1);
  const uint64_t sent = p.a.counters().req_packets;
  ASSERT_TRUE(post_send(*p.a.qp, u.wr(1, &big)).ok());
  auto sc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].wr_id, 1u);
  EXPECT_EQ(sc[0].status, WcStatus::success);
  EXPECT_EQ(p.a.counters().req_packets, sent);
  EXPECT_EQ(p.a.counters().ud_oversize_sends, 1u);
  EXPECT_TRUE(drain(*p.b.rcq, 50).empty()) << "nothing was sent";
  Sge fits = p.a.sge(0, mtu);
  ASSERT_TRUE(post_send(*p.a.qp, u.wr(2, &fits)).ok());
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 70u);
  EXPECT_EQ(rc[0].byte_len, kGrh + mtu);
  EXPECT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
}

// What a UD QP cannot execute (RDMA, atomics, an address handle of another
// PD) is posted and completes LOC_QP_OP_ERR when the requester reaches it,
// as on rxe; the QP goes to ERR and what follows is flushed.
TEST(Ud, WhatUdCannotExecuteCompletesInError) {
  for (int variant = 0; variant < 5; ++variant) {
    SCOPED_TRACE(variant);
    Ud u;
    Pair& p = u.p;
    Sge s = p.a.sge(0, 8);
    constexpr WrOpcode kOps[] = {WrOpcode::rdma_write, WrOpcode::rdma_write_with_imm, WrOpcode::rdma_read,
                                 WrOpcode::atomic_fetch_and_add};
    SendWr bad = u.wr(1, &s, kQkey, variant < 4 ? kOps[variant] : WrOpcode::send);
    bad.remote_addr = p.b.addr(0);
    bad.rkey = p.b.mr->rkey();
    auto other_pd = Pd::create(*p.a.ctx).value();
    auto foreign = Ah::create(*other_pd, AhAttr{p.b.gid()}).value();
    if (variant == 4) bad.ah = foreign.get();
    SendWr next = u.wr(2, &s);
    SendWr both[2] = {bad, next};
    size_t at = 99;
    const uint64_t sent = p.a.counters().req_packets;
    ASSERT_TRUE(p.a.qp->post_send(both, &at).ok());
    auto sc = poll_n(*p.a.scq, 2);
    ASSERT_EQ(sc.size(), 2u);
    EXPECT_EQ(sc[0].wr_id, 1u);
    EXPECT_EQ(sc[0].status, WcStatus::loc_qp_op_err);
    EXPECT_EQ(sc[1].wr_id, 2u);
    EXPECT_EQ(sc[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(p.a.qp->query().qp_state, QpState::err);
    EXPECT_EQ(p.a.counters().req_packets, sent);
  }
}

TEST_P(UdPath, NoReceiveOrShortReceive) {
  Ud u(over(GetParam()));
  Pair& p = u.p;
  Sge s = p.a.sge(0, 100);
  ASSERT_TRUE(post_send(*p.a.qp, u.wr(1, &s)).ok());
  ASSERT_TRUE(wait_until([&] { return p.b.counters().ud_no_recv_drops == 1; }));
  EXPECT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
  // A message the receive cannot hold (GRH + data) is dropped and counted,
  // the receive staying posted for the next one, as rxe does (IBA class D).
  ASSERT_TRUE(post_recv(*p.b.qp, 90, {p.b.sge(0, kGrh + 99)}).ok());
  ASSERT_TRUE(post_send(*p.a.qp, u.wr(2, &s)).ok());
  ASSERT_TRUE(wait_until([&] { return p.b.counters().ud_len_errors == 1; }));
  EXPECT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
  EXPECT_TRUE(drain(*p.b.rcq, 50).empty()) << "no completion for a dropped message";
  EXPECT_EQ(p.b.qp->query().qp_state, QpState::rts) << "UD stays usable";
  Sge fits = p.a.sge(200, 99);
  ASSERT_TRUE(post_send(*p.a.qp, u.wr(3, &fits)).ok());
  auto rc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 90u);
  EXPECT_EQ(rc[0].status, WcStatus::success);
  EXPECT_EQ(rc[0].byte_len, kGrh + 99);
}

INSTANTIATE_TEST_SUITE_P(Over, UdPath, kEveryPacketPath, PacketPathName);

}  // namespace
}  // namespace uroce::test
