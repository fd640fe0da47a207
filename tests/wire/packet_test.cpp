// wire/packet.hpp: decode() refusals and exact encode_headers() bytes on
// hand-built packets.
#include "wire/packet.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/hex.hpp"
#include "support/roce_packet.hpp"

namespace uroce::wire {
namespace {

using test::from_hex;
using test::to_hex;

// BTH of `opcode` with PadCnt `pad`, everything else fixed, then `rest`.
std::vector<uint8_t> pkt(uint8_t opcode, uint8_t pad, size_t rest_len, uint8_t tver = 0) {
  std::vector<uint8_t> p = {opcode, uint8_t(pad << 4 | tver), 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 1};
  p.resize(p.size() + rest_len, 0);
  return p;
}

DecodeError decode_error(const std::vector<uint8_t>& p) {
  Packet out;
  DecodeError err{};
  EXPECT_FALSE(decode(p, out, err)) << to_hex(p);
  return err;
}

TEST(wire_packet, EncodesWriteOnlyImmByteForByte) {
  Headers h;
  h.bth = {.opcode = 0x0b,
           .solicited = true,
           .mig_req = true,
           .pad = 3,
           .tver = 0,
           .pkey = 0x8001,
           .fecn = true,
           .becn = false,
           .dest_qp = 0x123456,
           .ack_req = true,
           .psn = 0xabcdef};
  h.reth = {0x0102030405060708, 0x11223344, 5};
  const uint8_t imm[4] = {0xde, 0xad, 0xbe, 0xef};
  std::memcpy(&h.imm, imm, 4);
  h.aeth = {0x1f, 0x777};  // not part of this opcode: ignored
  uint8_t out[kMaxHeaderLen];
  std::memset(out, 0xcc, sizeof out);
  ASSERT_EQ(encode_headers(h, out), 32u);
  EXPECT_EQ(to_hex(std::span(out, 32)),
            "0bf08001"
            "80123456"
            "80abcdef"  // BTH
            "0102030405060708"
            "11223344"
            "00000005"       // RETH
            "deadbeef");     // ImmDt, wire order
  EXPECT_EQ(out[32], 0xcc);  // nothing written past header_len
}

TEST(wire_packet, EncodesUdSendOnlyImmAndAtomicAck) {
  Headers h;
  h.bth.opcode = 0x65;
  h.bth.dest_qp = 1;
  h.deth = {0x80010000, 0xabcdef};
  h.imm = 0;
  uint8_t out[kMaxHeaderLen];
  ASSERT_EQ(encode_headers(h, out), 24u);
  EXPECT_EQ(to_hex(std::span(out, 24)),
            "6500ffff000000010000000080010000"
            "00abcdef"
            "00000000");

  Headers a;
  a.bth.opcode = 0x12;
  a.aeth = {make_syndrome(AckType::ack, kCreditsInvalid), 0x000102};
  a.atomic_ack.orig = 0x1122334455667788;
  ASSERT_EQ(encode_headers(a, out), 24u);
  EXPECT_EQ(to_hex(std::span(out, 24)),
            "1200ffff0000000000000000"
            "1f000102"
            "1122334455667788");
}

TEST(wire_packet, EncodeRefusesUnknownOpcodeAndShortBuffer) {
  Headers h;
  h.bth.opcode = 0x15;  // reserved RC opcode
  uint8_t out[kMaxHeaderLen] = {};
  EXPECT_EQ(encode_headers(h, out), 0u);
  h.bth.opcode = 0x0a;  // RC_WRITE_ONLY: 28 bytes
  std::memset(out, 0xcc, sizeof out);
  EXPECT_EQ(encode_headers(h, std::span(out, 27)), 0u);
  EXPECT_EQ(out[0], 0xcc);  // nothing written
  EXPECT_EQ(encode_headers(h, std::span(out, 28)), 28u);
}

TEST(wire_packet, DecodesFieldsOfHandBuiltPacket) {
  // RC_SEND_ONLY_IMM, S=1, pad 2, 6 bytes payload "abcdef" + 2 pad, ICRC 04030201.
  const auto p = from_hex("05a0ffff c0000011 80000007 01020304 616263646566 0000 01020304");
  Packet out;
  DecodeError err{};
  ASSERT_TRUE(decode(p, out, err)) << to_string(err);
  EXPECT_EQ(out.info, &info(Opcode::rc_send_only_imm));
  EXPECT_TRUE(out.hdr.bth.solicited);
  EXPECT_FALSE(out.hdr.bth.mig_req);
  EXPECT_EQ(out.hdr.bth.pad, 2);
  EXPECT_TRUE(out.hdr.bth.fecn);
  EXPECT_TRUE(out.hdr.bth.becn);
  EXPECT_EQ(out.hdr.bth.dest_qp, 0x11u);
  EXPECT_TRUE(out.hdr.bth.ack_req);
  EXPECT_EQ(out.hdr.bth.psn, 7u);
  uint8_t imm[4];
  std::memcpy(imm, &out.hdr.imm, 4);  // kept in wire order
  EXPECT_EQ(to_hex(imm), "01020304");
  EXPECT_EQ(out.payload.data(), p.data() + 16);
  EXPECT_EQ(std::string(out.payload.begin(), out.payload.end()), "abcdef");
  EXPECT_EQ(out.icrc, 0x04030201u);  // LSB first
}

TEST(wire_packet, RefusesTooShortForBthAndIcrc) {
  EXPECT_EQ(decode_error({}), DecodeError::truncated);
  EXPECT_EQ(decode_error(pkt(0x04, 0, 3)), DecodeError::truncated);  // 15 bytes
}

TEST(wire_packet, RefusesUnknownOpcodes) {
  for (uint8_t op : {0x15, 0x18, 0x1f, 0x2c, 0x40, 0x60, 0x63, 0x66, 0x80, 0x82, 0xb5, 0xff}) {
    EXPECT_EQ(decode_error(pkt(op, 0, 40)), DecodeError::unknown_opcode) << int(op);
  }
}

TEST(wire_packet, RefusesNonZeroTransportVersion) {
  EXPECT_EQ(decode_error(pkt(0x04, 0, 4, 1)), DecodeError::bad_version);
  EXPECT_EQ(decode_error(pkt(0x11, 0, 8, 0xf)), DecodeError::bad_version);
}

TEST(wire_packet, RefusesMissingExtensionHeaders) {
  EXPECT_EQ(decode_error(pkt(0x0c, 0, 15 + 4)), DecodeError::truncated);  // RETH short by 1
  EXPECT_EQ(decode_error(pkt(0x11, 0, 3 + 4)), DecodeError::truncated);   // AETH short by 1
  EXPECT_EQ(decode_error(pkt(0x65, 0, 11 + 4)), DecodeError::truncated);  // DETH+ImmDt - 1
  EXPECT_EQ(decode_error(pkt(0x81, 0, 15 + 4)), DecodeError::truncated);  // CNP reserved - 1
  EXPECT_EQ(decode_error(pkt(0xb3, 0, 31 + 4)), DecodeError::truncated);  // XRCETH+AtomicETH - 1
}

TEST(wire_packet, RefusesPayloadOnOpcodesWithout) {
  EXPECT_EQ(decode_error(pkt(0x11, 0, 4 + 4 + 4)), DecodeError::unexpected_payload);  // ACK
  EXPECT_EQ(decode_error(pkt(0x0c, 0, 16 + 4 + 4)), DecodeError::unexpected_payload);
  EXPECT_EQ(decode_error(pkt(0x13, 0, 28 + 4 + 4)), DecodeError::unexpected_payload);
  EXPECT_EQ(decode_error(pkt(0x81, 0, 16 + 4 + 4)), DecodeError::unexpected_payload);
  // Pad count without any data is a pad error, not a payload error.
  EXPECT_EQ(decode_error(pkt(0x11, 1, 4 + 4)), DecodeError::bad_pad);
}

TEST(wire_packet, RefusesBadPad) {
  EXPECT_EQ(decode_error(pkt(0x04, 0, 3 + 4)), DecodeError::bad_pad);  // data not 4-aligned
  EXPECT_EQ(decode_error(pkt(0x04, 0, 5 + 4)), DecodeError::bad_pad);
  EXPECT_EQ(decode_error(pkt(0x04, 1, 0 + 4)), DecodeError::bad_pad);  // pad > data
  Packet out;
  DecodeError err{};
  const auto p = pkt(0x04, 3, 4 + 4);  // 1 byte payload + 3 pad
  ASSERT_TRUE(decode(p, out, err));
  EXPECT_EQ(out.payload.size(), 1u);
  const auto e = pkt(0x04, 0, 0 + 4);  // zero-length SEND_ONLY
  ASSERT_TRUE(decode(e, out, err));
  EXPECT_TRUE(out.payload.empty());
}

TEST(wire_packet, LeavesOutputUntouchedOnError) {
  Packet out;
  out.hdr.bth.psn = 12345;
  out.info = &info(Opcode::rc_ack);
  DecodeError err = DecodeError::bad_pad;
  EXPECT_FALSE(decode(pkt(0x0c, 0, 10), out, err));
  EXPECT_EQ(err, DecodeError::truncated);
  EXPECT_EQ(out.hdr.bth.psn, 12345u);
  EXPECT_EQ(out.info, &info(Opcode::rc_ack));
}

TEST(wire_packet, IgnoresReservedBitsOnReceive) {
  // Resv6 (BTH byte 4), Resv7 (byte 8), the DETH and XRCETH Resv8 are ignored.
  auto p = pkt(0x64, 0, 8 + 4);
  p[4] |= 0x3f;
  p[8] |= 0x7f;
  p[16] = 0xff;  // DETH Resv8
  Packet out;
  DecodeError err{};
  ASSERT_TRUE(decode(p, out, err));
  EXPECT_EQ(out.hdr.bth.psn, 1u);
  EXPECT_FALSE(out.hdr.bth.fecn);
  EXPECT_FALSE(out.hdr.bth.ack_req);
  EXPECT_EQ(out.hdr.deth.src_qp, 0u);
}

TEST(wire_packet, ErrorNames) {
  EXPECT_STREQ(to_string(DecodeError::truncated), "truncated");
  EXPECT_STREQ(to_string(DecodeError::unknown_opcode), "unknown_opcode");
  EXPECT_STREQ(to_string(DecodeError::bad_version), "bad_version");
  EXPECT_STREQ(to_string(DecodeError::unexpected_payload), "unexpected_payload");
  EXPECT_STREQ(to_string(DecodeError::bad_pad), "bad_pad");
}

TEST(wire_packet, PadAndLength) {
  EXPECT_EQ(pad_for(0), 0);
  EXPECT_EQ(pad_for(1), 3);
  EXPECT_EQ(pad_for(2), 2);
  EXPECT_EQ(pad_for(3), 1);
  EXPECT_EQ(pad_for(4096), 0);
  EXPECT_EQ(udp_payload_len(info(Opcode::rc_write_first), 5), 28u + 5 + 3 + 4);
  EXPECT_EQ(udp_payload_len(info(Opcode::rc_ack), 0), 20u);
}

}  // namespace
}  // namespace uroce::wire
