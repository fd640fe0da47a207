// The CM MAD codec against the five CM MADs Linux (Soft-RoCE) sent in
// tests/data/rxe_rping.pcap -- REQ (frame 1), REP (2), RTU (3), DREQ (64),
// DREP (65): each decodes to the values read off the capture and encodes
// back byte for byte.  Plus round trips of the messages the capture lacks,
// and the bounds checks.
#include "cm/mad.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/hex.hpp"
#include "support/pcap.hpp"
#include "wire/packet.hpp"

namespace uroce::cm {
namespace {

struct CapturedMad {
  size_t frame;  // 1-based, as tshark numbers them
  AttrId attr;
  std::vector<uint8_t> mad;
  wire::Headers hdr;
};

std::vector<CapturedMad> captured() {
  auto file = test::read_pcap(UROCE_TEST_DATA "/rxe_rping.pcap");
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  std::vector<CapturedMad> out;
  if (!file.ok()) return out;
  for (const auto& f : test::roce_frames(*file)) {
    wire::Packet p;
    wire::DecodeError e;
    if (!wire::decode(f.payload(), p, e) || p.hdr.bth.dest_qp != kGsiQpn) continue;
    MadHeader h;
    EXPECT_TRUE(decode_header(p.payload, h));
    out.push_back({f.index + 1, AttrId(h.attr_id), {p.payload.begin(), p.payload.end()}, p.hdr});
  }
  return out;
}

template <class M>
void expect_round_trip(const CapturedMad& c, M& m) {
  SCOPED_TRACE("frame " + std::to_string(c.frame));
  ASSERT_EQ(c.mad.size(), kMadSize);
  ASSERT_TRUE(decode(c.mad, m));
  MadHeader h;
  ASSERT_TRUE(decode_header(c.mad, h));
  MadBuf out;
  encode(h, m, out);
  EXPECT_EQ(test::to_hex(out), test::to_hex(c.mad));
}

TEST(CmMad, CaptureHoldsTheFiveCmMadsOnQp1) {
  const auto mads = captured();
  ASSERT_EQ(mads.size(), 5u);
  const AttrId want[] = {AttrId::req, AttrId::rep, AttrId::rtu, AttrId::dreq, AttrId::drep};
  const size_t frames[] = {1, 2, 3, 64, 65};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(mads[i].attr, want[i]);
    EXPECT_EQ(mads[i].frame, frames[i]);
    // How Linux sends a MAD: UD SEND_ONLY, AckReq, QP1 -> QP1, GSI Q_Key.
    const wire::Headers& h = mads[i].hdr;
    EXPECT_EQ(h.bth.opcode, uint8_t(wire::Opcode::ud_send_only));
    EXPECT_TRUE(h.bth.ack_req);
    EXPECT_EQ(h.bth.pkey, 0xffff);
    EXPECT_EQ(h.deth.qkey, kGsiQkey);
    EXPECT_EQ(h.deth.src_qp, kGsiQpn);
    MadHeader mh;
    ASSERT_TRUE(decode_header(mads[i].mad, mh));
    EXPECT_TRUE(is_cm_send(mh));
    EXPECT_EQ(mh.tid, 0x000000026b356916ull);  // one transaction ID for the whole connection
  }
}

TEST(CmMad, ReqDecodesAndEncodesByteForByte) {
  const auto mads = captured();
  ASSERT_GE(mads.size(), 1u);
  Req r;
  expect_round_trip(mads[0], r);
  EXPECT_EQ(r.local_comm_id, 0x1669356bu);
  EXPECT_EQ(r.service_id, 0x0000000001061c06ull);  // RDMA_PS_TCP, port 7174
  EXPECT_EQ(service_ps(r.service_id), kPsTcp);
  EXPECT_EQ(service_port(r.service_id), 7174);
  EXPECT_TRUE(is_ip_service(r.service_id));
  EXPECT_EQ(r.local_ca_guid, 0x505400fffe990002ull);
  EXPECT_EQ(r.local_qkey, 0u);
  EXPECT_EQ(r.local_qpn, 0x13u);
  EXPECT_EQ(r.responder_resources, 1);
  EXPECT_EQ(r.initiator_depth, 1);
  EXPECT_EQ(r.remote_cm_response_timeout, 20);
  EXPECT_EQ(r.transport_service_type, 0);  // RC
  EXPECT_FALSE(r.e2e_flow_control);
  EXPECT_EQ(r.starting_psn, 0x77213du);
  EXPECT_EQ(r.local_cm_response_timeout, 20);
  EXPECT_EQ(r.retry_count, 7);
  EXPECT_EQ(r.pkey, 0xffff);
  EXPECT_EQ(r.path_mtu, 3);  // 1024
  EXPECT_EQ(r.rnr_retry_count, 7);
  EXPECT_EQ(r.max_cm_retries, 15);
  EXPECT_FALSE(r.srq);
  EXPECT_EQ(r.primary.local_lid, 0xffff);
  EXPECT_EQ(r.primary.remote_lid, 0xffff);
  EXPECT_EQ(r.primary.local_gid, *IpAddr::parse("10.99.0.3"));
  EXPECT_EQ(r.primary.remote_gid, *IpAddr::parse("10.99.0.2"));
  EXPECT_EQ(r.primary.flow_label, 0x819a8u);
  EXPECT_EQ(r.primary.hop_limit, 64);
  EXPECT_EQ(r.primary.traffic_class, 0);
  EXPECT_EQ(r.primary.local_ack_timeout, 19);
  EXPECT_EQ(r.alternate, ReqPath{});
  IpCmHeader ip;
  ASSERT_TRUE(decode_ip_header(r.private_data, ip));
  EXPECT_EQ(ip.major, 0);
  EXPECT_EQ(ip.minor, 0);
  EXPECT_EQ(ip.ip_version, 4);
  EXPECT_EQ(ip.src_port, 0xc61e);
  EXPECT_EQ(ip.src, *IpAddr::parse("10.99.0.3"));
  EXPECT_EQ(ip.dst, *IpAddr::parse("10.99.0.2"));
  uint8_t back[kIpCmHeaderSize];
  ASSERT_TRUE(encode_ip_header(ip, back));
  EXPECT_EQ(test::to_hex(back), test::to_hex(std::span<const uint8_t>(r.private_data.data(), kIpCmHeaderSize)));
}

TEST(CmMad, RepDecodesAndEncodesByteForByte) {
  const auto mads = captured();
  ASSERT_GE(mads.size(), 2u);
  Rep r;
  expect_round_trip(mads[1], r);
  EXPECT_EQ(r.local_comm_id, 0xdb4e937eu);
  EXPECT_EQ(r.remote_comm_id, 0x1669356bu);
  EXPECT_EQ(r.local_qkey, 0u);
  EXPECT_EQ(r.local_qpn, 0x13u);
  EXPECT_EQ(r.starting_psn, 0xd2ab14u);
  EXPECT_EQ(r.responder_resources, 1);
  EXPECT_EQ(r.initiator_depth, 1);
  EXPECT_EQ(r.target_ack_delay, 15);
  EXPECT_EQ(r.failover_accepted, 0);
  EXPECT_EQ(r.rnr_retry_count, 7);
  EXPECT_FALSE(r.srq);
  EXPECT_EQ(r.local_ca_guid, 0x505400fffe990001ull);
}

TEST(CmMad, RtuDreqDrepDecodeAndEncodeByteForByte) {
  const auto mads = captured();
  ASSERT_EQ(mads.size(), 5u);
  Rtu rtu;
  expect_round_trip(mads[2], rtu);
  EXPECT_EQ(rtu.local_comm_id, 0x1669356bu);
  EXPECT_EQ(rtu.remote_comm_id, 0xdb4e937eu);
  Dreq dreq;
  expect_round_trip(mads[3], dreq);
  EXPECT_EQ(dreq.local_comm_id, 0x1669356bu);
  EXPECT_EQ(dreq.remote_comm_id, 0xdb4e937eu);
  EXPECT_EQ(dreq.remote_qpn, 0x13u);
  Drep drep;
  expect_round_trip(mads[4], drep);
  EXPECT_EQ(drep.local_comm_id, 0xdb4e937eu);
  EXPECT_EQ(drep.remote_comm_id, 0x1669356bu);
}

template <class M>
M round_trip(const M& m, AttrId id) {
  MadHeader h;
  h.tid = 0x1122334455667788ull;
  MadBuf buf;
  encode(h, m, buf);
  MadHeader back_h;
  EXPECT_TRUE(decode_header(buf, back_h));
  EXPECT_EQ(back_h.attr_id, uint16_t(id));
  EXPECT_EQ(back_h.tid, h.tid);
  M back;
  EXPECT_TRUE(decode(buf, back));
  return back;
}

TEST(CmMad, EveryMessageRoundTripsWithAllFieldsSet) {
  Req req;
  req.local_comm_id = 0xdeadbeef;
  req.service_id = service_id(kPsUdp, 4242);
  req.local_ca_guid = 0x0102030405060708ull;
  req.local_qkey = 0x01234567;
  req.local_qpn = 0xabcdef;
  req.responder_resources = 16;
  req.local_eecn = 0x123456;
  req.initiator_depth = 8;
  req.remote_eecn = 0x654321;
  req.remote_cm_response_timeout = 31;
  req.transport_service_type = 1;
  req.e2e_flow_control = true;
  req.starting_psn = 0xfffffe;
  req.local_cm_response_timeout = 17;
  req.retry_count = 5;
  req.pkey = 0x8001;
  req.path_mtu = 5;
  req.rdc_exists = true;
  req.rnr_retry_count = 6;
  req.max_cm_retries = 9;
  req.srq = true;
  req.extended_transport_type = 3;
  req.primary = {1, 2, *IpAddr::parse("fe80::1"), *IpAddr::parse("::ffff:1.2.3.4"), 0xfffff, 0x3f, 7, 9, 15, true, 31};
  req.alternate = {3, 4, *IpAddr::parse("::2"), *IpAddr::parse("::3"), 0x12345, 2, 1, 2, 3, false, 4};
  for (size_t i = 0; i < req.private_data.size(); ++i) req.private_data[i] = uint8_t(i * 7);
  EXPECT_EQ(round_trip(req, AttrId::req), req);

  Rep rep;
  rep.local_comm_id = 1;
  rep.remote_comm_id = 2;
  rep.local_qkey = 3;
  rep.local_qpn = 0xffffff;
  rep.local_eecn = 5;
  rep.starting_psn = 6;
  rep.responder_resources = 7;
  rep.initiator_depth = 8;
  rep.target_ack_delay = 31;
  rep.failover_accepted = 2;
  rep.e2e_flow_control = true;
  rep.rnr_retry_count = 7;
  rep.srq = true;
  rep.local_ca_guid = ~0ull;
  rep.private_data.fill(0xa5);
  EXPECT_EQ(round_trip(rep, AttrId::rep), rep);

  Rej rej;
  rej.local_comm_id = 9;
  rej.remote_comm_id = 10;
  rej.msg_rejected = MsgRef::rep;
  rej.reject_info_length = 0x7f;
  rej.reason = uint16_t(RejReason::invalid_service_id);
  rej.ari.fill(0x11);
  rej.private_data.fill(0x22);
  EXPECT_EQ(round_trip(rej, AttrId::rej), rej);

  Mra mra;
  mra.local_comm_id = 11;
  mra.remote_comm_id = 12;
  mra.msg_mraed = MsgRef::other;
  mra.service_timeout = 24;
  mra.private_data.fill(0x33);
  EXPECT_EQ(round_trip(mra, AttrId::mra), mra);

  Rtu rtu;
  rtu.local_comm_id = 13;
  rtu.private_data.fill(0x44);
  EXPECT_EQ(round_trip(rtu, AttrId::rtu), rtu);

  Dreq dreq;
  dreq.remote_qpn = 0x800002;
  dreq.private_data.fill(0x55);
  EXPECT_EQ(round_trip(dreq, AttrId::dreq), dreq);

  Drep drep;
  drep.remote_comm_id = 14;
  drep.private_data.fill(0x66);
  EXPECT_EQ(round_trip(drep, AttrId::drep), drep);

  SidrReq sreq;
  sreq.request_id = 15;
  sreq.pkey = 0x7fff;
  sreq.service_id = service_id(kPsUdp, 7171);
  sreq.private_data.fill(0x77);
  EXPECT_EQ(round_trip(sreq, AttrId::sidr_req), sreq);

  SidrRep srep;
  srep.request_id = 16;
  srep.status = uint8_t(SidrStatus::sid_not_supported);
  srep.additional_info_length = 4;
  srep.qpn = 0x4002;
  srep.service_id = sreq.service_id;
  srep.qkey = kRdmaUdpQkey;
  srep.class_port_info.fill(0x88);
  srep.private_data.fill(0x99);
  EXPECT_EQ(round_trip(srep, AttrId::sidr_rep), srep);
}

TEST(CmMad, FieldsLandAtTheirOffsets) {
  // A few hand-checked positions (offsets within the 256-byte MAD).
  Req req;
  req.local_qpn = 0x123456;
  req.responder_resources = 0x78;
  req.starting_psn = 0xabcdef;
  req.local_cm_response_timeout = 0x1f;
  req.retry_count = 5;
  req.path_mtu = 4;
  req.rnr_retry_count = 3;
  req.max_cm_retries = 0xf;
  MadBuf b;
  encode(MadHeader{}, req, b);
  EXPECT_EQ(test::to_hex(std::span<const uint8_t>(b.data() + 24 + 32, 4)), "12345678");
  EXPECT_EQ(test::to_hex(std::span<const uint8_t>(b.data() + 24 + 44, 4)), "abcdeffd");
  EXPECT_EQ(b[24 + 50], 0x43);
  EXPECT_EQ(b[24 + 51], 0xf0);
  Rej rej;
  rej.msg_rejected = MsgRef::rep;
  rej.reject_info_length = 1;
  rej.reason = 28;
  encode(MadHeader{}, rej, b);
  EXPECT_EQ(test::to_hex(std::span<const uint8_t>(b.data() + 24 + 8, 4)), "4002001c");
  EXPECT_EQ(b[16], 0x00);  // attribute ID 0x0012 at bytes 16-17
  EXPECT_EQ(b[17], 0x12);
}

TEST(CmMad, ShortBuffersAreRefused) {
  MadBuf b{};
  encode(MadHeader{}, Req{}, b);
  Req r;
  r.local_comm_id = 42;
  EXPECT_FALSE(decode(std::span<const uint8_t>(b.data(), kMadSize - 1), r));
  EXPECT_EQ(r.local_comm_id, 42u);  // untouched
  MadHeader h;
  EXPECT_FALSE(decode_header(std::span<const uint8_t>(b.data(), 23), h));
  EXPECT_TRUE(decode_header(std::span<const uint8_t>(b.data(), 24), h));
  Rep rep;
  EXPECT_FALSE(decode(std::span<const uint8_t>(), rep));
  IpCmHeader ip;
  uint8_t small[35] = {};
  EXPECT_FALSE(decode_ip_header(small, ip));
  EXPECT_FALSE(encode_ip_header(ip, small));
  uint8_t bad_version[36] = {0x00, 0x50};
  EXPECT_FALSE(decode_ip_header(bad_version, ip));
}

TEST(CmMad, IpCmHeaderOfIpv6) {
  IpCmHeader h;
  h.ip_version = 6;
  h.src_port = 4242;
  h.src = *IpAddr::parse("fd00::1");
  h.dst = *IpAddr::parse("fd00::2");
  uint8_t buf[kIpCmHeaderSize];
  ASSERT_TRUE(encode_ip_header(h, buf));
  EXPECT_EQ(buf[1], 0x60);
  IpCmHeader back;
  ASSERT_TRUE(decode_ip_header(buf, back));
  EXPECT_EQ(back, h);
}

TEST(CmMad, ServiceIdsAndTimes) {
  EXPECT_EQ(service_id(kPsTcp, 7174), 0x0000000001061c06ull);
  EXPECT_EQ(service_id(kPsUdp, 1), 0x0000000001110001ull);
  EXPECT_FALSE(is_ip_service(0x1000000001061c06ull));
  EXPECT_EQ(iba_time_us(0), 4u);
  EXPECT_EQ(iba_time_us(16), 268435u);
  EXPECT_EQ(iba_time_us(20), 4294967u);
}

}  // namespace
}  // namespace uroce::cm
