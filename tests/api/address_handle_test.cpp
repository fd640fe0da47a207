// uroce::AddressHandle: UD datagrams to a GID.
#include <arpa/inet.h>

#include "api_pair.hpp"

namespace uroce::apitest {
namespace {

constexpr uint32_t kQkey = 0x11111111;  // ConnectOptions' default

TEST(AddressHandle, CarriesItsAttributes) {
  Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
  auto pd = must(ctx.alloc_pd(), "alloc_pd");
  AhAttr a;
  a.dgid = ip("127.0.0.2");
  a.traffic_class = 0x10;
  a.hop_limit = 7;
  auto ah = must(pd.create_ah(a), "create_ah");
  EXPECT_NE(ah.get(), nullptr);
  EXPECT_EQ(ah.attr().dgid, ip("127.0.0.2"));
  EXPECT_EQ(ah.attr().traffic_class, 0x10);
  EXPECT_EQ(ah.attr().hop_limit, 7);
  const verbs::Ah* raw = ah.get();
  AddressHandle moved = std::move(ah);
  EXPECT_EQ(moved.get(), raw);
  EXPECT_EQ(ah.get(), nullptr);  // NOLINT(bugprone-use-after-move)
}

TEST(AddressHandle, UdDatagramReachesThePeerWithItsGrh) {
  Pair p(PairOptions{.type = QpType::ud});
  EXPECT_EQ(p.a.qp->state(), QpState::rts);
  EXPECT_EQ(p.a.qp->query().qkey, kQkey);
  AhAttr a;
  a.dgid = ip("127.0.0.2");
  auto ah = must(p.a.pd->create_ah(a), "create_ah");

  Sge r = p.b.sge(0, 40 + 512);
  must(p.b.qp->post_recv(RecvWr{8, {&r, 1}}), "post_recv");
  fill(std::span<std::byte>(p.a.buf).first(300), 21);
  Sge s = p.a.sge(0, 300);
  SendWr wr;
  wr.wr_id = 3;
  wr.opcode = WrOpcode::send_with_imm;
  wr.imm_data = htonl(1234);
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  wr.ah = ah.get();
  wr.remote_qpn = p.b.qp->qpn();
  wr.remote_qkey = kQkey;
  must(p.a.qp->post_send(wr), "post_send");

  const Wc c = wait_wc(*p.a.scq);
  EXPECT_EQ(c.status, WcStatus::success);
  EXPECT_EQ(c.wr_id, 3u);
  const Wc rc = wait_wc(*p.b.rcq);
  EXPECT_EQ(rc.status, WcStatus::success);
  EXPECT_EQ(rc.wr_id, 8u);
  EXPECT_EQ(rc.byte_len, 40u + 300u);  // the 40-byte GRH area, then the data
  EXPECT_EQ(rc.src_qp, p.a.qp->qpn());
  EXPECT_EQ(rc.wc_flags & wc_flags::kGrh, wc_flags::kGrh);
  EXPECT_EQ(rc.wc_flags & wc_flags::kWithImm, wc_flags::kWithImm);
  EXPECT_EQ(ntohl(rc.imm_data), 1234u);
  EXPECT_EQ(std::memcmp(p.a.at(0), p.b.at(40), 300), 0);
  // RoCEv2 over IPv4: the IP header sits in bytes 20..39 of the GRH area,
  // with the sender's address as the source.
  EXPECT_EQ(uint8_t(p.b.buf[20]) >> 4, 4);
  EXPECT_EQ(std::memcmp(p.b.at(20 + 12), ip("127.0.0.1").bytes().data() + 12, 4), 0);
}

TEST(AddressHandle, WrongQkeyIsDropped) {
  Pair p(PairOptions{.type = QpType::ud});
  AhAttr a;
  a.dgid = ip("127.0.0.2");
  auto ah = must(p.a.pd->create_ah(a), "create_ah");
  Sge r = p.b.sge(0, 128);
  must(p.b.qp->post_recv(RecvWr{1, {&r, 1}}), "post_recv");
  Sge s = p.a.sge(0, 16);
  SendWr wr;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&s, 1};
  wr.ah = ah.get();
  wr.remote_qpn = p.b.qp->qpn();
  wr.remote_qkey = kQkey + 1;
  must(p.a.qp->post_send(wr), "post_send");
  EXPECT_EQ(wait_wc(*p.a.scq).status, WcStatus::success);  // UD: sent is done
  EXPECT_TRUE(drain(*p.b.rcq, 50ms).empty());
  EXPECT_EQ(must(p.b.ctx->counter("ud_qkey_drops"), "ud_qkey_drops"), 1u);
}

TEST(AddressHandle, UdSendWithoutHandleIsEinval) {
  Pair p(PairOptions{.type = QpType::ud});
  Sge s = p.a.sge(0, 16);
  SendWr wr;
  wr.opcode = WrOpcode::send;
  wr.sg_list = {&s, 1};
  wr.remote_qpn = p.b.qp->qpn();
  Status st = p.a.qp->post_send(wr);
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.message().find("address handle"), std::string_view::npos) << st.to_string();
}

}  // namespace
}  // namespace uroce::apitest
