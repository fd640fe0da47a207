// Every opcode of the table: random headers and payloads survive
// encode -> decode unchanged, and re-encoding gives the same bytes.
#include <gtest/gtest.h>

#include <random>

#include "support/hex.hpp"
#include "support/roce_packet.hpp"
#include "wire/packet.hpp"

namespace uroce::wire {
namespace {

IpUdpFields some_ipv4() {
  IpUdpFields f;
  f.src = IpAddr::from_v4(0x0a000001);
  f.dst = IpAddr::from_v4(0x0a000002);
  f.src_port = 50000;
  return f;
}

TEST(wire_roundtrip, EveryOpcodeRandomHeadersAndPayloads) {
  std::mt19937_64 rng(0x5eed0001);
  const IpUdpFields ip = some_ipv4();
  int opcodes = 0;
  for (unsigned op = 0; op < 256; ++op) {
    const OpcodeInfo& oi = info(uint8_t(op));
    if (!oi.valid()) continue;
    ++opcodes;
    SCOPED_TRACE(oi.name);
    for (int iter = 0; iter < 200; ++iter) {
      Headers h = test::random_headers(uint8_t(op), rng);
      const size_t len = oi.has(op::kPayload) ? (iter < 8 ? size_t(iter) : rng() % 300) : 0;
      const auto payload = test::random_bytes(len, rng);
      const auto bytes = test::make_udp_payload(h, payload, ip);
      ASSERT_EQ(bytes.size(), udp_payload_len(oi, len));

      Packet p;
      DecodeError err{};
      ASSERT_TRUE(decode(bytes, p, err)) << to_string(err) << " " << test::to_hex(bytes);
      h.bth.pad = pad_for(len);
      EXPECT_EQ(p.hdr, h);
      EXPECT_EQ(p.info, &oi);
      ASSERT_EQ(p.payload.size(), len);
      EXPECT_TRUE(std::equal(p.payload.begin(), p.payload.end(), payload.begin()));
      EXPECT_EQ(p.icrc, compute_icrc(ip, bytes));
      EXPECT_EQ(verify_icrc(ip, bytes), IcrcCheck::ok);
      EXPECT_EQ(test::make_udp_payload(p.hdr, p.payload, ip), bytes);
    }
  }
  EXPECT_EQ(opcodes, 67);
}

TEST(wire_roundtrip, FieldsAtTheirLimits) {
  // All-ones values in every field of every header survive; 24-bit fields
  // keep exactly 24 bits.
  for (unsigned op = 0; op < 256; ++op) {
    const OpcodeInfo& oi = info(uint8_t(op));
    if (!oi.valid()) continue;
    Headers h;
    h.bth = {uint8_t(op), true, true, 0, 0, 0xffff, true, true, kQpnMask, true, kPsnMask};
    h.xrc_srqn = oi.xrceth ? 0xffffff : 0;
    if (oi.reth) h.reth = {~0ull, ~0u, ~0u};
    if (oi.aeth) h.aeth = {0xff, 0xffffff};
    if (oi.atomic_eth) h.atomic = {~0ull, ~0u, ~0ull, ~0ull};
    if (oi.atomic_ack_eth) h.atomic_ack = {~0ull};
    if (oi.imm) h.imm = ~0u;
    if (oi.ieth) h.ieth = ~0u;
    if (oi.deth) h.deth = {~0u, 0xffffff};
    const auto bytes = test::make_udp_payload(h, {}, some_ipv4());
    Packet p;
    DecodeError err{};
    ASSERT_TRUE(decode(bytes, p, err)) << oi.name;
    EXPECT_EQ(p.hdr, h) << oi.name;
  }
}

}  // namespace
}  // namespace uroce::wire
