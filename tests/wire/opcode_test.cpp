// wire/opcode.hpp: the constexpr opcode table against IBA vol. 1 table 35 and
// sec. 9.2-9.5, written out independently here.
#include "wire/opcode.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace uroce::wire {
namespace {

struct Expect {
  uint8_t opcode;
  const char* name;
  unsigned header_len;
};

// BTH (12) + extension headers, per opcode.
constexpr Expect kExpected[] = {
    {0x00, "RC_SEND_FIRST", 12},
    {0x01, "RC_SEND_MIDDLE", 12},
    {0x02, "RC_SEND_LAST", 12},
    {0x03, "RC_SEND_LAST_IMM", 16},
    {0x04, "RC_SEND_ONLY", 12},
    {0x05, "RC_SEND_ONLY_IMM", 16},
    {0x06, "RC_WRITE_FIRST", 28},
    {0x07, "RC_WRITE_MIDDLE", 12},
    {0x08, "RC_WRITE_LAST", 12},
    {0x09, "RC_WRITE_LAST_IMM", 16},
    {0x0a, "RC_WRITE_ONLY", 28},
    {0x0b, "RC_WRITE_ONLY_IMM", 32},
    {0x0c, "RC_READ_REQUEST", 28},
    {0x0d, "RC_READ_RESPONSE_FIRST", 16},
    {0x0e, "RC_READ_RESPONSE_MIDDLE", 12},
    {0x0f, "RC_READ_RESPONSE_LAST", 16},
    {0x10, "RC_READ_RESPONSE_ONLY", 16},
    {0x11, "RC_ACK", 16},
    {0x12, "RC_ATOMIC_ACK", 24},
    {0x13, "RC_COMPARE_SWAP", 40},
    {0x14, "RC_FETCH_ADD", 40},
    {0x16, "RC_SEND_LAST_INV", 16},
    {0x17, "RC_SEND_ONLY_INV", 16},
    {0x20, "UC_SEND_FIRST", 12},
    {0x21, "UC_SEND_MIDDLE", 12},
    {0x22, "UC_SEND_LAST", 12},
    {0x23, "UC_SEND_LAST_IMM", 16},
    {0x24, "UC_SEND_ONLY", 12},
    {0x25, "UC_SEND_ONLY_IMM", 16},
    {0x26, "UC_WRITE_FIRST", 28},
    {0x27, "UC_WRITE_MIDDLE", 12},
    {0x28, "UC_WRITE_LAST", 12},
    {0x29, "UC_WRITE_LAST_IMM", 16},
    {0x2a, "UC_WRITE_ONLY", 28},
    {0x2b, "UC_WRITE_ONLY_IMM", 32},
    {0x64, "UD_SEND_ONLY", 20},
    {0x65, "UD_SEND_ONLY_IMM", 24},
    {0x81, "CNP", 28},
    // XRC: requests carry a 4-byte XRCETH after the BTH, responses do not.
    {0xa0, "XRC_SEND_FIRST", 16},
    {0xa1, "XRC_SEND_MIDDLE", 16},
    {0xa2, "XRC_SEND_LAST", 16},
    {0xa3, "XRC_SEND_LAST_IMM", 20},
    {0xa4, "XRC_SEND_ONLY", 16},
    {0xa5, "XRC_SEND_ONLY_IMM", 20},
    {0xa6, "XRC_WRITE_FIRST", 32},
    {0xa7, "XRC_WRITE_MIDDLE", 16},
    {0xa8, "XRC_WRITE_LAST", 16},
    {0xa9, "XRC_WRITE_LAST_IMM", 20},
    {0xaa, "XRC_WRITE_ONLY", 32},
    {0xab, "XRC_WRITE_ONLY_IMM", 36},
    {0xac, "XRC_READ_REQUEST", 32},
    {0xad, "XRC_READ_RESPONSE_FIRST", 16},
    {0xae, "XRC_READ_RESPONSE_MIDDLE", 12},
    {0xaf, "XRC_READ_RESPONSE_LAST", 16},
    {0xb0, "XRC_READ_RESPONSE_ONLY", 16},
    {0xb1, "XRC_ACK", 16},
    {0xb2, "XRC_ATOMIC_ACK", 24},
    {0xb3, "XRC_COMPARE_SWAP", 44},
    {0xb4, "XRC_FETCH_ADD", 44},
    {0xb6, "XRC_SEND_LAST_INV", 20},
    {0xb7, "XRC_SEND_ONLY_INV", 20},
    // Manufacturer-specific, between uroce peers (wire/sack.hpp, wire/copy.hpp): BTH, then payload.
    {0xc0, "UROCE_SACK_HELLO", 12},
    {0xc1, "UROCE_SACK", 12},
    {0xc2, "UROCE_COPY_WRITE", 12},
    {0xc3, "UROCE_COPY_NAK", 12},
    {0xc4, "UROCE_COPY_READ", 12},
    {0xc5, "UROCE_COPY_READ_DONE", 12},
};

TEST(wire_opcode, ExactlyTheExpectedOpcodesAreValid) {
  std::set<uint8_t> expected;
  for (const Expect& e : kExpected) expected.insert(e.opcode);
  ASSERT_EQ(expected.size(), 67u);  // 23 RC + 12 UC + 2 UD + CNP + 23 XRC + 6 uroce
  for (unsigned op = 0; op < 256; ++op) {
    const OpcodeInfo& i = info(uint8_t(op));
    EXPECT_EQ(i.valid(), expected.count(uint8_t(op)) == 1) << "opcode " << op;
    if (!i.valid()) {
      EXPECT_EQ(i.flags, 0u);
      EXPECT_EQ(i.name, nullptr);
      EXPECT_EQ(i.header_len, 0);
    }
  }
}

TEST(wire_opcode, NamesServicesAndHeaderLengths) {
  for (const Expect& e : kExpected) {
    const OpcodeInfo& i = info(e.opcode);
    SCOPED_TRACE(e.name);
    ASSERT_TRUE(i.valid());
    EXPECT_STREQ(i.name, e.name);
    EXPECT_EQ(i.header_len, e.header_len);
    EXPECT_LE(i.header_len, kMaxHeaderLen);
    const Service s = e.opcode >= 0xc0   ? Service::uroce
                      : e.opcode == 0x81 ? Service::cnp
                      : e.opcode >= 0xa0 ? Service::xrc
                      : e.opcode >= 0x60 ? Service::ud
                      : e.opcode >= 0x20 ? Service::uc
                                         : Service::rc;
    EXPECT_EQ(i.service, s);
  }
  EXPECT_EQ(kMaxHeaderLen, 44u);
  EXPECT_EQ(&info(Opcode::rc_ack), &opcode_table()[0x11]);
}

TEST(wire_opcode, ExtensionHeaderOffsetsFollowIbaOrder) {
  const OpcodeInfo& woi = info(Opcode::rc_write_only_imm);  // BTH RETH ImmDt
  EXPECT_EQ(woi.reth, 12);
  EXPECT_EQ(woi.imm, 28);
  const OpcodeInfo& xwoi = info(Opcode::xrc_write_only_imm);  // BTH XRCETH RETH ImmDt
  EXPECT_EQ(xwoi.xrceth, 12);
  EXPECT_EQ(xwoi.reth, 16);
  EXPECT_EQ(xwoi.imm, 32);
  const OpcodeInfo& udi = info(Opcode::ud_send_only_imm);  // BTH DETH ImmDt
  EXPECT_EQ(udi.deth, 12);
  EXPECT_EQ(udi.imm, 20);
  const OpcodeInfo& aack = info(Opcode::rc_atomic_ack);  // BTH AETH AtomicAckETH
  EXPECT_EQ(aack.aeth, 12);
  EXPECT_EQ(aack.atomic_ack_eth, 16);
  const OpcodeInfo& xcs = info(Opcode::xrc_compare_swap);  // BTH XRCETH AtomicETH
  EXPECT_EQ(xcs.xrceth, 12);
  EXPECT_EQ(xcs.atomic_eth, 16);
  EXPECT_EQ(info(Opcode::rc_send_only_inv).ieth, 12);
  EXPECT_EQ(info(Opcode::xrc_send_last_inv).ieth, 16);
  EXPECT_EQ(info(Opcode::rc_read_response_first).aeth, 12);
  EXPECT_EQ(info(Opcode::rc_read_response_middle).aeth, 0);   // MIDDLE: no AETH
  EXPECT_EQ(info(Opcode::xrc_read_response_last).xrceth, 0);  // responses: no XRCETH
  EXPECT_EQ(info(Opcode::xrc_ack).aeth, 12);
  const OpcodeInfo& cnp = info(Opcode::cnp);
  EXPECT_TRUE(cnp.has(op::kCnpPad));
  EXPECT_EQ(cnp.flags, op::kValid | op::kCnpPad);  // no payload, no direction, no position
}

// Every present header's offset is consistent: headers do not overlap and
// together fill header_len exactly.
TEST(wire_opcode, OffsetsTileTheHeader) {
  for (const Expect& e : kExpected) {
    const OpcodeInfo& i = info(e.opcode);
    SCOPED_TRACE(e.name);
    unsigned sum = kBthLen + (i.has(op::kCnpPad) ? kCnpPadLen : 0);
    const std::pair<uint8_t, unsigned> hdrs[] = {{i.xrceth, kXrcethLen},
                                                 {i.reth, kRethLen},
                                                 {i.aeth, kAethLen},
                                                 {i.atomic_eth, kAtomicEthLen},
                                                 {i.atomic_ack_eth, kAtomicAckEthLen},
                                                 {i.imm, kImmLen},
                                                 {i.ieth, kIethLen},
                                                 {i.deth, kDethLen}};
    const uint32_t bits[] = {op::kXrceth,       op::kReth, op::kAeth, op::kAtomicEth,
                             op::kAtomicAckEth, op::kImm,  op::kIeth, op::kDeth};
    std::set<unsigned> starts;
    size_t present = 0;
    for (size_t k = 0; k < std::size(hdrs); ++k) {
      EXPECT_EQ(hdrs[k].first != 0, i.has(bits[k])) << "header " << k;
      if (!hdrs[k].first) continue;
      EXPECT_GE(hdrs[k].first, kBthLen);
      EXPECT_LE(hdrs[k].first + hdrs[k].second, i.header_len);
      starts.insert(hdrs[k].first);
      ++present;
      sum += hdrs[k].second;
    }
    EXPECT_EQ(sum, i.header_len);
    EXPECT_EQ(starts.size(), present);  // no two headers at one offset
  }
}

bool name_has(const OpcodeInfo& i, const char* part) { return std::string(i.name).find(part) != std::string::npos; }

TEST(wire_opcode, FlagsFollowTheOperation) {
  for (const Expect& e : kExpected) {
    const OpcodeInfo& i = info(e.opcode);
    SCOPED_TRACE(e.name);
    const bool send = name_has(i, "SEND"), write = name_has(i, "WRITE");
    const bool resp = name_has(i, "RESPONSE"), read_req = name_has(i, "READ_REQUEST");
    const bool atomic = name_has(i, "COMPARE") || name_has(i, "FETCH");
    const bool ack = name_has(i, "_ACK") && !name_has(i, "ATOMIC"), atomic_ack = name_has(i, "ATOMIC_ACK");
    if (i.service == Service::uroce) {  // a payload only: neither an RC request nor a response
      EXPECT_EQ(i.flags, op::kValid | op::kPayload | op::kOnly);
      continue;
    }
    EXPECT_EQ(i.has(op::kSend), send);
    EXPECT_EQ(i.has(op::kWrite), write);
    EXPECT_EQ(i.has(op::kRead), resp || read_req);
    EXPECT_EQ(i.has(op::kAtomic), atomic || atomic_ack);
    EXPECT_EQ(i.has(op::kAck), ack);
    EXPECT_EQ(i.has(op::kPayload), send || write || resp);
    EXPECT_EQ(i.has(op::kRequest), send || write || read_req || atomic);
    EXPECT_EQ(i.has(op::kResponse), resp || ack || atomic_ack);
    EXPECT_FALSE(i.has(op::kRequest) && i.has(op::kResponse));
    const bool consumes = (send && (name_has(i, "LAST") || name_has(i, "ONLY"))) || (write && name_has(i, "IMM"));
    EXPECT_EQ(i.has(op::kConsumesRecv), consumes);
    EXPECT_EQ(i.has(op::kImm), name_has(i, "IMM"));
    EXPECT_EQ(i.has(op::kIeth), name_has(i, "INV"));
    EXPECT_EQ(i.has(op::kDeth), i.service == Service::ud);
    EXPECT_EQ(i.has(op::kXrceth), i.service == Service::xrc && i.has(op::kRequest));
    EXPECT_EQ(i.has(op::kAeth), ack || atomic_ack || (resp && !name_has(i, "MIDDLE")));
    EXPECT_EQ(i.has(op::kReth), read_req || (write && (name_has(i, "FIRST") || name_has(i, "ONLY"))));
    // Position: FIRST/MIDDLE/LAST/ONLY from the name; single-packet messages are ONLY.
    if (e.opcode == 0x81) continue;
    const bool only = name_has(i, "ONLY") || read_req || atomic || ack || atomic_ack;
    EXPECT_EQ(i.has(op::kOnly), only);
    EXPECT_EQ(i.has(op::kFirst), only || name_has(i, "FIRST"));
    EXPECT_EQ(i.has(op::kLast), only || name_has(i, "LAST"));
    EXPECT_EQ(i.has(op::kMiddle), name_has(i, "MIDDLE"));
  }
}

}  // namespace
}  // namespace uroce::wire
