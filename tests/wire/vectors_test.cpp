// The six reference vectors of tests/data/vectors.txt (checked by tshark and
// two independent checkers): decode, re-encode byte for byte, same ICRC.
#include "support/vectors.hpp"

#include <gtest/gtest.h>

#include "support/hex.hpp"
#include "support/pcap.hpp"
#include "support/roce_packet.hpp"
#include "wire/icrc.hpp"
#include "wire/ip_header.hpp"
#include "wire/packet.hpp"

namespace uroce::wire {
namespace {

using test::to_hex;

class wire_vectors : public ::testing::Test {
 protected:
  void SetUp() override {
    auto v = test::read_vectors(UROCE_TEST_DATA "/vectors.txt");
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    vs_ = std::move(*v);
    ASSERT_EQ(vs_.size(), 6u);
  }
  // Parses and decodes vector i.
  void load(size_t i, ParsedIpUdp& ip, Packet& p) {
    auto parsed = parse_ip_udp(vs_[i].bytes);
    ASSERT_TRUE(parsed) << vs_[i].name;
    ip = *parsed;
    DecodeError err{};
    ASSERT_TRUE(decode(ip.udp_payload, p, err)) << vs_[i].name << ": " << to_string(err);
  }
  std::vector<test::Vector> vs_;
};

TEST_F(wire_vectors, AllSixDecodeAndReencodeByteForByte) {
  const char* kOpcodes[] = {"RC_SEND_ONLY", "RC_WRITE_FIRST", "UC_SEND_ONLY", "CNP", "RC_ACK", "RC_WRITE_FIRST"};
  for (size_t i = 0; i < vs_.size(); ++i) {
    SCOPED_TRACE(vs_[i].name);
    ParsedIpUdp ip;
    Packet p;
    load(i, ip, p);
    EXPECT_STREQ(p.info->name, kOpcodes[i]);
    // BTH .. ICRC rebuilt from the decoded headers and payload.
    const auto again = test::make_udp_payload(p.hdr, p.payload, ip.fields);
    EXPECT_EQ(to_hex(again), to_hex(ip.udp_payload));
    // The ICRC, computed from the vector's own IP fields, is the vector's.
    uint8_t icrc[4];
    put_icrc(compute_icrc(ip.fields, ip.udp_payload), icrc);
    EXPECT_EQ(to_hex(icrc), to_hex(vs_[i].icrc));
    EXPECT_EQ(p.icrc, get_icrc(vs_[i].icrc.data()));
    EXPECT_EQ(verify_icrc(ip.fields, ip.udp_payload), IcrcCheck::ok);
  }
}

TEST_F(wire_vectors, V1SendOnlyFields) {
  ParsedIpUdp ip;
  Packet p;
  load(0, ip, p);
  EXPECT_EQ(p.hdr.bth.dest_qp, 0x11u);
  EXPECT_EQ(p.hdr.bth.psn, 0x100u);
  EXPECT_TRUE(p.hdr.bth.ack_req);
  EXPECT_TRUE(p.hdr.bth.mig_req);
  EXPECT_EQ(std::string(p.payload.begin(), p.payload.end()), "hello rdma wire!");
  EXPECT_EQ(p.icrc, 0x0aa73e23u);
}

TEST_F(wire_vectors, V2WriteFirstReth) {
  ParsedIpUdp ip;
  Packet p;
  load(1, ip, p);
  EXPECT_EQ(p.hdr.reth.va, 0x7f0000001000ull);
  EXPECT_EQ(p.hdr.reth.rkey, 0x1234u);
  EXPECT_EQ(p.hdr.reth.length, 32u);
  EXPECT_EQ(p.payload.size(), 16u);
}

TEST_F(wire_vectors, V3ScapyUcSendOnlyWithPad) {
  ParsedIpUdp ip;
  Packet p;
  load(2, ip, p);
  EXPECT_EQ(p.hdr.bth.pad, 2);
  EXPECT_FALSE(p.hdr.bth.solicited);
  EXPECT_TRUE(p.hdr.bth.mig_req);
  EXPECT_EQ(p.hdr.bth.dest_qp, 0xd3u);
  EXPECT_EQ(p.hdr.bth.psn, 0xcf1710u);
  EXPECT_EQ(p.payload.size(), 18u);
  EXPECT_EQ(ip.fields.ipv4_id, 0x0478);
  EXPECT_EQ(ip.variant.tos, 0x01);
}

TEST_F(wire_vectors, V4ConnectXCnpWithEcnAndBecn) {
  ParsedIpUdp ip;
  Packet p;
  load(3, ip, p);
  EXPECT_EQ(p.info, &info(Opcode::cnp));
  EXPECT_TRUE(p.hdr.bth.becn);
  EXPECT_FALSE(p.hdr.bth.fecn);
  EXPECT_FALSE(p.hdr.bth.mig_req);
  EXPECT_EQ(p.hdr.bth.dest_qp, 0x118u);
  EXPECT_EQ(p.hdr.bth.psn, 0u);
  EXPECT_TRUE(p.payload.empty());
  EXPECT_EQ(ip.variant.tos & 3, 2);  // ECN field: ECT(0)
  EXPECT_EQ(ip.fields.src_port, 0);
  // FECN/BECN are not covered: a CNP with BECN clear has the same ICRC.
  std::vector<uint8_t> b(ip.udp_payload.begin(), ip.udp_payload.end());
  b[4] = 0;
  EXPECT_EQ(verify_icrc(ip.fields, b), IcrcCheck::ok);
}

TEST_F(wire_vectors, V5AckSyndrome) {
  ParsedIpUdp ip;
  Packet p;
  load(4, ip, p);
  EXPECT_EQ(aeth_type(p.hdr.aeth.syndrome), AckType::ack);
  EXPECT_EQ(aeth_value(p.hdr.aeth.syndrome), kCreditsInvalid);
  EXPECT_EQ(p.hdr.aeth.msn, 3u);
  EXPECT_EQ(p.hdr.bth.psn, 12u);
  EXPECT_EQ(ip.variant.ttl, 0x2f);
}

TEST_F(wire_vectors, V6Ipv6TrafficClassAndFlowLabelAreNotCovered) {
  ParsedIpUdp ip;
  Packet p;
  load(5, ip, p);
  EXPECT_FALSE(ip.fields.src.is_v4());
  EXPECT_EQ(ip.variant.tos, 0x1a);
  EXPECT_EQ(ip.variant.flow_label, 0x12345u);
  EXPECT_EQ(p.hdr.reth.length, 48u);
  // Rebuilding the IPv6 packet with other variant fields keeps the ICRC.
  const auto rebuilt = test::make_ip_packet(ip.fields, {.tos = 0, .ttl = 1, .flow_label = 0}, ip.udp_payload);
  const auto again = parse_ip_udp(rebuilt);
  ASSERT_TRUE(again);
  EXPECT_EQ(verify_icrc(again->fields, again->udp_payload), IcrcCheck::ok);
  // And the full packet rebuilt with the vector's own variant fields is the vector.
  EXPECT_EQ(to_hex(test::make_ip_packet(ip.fields, ip.variant, ip.udp_payload)), to_hex(vs_[5].bytes));
}

TEST_F(wire_vectors, VectorsPcapHoldsV3AndV4) {
  auto file = test::read_pcap(UROCE_TEST_DATA "/vectors.pcap");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->linktype, test::kLinktypeEthernet);
  ASSERT_EQ(file->frames.size(), 2u);
  const auto l3a = test::strip_link(file->linktype, file->frames[0].data);
  const auto l3b = test::strip_link(file->linktype, file->frames[1].data);
  ASSERT_TRUE(l3a && l3b);
  EXPECT_EQ(to_hex(*l3a), to_hex(vs_[2].bytes));
  EXPECT_EQ(to_hex(*l3b), to_hex(vs_[3].bytes));
}

}  // namespace
}  // namespace uroce::wire
