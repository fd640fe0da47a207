// wire/sack.hpp: the UROCE_SACK_HELLO and UROCE_SACK payloads, byte for
// byte, and what their parsers refuse.
#include "wire/sack.hpp"

#include <gtest/gtest.h>

#include "support/hex.hpp"
#include "support/roce_packet.hpp"
#include "wire/icrc.hpp"
#include "wire/packet.hpp"

namespace uroce::wire {
namespace {

using test::from_hex;
using test::to_hex;

TEST(wire_sack, HelloPayloadByteForByte) {
  const auto p = sack_hello_payload();
  EXPECT_EQ(to_hex(p), "7552534b01000000");  // "uRSK", version 1, reserved
  EXPECT_TRUE(parse_sack_hello(p));
}

TEST(wire_sack, SackBitmapLeastSignificantBitFirst) {
  SackBitmap held{};
  set_sack_bit(held, 0);    // base + 1
  set_sack_bit(held, 9);    // base + 10
  set_sack_bit(held, 255);  // base + 256
  const auto p = sack_payload(held);
  EXPECT_EQ(to_hex(p),
            "7552534b01000000"
            "0102000000000000000000000000000000000000000000000000000000000080");
  const std::optional<SackBitmap> back = parse_sack(p);
  ASSERT_TRUE(back);
  for (unsigned i = 0; i < kSackBits; ++i) EXPECT_EQ(sack_bit(*back, i), i == 0 || i == 9 || i == 255) << i;
}

TEST(wire_sack, ParsersRefuseOtherLengthsMagicsAndVersions) {
  const auto hello = sack_hello_payload();
  const auto sack = sack_payload(SackBitmap{});
  EXPECT_FALSE(parse_sack_hello(sack));  // a SACK is no hello
  EXPECT_FALSE(parse_sack(hello));       // nor the other way round
  for (size_t n = 0; n < sack.size(); ++n) EXPECT_FALSE(parse_sack({sack.data(), n})) << n;
  for (size_t n = 0; n < hello.size(); ++n) EXPECT_FALSE(parse_sack_hello({hello.data(), n})) << n;
  for (size_t i = 0; i < 5; ++i) {  // each byte of the magic and the version
    auto h = hello;
    auto s = sack;
    h[i] ^= 0x20;
    s[i] ^= 0x20;
    EXPECT_FALSE(parse_sack_hello(h)) << i;
    EXPECT_FALSE(parse_sack(s)) << i;
  }
}

// A whole UROCE_SACK as a uroce responder sends it: BTH (opcode 0xc1, the
// expected PSN) and the payload, ICRC over the IPv4 fields; it decodes as
// the manufacturer-specific service with the payload intact.
TEST(wire_sack, APacketDecodesWithItsPayload) {
  Headers h;
  h.bth.opcode = uint8_t(Opcode::uroce_sack);
  h.bth.dest_qp = 0x000123;
  h.bth.psn = 0x00ab00;
  SackBitmap held{};
  set_sack_bit(held, 3);
  const auto payload = sack_payload(held);
  IpUdpFields ip;
  ip.src = *IpAddr::parse("127.0.0.1");
  ip.dst = *IpAddr::parse("127.0.0.2");
  const std::vector<uint8_t> bytes = test::make_udp_payload(h, payload, ip);
  ASSERT_EQ(bytes.size(), kBthLen + kSackLen + kIcrcLen);
  EXPECT_EQ(to_hex({bytes.data(), kBthLen}),
            "c100ffff00000123"
            "0000ab00");
  Packet p;
  DecodeError err;
  ASSERT_TRUE(decode(bytes, p, err)) << to_string(err);
  EXPECT_EQ(p.info->service, Service::uroce);
  EXPECT_EQ(p.hdr.bth.psn, 0x00ab00u);
  EXPECT_EQ(verify_icrc(ip, bytes), IcrcCheck::ok);
  const std::optional<SackBitmap> back = parse_sack(p.payload);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, held);
}

}  // namespace
}  // namespace uroce::wire
